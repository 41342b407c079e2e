//! A request row as the ordering sees it ([`Candidate`]): the columns, and the read of them,
//! shared by the writer and the questions answered off it (`live.rs`, `rank.rs`,
//! `volume_wait.rs`).

use super::db::{DbResult, Row};
use super::read::stored_qos;
use crate::domain::PolicySettings;
use crate::policy;
use crate::policy::order::Candidate;

/// Columns [`read_candidate`] reads.
pub(super) const CANDIDATE_COLUMNS: &str =
    "id, group_path, library, created_ms, size_bytes, access_mode, \
     qos, user_factor, slots, passed";

/// A request row as the ordering sees it (`None` for a group no longer configured).
pub(super) fn read_candidate(policy: &PolicySettings, r: &Row<'_>) -> DbResult<Option<Candidate>> {
    let path: String = r.get(1)?;
    let Some(group) = policy.group_by_path(&path) else {
        return Ok(None);
    };
    let size: i64 = r.get(4)?;
    let mode: String = r.get(5)?;
    let qos = match r.get::<Option<String>>(6)? {
        Some(q) => Some(stored_qos(6, &q)?),
        None => None,
    };
    let user: Option<f64> = r.get(7)?;
    let order = &policy.order;
    Ok(Some(Candidate {
        id: r.get(0)?,
        group,
        library: r.get(2)?,
        created_ms: r.get(3)?,
        size_bytes: size.max(0) as u64,
        benefit: policy::benefit(policy, &mode, size.max(0) as u64),
        qos: order.qos(qos, &mode),
        user: user.unwrap_or(1.0),
        queue: order.queue_factor(&mode),
        slots: r.get::<i64>(8)?.clamp(1, i64::from(u32::MAX)) as u32,
        passed: r.get::<i64>(9)?.clamp(0, i64::from(u32::MAX)) as u32,
    }))
}

//! Explain for a request waiting in the `volumes` release mode, off the writer: its volume's
//! queued bytes and files, which eligibility rule makes the volume eligible or which it waits on
//! (`policy::volumes::rule`, the rule the writer's queue applies), the volumes in flight at its
//! library, and its group's place in the policy's order among the groups waiting there. Read
//! from the same snapshot as the request's placement: a few index lookups (the `queued` rows by
//! library and volume and by library and group, the in-flight rows), one placement per group,
//! never a walk of the queue.

use std::collections::BTreeSet;

use super::db::{params, Db, DbError, DbResult, Param};
use serde::Serialize;

use super::candidate::{read_candidate, CANDIDATE_COLUMNS};
use crate::domain::PolicySettings;
use crate::policy::order::{is_fair, Candidate, ShareSnapshot};
use crate::policy::queue::Ranking;
use crate::policy::volumes::{locating as locating_rule, rule, Eligibility};
use crate::shares::UsageLookup;

/// Where a request waiting in the `volumes` release mode stands.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VolumeWait {
    /// Its tape volume (`None`: its group's requests without a volume, one pseudo-volume,
    /// always eligible).
    pub volume: Option<String>,
    /// What waits on that volume now (every group's requests).
    pub queued_bytes: u64,
    pub queued_files: u64,
    /// Arrival of the volume's oldest and newest waiting request (ms since the epoch).
    pub oldest_ms: i64,
    pub newest_ms: i64,
    /// Whether the volume may be mounted now.
    pub eligible: bool,
    /// The rule that makes it eligible (`no_volume`, `volume_lookup_wait_secs`, `mounted`,
    /// `min_volume_bytes`, `min_volume_files`, `quiet_secs`, `max_age_secs`) or the one it waits
    /// on (`waiting_volume_lookup`, `waiting_quiet_secs`, `waiting_max_age_secs`).
    pub rule: &'static str,
    /// When it waits: the instant it becomes eligible by that rule if nothing more comes.
    pub eligible_at_ms: Option<i64>,
    /// Volumes in flight at its library, and how many may be.
    pub volumes_in_flight: usize,
    pub max_volumes: u32,
    /// Its group's place (1 first) among the groups waiting at its library, in the policy's
    /// order (starved first, then the policy's score of each group's oldest request): which group
    /// the next volume is mounted for, if it has an eligible volume.
    pub group_position: Option<usize>,
    pub groups_waiting: usize,
}

/// [`VolumeWait`] of queued request `c` (read with its volume, and whether no volume lookup
/// has answered for it) at `now`.
pub(super) fn volume_wait<U: UsageLookup>(
    c: &Db<'_>,
    policy: &PolicySettings,
    standing: &ShareSnapshot<'_, U>,
    (request, volume, unanswered): (&Candidate, Option<&str>, bool),
    now: i64,
) -> DbResult<VolumeWait> {
    let settings = &policy.order.release.volumes;
    let volume = volume.filter(|v| !v.is_empty());
    // Waiting for the lookup's answer, among its group's requests that wait for theirs.
    let locating = volume.is_none() && unanswered && settings.lookup_wait_ms.is_some();
    let group_path = policy.group(request.group).path.as_str();
    // One statement per case, so each uses the index on the queued rows by library and volume.
    let figures = |sql: &str, p: &[&dyn Param]| {
        c.query_one(
            &format!(
                "SELECT COALESCE(SUM(size_bytes), 0), COUNT(*), MIN(created_ms), MAX(created_ms) \
                 FROM requests WHERE state = 'queued' AND library = ?1 AND {sql}"
            ),
            p,
            |r| {
                Ok((
                    r.get::<i64>(0)?.max(0) as u64,
                    r.get::<i64>(1)?.max(0) as u64,
                    r.get::<Option<i64>>(2)?.unwrap_or(request.created_ms),
                    r.get::<Option<i64>>(3)?.unwrap_or(request.created_ms),
                ))
            },
        )
    };
    let (bytes, files, oldest_ms, newest_ms) = match volume {
        Some(v) => figures("volume = ?2", params![request.library, v])?,
        None if locating => figures(
            "volume IS NULL AND volume_source IS NULL AND group_path = ?2",
            params![request.library, group_path],
        )?,
        None => figures(
            "(volume IS NULL OR volume = '') AND group_path = ?2",
            params![request.library, group_path],
        )?,
    };
    let flying = volumes_in_flight(c, &request.library)?;
    let eligibility = match volume {
        None if locating => locating_rule(settings, oldest_ms, now),
        None => Eligibility::Loose,
        Some(v) if flying.contains(&(Some(v.to_string()), String::new())) => Eligibility::Mounted,
        Some(_) => rule(settings, bytes, files as usize, oldest_ms, newest_ms, now),
    };
    let (group_position, groups_waiting) = group_place(c, policy, standing, request, now)?;
    Ok(VolumeWait {
        volume: volume.map(str::to_string),
        queued_bytes: bytes,
        queued_files: files,
        oldest_ms,
        newest_ms,
        eligible: eligibility.is_eligible(),
        rule: eligibility.name(),
        eligible_at_ms: match eligibility {
            Eligibility::Waiting { at_ms, .. } | Eligibility::Locating { at_ms } => Some(at_ms),
            _ => None,
        },
        volumes_in_flight: flying.len(),
        max_volumes: settings.max_volumes_of(&request.library),
        group_position,
        groups_waiting,
    })
}

/// The volumes in flight at `library` (released requests not yet ended), as (volume, group
/// for a pseudo-volume).
fn volumes_in_flight(c: &Db<'_>, library: &str) -> DbResult<BTreeSet<(Option<String>, String)>> {
    let mut out = BTreeSet::new();
    // Two queries so each uses its partial index (ready rows, rows at the MSS).
    for state in ["state = 'accepted'", "state IN ('submitted', 'running')"] {
        c.for_each(
            &format!(
                "SELECT DISTINCT volume, group_path FROM requests \
                 WHERE {state} AND library = ?1 AND release_seq IS NOT NULL"
            ),
            params![library],
            |r| {
                let volume: Option<String> = r.get(0)?;
                let key = match volume.filter(|v| !v.is_empty()) {
                    Some(v) => (Some(v), String::new()),
                    None => (None, r.get(1)?),
                };
                out.insert(key);
                Ok::<_, DbError>(())
            },
        )?;
    }
    Ok(out)
}

/// `request`'s group's place among the groups with requests queued at its library, ranked by
/// each group's oldest request as held mode ranks requests: (position, groups waiting).
fn group_place<U: UsageLookup>(
    c: &Db<'_>,
    policy: &PolicySettings,
    standing: &ShareSnapshot<'_, U>,
    request: &Candidate,
    now: i64,
) -> DbResult<(Option<usize>, usize)> {
    let mut heads = Vec::new();
    let mut stmt = c.prepare(&format!(
        "SELECT {CANDIDATE_COLUMNS} FROM requests \
         WHERE state = 'queued' AND library = ?1 AND group_path = ?2 ORDER BY id LIMIT 1"
    ))?;
    for g in policy.group_ids().filter(|&g| is_fair(policy, g)) {
        let head = stmt
            .query_opt(
                params![request.library, policy.group(g).path.as_str()],
                |r| read_candidate(policy, r),
            )?
            .flatten();
        heads.extend(head);
    }
    let mine = heads
        .iter()
        .find(|h| h.group == request.group)
        .map(|h| h.id);
    let ranking = Ranking::new(&policy.order, standing, &heads, now);
    let position = mine.and_then(|id| ranking.get(id)).map(|p| p.position);
    Ok((position, heads.len()))
}

//! Groups leaving the configuration: which of them still have unfinished requests (refused at
//! start and at reload, by name with the counts per state), and cancelling every unfinished
//! request of one group (`mssbroker cancel --group`), so none is silently orphaned: listed off
//! the writer ([`unfinished_of`]), then cancelled a chunk per command ([`Txn::cancel_listed`],
//! driven by `ledger::group_cancel`), so other commands are committed between chunks.

use std::fmt;

use crate::ledger::db::{params, Db, DbResult};

use super::state::Txn;
use crate::domain::{PolicySettings, RequestState};
use crate::ledger::read::parse_state;
use crate::ledger::CancelOutcome;

/// Every unfinished request, with its group and state, read through the partial indexes of the
/// unfinished states; `in_flight` narrows those at the MSS.
fn unfinished(in_flight: &str) -> String {
    format!(
        "SELECT id, group_path, state FROM requests WHERE state = 'accepted' \
         UNION ALL SELECT id, group_path, state FROM requests WHERE state = 'held' \
         UNION ALL SELECT id, group_path, state FROM requests WHERE state = 'queued' \
         UNION ALL SELECT id, group_path, state FROM requests WHERE state = 'riding' \
         UNION ALL SELECT id, group_path, state FROM requests \
             WHERE state IN ('submitted', 'running'){in_flight}"
    )
}

/// A group no longer configured that still has unfinished requests, and how many per state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovedGroup {
    pub path: String,
    pub counts: Vec<(RequestState, u64)>,
}

/// The groups a configuration would remove while they have unfinished requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovedGroups(pub Vec<RemovedGroup>);

impl fmt::Display for RemovedGroups {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, g) in self.0.iter().enumerate() {
            let total: u64 = g.counts.iter().map(|(_, n)| n).sum();
            let per_state: Vec<String> = (g.counts.iter())
                .map(|(s, n)| format!("{} {n}", s.as_str()))
                .collect();
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(
                f,
                "group `{}` is not in the configuration but has {total} unfinished request(s) \
                 ({}): cancel them first with `mssbroker cancel --group {}`",
                g.path,
                per_state.join(", "),
                g.path
            )?;
        }
        Ok(())
    }
}

/// One request `cancel --group` cancelled (or asked the MSS to cancel).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupCancel {
    pub id: i64,
    /// Its state before the cancellation.
    pub previous: RequestState,
    /// `Cancelled` (and refunded) or `Requested` (at the MSS: the dispatcher carries it there).
    pub outcome: CancelOutcome,
}

/// The groups with unfinished requests that `policy` does not configure (empty: none).
pub(super) fn removed_groups(conn: &Db<'_>, policy: &PolicySettings) -> DbResult<RemovedGroups> {
    // A request whose cancellation the MSS was asked for is settling (its event refunds it by
    // path): it does not hold a group in the configuration.
    let rows = conn.query_rows(
        &format!(
            "SELECT group_path, state, COUNT(*) FROM ({}) AS u \
             GROUP BY group_path, state ORDER BY group_path, state",
            unfinished(" AND cancel_requested = 0")
        ),
        params![],
        |r| {
            Ok((
                r.get::<String>(0)?,
                parse_state(1, &r.get::<String>(1)?)?,
                r.get::<i64>(2)?,
            ))
        },
    )?;
    let mut groups: Vec<RemovedGroup> = Vec::new();
    for (path, state, n) in rows {
        if policy.group_by_path(&path).is_some() {
            continue;
        }
        let n = n.max(0) as u64;
        match groups.last_mut() {
            Some(g) if g.path == path => g.counts.push((state, n)),
            _ => groups.push(RemovedGroup {
                path,
                counts: vec![(state, n)],
            }),
        }
    }
    Ok(RemovedGroups(groups))
}

/// The ids of group `path`'s unfinished requests, in id order (a read connection: the writer
/// is not held while a large group is listed).
pub(in crate::ledger) fn unfinished_of(conn: &Db<'_>, path: &str) -> DbResult<Vec<i64>> {
    conn.query_rows(
        &format!(
            "SELECT id FROM ({}) AS u WHERE group_path = ?1 ORDER BY id",
            unfinished("")
        ),
        params![path],
        |r| r.get(0),
    )
}

impl Txn<'_, '_> {
    /// Cancel each of `ids` still unfinished, as a single cancel does: those not at the MSS
    /// cancelled and refunded now, those at the MSS flagged for the dispatcher; one ended since
    /// it was listed is reported `AlreadyFinal` and left as it is; an unknown id is skipped.
    pub fn cancel_listed(&mut self, ids: &[i64]) -> DbResult<Vec<GroupCancel>> {
        let mut out = Vec::with_capacity(ids.len());
        for &id in ids {
            let previous: Option<String> = self.tx.query_opt(
                "SELECT state FROM requests WHERE id = ?1",
                params![id],
                |r| r.get(0),
            )?;
            let Some(previous) = previous else {
                continue;
            };
            let previous = parse_state(0, &previous)?;
            let outcome = self.cancel(id)?;
            out.push(GroupCancel {
                id,
                previous,
                outcome,
            });
        }
        Ok(out)
    }
}

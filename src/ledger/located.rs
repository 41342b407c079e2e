//! Where a file lies, found after the request was accepted (issue 38, docs/volumes-live.md):
//! the requests the locator (`dispatcher::locator`) looks up, and what it found stored on
//! them through the writer (`writer/located.rs`).

use super::db::{params, spelled, Db, DbResult, Spelled};

use super::{Command, Ledger, LedgerError};

/// A lookup's answer for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeFound {
    pub id: i64,
    /// The volume and tape position found; `None`: the lookup failed.
    pub found: Option<(String, u64)>,
    /// The lookup's name (`enstore-layer4`, `command`).
    pub source: &'static str,
}

/// What `volume_source` holds for a request whose lookup failed.
pub const LOOKUP_FAILED: &str = "failed";

/// Queued requests without a volume not yet looked up, after `after_id` (at most `?2`), in id
/// order: (id, file). Read through the partial index `requests_unlocated` (named to SQLite's
/// planner; PostgreSQL's matches the predicate itself).
const UNLOCATED: Spelled = spelled!(
    "SELECT id, file FROM requests",
    [indexed_by requests_unlocated],
    " WHERE state = 'queued' AND volume IS NULL AND volume_source IS NULL AND id > ?1 \
     ORDER BY id LIMIT ?2",
);

/// Queued requests without a volume not yet looked up, after `after_id`, in id order: (id,
/// file).
fn unlocated(c: &Db<'_>, after_id: i64, limit: usize) -> DbResult<Vec<(i64, String)>> {
    c.query_rows(
        c.dialect().pick(&UNLOCATED),
        params![after_id, limit],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
}

impl Ledger {
    /// Queued requests without a volume that no lookup has answered, after `after_id`.
    pub async fn unlocated(
        &self,
        after_id: i64,
        limit: usize,
    ) -> Result<Vec<(i64, String)>, LedgerError> {
        self.reads.run(move |c| unlocated(c, after_id, limit)).await
    }

    /// Store lookups' answers; a request still waiting moves to its volume's queue. Returns
    /// how many requests took a volume.
    pub async fn located(&self, items: Vec<VolumeFound>) -> Result<usize, LedgerError> {
        self.call(|reply| Command::Located { items, reply }).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::db::tests::testdb::{on_both, Backend, TestDb};
    use crate::ledger::db::{Dialect, Value};

    /// Requests: (state, volume, volume_source); the ones `unlocated` lists are queued with
    /// neither.
    const ROWS: &[(&str, Option<&str>, Option<&str>)] = &[
        ("queued", None, None),
        ("queued", Some("VOL1"), None),
        ("accepted", None, None),
        ("queued", None, Some(LOOKUP_FAILED)),
        ("queued", None, None),
        ("held", None, None),
        ("queued", None, None),
    ];

    on_both!(the_unlocated_requests_are_read_in_id_order_after_a_cursor);

    fn the_unlocated_requests_are_read_in_id_order_after_a_cursor(backend: Backend) {
        let test = TestDb::new(backend);
        let conn = test.ledger();
        let db = conn.db();
        let mut expected = Vec::new();
        for (i, (state, volume, source)) in ROWS.iter().enumerate() {
            let file = format!("/pnfs/f{i}");
            let id = db
                .insert_id(
                    "INSERT INTO requests (station, client_request_id, user_name, file, \
                     size_bytes, access_mode, physics_group, direction, group_path, class, \
                     mss_priority, charged, charged_bytes, state, created_ms, volume, \
                     volume_source) VALUES ('st', ?1, 'u', ?2, 1, 'mc', 'x', 'read', 'mc', \
                     'front', 0, 0, 0, ?3, 0, ?4, ?5)",
                    [
                        Value::Text(&file),
                        Value::Text(&file),
                        Value::Text(state),
                        volume.map_or(Value::Null, Value::Text),
                        source.map_or(Value::Null, Value::Text),
                    ],
                )
                .expect("a request");
            if *state == "queued" && volume.is_none() && source.is_none() {
                expected.push((id, file));
            }
        }
        assert_eq!(unlocated(&db, 0, 100).expect("all"), expected);
        assert_eq!(unlocated(&db, 0, 2).expect("two"), expected[..2]);
        assert_eq!(
            unlocated(&db, expected[0].0, 100).expect("after the first"),
            expected[1..]
        );
        // Each backend reads it through the partial index (PostgreSQL's planner chose it by
        // the predicate, with no hint; a sequential scan is ruled out to see which index).
        let plan = match db.dialect() {
            Dialect::Sqlite => db.query_rows(
                &format!("EXPLAIN QUERY PLAN {}", Dialect::Sqlite.pick(&UNLOCATED)),
                params![0i64, 100i64],
                |r| r.get::<String>(3),
            ),
            Dialect::Postgres => {
                db.execute_batch("SET enable_seqscan = off").expect("set");
                db.query_rows(
                    &format!("EXPLAIN {}", Dialect::Postgres.pick(&UNLOCATED)),
                    params![0i64, 100i64],
                    |r| r.get::<String>(0),
                )
            }
        }
        .expect("the plan");
        assert!(
            plan.iter().any(|l| l.contains("requests_unlocated")),
            "{plan:?}"
        );
    }
}

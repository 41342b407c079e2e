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

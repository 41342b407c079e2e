//! Sends an earlier broker may or may not have made, which this MSS cannot settle (issue 42,
//! docs/ha.md, "How a new leader settles what the old one sent").
//!
//! A request's send is marked before it goes (`sent_attempt`, `writer/sends.rs`). A request
//! still `accepted` with its attempt marked when a term of office opens was marked by an earlier
//! broker (a crash, a restart, a takeover): the MSS may hold it. Where the MSS deduplicates by
//! key the dispatcher sends it again with the same key and attempt. Where it cannot, the request
//! is *unsettled*: held with `next_attempt_ms` at [`UNSETTLED_MS`], so that `to_submit` never
//! picks it, its `last_error` saying why, until an operator resolves it (`resend`, or a cancel).
//! The mark lives in existing columns, so neither backend needs a migration for it.

use super::db::{params, Db, DbResult};
use super::{Command, Ledger, LedgerError};

/// `next_attempt_ms` of an unsettled request: never due.
pub const UNSETTLED_MS: i64 = i64::MAX;

/// `accepted` requests whose attempt an earlier send marked, not yet flagged: (id, attempt), in
/// id order. Sorted here: an `ORDER BY id` makes SQLite scan the whole table by rowid instead
/// of the partial index of `accepted` requests.
fn marked_sends(c: &Db<'_>) -> DbResult<Vec<(i64, u32)>> {
    let mut marked = c.query_rows(
        "SELECT id, attempt FROM requests WHERE state = 'accepted' AND sent_attempt = attempt \
         AND next_attempt_ms < ?1",
        params![UNSETTLED_MS],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    marked.sort_unstable();
    Ok(marked)
}

/// How many requests are unsettled.
pub(super) fn count(c: &Db<'_>) -> DbResult<i64> {
    c.query_one(
        "SELECT COUNT(*) FROM requests WHERE state = 'accepted' AND next_attempt_ms = ?1",
        params![UNSETTLED_MS],
        |r| r.get(0),
    )
}

/// The writer's step for an operator's resend: the unsettled request `id` is due again at
/// `now_ms`, its attempt still marked, so it goes with the same key and attempt. Returns how
/// many rows changed (0: not unsettled).
pub(super) fn resend(db: &Db<'_>, id: i64, now_ms: i64) -> DbResult<usize> {
    db.execute(
        "UPDATE requests SET next_attempt_ms = ?2, \
         last_error = 'an operator resolved an unsettled send: sent again, same key and attempt' \
         WHERE id = ?1 AND state = 'accepted' AND next_attempt_ms = ?3",
        params![id, now_ms, UNSETTLED_MS],
    )
}

impl Ledger {
    /// `accepted` requests whose attempt an earlier send marked and that are not flagged yet:
    /// (id, attempt). Read when a term opens, before the dispatcher sends anything.
    pub async fn marked_sends(&self) -> Result<Vec<(i64, u32)>, LedgerError> {
        self.reads.run(marked_sends).await
    }

    /// Hold these marked sends, (id, attempt), for an operator: never sent again by
    /// themselves; `reason` becomes their `last_error`.
    pub async fn flag_unsettled(
        &self,
        items: Vec<(i64, u32)>,
        reason: String,
    ) -> Result<(), LedgerError> {
        self.deferred(items, UNSETTLED_MS, reason).await
    }

    /// How many requests are unsettled now.
    pub async fn unsettled_count(&self) -> Result<i64, LedgerError> {
        self.reads.run(count).await
    }

    /// An operator's resolution of unsettled request `id`: send it again, with the same key and
    /// attempt. Returns whether it was unsettled.
    pub async fn resend_unsettled(&self, id: i64) -> Result<bool, LedgerError> {
        let n = self
            .call(|reply| Command::ResendUnsettled { id, reply })
            .await?;
        if n > 0 {
            self.ready().notify_one();
        }
        Ok(n > 0)
    }
}

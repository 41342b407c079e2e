//! The marks of a send, before and after the MSS answers it: `mark_sending` marks an attempt as
//! possibly at the MSS before it goes; `deferred` holds back a send the MSS answered "not yet"
//! (`mark_unsent`, which may end a request, is with the other outcomes in `settle.rs`).

use std::collections::HashMap;

use crate::ledger::db::{params, spelled, DbResult, Spelled};

use super::settle::clip_error;
use super::state::Txn;

/// Of each request of a list (`?1`): its id, attempt, whether it is `accepted`, and whether
/// that attempt is marked sent (null-safe: `sent_attempt` is NULL until a send).
const SENDING: Spelled = spelled!(
    "SELECT id, attempt, state = 'accepted', ",
    [is "sent_attempt", "attempt"],
    " FROM requests WHERE ",
    [in_ids "id", "?1"],
);

/// Marks attempt `?2` of request `?1` as being sent.
const MARK_SENDING: &str = "UPDATE requests SET sent_attempt = ?2 WHERE id = ?1";

/// Holds attempt `?2` of request `?1` back until `?3` (never earlier than it was), saying why.
const DEFER: Spelled = spelled!(
    "UPDATE requests SET next_attempt_ms = ",
    [greatest "next_attempt_ms", "?3"],
    ", last_error = ?4 WHERE id = ?1 AND attempt = ?2 AND state = 'accepted'",
);

impl Txn<'_, '_> {
    /// These submissions are about to be sent: mark each attempt (`sent_attempt`) while the
    /// request is still `accepted`, so that a cancel from now on goes to the MSS. Returns the
    /// ids marked, in order, each with whether this is its attempt's first send (no earlier one
    /// may have reached the MSS); the others ended or moved on meanwhile and are not sent.
    pub fn mark_sending(&mut self, items: &[(i64, u32)]) -> DbResult<Vec<(i64, bool)>> {
        let ids: Vec<i64> = items.iter().map(|i| i.0).collect();
        // Each request's attempt, whether it is `accepted`, whether the attempt is marked.
        let mut rows: HashMap<i64, (i64, bool, bool)> = (self.tx)
            .query_rows(self.tx.dialect().pick(&SENDING), params![ids], |r| {
                Ok((r.get(0)?, (r.get(1)?, r.get(2)?, r.get(3)?)))
            })?
            .into_iter()
            .collect();
        let mut marked = Vec::with_capacity(items.len());
        for &(id, attempt) in items {
            self.note(id);
            let Some((now, accepted, sent)) = rows.get_mut(&id) else {
                continue;
            };
            // Not to be sent: the request ended or moved on to another attempt.
            if !*accepted || *now != i64::from(attempt) {
                continue;
            }
            // Marked already: by an earlier send of this attempt (this is a resend).
            let first = !*sent;
            if first {
                (self.tx).update(MARK_SENDING, params![id, attempt])?;
                *sent = true;
            }
            marked.push((id, first));
        }
        Ok(marked)
    }

    /// The MSS deferred these sends (it made nothing: FTS3's destination held by another
    /// transfer): not sent again before `until_ms`, so the ready requests behind them go
    /// meanwhile. Same attempt; `last_error` says why (the MSS's text: clipped, `clip_error`).
    pub fn deferred(&mut self, items: &[(i64, u32)], until_ms: i64, reason: &str) -> DbResult<()> {
        let mut stmt = self.tx.prepare(self.tx.dialect().pick(&DEFER))?;
        let reason = clip_error(reason);
        for &(id, attempt) in items {
            self.note(id);
            stmt.execute(params![id, attempt, until_ms, &*reason])?;
        }
        Ok(())
    }
}

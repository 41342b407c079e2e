//! `mssbroker cancel --group`: every unfinished request of one group cancelled, a chunk per
//! writer command. One transaction for the whole group held the writer for seconds on a large
//! group (issue 37: 300k queued stalled submissions up to 4.9 s); in chunks of
//! [`CANCEL_CHUNK`], commands waiting meanwhile are committed between two chunks (the channel
//! is first in, first out, the next chunk is sent only once the last one is answered, and the
//! writer commits a chunk in a transaction of its own: `Writer::commit_gathered`). The
//! group's unfinished requests are listed once, off the writer, when the cancel begins;
//! requests accepted into the group after that are not in the list (a second cancel takes them).
//! The answer counts them all and lists the first [`CANCEL_LISTED`].

use super::{GroupCancel, Ledger, LedgerError};
use crate::ledger::writer::{unfinished_of, Command};
use crate::ledger::CancelOutcome;

/// Requests cancelled per writer transaction. A cancel costs tens of microseconds (its row, the
/// refund, its riders, the queues), so a chunk holds the writer for milliseconds, and a
/// submission meanwhile waits for at most one chunk (docs/operations.md has the figures; 500
/// let submissions wait over 100 ms on the shared test host).
pub const CANCEL_CHUNK: usize = 200;

/// Requests listed one by one in the answer, the lowest ids; the rest are only counted.
pub const CANCEL_LISTED: usize = 100;

/// What `cancel --group` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupCancelled {
    /// Unfinished requests of the group when the cancel began.
    pub total: usize,
    /// Cancelled and refunded now.
    pub cancelled: usize,
    /// At the MSS: the MSS is asked to drop them (a `cancelled` event settles them).
    pub cancel_requested: usize,
    /// Ended on their own (done, failed, cancelled) between the listing and their chunk.
    pub already_final: usize,
    /// Writer transactions the cancels took.
    pub transactions: usize,
    /// The first [`CANCEL_LISTED`] of them, in id order.
    pub listed: Vec<GroupCancel>,
}

impl GroupCancelled {
    fn count(&mut self, chunk: &[GroupCancel]) {
        for c in chunk {
            match c.outcome {
                CancelOutcome::Requested(_) => self.cancel_requested += 1,
                CancelOutcome::AlreadyFinal(_) => self.already_final += 1,
                CancelOutcome::Cancelled => self.cancelled += 1,
                // `cancel_listed` skips an id it does not find.
                CancelOutcome::NotFound => {}
            }
        }
        let room = CANCEL_LISTED.saturating_sub(self.listed.len());
        self.listed.extend(chunk.iter().take(room).copied());
    }
}

impl Ledger {
    /// Cancel every unfinished request of group `path` (configured or not), each as `cancel`
    /// does, [`CANCEL_CHUNK`] per writer transaction; `at_mss` is called with each request
    /// whose cancel must go to the MSS (the dispatcher carries it there), as its chunk commits.
    /// Runs to the end in a task of its own, so a caller that goes away does not leave the
    /// group half cancelled. An error leaves the chunks before it committed (a second call
    /// cancels the rest).
    pub async fn cancel_group(
        &self,
        path: String,
        mut at_mss: impl FnMut(i64) + Send + 'static,
    ) -> Result<GroupCancelled, LedgerError> {
        let ids = (self.reads).run(move |c| unfinished_of(c, &path)).await?;
        let ledger = self.clone();
        let work = async move {
            let mut done = GroupCancelled {
                total: ids.len(),
                ..GroupCancelled::default()
            };
            for chunk in ids.chunks(CANCEL_CHUNK) {
                let ids = chunk.to_vec();
                let cancelled = ledger
                    .call(|reply| Command::CancelListed { ids, reply })
                    .await?;
                done.transactions += 1;
                for c in &cancelled {
                    if matches!(c.outcome, CancelOutcome::Requested(_)) {
                        at_mss(c.id);
                    }
                }
                done.count(&cancelled);
            }
            Ok(done)
        };
        tokio::spawn(work).await.map_err(|_| LedgerError::Closed)?
    }
}

//! The MSS's answers to a submitted batch: sorted into what it took, what could not reach it
//! and what it refused, and what it took recorded in the ledger (kept in
//! `Dispatcher::unrecorded` while the ledger cannot commit, so it is never sent again).

use mss_adapters::{MssError, TransferRef};
use tracing::{debug, warn};

use super::cancels::CancelJob;
use super::Dispatcher;
use crate::ledger::{AfterSubmit, LedgerError, SubmittedTransfer, ToSubmit};

impl Dispatcher {
    /// Record the transfers the MSS took (and queue the cancels asked meanwhile). If the ledger
    /// cannot, they are kept for the next step, which records them before it sends anything.
    pub(super) async fn record_taken(
        &self,
        (taken, refs): (Vec<SubmittedTransfer>, Vec<TransferRef>),
    ) -> Result<(), LedgerError> {
        let after = match self.ledger.submitted(taken.clone()).await {
            Ok(after) => after,
            Err(e) => {
                self.unrecorded_lock().extend(taken.into_iter().zip(refs));
                return Err(e);
            }
        };
        for ((t, r), a) in taken.into_iter().zip(refs).zip(after) {
            match a {
                AfterSubmit::Recorded => {}
                AfterSubmit::CancelAtMss => self.queue_cancel(CancelJob::Transfer(r)),
                AfterSubmit::CancelRequested => self.queue_cancel(CancelJob::Request(t.id)),
            }
        }
        Ok(())
    }

    pub(super) fn unrecorded_lock(
        &self,
    ) -> std::sync::MutexGuard<'_, Vec<(SubmittedTransfer, TransferRef)>> {
        // A panic while it was held cannot leave it half changed (one push or one take).
        self.unrecorded.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sort the MSS's answers to one batch: what it took, what could not reach it (retried
    /// later), and what it refused (recorded in the ledger now).
    pub(super) async fn sort_answers(
        &self,
        ready: &[ToSubmit],
        results: Vec<Result<mss_adapters::Submitted, MssError>>,
    ) -> Result<BatchAnswers, LedgerError> {
        let mut answers = BatchAnswers::default();
        for (r, result) in ready.iter().zip(results) {
            match result {
                Ok(s) => {
                    if s.duplicate {
                        debug!(request_id = r.id, "mss already had this transfer");
                    }
                    answers.refs.push(transfer_ref(r, Some(s.mss_id.clone())));
                    answers.taken.push(SubmittedTransfer {
                        id: r.id,
                        attempt: r.attempt,
                        mss_id: s.mss_id,
                    });
                }
                Err(e) if e.is_retryable() => {
                    match e {
                        MssError::Unreachable(_) => answers.unreachable.push((r.id, r.attempt)),
                        MssError::Unknown(_) if answers.unknown.is_none() => {
                            answers.unknown = Some(e)
                        }
                        _ => {}
                    }
                    answers.unavailable = true;
                }
                Err(e) => {
                    warn!(request_id = r.id, error = %e, "mss refused the transfer");
                    self.ledger.rejected(r.id, r.attempt, e.to_string()).await?;
                }
            }
        }
        Ok(answers)
    }
}

/// The adapter's name for a submitted request's transfer.
fn transfer_ref(r: &ToSubmit, mss_id: Option<String>) -> TransferRef {
    TransferRef {
        key: r.id.to_string(),
        attempt: r.attempt,
        mss_id,
        file: r.file.clone(),
        size_bytes: r.size_bytes,
    }
}

/// The MSS's answers to one submitted batch, sorted.
#[derive(Default)]
pub(super) struct BatchAnswers {
    /// The transfers it took, for the ledger ...
    pub taken: Vec<SubmittedTransfer>,
    /// ... and as the adapter names them, to cancel one at once.
    pub refs: Vec<TransferRef>,
    /// Some could not reach it (retryable).
    pub unavailable: bool,
    /// The first answer that could not be read: the MSS may have queued those.
    pub unknown: Option<MssError>,
    /// (id, attempt) of those that could not connect to it.
    pub unreachable: Vec<(i64, u32)>,
}

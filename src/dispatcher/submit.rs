//! The submit step: a batch of ready requests to the MSS in one call, its answers sorted and
//! recorded (what it took, what it refused, what could not reach it), and what it took whose
//! recording failed to commit kept and recorded at the next step.

use std::num::NonZeroU32;

use mss_adapters::{MssError, Submitted, Transfer, TransferRef};
use tracing::{debug, warn};

use super::cancels::CancelJob;
use super::{batches, Dispatcher, Step};
use crate::ledger::{AfterSubmit, LedgerError, SubmittedTransfer, ToSubmit};

/// How long a send the MSS deferred waits before it goes again (`Ledger::deferred`). Short, as
/// the adapter answers a deferred destination itself until FTS3 may take it (`fts3/holds.rs`,
/// without a call), and frees it at once when its holder ends; long enough that the ready
/// requests behind it go first instead of waiting while it heads every batch.
const DEFERRED_WAIT_MS: i64 = 1_000;

impl Dispatcher {
    /// Submit one batch of ready requests, as many as the adapter has room for.
    pub async fn submit_once(&self) -> Result<Step, LedgerError> {
        self.record_late().await?;
        let Some(limit) = self.batch_limit() else {
            return Ok(Step::Full);
        };
        let now = self.clock.now_ms();
        let mut ready =
            batches::keep_batches_whole(self.ledger.to_submit(0, now, limit).await?, limit);
        if ready.is_empty() {
            return Ok(Step::Idle);
        }
        let n = NonZeroU32::new(ready.len() as u32).unwrap_or(NonZeroU32::MIN);
        // Cannot fail: submit_batch is capped at the burst size when the config is validated.
        let limiter = self.live.get().submit_limiter.clone();
        let _ = limiter.until_n_ready(n).await;
        // Marked before they go: from now on the MSS may hold them, and a cancel goes there.
        // Those cancelled (or moved on) since they were read are not sent.
        let marked = (self.ledger)
            .mark_sending(ready.iter().map(|r| (r.id, r.attempt)).collect())
            .await?;
        keep_marked(&mut ready, &marked);
        if ready.is_empty() {
            return Ok(Step::Worked(0));
        }
        let first_sends: std::collections::HashSet<i64> =
            (marked.iter()).filter(|m| m.1).map(|m| m.0).collect();
        let transfers: Vec<Transfer> = ready.iter().map(transfer).collect();
        let started = std::time::Instant::now();
        let results = self.adapter.submit_batch(&transfers).await;
        self.count_the_call(&results, started);
        let BatchAnswers {
            taken,
            refs,
            unavailable,
            unknown,
            unreachable,
            deferred,
            deferred_why,
            failed,
        } = self.sort_answers(&ready, results).await;
        if let Some(e) = failed {
            self.keep_unrecorded(taken, refs);
            return Err(e);
        }
        if let Err(e) = self
            .record_unmade(unreachable, deferred, deferred_why, &first_sends)
            .await
        {
            // What the MSS took in the same batch is kept, as when `submitted` fails.
            self.keep_unrecorded(taken, refs);
            return Err(e);
        }
        if let Some(e) = unknown {
            // Not refused: the MSS may have queued them. They stay ready, marked, and are sent
            // again with the same key and attempt, which the MSS answers as a duplicate if it
            // did; a cancel meanwhile goes to the MSS.
            warn!(error = %e, "the mss's answer to a submission could not be read; will resend");
        }
        let count = taken.len();
        self.record_taken(taken, refs).await?;
        if unavailable && count == 0 {
            return Ok(Step::Unavailable);
        }
        Ok(Step::Worked(count))
    }

    /// How many ready requests one call may carry: the adapter's room, at most `submit_batch`;
    /// `None` when the adapter has no room.
    fn batch_limit(&self) -> Option<usize> {
        let batch = self.settings.submit_batch;
        match self.adapter.room() {
            Some(0) => None,
            room => Some(room.map_or(batch, |r| r.min(batch))),
        }
    }

    /// The call's outcome in `last_call` (for `/readyz`) and its time in the metrics.
    fn count_the_call(&self, results: &[Result<Submitted, MssError>], started: std::time::Instant) {
        let ok = results.iter().all(|r| r.is_ok());
        // One transfer refused or deferred is an answer; one that could not reach the MSS is
        // not.
        let failed = (results.iter()).find_map(|r| (r.as_ref().err()).filter(|e| !e.is_answer()));
        self.last_call.record("submit_batch", failed);
        self.metrics
            .mss_call("submit_batch", ok, started.elapsed().as_secs_f64());
    }

    /// Record what the MSS took. When that fails to commit it is kept and recorded at the next
    /// step: those still `accepted` go again; one a cancel took as at the MSS meanwhile does
    /// not, and only this answer names it.
    async fn record_taken(
        &self,
        taken: Vec<SubmittedTransfer>,
        refs: Vec<TransferRef>,
    ) -> Result<(), LedgerError> {
        if taken.is_empty() {
            return Ok(());
        }
        let ids: Vec<i64> = taken.iter().map(|t| t.id).collect();
        let after = match self.ledger.submitted(taken.clone()).await {
            Ok(after) => after,
            Err(e) => {
                self.keep_unrecorded(taken, refs);
                return Err(e);
            }
        };
        (self.unrecorded_list()).retain(|(s, _)| !ids.contains(&s.id));
        for ((id, t), a) in ids.into_iter().zip(refs).zip(after) {
            self.after_submit(id, t, a);
        }
        Ok(())
    }

    /// Record the sends that made nothing at the MSS. The first sends among those that could
    /// not reach it and those it deferred are unmarked (no earlier send of the same attempt may
    /// have reached it); the deferred ones wait `DEFERRED_WAIT_MS`.
    async fn record_unmade(
        &self,
        mut unmade: Vec<(i64, u32)>,
        deferred: Vec<(i64, u32)>,
        why: Option<String>,
        first_sends: &std::collections::HashSet<i64>,
    ) -> Result<(), LedgerError> {
        unmade.extend(&deferred);
        unmade.retain(|(id, _)| first_sends.contains(id));
        if !unmade.is_empty() {
            self.ledger.mark_unsent(unmade).await?;
        }
        if let Some(why) = why {
            let until = self.clock.now_ms() + DEFERRED_WAIT_MS;
            self.ledger.deferred(deferred, until, why).await?;
        }
        Ok(())
    }

    /// What to do once the MSS's taking of request `id` (`t`) is recorded.
    fn after_submit(&self, id: i64, t: TransferRef, after: AfterSubmit) {
        match after {
            AfterSubmit::Recorded => {}
            AfterSubmit::CancelAtMss => self.queue_cancel(CancelJob::Transfer(t)),
            AfterSubmit::CancelRequested => self.queue_cancel(CancelJob::Request(id)),
        }
    }

    fn unrecorded_list(&self) -> std::sync::MutexGuard<'_, Vec<(SubmittedTransfer, TransferRef)>> {
        self.unrecorded.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The MSS took these, and recording it failed to commit: kept for `record_late`.
    fn keep_unrecorded(&self, taken: Vec<SubmittedTransfer>, refs: Vec<TransferRef>) {
        let mut list = self.unrecorded_list();
        for (s, t) in taken.into_iter().zip(refs) {
            list.retain(|(kept, _)| kept.id != s.id);
            list.push((s, t));
        }
    }

    /// Record what the MSS took when recording it failed to commit (`Ledger::submitted_late`).
    /// A request a cancel took as at the MSS meanwhile (`cancel_maybe_at_mss`) is never sent
    /// again: this answer is all that names its transfer (after a restart too) and hands its
    /// cancel to the cancel loop, which tried it too early. Those still `accepted` are sent
    /// again and kept until that answer is recorded.
    async fn record_late(&self) -> Result<(), LedgerError> {
        let late = std::mem::take(&mut *self.unrecorded_list());
        if late.is_empty() {
            return Ok(());
        }
        let items = late.iter().map(|(s, _)| s.clone()).collect();
        let after = match self.ledger.submitted_late(items).await {
            Ok(after) => after,
            Err(e) => {
                self.unrecorded_list().extend(late);
                return Err(e);
            }
        };
        let mut resent = Vec::new();
        for ((s, t), a) in late.into_iter().zip(after) {
            match a {
                Some(a) => self.after_submit(s.id, t, a),
                None => resent.push((s, t)),
            }
        }
        self.unrecorded_list().extend(resent);
        Ok(())
    }

    /// Sort the MSS's answers to one batch: what it took, what could not reach it (retried
    /// later), and what it refused (recorded in the ledger now; a failure to record it is
    /// `failed`, with what it took kept).
    async fn sort_answers(
        &self,
        ready: &[ToSubmit],
        results: Vec<Result<mss_adapters::Submitted, MssError>>,
    ) -> BatchAnswers {
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
                Err(e @ MssError::Deferred(_)) => {
                    debug!(request_id = r.id, error = %e, "mss deferred the transfer");
                    answers.deferred.push((r.id, r.attempt));
                    answers.deferred_why.get_or_insert_with(|| e.to_string());
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
                    if answers.failed.is_none() {
                        let recorded = self.ledger.rejected(r.id, r.attempt, e.to_string());
                        answers.failed = recorded.await.err();
                    }
                }
            }
        }
        answers
    }
}

/// Keep the requests of `ready` whose ids are in `marked`, a subsequence of theirs in order.
fn keep_marked(ready: &mut Vec<ToSubmit>, marked: &[(i64, bool)]) {
    let mut next = marked.iter().peekable();
    ready.retain(|r| next.next_if(|m| m.0 == r.id).is_some());
}

/// The adapter's name for a submitted request's transfer.
fn transfer_ref(r: &ToSubmit, mss_id: Option<String>) -> TransferRef {
    TransferRef {
        key: r.key.clone(),
        attempt: r.attempt,
        mss_id,
        file: r.file.clone(),
        size_bytes: r.size_bytes,
    }
}

/// The MSS's answers to one submitted batch, sorted.
#[derive(Default)]
struct BatchAnswers {
    /// The transfers it took, for the ledger ...
    taken: Vec<SubmittedTransfer>,
    /// ... and as the adapter names them, to cancel one at once.
    refs: Vec<TransferRef>,
    /// Some could not reach it (retryable).
    unavailable: bool,
    /// The first answer that could not be read: the MSS may have queued those.
    unknown: Option<MssError>,
    /// (id, attempt) of those that could not connect to it.
    unreachable: Vec<(i64, u32)>,
    /// (id, attempt) of those it deferred (an answer: it is up, and made nothing) ...
    deferred: Vec<(i64, u32)>,
    /// ... and the first deferral's text, kept as their `last_error`.
    deferred_why: Option<String>,
    /// Recording a refusal failed (the refused one is sent again, and refused again).
    failed: Option<LedgerError>,
}

fn transfer(r: &ToSubmit) -> Transfer {
    Transfer {
        key: r.key.clone(),
        attempt: r.attempt,
        file: r.file.clone(),
        size_bytes: r.size_bytes,
        priority: r.mss_priority,
        volume: r.volume.clone(),
        group: r.group.clone(),
        direction: r.direction,
        local_file: r.local_file.clone(),
        bfid: r.bfid.clone(),
        position: r.position,
        offset_bytes: r.offset_bytes,
    }
}

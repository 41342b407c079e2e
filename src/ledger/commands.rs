//! The writer's commands: each `Ledger` method that records something sends one `Command` to the
//! writer thread (`writer.rs`) and answers after the group commit that holds it, so an answer is
//! never sent for a change that is not on disk. `call` is the one way in; `group_cancel.rs`,
//! `located.rs` and `reload.rs` send their own commands through it.

use mss_adapters::{EventCursor, MssEvent};
use tokio::sync::oneshot;

use super::writer::Command;
use super::{
    Accepted, AfterSubmit, CancelOutcome, Ledger, LedgerError, NewPriority, NewRequest, Refused,
    SubmittedTransfer,
};

impl Ledger {
    /// An empty command: answered by the writer when it is alive (keeps its heartbeat).
    pub async fn tick(&self) -> Result<(), LedgerError> {
        self.call(|reply| Command::Tick { reply }).await
    }

    pub(super) async fn call<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, LedgerError>>) -> Command,
    ) -> Result<T, LedgerError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(make(reply))
            .await
            .map_err(|_| LedgerError::Closed)?;
        rx.await.map_err(|_| LedgerError::Closed)?
    }

    /// Decide, charge and commit new requests; answers come back in order, after the commit.
    /// Record new requests. One refused on arrival makes the answer
    /// [`LedgerError::OverQueuedCap`] or [`LedgerError::OutputInUse`] (the items before and
    /// after it are still recorded): for one request at a time, or where nothing can be
    /// refused; a batch uses [`Ledger::accept_each`].
    pub async fn accept(&self, items: Vec<NewRequest>) -> Result<Vec<Accepted>, LedgerError> {
        (self.accept_each(items).await?.into_iter())
            .map(|r| {
                r.map_err(|refused| match refused {
                    Refused::QueuedCap(r) => LedgerError::OverQueuedCap(r),
                    Refused::OutputInUse(r) => LedgerError::OutputInUse(r),
                })
            })
            .collect()
    }

    /// Record new requests, answering each: accepted, or refused on arrival (a queued-bytes
    /// cap; a station-side copy another unfinished read writes), checked item by item in
    /// order, so the earlier items of the same call count.
    pub async fn accept_each(
        &self,
        items: Vec<NewRequest>,
    ) -> Result<Vec<Result<Accepted, Refused>>, LedgerError> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let request_id = crate::request_scope::request_id();
        let without_volume = (items.iter()).any(|i| i.volume.as_deref().is_none_or(str::is_empty));
        let answers = self
            .call(|reply| Command::Accept {
                items,
                request_id,
                reply,
            })
            .await;
        if without_volume && answers.is_ok() {
            self.unlocated.notify_one();
        }
        answers
    }

    /// Record that the MSS took these transfers.
    pub async fn submitted(
        &self,
        items: Vec<SubmittedTransfer>,
    ) -> Result<Vec<AfterSubmit>, LedgerError> {
        self.call(|reply| Command::Submitted { items, reply }).await
    }

    /// Record again what the MSS took when recording it first failed to commit (a full disk, an
    /// I/O error). A request a cancel took as at the MSS meanwhile (`submitted`, never sent
    /// again) has only this answer to name its transfer and hand its cancel on; one still
    /// `accepted` at that attempt is sent again (the MSS answers a duplicate) and is left to
    /// that answer: `None`.
    pub async fn submitted_late(
        &self,
        items: Vec<SubmittedTransfer>,
    ) -> Result<Vec<Option<AfterSubmit>>, LedgerError> {
        self.call(|reply| Command::SubmittedLate { items, reply })
            .await
    }

    /// These submissions, (id, attempt), are about to be sent: from the commit on the MSS may
    /// hold them, and a cancel goes there. Returns the ids to send, in order (those still
    /// `accepted` at that attempt), each with whether it is its attempt's first send.
    pub async fn mark_sending(
        &self,
        items: Vec<(i64, u32)>,
    ) -> Result<Vec<(i64, bool)>, LedgerError> {
        self.call(|reply| Command::Sending { items, reply }).await
    }

    /// These first sends, (id, attempt), could not connect to the MSS (nothing reached it): a
    /// cancel of them is final at once again, and one asked for meanwhile ends them now.
    pub async fn mark_unsent(&self, items: Vec<(i64, u32)>) -> Result<(), LedgerError> {
        self.call(|reply| Command::Unsent { items, reply }).await
    }

    /// The MSS deferred these sends, (id, attempt): it made nothing and will take them later
    /// (FTS3: their destination is held by a transfer not ended). They stay `accepted` at the
    /// same attempt and are not sent again before `until_ms`.
    pub async fn deferred(
        &self,
        items: Vec<(i64, u32)>,
        until_ms: i64,
        reason: String,
    ) -> Result<(), LedgerError> {
        self.call(|reply| Command::Deferred {
            items,
            until_ms,
            reason,
            reply,
        })
        .await
    }

    /// The MSS refused a submission for good: fail the request and refund it.
    pub async fn rejected(&self, id: i64, attempt: u32, reason: String) -> Result<(), LedgerError> {
        self.call(|reply| Command::Rejected {
            id,
            attempt,
            reason,
            reply,
        })
        .await
    }

    /// Apply MSS events and move the event cursor, in one transaction. Returns how many events
    /// changed a request (duplicates and stale events change nothing).
    pub async fn apply_events(
        &self,
        events: Vec<MssEvent>,
        cursor: EventCursor,
    ) -> Result<usize, LedgerError> {
        self.call(|reply| Command::Events {
            events,
            cursor: Some(cursor),
            reply,
        })
        .await
    }

    /// Apply events learnt from status queries; the stored event cursor is left as it is.
    pub async fn apply_status_events(&self, events: Vec<MssEvent>) -> Result<usize, LedgerError> {
        self.call(|reply| Command::Events {
            events,
            cursor: None,
            reply,
        })
        .await
    }

    /// The MSS confirmed these in-flight requests are still queued or running.
    pub async fn confirm_in_flight(&self, ids: Vec<i64>) -> Result<(), LedgerError> {
        self.call(|reply| Command::Checked { ids, reply }).await
    }

    /// The MSS no longer knows this attempt (it lost its queue): submit the request again as a
    /// new attempt, keeping its charge. Returns whether the request was in flight.
    pub async fn resubmit_lost(
        &self,
        id: i64,
        attempt: u32,
        reason: String,
    ) -> Result<bool, LedgerError> {
        self.call(|reply| Command::Lost {
            id,
            attempt,
            reason,
            reply,
        })
        .await
    }

    /// Release held requests whose groups are now under their feasibility caps. Returns how
    /// many were released.
    pub async fn release_held(&self) -> Result<usize, LedgerError> {
        self.call(|reply| Command::Release { reply }).await
    }

    /// Record priorities the MSS has taken.
    pub async fn reprioritised(&self, items: Vec<NewPriority>) -> Result<usize, LedgerError> {
        self.call(|reply| Command::Reprioritised { items, reply })
            .await
    }

    /// Tests: what the writer's memory holds that its rows do not say (empty: nothing).
    #[cfg(test)]
    pub async fn audit(&self) -> Result<Vec<String>, LedgerError> {
        self.call(|reply| Command::Audit { reply }).await
    }

    pub async fn cancel(&self, id: i64) -> Result<CancelOutcome, LedgerError> {
        let request_id = crate::request_scope::request_id();
        self.call(|reply| Command::Cancel {
            id,
            request_id,
            reply,
        })
        .await
    }
}

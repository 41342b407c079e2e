//! The cancel loop: carries cancellations to the MSS, and sends again those the MSS could not
//! take (an outage, an answer that could not be read) until it takes them or the request ends.
//!
//! Two kinds of work arrive: a request whose cancel was asked for (from the API, or from the
//! submit loop once a request cancelled while it waited to be resent reached the MSS), carried
//! while the ledger lists it (`Ledger::cancelling_one`: at the MSS, no rider waiting on its
//! transfer); and a transfer whose request had already ended when its submission's answer came
//! (cancelled while it was being submitted), named by the adapter's reference.

use std::collections::BTreeSet;
use std::sync::Arc;

use mss_adapters::{MssError, TransferRef};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use super::{Backoff, Dispatcher};

/// One cancel for the loop.
#[derive(Debug)]
pub(super) enum CancelJob {
    /// A request whose cancel was asked for.
    Request(i64),
    /// A transfer of a request that has ended: cancel it at the MSS, nothing else.
    Transfer(TransferRef),
}

/// What the MSS could not take yet, sent again at the next retry pass.
#[derive(Default)]
pub(super) struct CancelsToRetry {
    requests: BTreeSet<i64>,
    transfers: Vec<TransferRef>,
}

impl CancelsToRetry {
    pub(super) fn is_empty(&self) -> bool {
        self.requests.is_empty() && self.transfers.is_empty()
    }
}

impl Dispatcher {
    /// Ask the MSS to cancel `t`. Whether to ask again later (the MSS could not be reached or
    /// its answer could not be read).
    pub(super) async fn cancel_at_mss(&self, t: &TransferRef) -> bool {
        let key = &t.key;
        match self.timed("cancel", self.adapter.cancel(t)).await {
            Ok(()) => debug!(mss_key = %key, "cancel sent to the mss"),
            // Too late (running or finished) or unknown: the transfer's own event settles it.
            Err(MssError::Rejected(why)) => debug!(mss_key = %key, %why, "mss did not cancel"),
            Err(e) if e.is_retryable() => {
                warn!(mss_key = %key, error = %e, "cannot reach the mss to cancel; will retry");
                return true;
            }
            Err(e) => warn!(mss_key = %key, error = %e, "the mss's answer to a cancel"),
        }
        false
    }

    /// Hand `job` to the cancel loop (dropped when no loop runs: a test's single steps).
    pub(super) fn queue_cancel(&self, job: CancelJob) {
        let _ = self.cancel_jobs.send(job);
    }

    /// Carry the cancel of request `id` to the MSS while it is asked for, the request is at the
    /// MSS and no rider waits on its transfer; `id` joins `retry` if the MSS could not take it,
    /// or while the request is not at the MSS yet or riders wait on it.
    async fn cancel_one(&self, id: i64, retry: &mut BTreeSet<i64>) {
        match self.ledger.cancelling_one(id).await {
            Ok(Some(r)) => {
                if self.cancel_at_mss(&r.transfer).await {
                    retry.insert(id);
                }
            }
            // Riders wait on its transfer, or it waits to be resent: looked at again later,
            // until the cancel can go or the request ends.
            Ok(None) => match self.ledger.request(id).await {
                Ok(Some(r)) if r.cancel_requested && !r.state.is_terminal() => {
                    retry.insert(id);
                }
                Ok(_) => {}
                Err(_) => {
                    retry.insert(id);
                }
            },
            Err(e) => {
                warn!(request_id = id, error = %e, "cannot read the request to cancel");
                retry.insert(id);
            }
        }
    }

    pub(super) async fn run_job(&self, job: CancelJob, retry: &mut CancelsToRetry) {
        match job {
            CancelJob::Request(id) => self.cancel_one(id, &mut retry.requests).await,
            CancelJob::Transfer(t) => {
                if self.cancel_at_mss(&t).await {
                    retry.transfers.push(t);
                }
            }
        }
    }

    /// Cancels asked for before a restart, from the ledger: every request whose cancel is
    /// asked for and that has not ended (at the MSS or waiting to be resent; riders or not).
    pub(super) async fn carried_over(&self, retry: &mut CancelsToRetry) {
        match self.ledger.cancel_pending().await {
            Ok(ids) => {
                if !ids.is_empty() {
                    info!(count = ids.len(), "resending cancellations");
                }
                for id in ids {
                    self.cancel_one(id, &mut retry.requests).await;
                }
            }
            Err(e) => warn!(error = %e, "cannot read pending cancellations"),
        }
    }

    /// The loop: `cancels` from the API, `jobs` from the dispatcher's own loops.
    pub(super) async fn cancel_loop(
        self: Arc<Self>,
        mut cancels: mpsc::UnboundedReceiver<i64>,
        mut jobs: mpsc::UnboundedReceiver<CancelJob>,
    ) {
        let mut retry = CancelsToRetry::default();
        self.carried_over(&mut retry).await;
        let mut backoff = Backoff::new(self.settings.retry);
        // When the next retry pass runs: new cancels arriving meanwhile do not move it.
        let mut due: Option<tokio::time::Instant> = None;
        loop {
            if retry.is_empty() {
                backoff.reset();
                due = None;
            } else if due.is_none() {
                due = Some(tokio::time::Instant::now() + backoff.next());
            }
            let retry_pass = async {
                match due {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                id = cancels.recv() => match id {
                    Some(id) => self.run_job(CancelJob::Request(id), &mut retry).await,
                    None => return,
                },
                Some(job) = jobs.recv() => self.run_job(job, &mut retry).await,
                () = retry_pass => {
                    let CancelsToRetry { requests, transfers } = std::mem::take(&mut retry);
                    for id in requests {
                        self.run_job(CancelJob::Request(id), &mut retry).await;
                    }
                    for t in transfers {
                        self.run_job(CancelJob::Transfer(t), &mut retry).await;
                    }
                    due = None;
                }
            }
        }
    }
}

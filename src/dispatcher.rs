//! The dispatcher: moves committed requests to the MSS and MSS events back into the ledger.
//!
//! Six loops (seven with volume lookups), all restartable from the ledger alone:
//! - **submit**: takes ready requests, highest MSS priority first (data taking never waits in
//!   the broker behind fair-share requests) and then in decision order, no more than the
//!   adapter has room for (an `encp` adapter runs a bounded number of processes), waits for the
//!   governor rate limiter, and sends them in one ordered batch. Every transfer carries the request id (and attempt) as its
//!   idempotency key, so a request re-sent after a crash is answered "duplicate" by the MSS and
//!   never queued twice. When the MSS is unreachable, the loop backs off (capped exponential,
//!   with jitter, never above `mss.retry_max_ms`) instead of hammering it, and picks up where it
//!   was when the MSS returns. An answer that cannot be read (`MssError::Unknown`) is treated
//!   the same way: the requests stay ready and are resent with the same key and attempt; only
//!   the MSS's own refusal fails a request.
//! - **events**: long-polls the adapter from the cursor stored in the ledger and applies each
//!   batch of events together with the new cursor in one transaction.
//! - **cancel**: carries cancellations of requests already at the MSS to the adapter.
//! - **release**: every `usage.held_recheck_ms`, asks the ledger to release requests held by a
//!   feasibility cap whose group's usage has fallen below it (decay and window roll-over lower
//!   usage with no event at all, so this runs on a timer).
//! - **reprioritise**: every `policy.reprioritise_secs`, recomputes the priorities of requests
//!   queued at the MSS (wait time and decayed usage change with time alone; the starvation
//!   bound lifts a request that waited `policy.max_wait_secs`) and sends the changes through
//!   the adapter, when the MSS can take them.
//! - **locate** (with `[mss.volume_lookup]`, `dispatcher/locator.rs`): looks up where the
//!   files of queued requests without a volume lie, and stores the answers.
//! - **stale**: asks the MSS for the status of in-flight requests it has said nothing of for a
//!   while, which recovers lost events and transfers the MSS lost. The same settling runs for
//!   every in-flight request when the MSS's event log starts over (a new epoch).
//!
//! Each loop's body is a `*_once` step a test can call directly.
//!
//! The submit, event, stale, cancel and release loops, each around a testable step (`submit_once`,
//! `events_once`, `check_stale_once`; release is one ledger command). `dispatcher/submit.rs`: the
//! submit step, `submit_once`, its answers sorted (`sort_answers`) and the answers whose recording
//! failed kept for the next step (`keep_unrecorded`, `record_late`). `submit_once` takes no more
//! ready requests than the adapter's `room()`; when it is full the loop waits for `room_freed()`.
//! Every call after submission names the transfer by the `TransferRef` the ledger builds
//! (`InFlight`, `RequestRecord::transfer_ref`). The settings (`MssSettings`,
//! `AdapterSettings`, `SimulatorSettings`) are `domain::mss`'s, re-exported here. `dispatcher/locator.rs`: `VolumeLocator`, the loop that
//! (with `[mss.volume_lookup]`, in the `volumes` mode) looks up queued requests without a volume
//! (`Ledger::unlocated`) and stores the answers (`Ledger::located`, `ledger/writer/located.rs`:
//! stored once, a waiting request moved to its tape's queue; schema version 11, `volume_source`).
//! `dispatcher/last_call.rs`: `LastCall`, the latest MSS call's outcome (a refusal is an answer),
//! recorded by `timed` and `submit_once`, read by `/readyz`. `dispatcher/cancels.rs`: the cancel
//! loop, carrying a request's cancel to the MSS while the ledger lists it (`cancelling_one`: at the
//! MSS, no rider waiting) and sending again what the MSS could not take, with the retry backoff; at
//! start it takes every cancel the ledger has pending (`cancel_pending`), and the submit loop hands
//! it the cancels its answers call for (`AfterSubmit::CancelAtMss`, `CancelRequested`).
//! `dispatcher/batches.rs`: `whole`, a full read of ready requests cut before a `volumes` batch it
//! would split (the batch goes whole in the next call). `dispatcher/marked.rs`:
//! `settle_marked_sends`, run once at the start of a term's submit loop: the sends an earlier
//! broker marked go again with the same key where the MSS deduplicates, and are held
//! `unsettled` for an operator where it cannot (issue 42, docs/ha.md).

mod batches;
mod cancels;
mod last_call;
mod locator;
mod marked;
mod submit;

pub use crate::domain::mss::{AdapterSettings, MssSettings, SimulatorSettings};
pub use last_call::{CallOutcome, LastCall};
pub use locator::VolumeLocator;

use std::sync::Arc;
use std::time::Duration;

use mss_adapters::{EventKind, MssAdapter, MssError, MssEvent, Progress, TransferRef};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use crate::clock::Clock;
use crate::domain::RetrySettings;
use crate::ledger::{InFlight, Ledger, LedgerError, SubmittedTransfer};
use crate::live_settings::LiveSettings;
use crate::policy::transition::REPRIORITISE_BATCH;
use cancels::CancelJob;

/// Most stale requests one sweep checks.
const STALE_BATCH: usize = 500;

/// Longest the submit loop sleeps when idle before looking again (a safety net: commits notify).
const IDLE_POLL: Duration = Duration::from_secs(1);

/// What one step of a loop found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Did some work: go again at once.
    Worked(usize),
    /// Nothing to do.
    Idle,
    /// The MSS (or the ledger) is not answering: back off.
    Unavailable,
    /// The MSS has no room for another transfer: wait until one ends.
    Full,
}

/// The dispatcher's parts.
pub struct Dispatcher {
    ledger: Ledger,
    adapter: Arc<dyn MssAdapter>,
    /// The submit rate limit in force (a reload may change it).
    live: Arc<LiveSettings>,
    settings: MssSettings,
    clock: Arc<dyn Clock>,
    metrics: Arc<crate::metrics::Metrics>,
    /// The latest MSS call's outcome, for readiness.
    last_call: Arc<LastCall>,
    /// Cancels the other loops hand to the cancel loop ...
    cancel_jobs: mpsc::UnboundedSender<CancelJob>,
    /// ... which takes this end when it starts.
    cancel_jobs_rx: Option<mpsc::UnboundedReceiver<CancelJob>>,
    /// What the MSS took whose recording failed to commit, recorded at the next submit step
    /// (`record_late`).
    unrecorded: std::sync::Mutex<Vec<(SubmittedTransfer, TransferRef)>>,
}

impl Dispatcher {
    pub fn new(
        ledger: Ledger,
        adapter: Arc<dyn MssAdapter>,
        settings: MssSettings,
        live: Arc<LiveSettings>,
        clock: Arc<dyn Clock>,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Dispatcher {
        let (cancel_jobs, cancel_jobs_rx) = mpsc::unbounded_channel();
        Dispatcher {
            ledger,
            adapter,
            live,
            settings,
            clock,
            metrics,
            last_call: Arc::default(),
            cancel_jobs,
            cancel_jobs_rx: Some(cancel_jobs_rx),
            unrecorded: Default::default(),
        }
    }

    /// Where the latest MSS call's outcome is kept (read by `/readyz`).
    pub fn last_call(&self) -> Arc<LastCall> {
        self.last_call.clone()
    }

    /// Start the loops on `tasks`.
    pub fn spawn(mut self, cancels: mpsc::UnboundedReceiver<i64>, tasks: &mut JoinSet<()>) {
        let jobs = (self.cancel_jobs_rx.take()).unwrap_or_else(|| mpsc::unbounded_channel().1);
        let this = Arc::new(self);
        tasks.spawn(this.clone().release_loop());
        tasks.spawn(this.clone().reprioritise_loop());
        tasks.spawn(this.clone().submit_loop());
        tasks.spawn(this.clone().event_loop());
        tasks.spawn(this.clone().stale_loop());
        if let Some((lookup, _)) = this.settings.volume_lookup.clone() {
            let concurrency = lookup.concurrency;
            let locator = mss_adapters::locate::Locator::new(lookup);
            let run = VolumeLocator::new(
                this.ledger.clone(),
                locator,
                concurrency,
                this.metrics.clone(),
            );
            tasks.spawn(run.run());
        }
        tasks.spawn(this.cancel_loop(cancels, jobs));
    }

    async fn release_loop(self: Arc<Self>) {
        loop {
            // Read each time: a reload may change it.
            let period = self.ledger.policy().held_recheck;
            tokio::time::sleep(period).await;
            match self.ledger.release_held().await {
                Ok(0) => {}
                Ok(n) => info!(released = n, "held requests released"),
                Err(e) => warn!(error = %e, "releasing held requests failed; will retry"),
            }
        }
    }

    async fn reprioritise_loop(self: Arc<Self>) {
        if !self.adapter.capabilities().reprioritize {
            if self.ledger.policy().order.reprioritise.is_some() {
                info!(
                    adapter = self.adapter.name(),
                    "the mss cannot change priorities: requests already there keep theirs"
                );
            }
            return;
        }
        loop {
            // Read each time: a reload may turn it on, off or change the period.
            let Some(period) = self.ledger.policy().order.reprioritise else {
                tokio::time::sleep(IDLE_POLL).await;
                continue;
            };
            tokio::time::sleep(period).await;
            match self.reprioritise_once().await {
                Ok(0) => {}
                Ok(n) => info!(changed = n, "re-prioritised requests queued at the mss"),
                Err(e) => warn!(error = %e, "re-prioritising failed; will retry"),
            }
        }
    }

    /// Recompute the priorities of requests queued at the MSS and send the ones that changed.
    /// The ledger records a new priority only once the MSS took it. Returns how many changed.
    pub async fn reprioritise_once(&self) -> Result<usize, LedgerError> {
        let changes = self.ledger.reprioritise(REPRIORITISE_BATCH).await?;
        let mut taken = Vec::with_capacity(changes.len());
        for c in changes {
            match self
                .timed(
                    "reprioritize",
                    self.adapter.reprioritize(&c.transfer, c.mss_priority),
                )
                .await
            {
                Ok(()) => taken.push(c),
                // Started meanwhile, or gone: its own events settle it.
                Err(MssError::Rejected(why)) => {
                    debug!(request_id = c.id, %why, "mss kept the old priority")
                }
                Err(e) => {
                    warn!(error = %e, "cannot reach the mss to re-prioritise; next period");
                    break;
                }
            }
        }
        let n = taken.len();
        if n > 0 {
            self.ledger.reprioritised(taken).await?;
        }
        Ok(n)
    }

    /// Await an adapter call and record its latency and outcome.
    async fn timed<T>(
        &self,
        call: &'static str,
        fut: impl std::future::Future<Output = Result<T, MssError>>,
    ) -> Result<T, MssError> {
        let started = std::time::Instant::now();
        let out = fut.await;
        self.last_call.record(call, out.as_ref().err());
        self.metrics
            .mss_call(call, out.is_ok(), started.elapsed().as_secs_f64());
        out
    }

    /// Fetch and apply one batch of MSS events.
    pub async fn events_once(&self, wait: Duration) -> Result<Step, LedgerError> {
        let cursor = self.ledger.event_cursor().await?;
        let batch = match self
            .timed("events", self.adapter.events(&cursor, wait))
            .await
        {
            Ok(b) => b,
            Err(e) => {
                debug!(error = %e, "cannot read mss events");
                return Ok(Step::Unavailable);
            }
        };
        if batch.events.is_empty() && batch.cursor == cursor {
            return Ok(Step::Idle);
        }
        if batch.cursor.epoch != cursor.epoch {
            // The MSS's event log started over: events of transfers it had may be gone with the
            // old log, and transfers it had may be gone too. Settle every in-flight request from
            // the MSS's own status before the new cursor is stored, so a failure here is retried
            // on the next poll instead of forgotten.
            if !self.recover_in_flight().await? {
                return Ok(Step::Unavailable);
            }
        }
        let n = batch.events.len();
        self.ledger.apply_events(batch.events, batch.cursor).await?;
        Ok(Step::Worked(n))
    }

    /// Ask the MSS where each in-flight request stands and settle it. Returns false if the MSS
    /// could not answer.
    pub async fn recover_in_flight(&self) -> Result<bool, LedgerError> {
        let in_flight = self.ledger.in_flight().await?;
        self.settle_all(&in_flight, "the mss event log started over")
            .await
    }

    /// Status-check in-flight requests the MSS has said nothing of for `mss.stale_after_ms`: a
    /// lost event is found this way, and a transfer the MSS lost is submitted again.
    pub async fn check_stale_once(&self) -> Result<Step, LedgerError> {
        let before = self.clock.now_ms() - self.settings.stale_after.as_millis() as i64;
        let stale = self.ledger.stale(before, STALE_BATCH).await?;
        if stale.is_empty() {
            return Ok(Step::Idle);
        }
        if !self.settle_all(&stale, "no news from the mss").await? {
            return Ok(Step::Unavailable);
        }
        Ok(Step::Worked(stale.len()))
    }

    /// An answer that cannot be read for one transfer (garbled, an unknown state, a refusal)
    /// does not stop the others: that request is counted as checked (asked again after
    /// `stale_after`) and the sweep goes on. An MSS that cannot be reached ends the sweep, to
    /// be retried whole (each further call would wait out its timeout).
    async fn settle_all(&self, requests: &[InFlight], why: &str) -> Result<bool, LedgerError> {
        let (mut resubmitted, mut settled, mut still) = (0usize, 0usize, Vec::new());
        for r in requests {
            let (id, attempt) = (r.id, r.attempt);
            let status = match self.timed("status", self.adapter.status(&r.transfer)).await {
                Ok(s) => s,
                Err(MssError::Unavailable(e) | MssError::Unreachable(e)) => {
                    warn!(request_id = id, error = %e, "cannot reach the mss for a transfer's state");
                    if !still.is_empty() {
                        self.ledger.confirm_in_flight(still).await?;
                    }
                    return Ok(false);
                }
                Err(e) => {
                    warn!(request_id = id, error = %e, "cannot read the mss's state of a transfer; asked again later");
                    still.push(id);
                    continue;
                }
            };
            let event = |kind| MssEvent {
                seq: 0,
                key: r.transfer.key.clone(),
                attempt,
                at_ms: self.clock.now_ms(),
                kind,
            };
            match status {
                Some(s) if s.attempt == attempt => match s.progress {
                    Progress::Finished(kind) => {
                        // A transfer done has started: as the adapters' event logs do
                        // (`EventLog::observe`), its start comes first, so a request whose
                        // start event was lost still has a start and a wait (a start already
                        // recorded is left as it is).
                        let started = matches!(kind, EventKind::Done { .. })
                            .then(|| event(EventKind::Started));
                        let events = started.into_iter().chain([event(kind)]).collect();
                        let changed = self.ledger.apply_status_events(events).await?;
                        settled += usize::from(changed > 0);
                    }
                    Progress::Running => {
                        self.ledger
                            .apply_status_events(vec![event(EventKind::Started)])
                            .await?;
                        still.push(id);
                    }
                    Progress::Queued => still.push(id),
                },
                _ => {
                    let reason =
                        format!("{why}; the mss no longer knows this transfer, submitted again");
                    resubmitted +=
                        usize::from(self.ledger.resubmit_lost(id, attempt, reason).await?);
                }
            }
        }
        if !still.is_empty() {
            self.ledger.confirm_in_flight(still).await?;
        }
        if resubmitted + settled > 0 {
            info!(
                resubmitted,
                settled, why, "settled in-flight requests from the mss's status"
            );
        }
        Ok(true)
    }

    async fn stale_loop(self: Arc<Self>) {
        let period = (self.settings.stale_after / 2)
            .clamp(Duration::from_millis(50), Duration::from_secs(30));
        loop {
            match self.check_stale_once().await {
                Ok(Step::Worked(_)) => continue,
                Ok(_) => {}
                Err(e) => warn!(error = %e, "ledger error checking stale requests"),
            }
            tokio::time::sleep(period).await;
        }
    }

    async fn submit_loop(self: Arc<Self>) {
        let mut backoff = Backoff::new(self.settings.retry);
        // Before this term sends anything: what earlier brokers marked (`marked.rs`).
        while let Err(e) = self.settle_marked_sends().await {
            let d = backoff.next();
            warn!(error = %e, retry_in_ms = d.as_millis() as u64, "ledger error settling the sends of earlier brokers");
            tokio::time::sleep(d).await;
        }
        backoff.reset();
        loop {
            match self.submit_once().await {
                Ok(Step::Worked(_)) => backoff.reset(),
                Ok(Step::Idle) => {
                    backoff.reset();
                    let wait = self.idle_wait().await;
                    let _ = tokio::time::timeout(wait, self.ledger.ready().notified()).await;
                }
                Ok(Step::Unavailable) => {
                    let d = backoff.next();
                    warn!(
                        retry_in_ms = d.as_millis() as u64,
                        "mss unavailable; holding submissions"
                    );
                    tokio::time::sleep(d).await;
                }
                Ok(Step::Full) => {
                    backoff.reset();
                    let _ = tokio::time::timeout(IDLE_POLL, self.adapter.room_freed()).await;
                }
                Err(e) => {
                    let d = backoff.next();
                    warn!(error = %e, retry_in_ms = d.as_millis() as u64, "ledger error in the submit loop");
                    tokio::time::sleep(d).await;
                }
            }
        }
    }

    /// How long to sleep when idle: until the next retry is due, at most `IDLE_POLL`.
    async fn idle_wait(&self) -> Duration {
        match self.ledger.next_retry_ms().await {
            Ok(Some(at)) => {
                let ms = (at - self.clock.now_ms()).clamp(1, IDLE_POLL.as_millis() as i64);
                Duration::from_millis(ms as u64)
            }
            _ => IDLE_POLL,
        }
    }

    async fn event_loop(self: Arc<Self>) {
        let mut backoff = Backoff::new(self.settings.retry);
        loop {
            match self.events_once(self.settings.event_wait).await {
                Ok(Step::Worked(_)) | Ok(Step::Idle) | Ok(Step::Full) => backoff.reset(),
                Ok(Step::Unavailable) => tokio::time::sleep(backoff.next()).await,
                Err(e) => {
                    warn!(error = %e, "ledger error applying mss events");
                    tokio::time::sleep(backoff.next()).await;
                }
            }
        }
    }
}

/// A loop's outage backoff: [`RetrySettings::jittered`] of the failures in a row (the one
/// backoff on the `[mss] retry_*` keys, which a request's retries wait too), the jitter drawn
/// from the clock's nanoseconds so brokers do not retry in step.
struct Backoff {
    retry: RetrySettings,
    /// Failures since the loop last worked.
    failures: u32,
}

impl Backoff {
    fn new(retry: RetrySettings) -> Backoff {
        Backoff { retry, failures: 0 }
    }

    fn reset(&mut self) {
        self.failures = 0;
    }

    fn next(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|t| t.subsec_nanos())
            .unwrap_or(0);
        (self.retry).jittered(self.failures, f64::from(nanos % 1000) / 1000.0)
    }
}

#[cfg(test)]
mod tests;

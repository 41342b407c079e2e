//! The simulator as an HTTP server. It runs the pure [`Library`] on the wall clock multiplied by
//! a time scale (so an hour of tape work can take a second), keeps an event log that clients
//! long-poll with a cursor, and records every submission it accepted, keyed by the idempotency
//! key, so tests can prove nothing reached the MSS twice. Faults (`PUT /v1/faults`) make calls
//! fail, slow or answer badly ([`super::bad_answer`]).
//!
//! The simulator HTTP server: runs the model on the wall clock times `time_scale`, keeps the event
//! log clients long-poll, records accepted submissions (`GET /v1/received`, with `calls`: how many
//! each submission call queued), and injects faults (`PUT /v1/faults`: failing or slow calls, an
//! outage, dropped or duplicated events) from a seeded coin.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};

use super::bad_answer;
use super::library::{CancelOutcome, Library, LibraryConfig, LibraryEvent, Micros};
use crate::protocol::{
    BadAnswer, BatchItem, BatchRequest, BatchResponse, ErrorBody, EventsResponse, Faults, MssEvent,
    ReceivedResponse, SubmitResponse, Transfer, TransferState,
};

/// Simulator settings.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub library: LibraryConfig,
    /// Virtual seconds per wall-clock second.
    pub time_scale: f64,
    /// Faults injected from the start (tests change them with `PUT /v1/faults`).
    pub faults: Faults,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            library: LibraryConfig::default(),
            time_scale: 1.0,
            faults: Faults::default(),
        }
    }
}

/// Most events one poll returns.
const MAX_EVENTS_PER_POLL: usize = 10_000;
/// Longest a poll may wait.
const MAX_WAIT_MS: u64 = 30_000;

struct Sim {
    library: Library,
    log: Vec<MssEvent>,
    faults: Faults,
    down_until: Option<Instant>,
    /// xorshift state for the fault coins: reproducible from the library seed.
    coin: u64,
    /// Calls refused by an injected fault.
    refused: u64,
    /// Per submission call that added transfers, how many it added to `received` (in order):
    /// so a test can tell which transfers reached the MSS in one call.
    calls: Vec<usize>,
}

impl Sim {
    /// A coin that lands true with probability `p`.
    fn coin(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        self.coin ^= self.coin << 13;
        self.coin ^= self.coin >> 7;
        self.coin ^= self.coin << 17;
        (self.coin >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

/// The simulator server's state, shared by its handlers and its driver.
struct SimServerState {
    sim: Mutex<Sim>,
    epoch: String,
    started: Instant,
    started_wall_ms: i64,
    time_scale: f64,
    /// Wakes the driver when a submission or cancellation may change the schedule.
    kick: Notify,
    /// The last sequence number in the log.
    last_seq: watch::Sender<u64>,
    /// Body bytes of bad answers sent.
    bad_answer_bytes: Arc<AtomicU64>,
}

impl SimServerState {
    fn lock(&self) -> MutexGuard<'_, Sim> {
        // A panic while holding the lock would be a bug in the pure model; keep serving.
        self.sim.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn virtual_now(&self) -> Micros {
        let real = self.started.elapsed().as_secs_f64();
        (real * self.time_scale * 1e6) as Micros
    }

    fn wall_ms(&self, at: Micros) -> i64 {
        self.started_wall_ms + (at as f64 / 1e3 / self.time_scale) as i64
    }

    /// Append library events to the log (dropping or doubling some when told to) and wake
    /// pollers.
    fn publish(&self, sim: &mut Sim, events: Vec<LibraryEvent>) {
        if events.is_empty() {
            return;
        }
        for e in events {
            let (drop_rate, dup_rate) =
                (sim.faults.drop_event_rate, sim.faults.duplicate_event_rate);
            if sim.coin(drop_rate) {
                continue;
            }
            let copies = if sim.coin(dup_rate) { 2 } else { 1 };
            for _ in 0..copies {
                let seq = sim.log.len() as u64 + 1;
                sim.log.push(MssEvent {
                    seq,
                    key: e.key.clone(),
                    attempt: e.attempt,
                    at_ms: self.wall_ms(e.at),
                    kind: e.kind.clone(),
                });
            }
        }
        self.last_seq.send_replace(sim.log.len() as u64);
    }

    /// Apply the injected delay and outage to a call: `Some(answer)` when it must fail.
    async fn gate(&self, submission: bool) -> Option<Response> {
        let delay = self.lock().faults.delay_ms;
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        let mut sim = self.lock();
        if sim.down_until.is_some_and(|t| Instant::now() < t) {
            sim.refused += 1;
            return Some(error(
                StatusCode::SERVICE_UNAVAILABLE,
                "mss is down (injected)".into(),
            ));
        }
        let rate = sim.faults.submit_failure_rate;
        if submission && sim.coin(rate) {
            sim.refused += 1;
            return Some(error(
                StatusCode::SERVICE_UNAVAILABLE,
                "submission failed (injected)".into(),
            ));
        }
        None
    }

    /// The bad answer to give a submission instead of its own, if one is set, and whether to
    /// queue the transfers first.
    fn bad_answer(&self) -> Option<(BadAnswer, bool)> {
        let mut sim = self.lock();
        let bad = sim.faults.submit_answer.clone()?;
        sim.refused += 1;
        Some((bad, sim.faults.queue_before_bad_answer))
    }

    /// Answer a submission: its own `answer` (computed only when the transfers are to be
    /// queued) or the bad answer set in the faults.
    fn submission_answer(&self, answer: impl FnOnce() -> Response) -> Response {
        match self.bad_answer() {
            None => answer(),
            Some((bad, queue)) => {
                if queue {
                    let _ = answer();
                }
                bad_answer::respond(&bad, self.bad_answer_bytes.clone())
            }
        }
    }
}

/// Serve the simulator on `listener` until `shutdown` completes.
pub async fn run(
    listener: TcpListener,
    cfg: SimConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let now_wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let shared = Arc::new(SimServerState {
        sim: Mutex::new(Sim {
            library: Library::new(cfg.library.clone()),
            log: Vec::new(),
            down_until: (cfg.faults.down_for_ms > 0)
                .then(|| Instant::now() + Duration::from_millis(cfg.faults.down_for_ms)),
            faults: cfg.faults.clone(),
            coin: cfg.library.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1,
            refused: 0,
            calls: Vec::new(),
        }),
        epoch: format!("{}-{}", now_wall.as_nanos(), std::process::id()),
        started: Instant::now(),
        started_wall_ms: now_wall.as_millis() as i64,
        time_scale: if cfg.time_scale > 0.0 {
            cfg.time_scale
        } else {
            1.0
        },
        kick: Notify::new(),
        last_seq: watch::channel(0).0,
        bad_answer_bytes: Arc::new(AtomicU64::new(0)),
    });
    let driver = tokio::spawn(drive(shared.clone()));
    let result = axum::serve(listener, router(shared))
        .with_graceful_shutdown(shutdown)
        .await;
    driver.abort();
    result
}

/// The simulator's routes.
fn router(shared: Arc<SimServerState>) -> Router {
    Router::new()
        .route("/v1/transfers", post(submit))
        .route("/v1/transfers/batch", post(submit_batch))
        .route("/v1/transfers/{key}", get(transfer).delete(cancel))
        .route(
            "/v1/transfers/{key}/priority",
            axum::routing::put(set_priority),
        )
        .route("/v1/events", get(events))
        .route("/v1/received", get(received))
        .route("/v1/faults", axum::routing::put(set_faults).get(get_faults))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(shared)
}

/// Advance the library as virtual time passes, sleeping until the next transfer ends or a
/// submission arrives.
async fn drive(shared: Arc<SimServerState>) {
    loop {
        let next = {
            let mut sim = shared.lock();
            let mut out = Vec::new();
            let now = shared.virtual_now();
            sim.library.advance(now, &mut out);
            shared.publish(&mut sim, out);
            sim.library.next_wakeup().map(|at| at.saturating_sub(now))
        };
        let sleep = match next {
            Some(v) => Duration::from_secs_f64(v as f64 / 1e6 / shared.time_scale),
            None => Duration::from_secs(3600),
        };
        tokio::select! {
            _ = tokio::time::sleep(sleep) => {}
            _ = shared.kick.notified() => {}
        }
    }
}

async fn submit(State(shared): State<Arc<SimServerState>>, body: axum::body::Bytes) -> Response {
    if let Some(refused) = shared.gate(true).await {
        return refused;
    }
    shared.submission_answer(|| submit_one(&shared, &body))
}

fn submit_one(shared: &SimServerState, body: &[u8]) -> Response {
    let transfer: Transfer = match serde_json::from_slice(body) {
        Ok(t) => t,
        Err(e) => return error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
    };
    let admission = {
        let mut sim = shared.lock();
        let mut out = Vec::new();
        let admission = sim.library.submit(transfer, shared.virtual_now(), &mut out);
        shared.publish(&mut sim, out);
        if !admission.duplicate {
            sim.calls.push(1);
        }
        admission
    };
    shared.kick.notify_one();
    let status = if admission.duplicate {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    let body = SubmitResponse {
        mss_id: admission.mss_id,
        duplicate: admission.duplicate,
    };
    (status, Json(body)).into_response()
}

async fn submit_batch(
    State(shared): State<Arc<SimServerState>>,
    body: axum::body::Bytes,
) -> Response {
    if let Some(refused) = shared.gate(true).await {
        return refused;
    }
    shared.submission_answer(|| submit_many(&shared, &body))
}

fn submit_many(shared: &SimServerState, body: &[u8]) -> Response {
    let batch: BatchRequest = match serde_json::from_slice(body) {
        Ok(b) => b,
        Err(e) => return error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
    };
    let results = {
        let mut sim = shared.lock();
        let mut out = Vec::new();
        let now = shared.virtual_now();
        let before = sim.library.received().len();
        let results = batch
            .transfers
            .into_iter()
            .map(|t| {
                let a = sim.library.submit(t, now, &mut out);
                BatchItem::Ok(SubmitResponse {
                    mss_id: a.mss_id,
                    duplicate: a.duplicate,
                })
            })
            .collect();
        shared.publish(&mut sim, out);
        let added = sim.library.received().len() - before;
        if added > 0 {
            sim.calls.push(added);
        }
        results
    };
    shared.kick.notify_one();
    Json(BatchResponse { results }).into_response()
}

async fn cancel(State(shared): State<Arc<SimServerState>>, Path(key): Path<String>) -> Response {
    if let Some(refused) = shared.gate(false).await {
        return refused;
    }
    let outcome = {
        let mut sim = shared.lock();
        let mut out = Vec::new();
        let outcome = sim.library.cancel(&key, shared.virtual_now(), &mut out);
        shared.publish(&mut sim, out);
        outcome
    };
    shared.kick.notify_one();
    pending_only(outcome, "no such transfer")
}

/// The answer to a change only a pending transfer can take (cancel, new priority).
fn pending_only(outcome: CancelOutcome, unknown: &str) -> Response {
    match outcome {
        CancelOutcome::Cancelled => StatusCode::NO_CONTENT.into_response(),
        CancelOutcome::TooLate(phase) => error(
            StatusCode::CONFLICT,
            format!("transfer is {}, not pending", phase.as_str()),
        ),
        CancelOutcome::Unknown => error(StatusCode::NOT_FOUND, unknown.to_string()),
    }
}

/// `PUT /v1/transfers/{key}/priority` with `{"attempt": n, "priority": p}`.
async fn set_priority(
    State(shared): State<Arc<SimServerState>>,
    Path(key): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    if let Some(refused) = shared.gate(false).await {
        return refused;
    }
    let change: crate::protocol::PriorityChange = match serde_json::from_slice(&body) {
        Ok(c) => c,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("bad body: {e}")),
    };
    let outcome = {
        let mut sim = shared.lock();
        let mut out = Vec::new();
        let outcome = sim.library.set_priority(
            &key,
            change.attempt,
            change.priority,
            shared.virtual_now(),
            &mut out,
        );
        shared.publish(&mut sim, out);
        outcome
    };
    shared.kick.notify_one();
    pending_only(outcome, "no such transfer attempt")
}

async fn transfer(State(shared): State<Arc<SimServerState>>, Path(key): Path<String>) -> Response {
    if let Some(refused) = shared.gate(false).await {
        return refused;
    }
    let sim = shared.lock();
    match sim.library.job(&key) {
        Some(job) => Json(TransferState {
            key: key.clone(),
            attempt: job.transfer.attempt,
            mss_id: job.mss_id.clone(),
            priority: job.transfer.priority,
            state: job.phase.as_str().to_string(),
            bytes_done: job.bytes_done,
        })
        .into_response(),
        None => error(StatusCode::NOT_FOUND, "no such transfer".to_string()),
    }
}

async fn events(
    State(shared): State<Arc<SimServerState>>,
    Query(q): Query<crate::protocol::EventsQuery>,
) -> Response {
    if let Some(refused) = shared.gate(false).await {
        return refused;
    }
    let after = if q.epoch == shared.epoch { q.after } else { 0 };
    let mut seen = shared.last_seq.subscribe();
    if q.wait_ms > 0 {
        let wait = Duration::from_millis(q.wait_ms.min(MAX_WAIT_MS));
        // Time out or sender gone both just mean "answer with what there is".
        let _ = tokio::time::timeout(wait, seen.wait_for(|&last| last > after)).await;
    }
    let sim = shared.lock();
    let from = (after as usize).min(sim.log.len());
    let to = (from + MAX_EVENTS_PER_POLL).min(sim.log.len());
    Json(EventsResponse {
        epoch: shared.epoch.clone(),
        events: sim.log[from..to].to_vec(),
    })
    .into_response()
}

async fn received(State(shared): State<Arc<SimServerState>>) -> Response {
    let sim = shared.lock();
    Json(ReceivedResponse {
        received: sim.library.received().to_vec(),
        duplicates: sim.library.duplicates(),
        refused: sim.refused,
        calls: sim.calls.clone(),
        bad_answer_bytes: shared.bad_answer_bytes.load(Ordering::Relaxed),
    })
    .into_response()
}

async fn set_faults(
    State(shared): State<Arc<SimServerState>>,
    body: axum::body::Bytes,
) -> Response {
    let faults: Faults = match serde_json::from_slice(&body) {
        Ok(f) => f,
        Err(e) => return error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
    };
    let mut sim = shared.lock();
    sim.down_until = (faults.down_for_ms > 0)
        .then(|| Instant::now() + Duration::from_millis(faults.down_for_ms));
    sim.faults = faults.clone();
    Json(faults).into_response()
}

async fn get_faults(State(shared): State<Arc<SimServerState>>) -> Response {
    Json(shared.lock().faults.clone()).into_response()
}

fn error(status: StatusCode, message: String) -> Response {
    (status, Json(ErrorBody { error: message })).into_response()
}

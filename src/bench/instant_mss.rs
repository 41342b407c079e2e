//! An MSS that finishes every transfer at once, for `bench history`: it speaks the simulator's
//! HTTP protocol (`mss_adapters::protocol`, the `http` adapter's) in the benchmark's process and
//! keeps only the events the broker has not read yet. The broker stores its event cursor with
//! the events' effects and polls from it, so what is at or before the `after` it asks from is
//! dropped. A run of millions of requests then measures the broker's memory alone: the
//! simulator keeps every event and submission (its tests read them back), which would grow with
//! the run in whichever process ran it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use mss_adapters::protocol::{
    BatchItem, BatchRequest, BatchResponse, ErrorBody, EventKind, EventsResponse, MssEvent,
    SubmitResponse, Transfer,
};
use tokio::sync::watch;

/// Most events one poll returns.
const MAX_EVENTS_PER_POLL: usize = 10_000;

/// The MSS serving on a loopback port until dropped.
pub(crate) struct InstantMss {
    pub url: String,
    shared: Arc<InstantMssState>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for InstantMss {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// The events not yet read.
struct Log {
    /// Sequence number of `events[0]`.
    first: u64,
    events: VecDeque<MssEvent>,
}

/// The instant MSS's state, shared by its handlers.
struct InstantMssState {
    epoch: String,
    /// Submissions are answered 503 (the broker keeps its requests and backs off).
    holding: AtomicBool,
    log: Mutex<Log>,
    /// The last sequence number given.
    last: watch::Sender<u64>,
}

impl InstantMssState {
    fn lock(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A transfer taken: it starts and is done at once.
    fn take(&self, log: &mut Log, t: &Transfer) -> SubmitResponse {
        let now = now_ms();
        for kind in [
            EventKind::Started,
            EventKind::Done {
                bytes: t.size_bytes,
            },
        ] {
            let seq = log.first + log.events.len() as u64;
            log.events.push_back(MssEvent {
                seq,
                key: t.key.clone(),
                attempt: t.attempt,
                at_ms: now,
                kind,
            });
        }
        SubmitResponse {
            mss_id: format!("instant-{}-{}", t.key, t.attempt),
            duplicate: false,
        }
    }

    fn published(&self, log: &Log) {
        self.last
            .send_replace((log.first + log.events.len() as u64).saturating_sub(1));
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl InstantMss {
    pub async fn start() -> anyhow::Result<InstantMss> {
        let (last, _) = watch::channel(0);
        let shared = Arc::new(InstantMssState {
            epoch: format!("instant-{}", now_ms()),
            holding: AtomicBool::new(false),
            log: Mutex::new(Log {
                first: 1,
                events: VecDeque::new(),
            }),
            last,
        });
        let app = Router::new()
            .route("/v1/transfers", post(submit))
            .route("/v1/transfers/batch", post(submit_batch))
            .route("/v1/transfers/{key}", get(unknown).delete(unknown))
            .route("/v1/transfers/{key}/priority", put(unknown))
            .route("/v1/events", get(events))
            .route("/healthz", get(|| async { "ok" }))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(InstantMss {
            url,
            shared,
            server,
        })
    }

    /// Take no transfers (answer submissions 503) while `on`.
    pub fn hold(&self, on: bool) {
        self.shared.holding.store(on, Ordering::Relaxed);
    }
}

/// The answer to a submission while holding.
fn held() -> Option<Response> {
    let body = ErrorBody {
        error: "holding submissions".into(),
    };
    Some((StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response())
}

fn refused(e: serde_json::Error) -> Response {
    let body = ErrorBody {
        error: e.to_string(),
    };
    (StatusCode::UNPROCESSABLE_ENTITY, Json(body)).into_response()
}

async fn submit(State(shared): State<Arc<InstantMssState>>, body: axum::body::Bytes) -> Response {
    if let Some(answer) = shared.holding.load(Ordering::Relaxed).then(held).flatten() {
        return answer;
    }
    let t: Transfer = match serde_json::from_slice(&body) {
        Ok(t) => t,
        Err(e) => return refused(e),
    };
    let mut log = shared.lock();
    let answer = shared.take(&mut log, &t);
    shared.published(&log);
    (StatusCode::CREATED, Json(answer)).into_response()
}

async fn submit_batch(
    State(shared): State<Arc<InstantMssState>>,
    body: axum::body::Bytes,
) -> Response {
    if let Some(answer) = shared.holding.load(Ordering::Relaxed).then(held).flatten() {
        return answer;
    }
    let batch: BatchRequest = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => return refused(e),
    };
    let mut log = shared.lock();
    let results = (batch.transfers.iter())
        .map(|t| BatchItem::Ok(shared.take(&mut log, t)))
        .collect();
    shared.published(&log);
    Json(BatchResponse { results }).into_response()
}

/// Nothing is kept of a transfer once it is done: a status query, a cancel or a new priority
/// finds none (the broker then resubmits a transfer as lost: it is done again at once).
async fn unknown() -> Response {
    let body = ErrorBody {
        error: "no such transfer".into(),
    };
    (StatusCode::NOT_FOUND, Json(body)).into_response()
}

async fn events(
    State(shared): State<Arc<InstantMssState>>,
    Query(q): Query<mss_adapters::protocol::EventsQuery>,
) -> Response {
    // Another epoch: the reader starts over, from what is kept.
    let after = if q.epoch == shared.epoch { q.after } else { 0 };
    let mut seen = shared.last.subscribe();
    if q.wait_ms > 0 {
        let wait = Duration::from_millis(q.wait_ms.min(30_000));
        let _ = tokio::time::timeout(wait, seen.wait_for(|&last| last > after)).await;
    }
    let mut log = shared.lock();
    // The reader has what is at or before `after` (its cursor is stored with their effects).
    while log.events.front().is_some_and(|e| e.seq <= after) {
        log.events.pop_front();
        log.first += 1;
    }
    let kept = log.events.len();
    if log.events.capacity() > 4 * kept.max(MAX_EVENTS_PER_POLL) {
        log.events.shrink_to(2 * kept);
    }
    let events = log
        .events
        .iter()
        .take(MAX_EVENTS_PER_POLL)
        .cloned()
        .collect();
    Json(EventsResponse {
        epoch: shared.epoch.clone(),
        events,
    })
    .into_response()
}

//! The ledger: SQLite, the broker's source of truth and the only module that writes SQL.
//!
//! One writer thread owns the write connection. Callers send it commands over a channel; it takes
//! whatever is waiting (up to `commit_batch_max`) and runs it as one transaction, so many
//! requests share one fsync (group commit). A caller's answer is sent only after the commit: a
//! 202 is never sent for a request that is not on disk. The writer also keeps every group's usage
//! in memory, so a decision costs a comparison, not a query; on start it is loaded from the
//! `groups` table, which is kept in the same transactions as the requests, so a restart changes
//! no decision.
//!
//! Reads (request lookups, the dispatcher's queue, group figures) use a small pool of read-only
//! connections; WAL lets them run beside the writer.

pub mod aggregates;
pub mod identity;
pub mod lock;
mod rank;
mod read;
mod schema;
mod usage;
mod wide;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use mss_adapters::{EventCursor, MssEvent};
use tokio::sync::{mpsc, oneshot, Notify};

use crate::clock::Clock;
use crate::domain::{Class, RequestState};
use crate::domain::{GroupId, PolicySettings, RetrySettings};
use crate::shares::view::SharesView;

pub use read::{GroupRow, InFlight, RequestRecord, ToSubmit};

/// Why the ledger could not do something.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// SQLite failed (busy, disk full, I/O): nothing of the command was committed.
    #[error("database error: {0}")]
    Storage(String),
    /// The writer has stopped (shutdown or a fatal error).
    #[error("the ledger writer is not running")]
    Closed,
    #[error("cannot open the database at {path}: {message}")]
    Open { path: PathBuf, message: String },
    /// The database was written by a newer build (its `user_version` is past this binary's).
    #[error(
        "the database {path} has schema version {found}, newer than this build knows ({known}): \
         open it with a newer mssbroker"
    )]
    SchemaTooNew {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    /// Another process writes this database (its lock file is locked).
    #[error("the database {path} is in use by another broker (pid {holder}; lock file {lock})")]
    Locked {
        path: PathBuf,
        lock: PathBuf,
        holder: String,
    },
}

impl From<rusqlite::Error> for LedgerError {
    fn from(e: rusqlite::Error) -> Self {
        LedgerError::Storage(e.to_string())
    }
}

/// A validated, classified request on its way into the ledger. The decision is made by the
/// writer, in commit order, so it sees every earlier request's charge.
#[derive(Debug, Clone)]
pub struct NewRequest {
    pub station: String,
    pub client_request_id: String,
    pub user: String,
    pub file: String,
    pub size_bytes: u64,
    pub access_mode: String,
    pub physics_group: String,
    pub volume: Option<String>,
    pub direction: mss_adapters::Direction,
    pub group: GroupId,
    pub benefit: u64,
    /// What the ordering policies read besides the above.
    pub extras: RequestExtras,
}

/// A request's optional fields: ordering inputs and what the MSS adapter needs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestExtras {
    /// The MSS library ('' the default one).
    pub library: String,
    pub qos: Option<crate::policy::multifactor::Qos>,
    pub user_factor: Option<f64>,
    /// The station-side copy: where a read goes, what a write stores.
    pub local_file: Option<String>,
    /// Enstore's bit-file id of the file to read.
    pub bfid: Option<String>,
}

/// What the ledger answered to one new request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    pub id: i64,
    pub group: String,
    pub class: Class,
    pub mss_priority: i64,
    pub state: RequestState,
    /// True when the station already sent this `client_request_id`: nothing new was created.
    pub duplicate: bool,
    /// Why the request is held (state `held`).
    pub held_reason: Option<String>,
}

/// One transfer the MSS took.
#[derive(Debug, Clone)]
pub struct SubmittedTransfer {
    pub id: i64,
    pub attempt: u32,
    pub mss_id: String,
}

/// What to do after recording a submission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterSubmit {
    Recorded,
    /// The request was cancelled while it was being submitted: cancel it at the MSS too.
    CancelAtMss,
}

/// What a cancellation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// It had not reached the MSS: cancelled and refunded now.
    Cancelled,
    /// It is at the MSS: the MSS is asked to drop it; a `cancelled` event settles it.
    Requested(RequestState),
    /// Already done, failed or cancelled.
    AlreadyFinal(RequestState),
    NotFound,
}

pub(crate) enum Command {
    Accept {
        items: Vec<NewRequest>,
        reply: oneshot::Sender<Result<Vec<Accepted>, LedgerError>>,
    },
    Submitted {
        items: Vec<SubmittedTransfer>,
        reply: oneshot::Sender<Result<Vec<AfterSubmit>, LedgerError>>,
    },
    Rejected {
        id: i64,
        attempt: u32,
        reason: String,
        reply: oneshot::Sender<Result<(), LedgerError>>,
    },
    Lost {
        id: i64,
        attempt: u32,
        reason: String,
        reply: oneshot::Sender<Result<bool, LedgerError>>,
    },
    Events {
        events: Vec<MssEvent>,
        /// The cursor to store with them; `None` for events that did not come from the log.
        cursor: Option<EventCursor>,
        reply: oneshot::Sender<Result<usize, LedgerError>>,
    },
    Checked {
        ids: Vec<i64>,
        reply: oneshot::Sender<Result<(), LedgerError>>,
    },
    Cancel {
        id: i64,
        reply: oneshot::Sender<Result<CancelOutcome, LedgerError>>,
    },
    Release {
        reply: oneshot::Sender<Result<usize, LedgerError>>,
    },
    /// A queued request's placement now (answered from memory, no transaction; one placement,
    /// not a walk of the queue).
    Explain {
        id: i64,
        reply: oneshot::Sender<Result<Option<QueuedPlacement>, LedgerError>>,
    },
    /// Usage and queue priorities now, for a ranking built off the writer (from memory).
    RankInputs {
        reply: oneshot::Sender<Result<RankInputs, LedgerError>>,
    },
    /// New priorities for requests queued at the MSS whose placement changed (computed, not
    /// written: the dispatcher tells the MSS first, then `Reprioritised` records them).
    Reprioritise {
        max: usize,
        reply: oneshot::Sender<Result<Vec<NewPriority>, LedgerError>>,
    },
    Reprioritised {
        items: Vec<NewPriority>,
        reply: oneshot::Sender<Result<usize, LedgerError>>,
    },
}

/// A queued request's live placement, as the writer computes it.
#[derive(Debug, Clone)]
pub struct QueuedPlacement {
    pub explain: crate::policy::order::Explain,
}

/// What ranking the queue needs from the writer's memory.
#[derive(Debug, Clone)]
pub struct RankInputs {
    pub usage: crate::shares::book::Effective,
    pub queues: crate::policy::fbsng::Queues,
    pub now_ms: i64,
}

/// A queued request's live placement and its place in the latest ranking.
#[derive(Debug, Clone, serde::Serialize)]
pub struct QueuedExplain {
    pub explain: crate::policy::order::Explain,
    /// 1-based place in its library's release order as ranked at `ranked_at_ms`, if nothing
    /// changed (`None`: it left the queue before a ranking saw it).
    pub position: Option<usize>,
    /// Requests waiting in its library at `ranked_at_ms`.
    pub waiting: Option<usize>,
    /// When the ranking was computed (ms since the epoch).
    pub ranked_at_ms: i64,
}

/// A request at the MSS whose priority the policy now puts elsewhere.
#[derive(Debug, Clone, PartialEq)]
pub struct NewPriority {
    pub id: i64,
    pub attempt: u32,
    /// Which transfer at the MSS (for the adapter).
    pub transfer: mss_adapters::TransferRef,
    pub old_priority: i64,
    pub mss_priority: i64,
    pub explain: String,
}

/// Settings of the ledger.
#[derive(Debug, Clone)]
pub struct LedgerOptions {
    pub path: PathBuf,
    pub commit_batch_max: usize,
    pub retry: RetrySettings,
    /// Where commit latency and batch size are recorded.
    pub metrics: Arc<crate::metrics::Metrics>,
}

/// A handle to the ledger; cheap to clone.
#[derive(Clone)]
pub struct Ledger {
    tx: mpsc::Sender<Command>,
    reads: Arc<read::ReadPool>,
    /// Notified after a commit that made requests ready to submit.
    ready: Arc<Notify>,
    policy: Arc<PolicySettings>,
    instance: Arc<str>,
    /// The latest ranking of the held queue, for explain's positions.
    ranker: Arc<rank::Ranker>,
}

impl Ledger {
    /// Open (creating if needed) the database, load usage, and start the writer thread.
    pub fn open(
        options: &LedgerOptions,
        policy: Arc<PolicySettings>,
        clock: Arc<dyn Clock>,
    ) -> Result<(Ledger, std::thread::JoinHandle<()>), LedgerError> {
        // Before the database is opened: a second writer must not even migrate it.
        let lock = lock::DbLock::acquire(&options.path)?;
        let conn = schema::open_writer(&options.path)?;
        let instance = schema::instance(&conn).map_err(|e| LedgerError::Open {
            path: options.path.clone(),
            message: e.to_string(),
        })?;
        let ready = Arc::new(Notify::new());
        let (tx, rx) = mpsc::channel(options.commit_batch_max.max(64));
        let state = writer::Writer::load(conn, policy.clone(), clock, options, ready.clone())?;
        let handle = std::thread::Builder::new()
            .name("ledger-writer".into())
            .spawn(move || {
                state.run(rx);
                // Released only once the writer (and its connection) is done.
                drop(lock);
            })
            .map_err(|e| LedgerError::Open {
                path: options.path.clone(),
                message: format!("cannot start the writer thread: {e}"),
            })?;
        let reads = Arc::new(read::ReadPool::new(&options.path));
        Ok((
            Ledger {
                tx,
                reads,
                ready,
                policy,
                instance: instance.into(),
                ranker: Arc::default(),
            },
            handle,
        ))
    }

    pub fn policy(&self) -> &Arc<PolicySettings> {
        &self.policy
    }

    /// This database's random identity, made when it was created: names the broker's
    /// transfers at an MSS (FTS3 submission ids), so a wiped database never reuses them.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Wait for a commit that made requests ready to submit.
    pub fn ready(&self) -> &Arc<Notify> {
        &self.ready
    }

    async fn call<T>(
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
    pub async fn accept(&self, items: Vec<NewRequest>) -> Result<Vec<Accepted>, LedgerError> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        self.call(|reply| Command::Accept { items, reply }).await
    }

    /// Record that the MSS took these transfers.
    pub async fn submitted(
        &self,
        items: Vec<SubmittedTransfer>,
    ) -> Result<Vec<AfterSubmit>, LedgerError> {
        self.call(|reply| Command::Submitted { items, reply }).await
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
    pub async fn checked(&self, ids: Vec<i64>) -> Result<(), LedgerError> {
        self.call(|reply| Command::Checked { ids, reply }).await
    }

    /// In-flight requests the MSS has said nothing of since `before_ms`.
    pub async fn stale(&self, before_ms: i64, limit: usize) -> Result<Vec<InFlight>, LedgerError> {
        self.reads
            .run(move |c| read::stale(c, before_ms, limit))
            .await
    }

    /// The MSS no longer knows this attempt (it lost its queue): submit the request again as a
    /// new attempt, keeping its charge. Returns whether the request was in flight.
    pub async fn lost(&self, id: i64, attempt: u32, reason: String) -> Result<bool, LedgerError> {
        self.call(|reply| Command::Lost {
            id,
            attempt,
            reason,
            reply,
        })
        .await
    }

    /// Requests at the MSS (submitted or running).
    pub async fn in_flight(&self) -> Result<Vec<InFlight>, LedgerError> {
        self.reads.run(read::in_flight).await
    }

    /// Release held requests whose groups are now under their feasibility caps. Returns how
    /// many were released.
    pub async fn release_held(&self) -> Result<usize, LedgerError> {
        self.call(|reply| Command::Release { reply }).await
    }

    /// The live placement of a queued request (`None` when it is not queued) and its place in
    /// the latest ranking of the queue (see `rank`): the writer computes one placement; the
    /// position is looked up in a ranking built off the writer.
    pub async fn explain_queued(&self, id: i64) -> Result<Option<QueuedExplain>, LedgerError> {
        let asked = std::time::Instant::now();
        let Some(live) = self.call(|reply| Command::Explain { id, reply }).await? else {
            return Ok(None);
        };
        let (place, ranked_at_ms) = self.ranked_place(id, asked).await?;
        Ok(Some(QueuedExplain {
            explain: live.explain,
            position: place.map(|p| p.position),
            waiting: place.map(|p| p.waiting),
            ranked_at_ms,
        }))
    }

    /// Requests at the MSS (not yet running) whose priority the policy now puts elsewhere, at
    /// most `max`.
    pub async fn reprioritise(&self, max: usize) -> Result<Vec<NewPriority>, LedgerError> {
        self.call(|reply| Command::Reprioritise { max, reply })
            .await
    }

    /// Record priorities the MSS has taken.
    pub async fn reprioritised(&self, items: Vec<NewPriority>) -> Result<usize, LedgerError> {
        self.call(|reply| Command::Reprioritised { items, reply })
            .await
    }

    pub async fn cancel(&self, id: i64) -> Result<CancelOutcome, LedgerError> {
        self.call(|reply| Command::Cancel { id, reply }).await
    }

    pub async fn request(&self, id: i64) -> Result<Option<RequestRecord>, LedgerError> {
        self.reads.run(move |c| read::request(c, id)).await
    }

    /// Requests ready to submit (state accepted, retry time reached): highest MSS priority
    /// first, then in decision order.
    pub async fn to_submit(
        &self,
        after_id: i64,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<ToSubmit>, LedgerError> {
        self.reads
            .run(move |c| read::to_submit(c, after_id, now_ms, limit))
            .await
    }

    /// When the earliest waiting retry becomes due, if any.
    pub async fn next_retry_ms(&self) -> Result<Option<i64>, LedgerError> {
        self.reads.run(read::next_retry_ms).await
    }

    /// Requests at the MSS whose cancellation has been asked for.
    pub async fn cancelling(&self) -> Result<Vec<InFlight>, LedgerError> {
        self.reads.run(read::cancelling).await
    }

    pub async fn groups(&self) -> Result<Vec<GroupRow>, LedgerError> {
        self.reads.run(read::groups).await
    }

    /// The Prometheus exposition: in-process metrics and the ledger's figures now.
    pub async fn metrics_text(
        &self,
        metrics: Arc<crate::metrics::Metrics>,
        now_ms: i64,
    ) -> Result<String, LedgerError> {
        let policy = self.policy.clone();
        self.reads
            .run(move |c| {
                let totals = totals_before(c, i64::MAX)?;
                let shares = read_shares(c, &policy, now_ms, now_ms)?;
                Ok(metrics.encode(&totals, &shares))
            })
            .await
    }

    /// A report over `range` (see [`read_report`]).
    pub async fn report(
        &self,
        range: crate::report::ReportRange,
        now_ms: i64,
    ) -> Result<crate::report::Report, LedgerError> {
        let policy = self.policy.clone();
        self.reads
            .run(move |c| read_report(c, &policy, range, now_ms))
            .await
    }

    /// The share view at `at_ms`, from the committed aggregates (`now_ms`: the present; an
    /// earlier `at_ms` is replayed from the requests).
    pub async fn shares(&self, at_ms: i64, now_ms: i64) -> Result<SharesView, LedgerError> {
        let policy = self.policy.clone();
        self.reads
            .run(move |c| read_shares(c, &policy, at_ms, now_ms))
            .await
    }

    pub async fn event_cursor(&self) -> Result<EventCursor, LedgerError> {
        self.reads.run(read::event_cursor).await
    }

    /// Number of requests in each state.
    pub async fn state_counts(&self) -> Result<Vec<(RequestState, u64)>, LedgerError> {
        self.reads.run(read::state_counts).await
    }
}

/// The share view of the database behind `c` at `at_ms` (used by `GET /v1/groups` and by
/// `mssbroker shares --db`). The stored aggregates hold the present (`now_ms`) and can be read
/// at any later instant; an instant in the past is replayed from the requests charged up to it
/// (a full scan). The ledger counts (pending, held) are always the present ones.
pub fn read_shares(
    c: &rusqlite::Connection,
    policy: &PolicySettings,
    at_ms: i64,
    now_ms: i64,
) -> rusqlite::Result<SharesView> {
    let book = if at_ms < now_ms {
        usage::book_as_of(c, policy, at_ms)?
    } else {
        usage::load_book(c, policy, at_ms)?.book
    };
    let counts = usage::group_counts(c, policy)?;
    let snapshot = book.snapshot(at_ms);
    Ok(crate::shares::view::build(
        policy,
        &snapshot,
        at_ms,
        Some(&counts),
    ))
}

const AGG_COLS: &str = "accepted, held, released, held_cancelled, front, back, priority, \
    started, wait_ms_sum, done, failed, cancelled, bytes_done, benefit_done, started_over_priority";

fn agg_row(r: &rusqlite::Row<'_>, o: usize) -> rusqlite::Result<aggregates::HourRow> {
    Ok(aggregates::HourRow {
        accepted: r.get(o)?,
        held: r.get(o + 1)?,
        released: r.get(o + 2)?,
        held_cancelled: r.get(o + 3)?,
        front: r.get(o + 4)?,
        back: r.get(o + 5)?,
        priority: r.get(o + 6)?,
        started: r.get(o + 7)?,
        wait_ms_sum: r.get(o + 8)?,
        done: r.get(o + 9)?,
        failed: r.get(o + 10)?,
        cancelled: r.get(o + 11)?,
        bytes_done: r.get::<_, wide::Wide>(o + 12)?.0,
        benefit_done: r.get::<_, wide::Wide>(o + 13)?.0,
        started_over_priority: r.get(o + 14)?,
    })
}

/// Per group path, the aggregates summed over every hour before `hour` (`i64::MAX`: all).
pub fn totals_before(
    c: &rusqlite::Connection,
    hour: i64,
) -> rusqlite::Result<Vec<(String, aggregates::HourRow)>> {
    let sums = AGG_COLS
        .split(", ")
        .map(|c| match c {
            // Exact past i64, where SUM() raises "integer overflow".
            "bytes_done" | "benefit_done" => format!("wide_sum({c})"),
            _ => format!("SUM({c})"),
        })
        .collect::<Vec<_>>()
        .join(", ");
    let mut st = c.prepare_cached(&format!(
        "SELECT path, {sums} FROM report_hours WHERE hour < ?1 GROUP BY path ORDER BY path"
    ))?;
    let rows = st.query_map([hour], |r| Ok((r.get::<_, String>(0)?, agg_row(r, 1)?)))?;
    rows.collect()
}

/// The aggregates a report over `range` needs: a few thousand rows for months of history.
pub fn report_rows(
    c: &rusqlite::Connection,
    range: &crate::report::ReportRange,
) -> rusqlite::Result<crate::report::ReportRows> {
    let (since, until) = (range.since_hour(), range.until_hour());
    let mut out = crate::report::ReportRows {
        before: totals_before(c, since)?.into_iter().collect(),
        ..Default::default()
    };
    let mut st = c.prepare(&format!(
        "SELECT path, hour, {AGG_COLS} FROM report_hours WHERE hour >= ?1 AND hour < ?2"
    ))?;
    for r in st.query_map([since, until], |r| {
        Ok((r.get(0)?, r.get(1)?, agg_row(r, 2)?))
    })? {
        out.hours.push(r?);
    }
    let mut st = c.prepare(
        "SELECT path, hour, bin, count FROM report_waits WHERE hour >= ?1 AND hour < ?2",
    )?;
    for r in st.query_map([since, until], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
    })? {
        out.waits.push(r?);
    }
    Ok(out)
}

/// A whole report from the database behind `c`; the `diagnose` section is the share view at
/// the end of the range, or now if that is later.
pub fn read_report(
    c: &rusqlite::Connection,
    policy: &PolicySettings,
    range: crate::report::ReportRange,
    now_ms: i64,
) -> rusqlite::Result<crate::report::Report> {
    let rows = report_rows(c, &range)?;
    let diagnose = read_shares(c, policy, range.until_ms.min(now_ms), now_ms)?;
    Ok(crate::report::build(policy, &rows, range, diagnose))
}

/// Open a database read-only (for `mssbroker shares --db` and reports).
pub fn open_read_only(path: &Path) -> Result<rusqlite::Connection, LedgerError> {
    let conn = schema::open_reader(path).map_err(|e| LedgerError::Open {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    schema::check_version(&conn, path)?;
    Ok(conn)
}

/// Create the parent directory of a database path.
pub fn ensure_parent(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => std::fs::create_dir_all(p),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests;

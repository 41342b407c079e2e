//! What goes into the ledger and what comes out: a new request, the answers to commands, the
//! ledger's settings.

use std::path::PathBuf;
use std::sync::Arc;

use crate::domain::{Class, RequestState};
use crate::domain::{GroupId, RetrySettings};

/// A request's own fields, checked: what a station asked for, before the broker classified it.
/// The API's reader fills it (`api::request::SubmitRequest::validate`), [`NewRequest`] holds it
/// beside what the broker adds. A new request field is added here once (in [`RequestExtras`]
/// when it is optional), besides the wire type `SubmitRequest` and the stored
/// [`RequestRecord`](crate::ledger::RequestRecord), which are kept apart on purpose.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestInput {
    pub client_request_id: String,
    pub station: String,
    pub user: String,
    pub file: String,
    pub size_bytes: u64,
    pub access_mode: String,
    pub physics_group: String,
    pub volume: Option<String>,
    pub direction: mss_adapters::Direction,
    /// What the ordering policies and the MSS adapter read besides the above.
    pub extras: RequestExtras,
}

/// A validated, classified request on its way into the ledger. The decision is made by the
/// writer, in commit order, so it sees every earlier request's charge.
#[derive(Debug, Clone)]
pub struct NewRequest {
    /// The request as the station gave it; the writer reads its fields as the new request's
    /// own (`item.station`, `item.extras.bfid`: see the `Deref` below).
    pub input: RequestInput,
    pub group: GroupId,
    pub benefit: u64,
}

// A new request is its input plus its classification: its fields are read through to the
// input, so the writer and the ledger's columns name them as before.
impl std::ops::Deref for NewRequest {
    type Target = RequestInput;

    fn deref(&self) -> &RequestInput {
        &self.input
    }
}

/// A request's optional fields: ordering inputs and what the MSS adapter needs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestExtras {
    /// The MSS library ('' the default one: the API refuses an empty `library`, so '' is one
    /// the station did not name).
    pub library: String,
    pub qos: Option<crate::policy::multifactor::Qos>,
    pub user_factor: Option<f64>,
    /// The station-side copy: where a read goes, what a write stores.
    pub local_file: Option<String>,
    /// Enstore's bit-file id of the file to read.
    pub bfid: Option<String>,
    /// The file's position on its volume (at most `i64::MAX`, as the API checks): its file
    /// sequence number.
    pub position: Option<u64>,
    /// Where the file starts on its volume, in bytes (at most 1 PB, as the API checks).
    pub offset_bytes: Option<u64>,
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

/// A new request refused because it would take a node or its user past a queued-bytes cap
/// (`[targets."path"] max_queued_bytes`, `[limits] max_queued_bytes_per_user`): nothing of it
/// was recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct QueuedCapRefused {
    /// The configuration key of the cap.
    pub field: String,
    pub message: String,
    /// Bytes of unfinished requests under the cap, without this request.
    pub queued: u64,
    pub cap: u64,
}

/// A new read refused because another unfinished read, of another file, writes the same
/// station-side copy (its `local_file`, or the adapter's place for it): the two would clobber
/// each other. Nothing of it was recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{output}` is where another unfinished read writes its copy")]
pub struct OutputInUse {
    /// The request's field that names the copy: `local_file`, or `file` when the adapter
    /// derives the copy from it (encp's `read_dir`).
    pub field: &'static str,
    /// The copy both would write.
    pub output: String,
    /// The unfinished request writing it, its station and file (for a caller who may read it).
    pub holder: i64,
    pub holder_station: String,
    pub holder_file: String,
}

/// Why the ledger refused a new request on arrival: nothing of it was recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error(transparent)]
    QueuedCap(QueuedCapRefused),
    #[error(transparent)]
    OutputInUse(OutputInUse),
}

impl From<QueuedCapRefused> for Refused {
    fn from(r: QueuedCapRefused) -> Self {
        Refused::QueuedCap(r)
    }
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
    /// Its cancel was asked for while it was being sent (marked by `Ledger::mark_sending`, taken as
    /// at the MSS by the cancel): the MSS's answer names it now, so the cancel goes again with
    /// that name. (A request cancelled while it waited to be resent after an unreadable answer
    /// is not resent, so no answer comes for it: its cancel goes to the adapter, which finds
    /// the transfer by its key where it can.)
    CancelRequested,
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

/// A queued request's live placement, as the writer computes it.
#[derive(Debug, Clone)]
pub struct QueuedPlacement {
    pub explain: crate::ledger::stored_explain::Explanation,
    /// Its library and what orders it there, to estimate its position in a ranking that does
    /// not know it.
    pub library: String,
    pub key: crate::policy::queue::RankKey,
    /// In the `volumes` release mode: its volume and where it stands.
    pub volume: Option<crate::ledger::VolumeWait>,
    /// `held` and `volumes` modes: the drives its library keeps for the priority classes now
    /// (`policy::reserve`), if any.
    pub drive_reserve: Option<crate::policy::reserve::Reservation>,
}

/// What ranking the queue needs from the writer's memory.
#[derive(Debug, Clone)]
pub struct RankInputs {
    pub usage: crate::shares::book::Effective,
    pub queues: crate::policy::fbsng::Queues,
    pub now_ms: i64,
}

/// A queued request's live placement and its place in the latest ranking.
#[derive(Debug, Clone)]
pub struct QueuedExplain {
    pub explain: crate::ledger::stored_explain::Explanation,
    /// 1-based place in its library's release order (`None`: not ranked yet, or it left the
    /// queue before a ranking saw it); how it was found is `basis`.
    pub position: Option<usize>,
    /// Requests waiting in its library: as ranked at `ranked_at_ms` for a position from the
    /// ranking, now for an estimate or no position.
    pub waiting: Option<usize>,
    /// When the ranking the position comes from was computed (ms since the epoch; `None`:
    /// none yet).
    pub ranked_at_ms: Option<i64>,
    pub basis: PositionBasis,
    /// In the `volumes` release mode: its volume and where it stands (then no ranking of the
    /// queue is made: `position` and `waiting` are `None`).
    pub volume: Option<crate::ledger::VolumeWait>,
    /// Its library, and the drives the library keeps for the priority classes now, if any.
    pub library: String,
    pub drive_reserve: Option<crate::policy::reserve::Reservation>,
}

/// Where a queued request's position comes from. An explain never waits for a ranking of the
/// queue (one takes about a second with 1M queued): it answers from the latest one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PositionBasis {
    /// Its place in the latest ranking (as of its `ranked_at_ms`: older than now).
    Ranking,
    /// It was queued after the latest ranking: where its placement now falls among the
    /// requests that ranking ordered.
    Estimate,
    /// No ranking has been made since the start (one is being made): no position.
    NotRanked,
    /// The `volumes` release mode ranks no single requests (see `volume`).
    Volumes,
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
    pub explain: crate::ledger::stored_explain::StoredExplain,
}

/// Settings of the ledger.
#[derive(Clone)]
pub struct LedgerOptions {
    /// The SQLite ledger's file (unused when `url` is given).
    pub path: PathBuf,
    /// The PostgreSQL ledger (`[database] url`): when given, the ledger is there and `path` is
    /// not used; no lock file is taken (the leadership lock is the exclusion, docs/ha.md).
    pub url: Option<crate::database_url::DatabaseUrl>,
    /// The term's epoch (`startup::term`): on PostgreSQL every write transaction is fenced at
    /// it (`leadership::fence`). 1 where leadership is not contended.
    pub epoch: i64,
    pub commit_batch_max: usize,
    pub retry: RetrySettings,
    /// Where commit latency and batch size are recorded (`metrics::Metrics` in the broker).
    pub metrics: Arc<dyn CommitObserver>,
    /// Where the configured adapter writes a read's station-side copy (`None`: nowhere, as the
    /// simulator): two unfinished reads of different files may not share one.
    pub read_outputs: Option<Arc<dyn mss_adapters::ReadOutput>>,
}

impl LedgerOptions {
    /// Where the ledger is, as its errors name it: the file, or the URL as `DatabaseUrl` shows
    /// it (no password, no query).
    pub fn shown(&self) -> PathBuf {
        match &self.url {
            Some(url) => PathBuf::from(url.to_string()),
            None => self.path.clone(),
        }
    }
}

/// Where the writer reports each group committed (not one rolled back): how long it took and
/// how many commands it carried. The broker's Prometheus histograms (`metrics`) implement it; the ledger does not
/// depend on how they are kept.
pub trait CommitObserver: Send + Sync {
    fn committed(&self, seconds: f64, commands: usize);
    /// A group of `commands` was rolled back (its transaction failed: a full disk, an I/O
    /// error, the file replaced); every command in it was answered with the error.
    fn rolled_back(&self, _commands: usize) {}
    /// A committed group took `trips` round trips to the database server (PostgreSQL only:
    /// statements prepared or run, BEGIN and COMMIT; SQLite has no server).
    fn round_trips(&self, _trips: u64) {}
    /// Committed MSS events named keys this ledger did not issue (`ledger::mss_key`).
    fn unknown_key_events(&self, _events: u64) {}
    /// A ranking of the held queue for explain's positions (`ledger/rank.rs`, off the writer)
    /// took `seconds` and ranked `requests`.
    fn ranked(&self, _seconds: f64, _requests: usize) {}
}

/// Records nothing (benchmarks and tests that do not read the histograms).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoObserver;

impl CommitObserver for NoObserver {
    fn committed(&self, _seconds: f64, _commands: usize) {}
}

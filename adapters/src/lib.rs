//! The MSS side of mssbroker: the adapter interface the broker's dispatcher talks to, the
//! adapters for real systems (Enstore's `encp`, FTS3, the WLCG Tape REST API), the HTTP adapter
//! and the Enstore-like simulator that speaks its protocol, and (feature `standin`, tests only)
//! stand-ins of the real interfaces.
//!
//! This crate never depends on the broker. The broker hands an adapter a [`Transfer`] with its
//! MSS priority already decided and its request id as the idempotency key; the adapter reports
//! back [`MssEvent`]s. Everything about a particular MSS (wire format, retries it can't make
//! sense of, its notion of a queue) stays behind [`MssAdapter`], and what it can do is declared
//! in its [`Capabilities`], so the broker's configuration check can refuse what cannot work.
//!
//! The `MssAdapter` trait (`capabilities`, `submit`, `submit_batch`, `room` and `room_freed`,
//! `cancel`, `reprioritize`, `release`, `status`, `events(cursor, wait)`), `Capabilities` (a
//! `PriorityScale`: none, a direct range or bands; what else the MSS can do), `TransferRef` (key,
//! attempt, the MSS id the broker recorded, file, size: how every call after submission names a
//! transfer) and `MssError` (`Unreachable`, no connection made: nothing sent; `Unavailable`;
//! `Unknown`, an answer that could not be read; and `Deferred`, the MSS answering "not yet", are
//! retryable; `Rejected` and `Protocol` are not; `is_answer`: `Rejected` and `Deferred`, which
//! leave the MSS counted as up for `/readyz`; a `Deferred` send waits `DEFERRED_WAIT_MS` in the
//! ledger, `Ledger::deferred`, so it never heads every batch). `MssAdapter::cancel_reaches_mss`
//! (default: `cancel`) says whether a cancel reaches the MSS's queue, not only the broker's side
//! (`GET /v1/mss`).

pub mod answer;
pub mod check;
pub mod encp;
pub mod endpoint;
pub mod event_log;
pub mod fts3;
pub mod http;
pub mod locate;
mod opening;
pub mod protocol;
pub mod redact;
pub mod renew;
pub mod rest;
pub mod sim;
#[cfg(feature = "standin")]
pub mod standin;
pub mod tape_rest;

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use protocol::{Direction, EventCursor, EventKind, MssEvent, Transfer};

/// What went wrong talking to an MSS, split by what the caller should do about it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum MssError {
    /// No connection could be made to the MSS: nothing was sent. Try again later.
    #[error("mss unreachable: {0}")]
    Unreachable(String),
    /// The MSS answered with a server error, or the adapter cannot go on now: try again later.
    /// (It may hold what a submission sent, as behind a proxy's 502.)
    #[error("mss unavailable: {0}")]
    Unavailable(String),
    /// The answer could not be read (garbled, stalled, too large, a proxy's page instead of the
    /// MSS's): the call may or may not have taken effect. Retryable with the same idempotency
    /// key and attempt, which the simulator and FTS3 answer as a duplicate if it did (Tape REST
    /// has none: a resend is a second stage request for the same files, one recall at the
    /// server, a second pin until its lifetime ends).
    #[error("mss outcome unknown: {0}")]
    Unknown(String),
    /// The MSS answered that it cannot take this transfer yet, though it will later (FTS3: its
    /// destination is held by another transfer not ended yet): nothing was made; send it again
    /// later with the same key and attempt. An answer, unlike `Unavailable`: the MSS is up.
    #[error("mss deferred the transfer: {0}")]
    Deferred(String),
    /// The MSS refused the call: retrying the same call will not help.
    #[error("mss rejected the call: {0}")]
    Rejected(String),
    /// The MSS answered something this adapter does not understand.
    #[error("mss protocol error: {0}")]
    Protocol(String),
}

impl MssError {
    /// Whether the MSS answered (a refusal or a deferral is an answer): the MSS is up.
    pub fn is_answer(&self) -> bool {
        matches!(self, MssError::Rejected(_) | MssError::Deferred(_))
    }

    /// Whether the same call may succeed if made again later (an unknown outcome included: the
    /// same key and attempt is never queued twice).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            MssError::Unreachable(_)
                | MssError::Unavailable(_)
                | MssError::Unknown(_)
                | MssError::Deferred(_)
        )
    }
}

/// What the MSS said to a submission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submitted {
    /// The MSS's own id for the transfer.
    pub mss_id: String,
    /// True when the MSS already had this idempotency key and created nothing new.
    pub duplicate: bool,
}

/// Where one transfer stands at the MSS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    Queued,
    Running,
    /// Finished: what its final event would have said.
    Finished(EventKind),
}

/// The answer to a status query: which attempt the MSS has, and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferStatus {
    pub attempt: u32,
    pub progress: Progress,
}

/// How an MSS orders its queue, which decides what the broker's priorities mean there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PriorityScale {
    /// The MSS takes no priority (the WLCG Tape REST API): the broker must order requests
    /// itself, in `held` release mode.
    None,
    /// The MSS takes the broker's priority as it is, within `min..=max` (Enstore's `encp
    /// --priority`).
    Direct { min: i64, max: i64 },
    /// The MSS has a few levels (FTS3's 1..5); the adapter maps the broker's priorities onto
    /// them by bands: a priority gets the level of the last band whose `from` it reaches.
    Bands(Vec<Band>),
}

/// One band of a [`PriorityScale::Bands`] mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Band {
    /// The lowest broker priority in the band.
    pub from: i64,
    /// The MSS's level for it.
    pub level: i64,
}

impl PriorityScale {
    /// The MSS's priority for a broker priority, or `None` when the MSS cannot take it.
    pub fn map(&self, priority: i64) -> Option<i64> {
        match self {
            PriorityScale::None => None,
            PriorityScale::Direct { min, max } => {
                (*min..=*max).contains(&priority).then_some(priority)
            }
            PriorityScale::Bands(bands) => bands
                .iter()
                .rev()
                .find(|b| priority >= b.from)
                .map(|b| b.level),
        }
    }
}

/// What an adapter's MSS can do. Declared from configuration alone, so the broker checks a
/// configuration against it before anything starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capabilities {
    /// Whether and how the MSS orders by priority.
    pub priority: PriorityScale,
    /// Whether the priority of a transfer still queued at the MSS can be changed.
    pub reprioritize: bool,
    /// Whether a queued (or running) transfer can be cancelled.
    pub cancel: bool,
    /// Whether a finished read's disk copy can be released (unpinned) through the MSS.
    pub release: bool,
    /// Whether the MSS stores files (writes) as well as staging them (reads).
    pub writes: bool,
    /// Whether a read needs the request's `local_file` (where the file goes).
    pub reads_need_local_file: bool,
    /// Whether a write needs the request's `local_file` (the file to store).
    pub writes_need_local_file: bool,
    /// Whether a read can name the file by Enstore's bit-file id (`bfid`).
    pub bfid: bool,
    /// Most transfers that may be outstanding at the MSS at once (`None`: no limit).
    pub max_outstanding: Option<usize>,
    /// What the MSS knows of a key after the broker that sent it is gone (a crash, a
    /// takeover by another broker): whether a send it may or may not have made can be settled.
    pub settling: Settling,
}

/// What an MSS remembers of the broker's keys beyond the life of one broker process: the
/// memory of the adapter object itself does not count (a restarted broker, or another host
/// taking over, has a new one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settling {
    /// The MSS can be asked the status of a key and attempt whose MSS id the broker never
    /// recorded (`MssAdapter::status` with `mss_id: None`).
    pub status_by_key: bool,
    /// A second submission of the same key and attempt never makes a second transfer at the
    /// MSS: it is answered as a duplicate. Only then may a send the broker marked but never
    /// saw answered be sent again blindly.
    pub dedup_by_key: bool,
}

impl Settling {
    /// An MSS that knows its transfers by the broker's key (the simulator, FTS3).
    pub const BY_KEY: Settling = Settling {
        status_by_key: true,
        dedup_by_key: true,
    };
    /// An MSS that knows nothing of the broker's keys once the adapter that sent them is gone.
    pub const NONE: Settling = Settling {
        status_by_key: false,
        dedup_by_key: false,
    };
}

impl Capabilities {
    /// The capabilities of an MSS that takes any priority and can do everything, with no limit
    /// (the simulator).
    pub fn full() -> Capabilities {
        Capabilities {
            priority: PriorityScale::Direct {
                min: i64::MIN,
                max: i64::MAX,
            },
            reprioritize: true,
            cancel: true,
            release: false,
            writes: true,
            reads_need_local_file: false,
            writes_need_local_file: false,
            bfid: false,
            max_outstanding: None,
            settling: Settling::BY_KEY,
        }
    }
}

/// Which transfer a call is about: everything the broker knows of it. Adapters whose MSS names
/// transfers by its own id (FTS3 job ids, Tape REST request ids) find it in `mss_id`, so they
/// answer for transfers submitted before a restart of the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferRef {
    /// The broker's request id: the idempotency key.
    pub key: String,
    pub attempt: u32,
    /// The MSS's id for this attempt, as it answered the submission (if it was recorded).
    pub mss_id: Option<String>,
    /// The MSS-side file name.
    pub file: String,
    /// Declared size, for MSS interfaces that report no bytes.
    pub size_bytes: u64,
}

/// A batch of events and the cursor to ask from next time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventBatch {
    pub cursor: EventCursor,
    pub events: Vec<MssEvent>,
}

/// The interface between the broker's dispatcher and one mass storage system.
///
/// Events are pulled with a cursor rather than pushed, because that is how the real systems
/// behave (encp exits, FTS3 and the WLCG Tape REST API are polled) and because a cursor stored
/// in the broker's ledger in the same transaction as the events it covers loses nothing when the
/// broker crashes.
/// Where an adapter writes a read's station-side copy: the request's `local_file`, else a
/// place of its own derived from the file (encp's `read_dir`, FTS3's `read_destination`).
/// Declared from configuration alone, so the broker knows it before the adapter runs: two
/// unfinished reads of different files may not share one (they would clobber each other).
pub trait ReadOutput: Send + Sync + std::fmt::Debug {
    /// The copy a read of `file` writes (`None`: none on the station's side).
    fn read_output(&self, file: &str, local_file: Option<&str>) -> Option<String>;
}

#[async_trait]
pub trait MssAdapter: Send + Sync + 'static {
    /// A short name for logs and metrics.
    fn name(&self) -> &'static str;

    /// Queue a transfer at the MSS. Submitting the same `key` and `attempt` twice must not
    /// create a second transfer.
    async fn submit(&self, transfer: &Transfer) -> Result<Submitted, MssError>;

    /// Queue several transfers, in order: the MSS sees them arrive in the order given. One
    /// answer per transfer. The default submits them one by one.
    async fn submit_batch(&self, transfers: &[Transfer]) -> Vec<Result<Submitted, MssError>> {
        let mut out = Vec::with_capacity(transfers.len());
        for t in transfers {
            out.push(self.submit(t).await);
        }
        out
    }

    /// What this MSS can do.
    fn capabilities(&self) -> Capabilities;

    /// How many more transfers the MSS may take now (`None`: no limit). The dispatcher submits
    /// no more than this; a bounded adapter refuses the surplus as `Unavailable`.
    fn room(&self) -> Option<usize> {
        None
    }

    /// Completes when room may have freed (a transfer ended). Unbounded adapters never free
    /// room because they never run out; the default waits forever.
    async fn room_freed(&self) {
        std::future::pending::<()>().await
    }

    /// Whether a request's `file` (an absolute path in the MSS namespace) is one this adapter
    /// can name (checked when the request arrives); the error says why not.
    fn check_file(&self, file: &str) -> Result<(), String> {
        let _ = file;
        Ok(())
    }

    /// Whether a request's `local_file` is one this adapter may use (checked when the request
    /// arrives, so a bad one is refused before anything is stored); the error says why not.
    fn check_local_file(&self, local_file: &str) -> Result<(), String> {
        let _ = local_file;
        Ok(())
    }

    /// The same for a request of `station`, for adapters whose allowed places depend on the
    /// station (encp's `{station}` in `local_roots`); the default ignores the station.
    fn check_local_file_for(&self, station: &str, local_file: &str) -> Result<(), String> {
        let _ = station;
        self.check_local_file(local_file)
    }

    /// Ask the MSS to drop a transfer. A `cancelled` event follows if it could.
    async fn cancel(&self, transfer: &TransferRef) -> Result<(), MssError>;

    /// Whether a cancel reaches the MSS itself, so its queue forgets the transfer, rather than
    /// only stopping the broker's side of it (an encp process stopped while its ticket stays in
    /// the library manager's queue). Kept out of [`Capabilities`] so adapters that always reach
    /// it need not say so.
    fn cancel_reaches_mss(&self) -> bool {
        self.capabilities().cancel
    }

    /// Give a transfer still queued at the MSS a new (broker) priority. An MSS that cannot is
    /// `Rejected`; a transfer already running is `Rejected` too (too late).
    async fn reprioritize(&self, transfer: &TransferRef, priority: i64) -> Result<(), MssError> {
        let _ = (transfer, priority);
        Err(MssError::Rejected(format!(
            "the {} adapter cannot change priorities",
            self.name()
        )))
    }

    /// Release the disk copy a finished read left pinned at the MSS.
    async fn release(&self, transfer: &TransferRef) -> Result<(), MssError> {
        let _ = transfer;
        Err(MssError::Rejected(format!(
            "the {} adapter keeps no disk copies to release",
            self.name()
        )))
    }

    /// Where the transfer stands, or `None` if the MSS does not know this attempt (it lost it,
    /// for instance in a restart). Used to recover after the event log started over and for
    /// transfers with no news for a long time.
    async fn status(&self, transfer: &TransferRef) -> Result<Option<TransferStatus>, MssError>;

    /// Events after `cursor`, waiting up to `wait` for the first one.
    async fn events(&self, cursor: &EventCursor, wait: Duration) -> Result<EventBatch, MssError>;
}

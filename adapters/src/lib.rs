//! The MSS side of mssbroker: the adapter interface the broker's dispatcher talks to, the HTTP
//! adapter, and an Enstore-like simulator that speaks the HTTP adapter's protocol.
//!
//! This crate never depends on the broker. The broker hands an adapter a [`Transfer`] with its
//! MSS priority already decided and its request id as the idempotency key; the adapter reports
//! back [`MssEvent`]s. Everything about a particular MSS (wire format, retries it can't make
//! sense of, its notion of a queue) stays behind [`MssAdapter`].

pub mod http;
pub mod protocol;
pub mod sim;

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use protocol::{Direction, EventCursor, EventKind, MssEvent, Transfer};

/// What went wrong talking to an MSS, split by what the caller should do about it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum MssError {
    /// The MSS could not be reached or answered with a server error: try again later.
    #[error("mss unavailable: {0}")]
    Unavailable(String),
    /// The MSS refused the call: retrying the same call will not help.
    #[error("mss rejected the call: {0}")]
    Rejected(String),
    /// The MSS answered something this adapter does not understand.
    #[error("mss protocol error: {0}")]
    Protocol(String),
}

impl MssError {
    /// Whether the same call may succeed if made again later.
    pub fn is_retryable(&self) -> bool {
        matches!(self, MssError::Unavailable(_))
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

    /// Ask the MSS to drop a queued transfer. A `cancelled` event follows if it could.
    async fn cancel(&self, key: &str) -> Result<(), MssError>;

    /// Whether [`MssAdapter::reprioritize`] can work.
    fn can_reprioritize(&self) -> bool {
        false
    }

    /// Give attempt `attempt` of a transfer still queued at the MSS a new priority. An MSS that
    /// cannot is `Rejected`; a transfer already running is `Rejected` too (too late).
    async fn reprioritize(&self, key: &str, attempt: u32, priority: i64) -> Result<(), MssError> {
        let _ = (key, attempt, priority);
        Err(MssError::Rejected(format!(
            "the {} adapter cannot change priorities",
            self.name()
        )))
    }

    /// Where the transfer with this key stands, or `None` if the MSS does not know it (it lost
    /// it, for instance in a restart). Used to recover after the event log started over.
    async fn status(&self, key: &str) -> Result<Option<TransferStatus>, MssError>;

    /// Events after `cursor`, waiting up to `wait` for the first one.
    async fn events(&self, cursor: &EventCursor, wait: Duration) -> Result<EventBatch, MssError>;
}

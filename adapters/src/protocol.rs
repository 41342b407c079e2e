//! The JSON wire protocol between the HTTP adapter and an MSS that speaks it (the simulator).
//!
//! `POST /v1/transfers` submits one, `POST /v1/transfers/batch` several in order, `DELETE /v1/transfers/{key}` cancels, `GET /v1/transfers/{key}`
//! reads one transfer, `GET /v1/events?epoch=E&after=N&wait_ms=W` long-polls the event log and
//! `GET /v1/received` lists every submission the MSS accepted (for tests and audits);
//! `PUT /v1/faults` sets the faults the simulator injects.
//!
//! The JSON wire types shared by the HTTP adapter and the simulator server: `Transfer` (key = the
//! request's MSS key, `ledger::mss_key`; attempt, priority, optional tape `position`, ...),
//! `MssEvent` (seq, key, attempt, kind), `EventCursor` (epoch + seq), `EventsQuery` (the events
//! endpoint's query, read by the simulator server and the bench's instant MSS).

use serde::{Deserialize, Serialize};

/// Whether a transfer reads from tape (stage) or writes to it (store).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    #[default]
    Read,
    Write,
}

impl Direction {
    /// `"read"` or `"write"`.
    pub fn parse(s: &str) -> Option<Direction> {
        match s {
            "read" => Some(Direction::Read),
            "write" => Some(Direction::Write),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Read => "read",
            Direction::Write => "write",
        }
    }
}

/// One transfer as the broker hands it to the MSS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Transfer {
    /// The broker's request id: the idempotency key.
    pub key: String,
    /// Which attempt this is; a transfer that failed may be submitted again with a higher one.
    pub attempt: u32,
    pub file: String,
    pub size_bytes: u64,
    /// MSS priority: higher runs first.
    pub priority: i64,
    /// Tape label, when the station knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<String>,
    /// The broker's accounting group, for MSS-side bookkeeping (FTS3's activity).
    pub group: String,
    #[serde(default)]
    pub direction: Direction,
    /// The station-side copy: where a read puts the file, what a write stores (a path for
    /// `encp`, a URL for FTS3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_file: Option<String>,
    /// Enstore's bit-file id, when the station knows it (reads through `encp --get-bfid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bfid: Option<String>,
    /// Where the file sits on its volume as a file sequence number (Enstore's location
    /// cookie's third field, CTA's fSeq; 1 = the first data file), when the station knows it;
    /// the simulator's Enstore model places the file at `(position - 1) * mean_file_bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<u64>,
    /// Where the file starts on its volume in bytes from the first data byte, when known (a
    /// separate field, so a byte offset is never taken for a sequence number); the simulator
    /// places the file there, whatever `position` says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset_bytes: Option<u64>,
}

/// What happened to a transfer at the MSS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum EventKind {
    Started,
    Done { bytes: u64 },
    Failed { reason: String, retryable: bool },
    Cancelled,
}

/// One event of one transfer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MssEvent {
    /// Position in the MSS's event log; strictly increasing within one epoch.
    pub seq: u64,
    pub key: String,
    pub attempt: u32,
    /// MSS time of the event, milliseconds since the Unix epoch.
    pub at_ms: i64,
    #[serde(flatten)]
    pub kind: EventKind,
}

/// Where a reader of the event log is. The epoch changes when the MSS's log starts over (a
/// restarted simulator), in which case the reader starts again from the beginning.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct EventCursor {
    pub epoch: String,
    pub after: u64,
}

/// The query of `GET /v1/events`: the reader's cursor and how long the server may hold the
/// answer while there is nothing new (every field optional: a reader with none starts over).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct EventsQuery {
    #[serde(default)]
    pub epoch: String,
    #[serde(default)]
    pub after: u64,
    #[serde(default)]
    pub wait_ms: u64,
}

/// Answer to `POST /v1/transfers`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SubmitResponse {
    pub mss_id: String,
    pub duplicate: bool,
}

/// Body of `POST /v1/transfers/batch`: transfers queued in the order given.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BatchRequest {
    pub transfers: Vec<Transfer>,
}

/// One answer of a batch: the submission's result or why it was refused.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum BatchItem {
    Ok(SubmitResponse),
    Err(ErrorBody),
}

/// Answer to `POST /v1/transfers/batch`, one item per transfer, in order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BatchResponse {
    pub results: Vec<BatchItem>,
}

/// Answer to `GET /v1/events`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EventsResponse {
    pub epoch: String,
    pub events: Vec<MssEvent>,
}

/// Answer to `GET /v1/transfers/{key}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TransferState {
    pub key: String,
    pub attempt: u32,
    pub mss_id: String,
    pub priority: i64,
    pub state: String,
    pub bytes_done: u64,
}

/// One accepted submission, as recorded by the MSS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Received {
    pub key: String,
    pub attempt: u32,
    pub priority: i64,
    pub size_bytes: u64,
    pub group: String,
    /// The volume and the position on it the submission named (absent from older servers).
    #[serde(default)]
    pub volume: Option<String>,
    #[serde(default)]
    pub position: Option<u64>,
}

/// Answer to `GET /v1/received`: every submission accepted, in arrival order, and how many
/// submissions were answered as duplicates.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReceivedResponse {
    pub received: Vec<Received>,
    pub duplicates: u64,
    /// Calls answered with an injected failure (outage or failed submission).
    #[serde(default)]
    pub refused: u64,
    /// Bytes of `BadAnswer` bodies actually sent (an over-size body stops when the caller stops
    /// reading).
    #[serde(default)]
    pub bad_answer_bytes: u64,
    /// Per submission call that queued new transfers, how many (in `received` order): the
    /// first `calls[0]` entries of `received` arrived in one call, the next `calls[1]` in the
    /// next, and so on.
    #[serde(default)]
    pub calls: Vec<usize>,
}

/// Error body of every non-2xx answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
}

/// Faults the simulator injects, set with `PUT /v1/faults` (tests) or `mss-sim` flags. Rates are
/// probabilities in [0, 1].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Faults {
    /// A submission call answers 503 instead of queueing.
    #[serde(default)]
    pub submit_failure_rate: f64,
    /// Every call answers 503 for this long from now.
    #[serde(default)]
    pub down_for_ms: u64,
    /// Every call waits this long before answering.
    #[serde(default)]
    pub delay_ms: u64,
    /// An event is never written to the log.
    #[serde(default)]
    pub drop_event_rate: f64,
    /// An event is written to the log twice.
    #[serde(default)]
    pub duplicate_event_rate: f64,
    /// Every submission call (single or batch) gets this answer instead of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submit_answer: Option<BadAnswer>,
    /// With `submit_answer`: queue the transfers before answering badly (the MSS did take them)
    /// instead of leaving them out.
    #[serde(default)]
    pub queue_before_bad_answer: bool,
}

/// An answer the simulator gives instead of its own (`Faults::submit_answer`): what a broken MSS
/// or a proxy in front of it sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum BadAnswer {
    /// 200 with a body that is not the JSON asked for.
    Garbled,
    /// 200 and the start of a body, then nothing more (until the caller gives up).
    Stalled,
    /// 404 with an HTML page, as a proxy answers for a path it does not route.
    ProxyNotFound,
    /// 200 with a body of this many bytes, streamed (never held in memory).
    Oversized { bytes: u64 },
    /// This status with the simulator's JSON error body, its message `bytes` long and full of
    /// newlines that try to forge log lines.
    ErrorBody { status: u16, bytes: usize },
}

/// A new priority for a queued transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriorityChange {
    pub attempt: u32,
    pub priority: i64,
}

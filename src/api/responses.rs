//! The JSON answers of the API: what each endpoint returns, built from the ledger's and the
//! MSS adapter's types.

use serde::Serialize;
use serde_json::Value;

use super::schemas::{ClassBody, PositionBasisBody, StateBody};
use crate::ledger::{Accepted, RequestRecord};

/// `GET /healthz`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Health {
    pub status: String,
}

/// The answer to an accepted (or replayed) request.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AcceptedBody {
    pub id: i64,
    pub group: String,
    pub class: ClassBody,
    pub mss_priority: i64,
    pub state: StateBody,
    pub duplicate: bool,
    /// Why the request is held (state `held`): a feasibility cap of its group is reached. Its
    /// class and MSS priority are decided when it is released.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_reason: Option<String>,
}

impl From<Accepted> for AcceptedBody {
    fn from(a: Accepted) -> Self {
        AcceptedBody {
            id: a.id,
            group: a.group,
            class: a.class.into(),
            mss_priority: a.mss_priority,
            state: a.state.into(),
            duplicate: a.duplicate,
            held_reason: a.held_reason,
        }
    }
}

/// A 422: a refused request, or a batch none of whose items was accepted.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum Unprocessable {
    Refused(super::error::ErrorBody),
    Batch(BatchBody),
}

/// A 429: a caller over its rate limit, or a batch whose every item was refused and at least
/// one by a queued-bytes cap (the batch's results name each cap; `Retry-After` is set).
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum TooMany {
    Refused(super::error::ErrorBody),
    Batch(BatchBody),
}

/// One result of a batch: accepted, or refused with the field at fault.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum BatchResult {
    Accepted(AcceptedBody),
    Refused {
        error: String,
        field: Option<String>,
    },
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BatchBody {
    pub results: Vec<BatchResult>,
    pub accepted: usize,
    pub refused: usize,
}

/// `GET /v1/requests/{id}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RequestBody {
    pub id: i64,
    pub client_request_id: String,
    pub station: String,
    pub user: String,
    pub file: String,
    pub size_bytes: u64,
    pub access_mode: String,
    pub physics_group: String,
    /// The tape volume the file lies on: as the station named it, or as the volume lookup found
    /// it (see `volume_source`).
    pub volume: Option<String>,
    /// Where `volume` (and `position`) came from: `station` (the request named it), `lookup`
    /// (`[mss.volume_lookup]` found it, `volume_lookup` says how), or `none`.
    pub volume_source: VolumeSourceBody,
    /// The volume lookup's outcome: its method (`enstore-layer4`, `command`) when it found the
    /// volume, `failed` when it found none (the request goes without a volume, never refused);
    /// `null` when no lookup answered (none configured, the station named the volume, or the
    /// answer not in yet).
    pub volume_lookup: Option<String>,
    // `read` or `write`, spelt here rather than by the adapters crate's serde.
    pub direction: String,
    pub group: String,
    pub class: ClassBody,
    pub mss_priority: i64,
    pub state: StateBody,
    pub attempt: u32,
    /// The key its transfers carry at the MSS, its idempotency key there: `"{id}.{nonce}"`,
    /// the nonce of the broker's start that made it (a restored backup never reuses one);
    /// the bare id for a request made before version 9 of the ledger.
    pub mss_key: String,
    pub mss_id: Option<String>,
    pub bytes_done: u64,
    pub charged: u64,
    pub cancel_requested: bool,
    pub last_error: Option<String>,
    /// An `accepted` request an earlier broker (before a crash, a restart or a takeover) may
    /// or may not have sent, which this MSS can neither be asked about nor deduplicate: held
    /// for an operator, never sent again by itself; `last_error` and `explain.unsettled` say
    /// so. Resolved by
    /// `POST /v1/requests/{id}/resend` or a cancel (docs/operations.md, "Unsettled sends").
    pub unsettled: bool,
    /// Why the request is held (state `held`), or was when it was cancelled while held.
    pub held_reason: Option<String>,
    pub created_ms: i64,
    pub submitted_ms: Option<i64>,
    pub started_ms: Option<i64>,
    pub finished_ms: Option<i64>,
    /// The MSS library ('' the default one).
    pub library: String,
    pub qos: Option<String>,
    pub user_factor: Option<f64>,
    /// Why the request has its place: the policy (`sam`, `fair_tree`, `multifactor`, `fbsng`),
    /// the release mode, the MSS priority, how long it had waited, the starvation bound if it
    /// decided, and the policy's own figures in `detail` (SAM's usage and share with the
    /// request, Fair Tree's rank, multifactor's factors and weighted values, FBSNG's queue
    /// priorities). Computed now for a `queued` request, with its `position` (1-based) in its
    /// library's release order, how many are `waiting` and `ranked_at_ms`, the ranking of the
    /// whole queue the position comes from (see `position_basis`: an answer never waits for a
    /// ranking; every release changes usage, so even a ranked position is a forecast); as
    /// decided (or last re-prioritised) otherwise; absent while `held`.
    #[schema(value_type = Option<Object>)]
    pub explain: Option<Value>,
    /// For a `queued` request outside the `volumes` mode: where `explain.position` comes from
    /// (`ranking`, `estimate` or `not_ranked`); `null` otherwise.
    pub position_basis: Option<PositionBasisBody>,
    pub local_file: Option<String>,
    pub bfid: Option<String>,
    /// The file's position on its volume, as submitted or as the volume lookup found it (the
    /// file's number on the tape, from Enstore's location cookie).
    pub position: Option<u64>,
    /// Where the file starts on its volume in bytes, as submitted (`null` when not given; the
    /// volume lookup never sets it). The MSS is sent both; the simulator places the file here.
    pub offset_bytes: Option<u64>,
    /// For a request waiting in the `volumes` release mode (state `queued`): its volume, the
    /// volume's queued bytes and files, which eligibility rule it waits on, and its group's
    /// place in the order; `null` otherwise.
    pub volume_wait: Option<VolumeWaitBody>,
    /// For a `queued` request in the `held` or `volumes` release mode while its library keeps
    /// drives free of fair-share work for data taking (`[release.reserve]`, docs/volumes.md "A
    /// drive for data taking"): how many, and why; `null` when no drive is held back.
    pub drive_reserve: Option<DriveReserveBody>,
    /// For a duplicate read (state `riding`, and after it settled): the request whose MSS
    /// transfer it shares; it completes, fails or retries with that one. Shown only to a caller
    /// that may read that request (its station's token or an operator's): `null` for another
    /// station's carrier, as for a request that rides on nothing.
    pub rides_on: Option<i64>,
}

/// Where a request's volume came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = VolumeSource)]
pub enum VolumeSourceBody {
    /// The request named it.
    Station,
    /// The volume lookup (`[mss.volume_lookup]`) found it.
    Lookup,
    /// The request has no volume.
    None,
}

impl VolumeSourceBody {
    /// From the row's `volume` and `volume_source`.
    pub fn of(volume: Option<&str>, source: Option<&str>) -> VolumeSourceBody {
        match (volume.filter(|v| !v.is_empty()), source) {
            (None, _) => VolumeSourceBody::None,
            (Some(_), Some(s)) if s != crate::ledger::LOOKUP_FAILED => VolumeSourceBody::Lookup,
            (Some(_), _) => VolumeSourceBody::Station,
        }
    }
}

/// Drives a library keeps free of fair-share work for the priority classes (data taking).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DriveReserveBody {
    /// The library.
    pub library: String,
    /// Slots (drives) fair-share work may not take now (`release.reserve.drives`).
    pub reserved_drives: u32,
    /// A priority-class request waits at the MSS now: besides the reserved drives, no sticky
    /// volume is extended and no other group rides on a batch.
    pub priority_waiting: bool,
    /// When the reservation lapses unless data taking is seen again (ms since the epoch):
    /// `release.reserve.window_secs` after a priority request last moved; `null` while one
    /// waits.
    pub until_ms: Option<i64>,
}

/// Where a request waiting in the `volumes` release mode stands (docs/volumes-live.md).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct VolumeWaitBody {
    /// Its tape volume (`null`: its group's requests without a volume, one pseudo-volume that
    /// is always eligible; or, while the volume lookup has not answered, its group's requests
    /// waiting for theirs, eligible once the oldest has waited `[mss.volume_lookup] wait_secs`).
    pub volume: Option<String>,
    /// Bytes and files waiting on that volume now, of every group.
    pub queued_bytes: u64,
    pub queued_files: u64,
    /// When the volume's oldest and newest waiting requests arrived (ms since the epoch).
    pub oldest_ms: i64,
    pub newest_ms: i64,
    /// Whether the volume may be mounted now.
    pub eligible: bool,
    /// The rule that makes it eligible (`no_volume`, `volume_lookup_wait_secs`, `mounted`,
    /// `min_volume_bytes`, `min_volume_files`, `quiet_secs`, `max_age_secs`) or the one it waits
    /// on (`waiting_volume_lookup`: eligible at `eligible_at_ms` without a volume unless the
    /// lookup answers first; `waiting_quiet_secs`, `waiting_max_age_secs`: eligible at
    /// `eligible_at_ms` unless more bytes or files come first).
    pub rule: String,
    pub eligible_at_ms: Option<i64>,
    /// Volumes in flight at its library, and the most `release.volumes.max_volumes` allows.
    pub volumes_in_flight: usize,
    pub max_volumes: u32,
    /// Its group's place (1 first) among the `groups_waiting` groups with requests waiting at
    /// its library, in the policy's order of each group's oldest request: the policy chooses
    /// the group, then that group's best eligible volume is mounted.
    pub group_position: Option<usize>,
    pub groups_waiting: usize,
}

impl From<crate::ledger::VolumeWait> for VolumeWaitBody {
    fn from(w: crate::ledger::VolumeWait) -> Self {
        VolumeWaitBody {
            volume: w.volume,
            queued_bytes: w.queued_bytes,
            queued_files: w.queued_files,
            oldest_ms: w.oldest_ms,
            newest_ms: w.newest_ms,
            eligible: w.eligible,
            rule: w.rule.to_string(),
            eligible_at_ms: w.eligible_at_ms,
            volumes_in_flight: w.volumes_in_flight,
            max_volumes: w.max_volumes,
            group_position: w.group_position,
            groups_waiting: w.groups_waiting,
        }
    }
}

impl From<RequestRecord> for RequestBody {
    fn from(r: RequestRecord) -> Self {
        let explain = explained(&r);
        RequestBody {
            id: r.id,
            client_request_id: r.client_request_id,
            station: r.station,
            user: r.user,
            file: r.file,
            size_bytes: r.size_bytes,
            access_mode: r.access_mode,
            physics_group: r.physics_group,
            volume_source: VolumeSourceBody::of(r.volume.as_deref(), r.volume_source.as_deref()),
            volume_lookup: r.volume_source,
            volume: r.volume,
            direction: r.direction.as_str().to_string(),
            group: r.group,
            class: r.class.into(),
            mss_priority: r.mss_priority,
            state: r.state.into(),
            attempt: r.attempt,
            mss_key: r.mss_key,
            mss_id: r.mss_id,
            bytes_done: r.bytes_done,
            charged: r.charged,
            cancel_requested: r.cancel_requested,
            last_error: r.last_error,
            unsettled: r.unsettled,
            held_reason: r.held_reason,
            created_ms: r.created_ms,
            submitted_ms: r.submitted_ms,
            started_ms: r.started_ms,
            finished_ms: r.finished_ms,
            library: r.library,
            qos: r.qos.map(|q| q.as_str().to_string()),
            user_factor: r.user_factor,
            explain,
            position_basis: None,
            local_file: r.local_file,
            bfid: r.bfid,
            position: r.position,
            offset_bytes: r.offset_bytes,
            volume_wait: None,
            drive_reserve: None,
            rides_on: r.rides_on,
        }
    }
}

/// `POST /v1/requests/{id}/release`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReleaseBody {
    pub id: i64,
    pub released: bool,
}

/// A record's explanation as answered: the stored one, and for an unsettled request why it
/// waits for an operator (`unsettled`: its `last_error`).
fn explained(r: &RequestRecord) -> Option<Value> {
    let mut explain = (r.explain.as_ref()).and_then(|e| serde_json::to_value(&e.explain).ok());
    if let (true, Some(Value::Object(fields))) = (r.unsettled, explain.as_mut()) {
        let why = r.last_error.clone().unwrap_or_default();
        fields.insert("unsettled".to_string(), Value::String(why));
    }
    explain
}

/// `POST /v1/requests/{id}/resend`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ResendBody {
    pub id: i64,
    /// It was unsettled and is now sent again, with the same key and attempt.
    pub resent: bool,
}

/// `GET /v1/mss`: the adapter and its capabilities.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct MssBody {
    pub adapter: String,
    /// `none` (the MSS takes no priority: held release mode), `direct` (the broker's priority,
    /// within `min..max`) or `bands` (mapped onto the MSS's levels).
    pub priority: String,
    pub min_priority: Option<i64>,
    pub max_priority: Option<i64>,
    /// For `bands`: broker priorities from `from` up get the MSS's `level`.
    pub bands: Vec<BandBody>,
    pub reprioritize: bool,
    pub cancel: bool,
    /// Whether a cancel reaches the MSS's queue (false: the broker stops its side only, as an
    /// encp run stopped without `mss.encp.cancel_command` leaves its ticket queued).
    pub cancel_reaches_mss: bool,
    pub release: bool,
    pub writes: bool,
    pub bfid: bool,
    pub reads_need_local_file: bool,
    pub writes_need_local_file: bool,
    /// Most transfers outstanding at once (`null`: no limit).
    pub max_outstanding: Option<usize>,
    /// Transfers it may take now (`null`: no limit).
    pub room: Option<usize>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BandBody {
    pub from: i64,
    pub level: i64,
}

impl MssBody {
    pub fn new(adapter: &str, c: &mss_adapters::Capabilities, room: Option<usize>) -> MssBody {
        use mss_adapters::PriorityScale;
        let (kind, min, max, bands) = match &c.priority {
            PriorityScale::None => ("none", None, None, Vec::new()),
            PriorityScale::Direct { min, max } => ("direct", Some(*min), Some(*max), Vec::new()),
            PriorityScale::Bands(b) => (
                "bands",
                None,
                None,
                b.iter()
                    .map(|b| BandBody {
                        from: b.from,
                        level: b.level,
                    })
                    .collect(),
            ),
        };
        MssBody {
            adapter: adapter.to_string(),
            priority: kind.to_string(),
            min_priority: min,
            max_priority: max,
            bands,
            reprioritize: c.reprioritize,
            cancel: c.cancel,
            cancel_reaches_mss: c.cancel,
            release: c.release,
            writes: c.writes,
            bfid: c.bfid,
            reads_need_local_file: c.reads_need_local_file,
            writes_need_local_file: c.writes_need_local_file,
            max_outstanding: c.max_outstanding,
            room,
        }
    }

    /// Whether the adapter's cancel reaches the MSS (`MssAdapter::cancel_reaches_mss`).
    pub fn cancel_reaches_mss(mut self, reaches: bool) -> MssBody {
        self.cancel_reaches_mss = self.cancel && reaches;
        self
    }
}

/// `DELETE /v1/requests/{id}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CancelBody {
    pub id: i64,
    pub state: StateBody,
    pub cancel_requested: bool,
}

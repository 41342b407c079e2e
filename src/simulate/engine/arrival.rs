//! A request of the load, and the transfer the library receives for one of its attempts.

use mss_adapters::sim::library::Micros;
use mss_adapters::{Direction, Transfer};

use crate::domain::GroupId;
use crate::policy::multifactor::Qos;

/// One request of the load.
#[derive(Debug, Clone, PartialEq)]
pub struct Arrival {
    pub at: Micros,
    pub group: GroupId,
    pub size_bytes: u64,
    pub volume: Option<String>,
    /// Where the file is on its volume (`Transfer.position`): its file sequence number.
    pub position: Option<u64>,
    /// Where the file starts on its volume in bytes (`Transfer.offset_bytes`): the library
    /// places it here, whatever `position` says.
    pub offset_bytes: Option<u64>,
    /// What it is worth to its group (`None`: `policy::benefit` of its bytes, no access mode).
    pub benefit: Option<u64>,
    pub qos: Qos,
    /// The access mode's multifactor queue factor.
    pub queue: f64,
    /// A write (the data-taking stream) rather than a recall.
    pub write: bool,
    /// A fingerprint of the file read (reads of one file coalesce: `engine/coalesce.rs`);
    /// `None` never coalesces.
    pub file: Option<u64>,
    /// The file's name, for a request without a volume or a position: the library derives
    /// them from it, as it does for such a transfer from `serve` (`None`: the library sees an
    /// empty name, which only a request with both never reads).
    pub name: Option<String>,
    /// When the client cancels it (`None`: never): the engine replays the cancel as `serve`
    /// carries it out (`engine/cancel.rs`).
    pub cancelled_at: Option<Micros>,
}

impl Default for Arrival {
    fn default() -> Self {
        Arrival {
            at: 0,
            group: GroupId(0),
            size_bytes: 0,
            volume: None,
            position: None,
            offset_bytes: None,
            benefit: None,
            qos: Qos::Normal,
            queue: 0.0,
            write: false,
            file: None,
            name: None,
            cancelled_at: None,
        }
    }
}

/// Attempt `attempt` of request `id` (`a`, its arrival) as the library receives it, at
/// priority 0 until the broker places it.
pub(super) fn transfer(id: i64, a: &Arrival, attempt: u32) -> Transfer {
    Transfer {
        key: id.to_string(),
        attempt,
        file: a.name.clone().unwrap_or_default(),
        size_bytes: a.size_bytes,
        priority: 0,
        volume: a.volume.clone(),
        group: String::new(),
        direction: if a.write {
            Direction::Write
        } else {
            Direction::Read
        },
        local_file: None,
        bfid: None,
        position: a.position,
        offset_bytes: a.offset_bytes,
    }
}

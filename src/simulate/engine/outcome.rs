//! What a run reports: each decision, each fair-share request finished, and the run's counts.

use mss_adapters::sim::library::{LibraryStats, Micros};

use super::BatchRecord;
use crate::domain::{Class, GroupId, GroupKind, PolicySettings};
use crate::policy::order::is_fair;

/// A fair-share request finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finished {
    pub at: Micros,
    pub group: GroupId,
    pub bytes: u64,
    /// Whether every fair-share group with a share above 0 had a request waiting (arrived, not
    /// started at the library) at that instant.
    pub saturated: bool,
    /// Saturated on eligible demand: every such group had a request the policy could send
    /// (in the volumes mode, on an eligible or mounted volume; in the other modes, any).
    pub eligible: bool,
}

/// What the broker decided for one request when it sent it to the library: what `GET
/// /v1/requests/{id}` shows of a live decision (group, class, MSS priority). `class` is `None`
/// where a comparison baseline decided (it has no class).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SentDecision {
    /// The request's place in the load, from 1 (`load[arrival - 1]`).
    pub arrival: i64,
    pub group: GroupId,
    pub class: Option<Class>,
    pub mss_priority: i64,
}

/// What happened in a run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunRecord {
    /// Per group (`GroupId.0`): first starts, bytes done, longest wait from arrival to start.
    pub starts: Vec<u64>,
    pub bytes: Vec<u128>,
    pub max_wait: Vec<Micros>,
    /// Starts of requests taking more than one slot.
    pub bulk_starts: Vec<u64>,
    /// The most times a released request had been passed (FBSNG section priority).
    pub max_passed: Vec<u32>,
    /// Groups in the order their requests started.
    pub start_order: Vec<GroupId>,
    /// (time, group) of each start.
    pub start_times: Vec<(Micros, GroupId)>,
    /// Requests still waiting (broker or MSS) at the end.
    pub unfinished: usize,
    /// Per group: requests done, and every start's wait from arrival to start.
    pub files: Vec<u64>,
    pub waits: Vec<Vec<Micros>>,
    /// Fair-share requests done, in the order they finished.
    pub finished: Vec<Finished>,
    /// Fair-share starts at the library while a priority-class request was waiting (in the
    /// broker or at the library, not started).
    pub priority_inversions: u64,
    /// Per group: the benefit charged for the requests that ended, as settled at their end
    /// (`policy::transition::settle`): what the bytes done were worth, nothing for a failure
    /// (its estimate refunded).
    pub charged: Vec<u128>,
    /// Reads that rode on another read of the same file (no transfer of their own).
    pub coalesced: u64,
    /// Failed attempts sent again after the backoff (`engine/retry.rs`), and requests failed
    /// for good (their attempts used up; riders of a failed carrier included).
    pub retried: u64,
    pub failed: u64,
    /// Requests cancelled (a trace's `cancelled_t`) before they started, riders included.
    pub cancelled: u64,
    /// Priority changes the library took (the re-prioritisation passes').
    pub priority_changes: u64,
    /// When the last request finished.
    pub makespan: Micros,
    /// The library's mounts and drive times at the end.
    pub library: LibraryStats,
    /// Volumes mode: every batch released, in order.
    pub batches: Vec<BatchRecord>,
    /// Each request's decision, in the order the broker sent them to the library.
    pub decisions: Vec<SentDecision>,
}

impl RunRecord {
    /// Each fair-share group's share of the bytes done, against its target: the largest
    /// absolute difference in percentage points.
    pub fn share_error(&self, policy: &PolicySettings) -> f64 {
        let fair: Vec<GroupId> = policy.group_ids().filter(|&g| is_fair(policy, g)).collect();
        let total: u128 = fair.iter().map(|g| self.bytes[g.0]).sum();
        if total == 0 {
            return 0.0;
        }
        fair.iter()
            .map(|&g| {
                let share = self.bytes[g.0] as f64 / total as f64;
                let target = target_share(policy, g).unwrap_or(0.0);
                (share - target).abs() * 100.0
            })
            .fold(0.0, f64::max)
    }
}

/// A fair-share group's target fraction (`None` for a priority class).
pub fn target_share(policy: &PolicySettings, g: GroupId) -> Option<f64> {
    match policy.group(g).kind {
        GroupKind::FairShare { share } => Some(share.num() as f64 / share.den() as f64),
        GroupKind::Priority { .. } => None,
    }
}

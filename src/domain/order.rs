//! The ordering policy's validated settings (`[policy]`'s ordering keys, `[policy.multifactor]`,
//! `[policy.qos]`, `[policy.queue_factors]`, `[policy.fbsng."group"]`, `[release]`): pure data.
//! Their behaviour is in `policy::order`, `policy::multifactor` and `policy::fbsng`.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// Which ordering policy.
#[derive(Debug, Clone, PartialEq)]
pub enum Algorithm {
    Sam,
    FairTree,
    Multifactor(Multifactor),
    Fbsng,
}

/// When fair-share requests go to the MSS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseMode {
    /// On decision (the seed).
    PassThrough,
    /// The broker keeps them and releases the policy's first whenever the MSS has room.
    Held,
}

/// The held release mode's limits.
#[derive(Debug, Clone, PartialEq)]
pub struct Release {
    pub mode: ReleaseMode,
    /// Slots outstanding at the MSS per library (released, not finished).
    pub limit: u32,
    /// Per named library, instead of `limit`.
    pub libraries: BTreeMap<String, u32>,
    /// A request takes `ceil(size / slot_bytes)` slots (at least 1, at most the library's
    /// limit); 0: every request one slot.
    pub slot_bytes: u64,
}

/// Everything about ordering, validated from `[policy]`, `[policy.*]` and `[release]`.
#[derive(Debug, Clone, PartialEq)]
pub struct OrderSettings {
    pub algorithm: Algorithm,
    pub release: Release,
    /// MSS priorities the `fair_tree`, `multifactor` and `fbsng` policies map onto.
    pub band_low: i64,
    pub band_high: i64,
    /// Priority of a pass-through request that has waited `max_wait_ms`.
    pub starved_priority: i64,
    /// The starvation bound (None: off).
    pub max_wait_ms: Option<i64>,
    /// How often time-dependent priorities are recomputed (None: never).
    pub reprioritise: Option<Duration>,
    /// QoS per access mode (requests may name their own); unlisted modes are normal.
    pub qos_by_mode: HashMap<String, Qos>,
    /// Multifactor queue factor per access mode, [0, 1]; unlisted modes 0.
    pub queue_factor_by_mode: HashMap<String, f64>,
    /// FBSNG parameters per group (`GroupId.0`; priority classes carry defaults).
    pub fbsng: Vec<QueueParams>,
}

/// Relative importance a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Qos {
    Expedite,
    Normal,
    Standby,
}
/// Which requests the size factor favours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeFavours {
    Large,
    Small,
}

/// The weights and normalisers.
#[derive(Debug, Clone, PartialEq)]
pub struct Multifactor {
    pub wait_weight: f64,
    pub fair_share_weight: f64,
    pub qos_weight: f64,
    pub queue_weight: f64,
    pub size_weight: f64,
    pub user_weight: f64,
    pub max_wait_ms: i64,
    pub size_ref_bytes: u64,
    pub size_favours: SizeFavours,
    pub band_low: i64,
    pub band_high: i64,
}
/// One queue's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueParams {
    pub qp_min: i64,
    pub qp_max: i64,
    /// Raise when a request starts from another queue.
    pub qpi: i64,
    /// Drop when a request starts from this queue.
    pub qpd: i64,
    /// Queue priority gap: how far above a lower queue this one must be to hold it.
    pub qpg: i64,
    /// Section priority gap within the queue (0: off).
    pub spg: u32,
}

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
    /// The broker keeps them and releases them a tape volume at a time
    /// (`policy::volumes`, docs/volumes.md).
    Volumes,
}

/// Which requests a duplicate read may ride on (`[release] coalesce`, docs/coalescing.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coalesce {
    /// Every read is transferred on its own.
    Off,
    /// Only on a read already released to the MSS side (`accepted`, `submitted`, `running`).
    InFlight,
    /// Also on a read still queued in the broker (held and volumes modes).
    Queued,
}

impl Coalesce {
    pub fn name(self) -> &'static str {
        match self {
            Coalesce::Off => "off",
            Coalesce::InFlight => "in_flight",
            Coalesce::Queued => "queued",
        }
    }

    /// Whether a read may ride on a carrier that is decided (`true`) or queued (`false`).
    pub fn allows(self, decided: bool) -> bool {
        match self {
            Coalesce::Off => false,
            Coalesce::InFlight => decided,
            Coalesce::Queued => true,
        }
    }
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
    /// The volumes release mode's rules (`[release.volumes]`).
    pub volumes: VolumeSettings,
    /// Which requests duplicate reads ride on.
    pub coalesce: Coalesce,
    /// `[release.reserve]`: drives kept for the priority classes (`policy::reserve`).
    pub reserve: ReserveSettings,
}

/// `[release.reserve]`, validated (its behaviour: `policy::reserve`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReserveSettings {
    /// Slots (drives) per library kept free of fair-share work while priority demand lasts
    /// (0: off).
    pub drives: u32,
    /// How long after a priority request was last seen the drives stay reserved.
    pub window_ms: i64,
    /// Per named library, instead of `drives`.
    pub libraries: BTreeMap<String, u32>,
}

/// `[release.volumes]`: when a tape volume's waiting requests are released, and how many.
#[derive(Debug, Clone, PartialEq)]
pub struct VolumeSettings {
    /// A volume is eligible once its queued requests reach this many bytes...
    pub min_volume_bytes: u64,
    /// ...or this many files...
    pub min_volume_files: u32,
    /// ...or its newest request is this old (nothing more is coming)...
    pub quiet_ms: i64,
    /// ...or its oldest request is this old (nothing waits forever).
    pub max_age_ms: i64,
    /// Most bytes and files released in one batch (a batch has at least one request).
    pub batch_max_bytes: u64,
    pub batch_max_files: u32,
    /// A volume in flight or finished this recently gets its next batch before another volume
    /// is mounted (set at or below the MSS's dismount delay).
    pub sticky_ms: i64,
    /// Volumes in flight per library (a drive each).
    pub max_volumes: u32,
    /// Per named library, instead of `max_volumes`.
    pub libraries: BTreeMap<String, u32>,
    /// With `[mss.volume_lookup]` set: how long a request without a volume waits for the
    /// lookup's answer before it goes without one (`wait_secs`); `None`: no lookup, such a
    /// request goes at once.
    pub lookup_wait_ms: Option<i64>,
    /// Riding with a repaid lead (issue 39): `Some(b)`, a group's requests on a volume another
    /// group's batch mounts ride while the group's lead over its share (benefit units) stays
    /// at most `b`, and a group whose ride the bound cut rides no more until it is back at its
    /// share; `None`, only groups not ahead of their share ride, as much as the batch holds.
    pub ride_lead_bytes: Option<u64>,
    /// A batch takes along every request it would leave on its volume when they hold at most
    /// this many bytes and each of their groups has the credit for them
    /// (`policy::volumes::remainder`); 0: off.
    pub remainder_bytes: u64,
}

impl Default for VolumeSettings {
    /// The shipped defaults (config/broker.toml says why).
    fn default() -> Self {
        VolumeSettings {
            min_volume_bytes: 500_000_000_000,
            min_volume_files: 10_000,
            quiet_ms: 3_600_000,
            max_age_ms: 14_400_000,
            batch_max_bytes: 100_000_000_000,
            batch_max_files: 10_000,
            sticky_ms: 60_000,
            max_volumes: 8,
            libraries: BTreeMap::new(),
            lookup_wait_ms: None,
            ride_lead_bytes: None,
            remainder_bytes: 50_000_000_000,
        }
    }
}

impl VolumeSettings {
    /// Volumes in flight allowed at `library`.
    pub fn max_volumes_of(&self, library: &str) -> u32 {
        self.libraries
            .get(library)
            .copied()
            .unwrap_or(self.max_volumes)
    }
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

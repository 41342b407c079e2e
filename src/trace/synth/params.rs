//! The generator's parameters: every one documented with its default (also in docs/traces.md).
//! Deserialisable from TOML or JSON; a missing key takes its default, an unknown key is
//! refused.

use serde::{Deserialize, Serialize};

use crate::trace::format::{MAX_SIZE_BYTES, MAX_T_SECS};
use crate::trace::TraceError;

/// What `generate` makes. The defaults give a 10,000-request trace over the shipped
/// `config/broker.toml` share tree with a demand mix skewed against its shares.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GenParams {
    /// Seed of the pseudo-random stream (xoshiro256** seeded by SplitMix64). Default 1.
    pub seed: u64,
    /// Number of recall requests (scattered and campaign); the data-taking records come on top.
    /// Default 10,000.
    pub requests: u64,
    /// Mean arrival rate of recall requests over the whole trace, requests per second (> 0).
    /// Default 5.0.
    pub rate_per_s: f64,
    /// Burstiness of recall arrivals. Default: see `BurstParams`.
    pub burst: BurstParams,
    /// The groups recalls come from and their demand mix. Default: the leaves of the shipped
    /// share tree (see `GroupParams::shipped`).
    pub groups: Vec<GroupParams>,
    /// Stations, one picked uniformly per recall. Default `["fnal-cms", "cdf-farm"]` (the
    /// shipped demo tokens' stations).
    pub stations: Vec<String>,
    /// Users per group, named `<physics_group>-<n>` with n in 1..=users_per_group, one picked
    /// uniformly per recall (>= 1). Default 5.
    pub users_per_group: u32,
    /// File sizes of recalls. Default: see `SizeParams`.
    pub sizes: SizeParams,
    /// The tapes recalls read. Default: see `VolumeParams`.
    pub volumes: VolumeParams,
    /// Bulk campaigns. Default: see `CampaignParams`.
    pub campaigns: CampaignParams,
    /// The data-taking stream. Default: see `DataTakingParams`.
    pub data_taking: DataTakingParams,
}

impl Default for GenParams {
    fn default() -> Self {
        Self {
            seed: 1,
            requests: 10_000,
            rate_per_s: 5.0,
            burst: BurstParams::default(),
            groups: GroupParams::shipped(),
            stations: vec!["fnal-cms".into(), "cdf-farm".into()],
            users_per_group: 5,
            sizes: SizeParams::default(),
            volumes: VolumeParams::default(),
            campaigns: CampaignParams::default(),
            data_taking: DataTakingParams::default(),
        }
    }
}

/// A two-state on/off Markov-modulated Poisson process: arrivals are Poisson at a high rate
/// while "on" and a low one while "off" (`ratio` times lower); the state lasts an exponential
/// time with the mean given for it, then switches. The two rates are set so that the mean over
/// time is `GenParams::rate_per_s`. `ratio = 1` is a plain Poisson process. The trace starts
/// in the "off" state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BurstParams {
    /// On-state rate over off-state rate (>= 1). Default 4.0.
    pub ratio: f64,
    /// Mean length of an "on" period, seconds (> 0). Default 60.
    pub mean_on_s: f64,
    /// Mean length of an "off" period, seconds (> 0). Default 240.
    pub mean_off_s: f64,
}

impl Default for BurstParams {
    fn default() -> Self {
        Self {
            ratio: 4.0,
            mean_on_s: 60.0,
            mean_off_s: 240.0,
        }
    }
}

/// One group: which request fields classify it (`access_mode`, `physics_group`: the leaf
/// `<access_mode>/<physics_group>`, or the leaf `<access_mode>`, of the share tree) and its
/// demand weight: each recall picks its group with probability weight / sum of weights.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupParams {
    pub access_mode: String,
    pub physics_group: String,
    /// >= 0; the weights need not sum to 1.
    pub weight: f64,
}

impl GroupParams {
    fn new(access_mode: &str, physics_group: &str, weight: f64) -> Self {
        Self {
            access_mode: access_mode.into(),
            physics_group: physics_group.into(),
            weight,
        }
    }

    /// The shipped share tree's leaves, with demand skewed against their shares (share in
    /// brackets): analysis/higgs 0.25 (6.7 %), analysis/top 0.15 (20 %), analysis/neutrino
    /// 0.10 (13.3 %), reprocessing 0.30 (30 %), mc/higgs 0.15 (15 %), mc/top 0.05 (15 %).
    pub fn shipped() -> Vec<Self> {
        vec![
            Self::new("analysis", "higgs", 0.25),
            Self::new("analysis", "top", 0.15),
            Self::new("analysis", "neutrino", 0.10),
            Self::new("reprocessing", "all", 0.30),
            Self::new("mc", "higgs", 0.15),
            Self::new("mc", "top", 0.05),
        ]
    }

    /// The group's path as the Summary names it: `<access_mode>/<physics_group>`.
    pub fn path(&self) -> String {
        format!("{}/{}", self.access_mode, self.physics_group)
    }
}

/// Lognormal file sizes: ln(size) is normal with mean ln(median_bytes) and standard deviation
/// `sigma`, rounded to bytes and clipped to [min_bytes, max_bytes]. A file's size is a
/// function of the seed, its volume and its position, so every recall of a file has the same
/// size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SizeParams {
    /// Median size, bytes (> 0). Default 2,000,000,000.
    pub median_bytes: f64,
    /// Standard deviation of ln(size) (>= 0). Default 1.0.
    pub sigma: f64,
    /// Smallest size, bytes (>= 1). Default 1,000,000.
    pub min_bytes: u64,
    /// Largest size, bytes (>= min_bytes). Default 100,000,000,000.
    pub max_bytes: u64,
}

impl Default for SizeParams {
    fn default() -> Self {
        Self {
            median_bytes: 2e9,
            sigma: 1.0,
            min_bytes: 1_000_000,
            max_bytes: 100_000_000_000,
        }
    }
}

/// The tapes: `count` volumes labelled `<label_prefix><index>` (index from 0, six digits),
/// each holding `files_per_volume` files at positions 1..=files_per_volume. Scattered recalls
/// pick their volume by Zipf popularity: volume index k-1 with probability proportional to
/// k^-zipf_s, then a position uniformly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VolumeParams {
    /// Number of volumes (1..=10,000,000). Default 2,000.
    pub count: u64,
    /// Files on each volume (>= 1). Default 1,000.
    pub files_per_volume: u64,
    /// Zipf exponent s (>= 0; 0 is uniform). Default 1.0.
    pub zipf_s: f64,
    /// Prefix of the labels. Default "VR".
    pub label_prefix: String,
    /// Fraction of a group's recalls on volumes of its own (in [0, 1]). Default 0: every
    /// recall picks among all volumes. Enstore writes each file family to volumes of its own
    /// (a volume's family is `storage_group.file_family.wrapper`, `volume_family.py`, Enstore
    /// at a154041), so a group whose datasets live in its own families reads mostly its own
    /// tapes. Volume index v belongs to group `v % groups`; an own recall picks among its
    /// group's volumes by the same Zipf law, an own campaign opens on one of them. Above 0 it
    /// needs at least as many volumes as groups, so that each group owns one.
    pub own_fraction: f64,
}

impl Default for VolumeParams {
    fn default() -> Self {
        Self {
            count: 2_000,
            files_per_volume: 1_000,
            zipf_s: 1.0,
            label_prefix: "VR".into(),
            own_fraction: 0.0,
        }
    }
}

/// Bulk campaigns: each recall is a campaign request with probability `fraction`, else a
/// scattered recall. A group's campaign requests continue its open campaign, or open a new one
/// when it has none: a size in files drawn uniformly from [min_files, max_files], a volume
/// picked uniformly (bulk work reads old data whatever its popularity) and a start position
/// uniformly on it; the campaign reads consecutive positions and, at the volume's end, goes on
/// from position 1 of another uniformly picked volume. So a campaign is many files of few
/// volumes, interleaved with the other requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CampaignParams {
    /// Fraction of recalls that belong to campaigns, in [0, 1]. Default 0.3.
    pub fraction: f64,
    /// Fewest files of a campaign (>= 1). Default 20.
    pub min_files: u64,
    /// Most files of a campaign (>= min_files). Default 300.
    pub max_files: u64,
}

impl Default for CampaignParams {
    fn default() -> Self {
        Self {
            fraction: 0.3,
            min_files: 20,
            max_files: 300,
        }
    }
}

/// The data-taking stream: writes (`direction: write`) at a steady rate, one every
/// 1/rate_per_s seconds from t = 0 to the last recall, each a new file of `size_bytes` on
/// fresh volumes `<label_prefix><index>` filled in order, `files_per_volume` each; the client
/// request id is `daq-<n>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DataTakingParams {
    /// Writes per second (>= 0; 0: no stream). Default 0.1.
    pub rate_per_s: f64,
    /// Access mode (a priority class in the shipped configuration). Default "datataking".
    pub access_mode: String,
    /// Physics group. Default "raw".
    pub physics_group: String,
    /// Station. Default "fnal-cms".
    pub station: String,
    /// User. Default "daq".
    pub user: String,
    /// Size of each written file, bytes (>= 1). Default 4,000,000,000.
    pub size_bytes: u64,
    /// Files per written volume (>= 1). Default 500.
    pub files_per_volume: u64,
    /// Prefix of the written volumes' labels. Default "DT".
    pub label_prefix: String,
}

impl Default for DataTakingParams {
    fn default() -> Self {
        Self {
            rate_per_s: 0.1,
            access_mode: "datataking".into(),
            physics_group: "raw".into(),
            station: "fnal-cms".into(),
            user: "daq".into(),
            size_bytes: 4_000_000_000,
            files_per_volume: 500,
            label_prefix: "DT".into(),
        }
    }
}

impl GenParams {
    /// Every parameter's bounds, the first problem named by its key.
    pub fn validate(&self) -> Result<(), TraceError> {
        let bad = |key: &str, why: &str| Err(TraceError::Param(format!("{key}: {why}")));
        let positive = |x: f64| x.is_finite() && x > 0.0;
        let non_negative = |x: f64| x.is_finite() && x >= 0.0;
        if !positive(self.rate_per_s) {
            return bad("rate_per_s", "must be > 0");
        }
        if self.requests as f64 / self.rate_per_s > MAX_T_SECS {
            return bad(
                "rate_per_s",
                "requests / rate_per_s is past 10^9 s, the latest a trace may hold",
            );
        }
        if !(self.burst.ratio.is_finite() && self.burst.ratio >= 1.0) {
            return bad("burst.ratio", "must be >= 1");
        }
        if !positive(self.burst.mean_on_s) || !positive(self.burst.mean_off_s) {
            return bad("burst.mean_on_s/mean_off_s", "must be > 0");
        }
        if self.groups.is_empty() {
            return bad("groups", "at least one group is needed");
        }
        if self.groups.iter().any(|g| !non_negative(g.weight)) {
            return bad("groups.weight", "must be >= 0");
        }
        if self.groups.iter().map(|g| g.weight).sum::<f64>() <= 0.0 {
            return bad("groups.weight", "at least one weight must be > 0");
        }
        if self.stations.is_empty() {
            return bad("stations", "at least one station is needed");
        }
        if self.users_per_group == 0 {
            return bad("users_per_group", "must be >= 1");
        }
        self.validate_sizes_and_volumes()?;
        let c = &self.campaigns;
        if !(non_negative(c.fraction) && c.fraction <= 1.0) {
            return bad("campaigns.fraction", "must be in [0, 1]");
        }
        if c.min_files == 0 || c.max_files < c.min_files {
            return bad(
                "campaigns.min_files/max_files",
                "need 1 <= min_files <= max_files",
            );
        }
        let d = &self.data_taking;
        if !non_negative(d.rate_per_s) {
            return bad("data_taking.rate_per_s", "must be >= 0");
        }
        if d.size_bytes == 0 || d.files_per_volume == 0 {
            return bad("data_taking.size_bytes/files_per_volume", "must be >= 1");
        }
        if d.size_bytes > MAX_SIZE_BYTES {
            return bad(
                "data_taking.size_bytes",
                "must be <= 10^15 (a trace's largest file)",
            );
        }
        Ok(())
    }

    fn validate_sizes_and_volumes(&self) -> Result<(), TraceError> {
        let bad = |key: &str, why: &str| Err(TraceError::Param(format!("{key}: {why}")));
        let s = &self.sizes;
        if !(s.median_bytes.is_finite() && s.median_bytes > 0.0) {
            return bad("sizes.median_bytes", "must be > 0");
        }
        if !(s.sigma.is_finite() && s.sigma >= 0.0) {
            return bad("sizes.sigma", "must be >= 0");
        }
        if s.min_bytes == 0 || s.max_bytes < s.min_bytes || s.max_bytes > MAX_SIZE_BYTES {
            return bad(
                "sizes.min_bytes/max_bytes",
                "need 1 <= min_bytes <= max_bytes <= 10^15 (a trace's largest file)",
            );
        }
        let v = &self.volumes;
        if v.count == 0 || v.count > 10_000_000 {
            return bad("volumes.count", "must be in 1..=10000000");
        }
        if v.files_per_volume == 0 {
            return bad("volumes.files_per_volume", "must be >= 1");
        }
        if !(v.zipf_s.is_finite() && v.zipf_s >= 0.0) {
            return bad("volumes.zipf_s", "must be >= 0");
        }
        if !(v.own_fraction.is_finite() && (0.0..=1.0).contains(&v.own_fraction)) {
            return bad("volumes.own_fraction", "must be in [0, 1]");
        }
        // A group owning no volume would read the others' under `own_fraction`.
        if v.own_fraction > 0.0 && v.count < self.groups.len() as u64 {
            return bad(
                "volumes.own_fraction",
                "needs volumes.count >= the number of groups (each owns a volume)",
            );
        }
        Ok(())
    }
}

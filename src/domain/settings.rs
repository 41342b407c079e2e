//! Validated settings that several layers read: the policy's (`PolicySettings` and the pure
//! data it embeds) and the dispatcher's retry schedule. Built by `config`; behaviour lives in
//! `impl` blocks of the modules that use them (`policy::order`, `policy::multifactor`,
//! `policy::fbsng`, `shares::model`).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use super::order::OrderSettings;
use super::tree::{GroupId, GroupInfo, ShareTree};
use super::Fraction;

/// How requests are classified, charged and prioritised. Pure data: the policy functions read it.
#[derive(Debug, Clone)]
pub struct PolicySettings {
    pub p_front: i64,
    pub p_back: i64,
    pub benefit: Benefit,
    /// How usage forgets (`[usage]`).
    pub usage_model: UsageModel,
    /// The form of the fair-share delta reported per node (and used by factor policies).
    pub fs_delta: DeltaForm,
    /// How often held requests are checked against their feasibility caps.
    pub held_recheck: Duration,
    /// The ordering policy and release mode.
    pub order: OrderSettings,
    /// Every accounting group: priority classes first (in configured order), then share leaves.
    pub groups: Vec<GroupInfo>,
    pub tree: ShareTree,
    pub rules: Vec<Rule>,
    /// Group of requests no rule matches, or `None` to refuse them.
    pub default_group: Option<GroupId>,
    /// At most this many bytes of one user's (a user name of one station) fair-share requests
    /// not finished, riders included; a submission past it is refused (429). `[limits]`.
    pub max_queued_bytes_per_user: Option<u64>,
    /// Every group by its path (built by `config`).
    pub(crate) by_path: HashMap<String, GroupId>,
    /// Every priority class by its access mode (built by `config`).
    pub(crate) class_by_mode: HashMap<String, GroupId>,
}

impl PolicySettings {
    pub fn group(&self, id: GroupId) -> &GroupInfo {
        &self.groups[id.0]
    }

    pub fn group_by_path(&self, path: &str) -> Option<GroupId> {
        self.by_path.get(path).copied()
    }

    /// The priority class an access mode belongs to, if it is one.
    pub fn priority_class(&self, access_mode: &str) -> Option<GroupId> {
        self.class_by_mode.get(access_mode).copied()
    }

    pub fn group_ids(&self) -> impl Iterator<Item = GroupId> {
        (0..self.groups.len()).map(GroupId)
    }
}

/// Maui's two forms of the fair-share delta of a node with target `t` and usage share `u`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeltaForm {
    /// `t - u` (Maui's default).
    Difference,
    /// `1 - u / t` (Maui's `%` FSPOLICY).
    Percent,
}

impl DeltaForm {
    pub fn name(self) -> &'static str {
        match self {
            DeltaForm::Difference => "difference",
            DeltaForm::Percent => "percent",
        }
    }
}

/// What a request's run is worth to its group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Benefit {
    Bytes,
    Files,
    /// Bytes times an integer weight per access mode (1 when the mode is not listed).
    WeightedBytes(BTreeMap<String, u64>),
}

impl Benefit {
    pub fn name(&self) -> &'static str {
        match self {
            Benefit::Bytes => "bytes",
            Benefit::Files => "files",
            Benefit::WeightedBytes(_) => "weighted_bytes",
        }
    }
}

/// A classification rule: every field given must match; the first rule that matches wins.
#[derive(Debug, Clone)]
pub struct Rule {
    pub access_mode: Option<String>,
    pub physics_group: Option<String>,
    pub station: Option<String>,
    pub user: Option<String>,
    pub path_prefix: Option<String>,
    pub group: GroupId,
}

/// The configured usage model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UsageModel {
    Cumulative,
    HalfLife {
        half_life_ms: i64,
    },
    Windows {
        interval_ms: i64,
        depth: usize,
        /// FSDECAY as an exact fraction in (0, 1].
        decay: Fraction,
    },
}

/// How a failed MSS call is tried again (`[mss] retry_*`): the one backoff of the broker. The
/// dispatcher's loops wait [`RetrySettings::jittered`] while the MSS is out; a request whose
/// attempt failed waits [`RetrySettings::backoff`] before its next one, and has
/// `max_attempts` in all (`policy::transition::after_failure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetrySettings {
    pub max_attempts: u32,
    pub base: Duration,
    pub max: Duration,
}

impl RetrySettings {
    /// `[mss]`'s defaults, stated once (`config/mss.rs` reads them): 5 attempts, 500 ms
    /// doubling to 60 s.
    pub const DEFAULT: RetrySettings = RetrySettings {
        max_attempts: 5,
        base: Duration::from_millis(500),
        max: Duration::from_millis(60_000),
    };

    /// Delay before attempt `attempt + 1`, doubling from `base` up to `max` (the first wait,
    /// after attempt 1, is `base`).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32
            .checked_shl(attempt.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.max)
    }

    /// [`RetrySettings::backoff`] less `jitter` (taken as 0..=1) times a quarter of it, so
    /// brokers do not retry in step: never above `max`, never below three quarters of the
    /// backoff. The caller draws `jitter`, so this stays pure.
    pub fn jittered(&self, attempt: u32, jitter: f64) -> Duration {
        let d = self.backoff(attempt);
        d.saturating_sub(d.mul_f64(jitter.clamp(0.0, 1.0) / 4.0))
    }
}

impl Default for RetrySettings {
    fn default() -> Self {
        RetrySettings::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let r = RetrySettings {
            max_attempts: 5,
            base: Duration::from_millis(100),
            max: Duration::from_millis(350),
        };
        assert_eq!(r.backoff(1), Duration::from_millis(100));
        assert_eq!(r.backoff(2), Duration::from_millis(200));
        assert_eq!(r.backoff(3), Duration::from_millis(350));
        assert_eq!(r.backoff(40), Duration::from_millis(350));
    }

    #[test]
    fn the_jittered_backoff_never_exceeds_its_max_whatever_the_jitter() {
        // The shipped figures: 500 ms doubling to 60 s (64 s uncapped), where 69.6 s and
        // 72.6 s were seen.
        for (base, max) in [(500, 60_000), (100, 800), (700, 700), (1, 86_400_000)] {
            let r = RetrySettings {
                max_attempts: 5,
                base: Duration::from_millis(base),
                max: Duration::from_millis(max),
            };
            for jitter in [0.0, 0.001, 0.25, 0.5, 0.999, 1.0, 7.0, -1.0] {
                for attempt in 1..=80 {
                    let d = r.jittered(attempt, jitter);
                    assert!(d <= r.max, "{d:?} over {:?} (jitter {jitter})", r.max);
                    assert!(d >= r.backoff(attempt).mul_f64(0.75), "{d:?}");
                }
            }
        }
    }
}

//! The comparison baselines, for `mssbroker simulate` only (`serve` cannot select them): a
//! pick function beside [`crate::policy::queue::HeldQueue::pick`] over the broker's held
//! requests.
//!
//! - [`Baseline::Fifo`]: arrival order. Held: the oldest waiting request is released next,
//!   whatever its group. Pass-through: every fair-share request goes to the library at one
//!   priority (`band_low`), so the library's own order decides (arrival order between equal
//!   priorities; under the Enstore model the volume queues).
//! - [`Baseline::WeightedRandom`]: as FTS3 hands out activity slots, each free slot picks a
//!   group at random in proportion to its target share among the groups with waiting requests
//!   (zero-share groups only when no other group waits, then the oldest), then that group's
//!   oldest request. Seeded: the same seed gives the same picks. It needs held mode (there is
//!   no slot to pick for in pass-through).

use std::collections::{BTreeMap, VecDeque};

use crate::domain::GroupId;
use crate::policy::order::Candidate;

/// A comparison baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Baseline {
    Fifo,
    WeightedRandom,
}

impl Baseline {
    pub fn name(self) -> &'static str {
        match self {
            Baseline::Fifo => "fifo",
            Baseline::WeightedRandom => "weighted_random",
        }
    }
}

/// The held requests under a baseline: per group, in arrival order.
#[derive(Debug, Clone)]
pub struct BaselineQueue {
    groups: BTreeMap<GroupId, VecDeque<Candidate>>,
    rng: SplitMix64,
}

impl BaselineQueue {
    pub fn new(seed: u64) -> BaselineQueue {
        BaselineQueue {
            groups: BTreeMap::new(),
            rng: SplitMix64(seed),
        }
    }

    /// Add a request (requests arrive in id order).
    pub fn push(&mut self, c: Candidate) {
        self.groups.entry(c.group).or_default().push_back(c);
    }

    pub fn len(&self) -> usize {
        self.groups.values().map(VecDeque::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Take the request `baseline` releases into `free` slots, if it fits; `share` gives a
    /// group's target share (the weights of [`Baseline::WeightedRandom`]). A request that does
    /// not fit is not passed: nothing is released until it fits.
    pub fn pick(
        &mut self,
        baseline: Baseline,
        free: u32,
        share: impl Fn(GroupId) -> f64,
    ) -> Option<Candidate> {
        let g = match baseline {
            Baseline::Fifo => self.oldest_group()?,
            Baseline::WeightedRandom => self.random_group(share)?,
        };
        let reqs = self.groups.get_mut(&g)?;
        if reqs.front()?.slots > free {
            return None;
        }
        let c = reqs.pop_front();
        if reqs.is_empty() {
            self.groups.remove(&g);
        }
        c
    }

    /// The group whose first request arrived first.
    fn oldest_group(&self) -> Option<GroupId> {
        self.groups
            .iter()
            .filter_map(|(g, reqs)| reqs.front().map(|c| (c.id, *g)))
            .min()
            .map(|(_, g)| g)
    }

    /// A group with waiting requests, drawn in proportion to `share` (zero-share groups only
    /// when every waiting group has none: then the oldest).
    fn random_group(&mut self, share: impl Fn(GroupId) -> f64) -> Option<GroupId> {
        let weighted: Vec<(GroupId, f64)> = self
            .groups
            .keys()
            .map(|&g| (g, share(g).max(0.0)))
            .filter(|&(_, w)| w > 0.0)
            .collect();
        let total: f64 = weighted.iter().map(|(_, w)| w).sum();
        if weighted.is_empty() || total <= 0.0 {
            return self.oldest_group();
        }
        let mut x = self.rng.unit() * total;
        for &(g, w) in &weighted {
            if x < w {
                return Some(g);
            }
            x -= w;
        }
        weighted.last().map(|&(g, _)| g)
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014): a small, fixed, seeded stream.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

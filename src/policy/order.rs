//! Where a fair-share request goes, under the configured ordering policy: its MSS priority, its
//! place in the broker's own queue (held release mode) and the explanation `GET
//! /v1/requests/{id}` shows. Pure: usage, queue priorities and the time are passed in, so the
//! live broker, the simulator's virtual-time engine (`simulate::engine`) and tests run the
//! same code.
//!
//! - `sam`: the seed's front or back ([`super::sam`]).
//! - `fair_tree`: the group's Fair Tree rank `r` of `N` leaves onto the band:
//!   `band_low + round((r - 1) * (band_high - band_low) / (N - 1))` (rank N, the most
//!   under-served, gets `band_high`).
//! - `multifactor`: seed 002's weighted factors ([`super::multifactor`]) onto the band.
//! - `fbsng`: the group's queue priority above the lowest queue's, from `band_low`, capped at
//!   `band_high` ([`super::fbsng`]); in held mode the FBSNG scheduler picks what starts.
//!
//! Whatever the policy, a request that has waited `max_wait` goes to `starved_priority` (pass
//! through) or is released before anything else, oldest first (held).

use std::cell::OnceCell;
use std::collections::{BTreeMap, HashMap};

pub use crate::domain::order::{Algorithm, OrderSettings, Release, ReleaseMode, VolumeSettings};

use super::fbsng::{QueueParams, Queues};
use super::multifactor::{Factors, Qos};
use crate::domain::Class;
use crate::domain::{GroupId, GroupKind, PolicySettings};
use crate::shares::book::BookAt;
use crate::shares::fairtree::{fair_tree, FairTree};
use crate::shares::{UsageBook, UsageLookup};

impl Algorithm {
    pub fn name(&self) -> &'static str {
        match self {
            Algorithm::Sam => "sam",
            Algorithm::FairTree => "fair_tree",
            Algorithm::Multifactor(_) => "multifactor",
            Algorithm::Fbsng => "fbsng",
        }
    }
}

impl ReleaseMode {
    pub fn name(self) -> &'static str {
        match self {
            ReleaseMode::PassThrough => "pass_through",
            ReleaseMode::Held => "held",
            ReleaseMode::Volumes => "volumes",
        }
    }
}

impl Release {
    pub fn limit_of(&self, library: &str) -> u32 {
        self.libraries.get(library).copied().unwrap_or(self.limit)
    }

    pub fn slots(&self, library: &str, size_bytes: u64) -> u32 {
        if self.slot_bytes == 0 {
            return 1;
        }
        let n = size_bytes.div_ceil(self.slot_bytes).max(1);
        n.min(u64::from(self.limit_of(library).max(1))) as u32
    }
}

impl OrderSettings {
    /// The seed's behaviour: SAM, pass through, no starvation bound, no re-prioritisation.
    pub fn seed(p_front: i64, p_back: i64, groups: usize) -> OrderSettings {
        OrderSettings {
            algorithm: Algorithm::Sam,
            release: Release {
                mode: ReleaseMode::PassThrough,
                limit: 8,
                libraries: BTreeMap::new(),
                slot_bytes: 0,
                volumes: VolumeSettings::default(),
                coalesce: crate::domain::order::Coalesce::InFlight,
                reserve: Default::default(),
            },
            band_low: p_back,
            band_high: p_front,
            starved_priority: p_front + 1,
            max_wait_ms: None,
            reprioritise: None,
            qos_by_mode: HashMap::new(),
            queue_factor_by_mode: HashMap::new(),
            fbsng: vec![QueueParams::default(); groups],
        }
    }

    pub fn held(&self) -> bool {
        self.release.mode == ReleaseMode::Held
    }

    /// The volumes release mode: the broker keeps fair-share requests in a
    /// [`super::volumes::VolumeQueue`] and releases them a volume at a time.
    pub fn volumes(&self) -> bool {
        self.release.mode == ReleaseMode::Volumes
    }

    /// The QoS of a request: its own, else its access mode's, else normal.
    pub fn qos(&self, asked: Option<Qos>, access_mode: &str) -> Qos {
        asked
            .or_else(|| self.qos_by_mode.get(access_mode).copied())
            .unwrap_or(Qos::Normal)
    }

    pub fn queue_factor(&self, access_mode: &str) -> f64 {
        self.queue_factor_by_mode
            .get(access_mode)
            .copied()
            .unwrap_or(0.0)
    }
}

/// What the ordering knows about one fair-share request.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub id: i64,
    pub group: GroupId,
    pub library: String,
    pub created_ms: i64,
    pub size_bytes: u64,
    pub benefit: u64,
    pub qos: Qos,
    /// The submitter's factor, [0, 1].
    pub user: f64,
    /// The access mode's queue factor, [0, 1].
    pub queue: f64,
    pub slots: u32,
    /// FBSNG section priority.
    pub passed: u32,
}

/// The group-level figures one ordering reads at one instant. The Fair Tree is computed on
/// first use (or kept by a [`ShareSnapshotCache`] across the decisions it stays valid for).
pub struct ShareSnapshot<'a, U: UsageLookup> {
    pub policy: &'a PolicySettings,
    pub usage: U,
    pub queues: &'a Queues,
    tree: OnceCell<FairTree>,
    /// A [`ShareSnapshotCache`]'s tree, used instead of `tree` when given.
    kept: Option<&'a OnceCell<FairTree>>,
}

impl<'a, U: UsageLookup> ShareSnapshot<'a, U> {
    pub fn new(policy: &'a PolicySettings, usage: U, queues: &'a Queues) -> Self {
        ShareSnapshot {
            policy,
            usage,
            queues,
            tree: OnceCell::new(),
            kept: None,
        }
    }

    fn tree(&self) -> &FairTree {
        self.kept
            .unwrap_or(&self.tree)
            .get_or_init(|| tree_of(self.policy, &self.usage))
    }

    /// A group's Fair Tree rank (N is the most under-served) and N.
    pub fn rank(&self, g: GroupId) -> (u32, u32) {
        let t = self.tree();
        let rank = self
            .policy
            .group(g)
            .ancestors
            .last()
            .and_then(|&n| t.rank.get(n).copied().flatten())
            .unwrap_or(1);
        (rank, t.leaves.max(1))
    }

    /// The lowest queue priority among fair-share groups.
    pub(super) fn lowest_queue(&self) -> i64 {
        self.policy
            .group_ids()
            .filter(|&g| is_fair(self.policy, g))
            .map(|g| self.queues.get(g.0))
            .min()
            .unwrap_or(0)
    }
}

/// The Fair Tree of every group's usage.
fn tree_of(policy: &PolicySettings, usage: &impl UsageLookup) -> FairTree {
    let mut leaf = vec![0u128; policy.tree.nodes.len()];
    for g in policy.group_ids() {
        if let Some(&node) = policy.group(g).ancestors.last() {
            if let Some(v) = leaf.get_mut(node) {
                *v = usage.value(g);
            }
        }
    }
    fair_tree(&policy.tree, &leaf)
}

/// What decisions read of a [`UsageBook`] that costs O(groups) — the fair-share total `U`
/// (under the half-life model; the other models keep it in O(1) or O(depth)) and the Fair Tree
/// — kept between decisions and recomputed only when the book changed (its generation: a
/// charge, a load, a rebase, a roll) or, under a model where usage moves with time alone, the
/// instant did. So the decisions of one instant with no charge between them share one
/// computation, and a cumulative book's `U` is never summed. The values are the ones a fresh
/// [`ShareSnapshot`] computes (a property test checks), so decisions stay exact.
#[derive(Debug, Default)]
pub struct ShareSnapshotCache {
    /// (book generation, instant or 0 when usage does not move with time) of what is kept.
    key: Option<(u64, i64)>,
    fair_total: u128,
    tree: OnceCell<FairTree>,
}

impl ShareSnapshotCache {
    /// The standing at `now_ms`, from what is kept when it is still current.
    pub fn snapshot<'a>(
        &'a mut self,
        policy: &'a PolicySettings,
        book: &'a UsageBook,
        queues: &'a Queues,
        now_ms: i64,
    ) -> ShareSnapshot<'a, BookAt<'a>> {
        let instant = if book.moves_with_time() { now_ms } else { 0 };
        let key = (book.generation(), instant);
        if self.key != Some(key) {
            self.key = Some(key);
            self.fair_total = book.at(now_ms).fair_total();
            self.tree = OnceCell::new();
        }
        ShareSnapshot {
            policy,
            usage: book.at_with_total(now_ms, self.fair_total),
            queues,
            tree: OnceCell::new(),
            kept: Some(&self.tree),
        }
    }
}

pub fn is_fair(policy: &PolicySettings, g: GroupId) -> bool {
    matches!(policy.group(g).kind, GroupKind::FairShare { .. })
}

/// Where a request goes, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    pub class: Class,
    pub mss_priority: i64,
    /// In held mode, higher is released first.
    pub score: f64,
    pub starved: bool,
    pub explain: Explain,
}

/// Why a request has its place: what `GET /v1/requests/{id}` shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Explain {
    pub policy: &'static str,
    pub release_mode: &'static str,
    /// When this placement was computed (ms since the epoch).
    pub at_ms: i64,
    pub mss_priority: i64,
    pub waited_ms: i64,
    /// Present when the starvation bound decided.
    pub starved: Option<Starved>,
    pub detail: Detail,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Starved {
    pub max_wait_ms: i64,
    pub starved_priority: i64,
}

/// The policy's own figures.
#[derive(Debug, Clone, PartialEq)]
pub enum Detail {
    /// A priority class: always ahead of fair share.
    PriorityClass { class_priority: i64 },
    /// The SAM comparison `(usage + benefit) / (total + benefit) < target`, in weighted units.
    Sam {
        group_usage: String,
        fair_total: String,
        request_benefit: String,
        share_with_request: f64,
        target: f64,
        front: bool,
    },
    /// The group's Fair Tree rank onto the band.
    FairTree {
        rank: u32,
        leaves: u32,
        fairshare: f64,
        band: [i64; 2],
    },
    /// Seed 002's factors (each in [0, 1]), their weighted values and the sum.
    Multifactor {
        factors: Factors,
        weighted: Factors,
        score: f64,
        total_weight: f64,
        band: [i64; 2],
    },
    /// FBSNG: the group's queue priority, the lowest queue's, and the request's section
    /// priority.
    Fbsng {
        queue_priority: i64,
        lowest_queue_priority: i64,
        section_priority: u32,
        band: [i64; 2],
    },
}

/// Where request `c` goes now.
pub fn place<U: UsageLookup>(
    order: &OrderSettings,
    standing: &ShareSnapshot<'_, U>,
    c: &Candidate,
    now_ms: i64,
) -> Placement {
    let policy = standing.policy;
    let waited_ms = (now_ms - c.created_ms).max(0);
    let explain = |mss_priority, detail| Explain {
        policy: order.algorithm.name(),
        release_mode: order.release.mode.name(),
        at_ms: now_ms,
        mss_priority,
        waited_ms,
        starved: None,
        detail,
    };
    if let GroupKind::Priority { mss_priority, .. } = policy.group(c.group).kind {
        return Placement {
            class: Class::Priority,
            mss_priority,
            score: f64::INFINITY,
            starved: false,
            explain: explain(
                mss_priority,
                Detail::PriorityClass {
                    class_priority: mss_priority,
                },
            ),
        };
    }
    let sam = super::sam::decide(policy, &standing.usage, c.group, c.benefit);
    let band = [order.band_low, order.band_high];
    let arm = match &order.algorithm {
        Algorithm::Sam => sam_placement(standing, c, sam.mss_priority, sam.class == Class::Front),
        Algorithm::FairTree => fair_tree_placement(band, standing.rank(c.group)),
        Algorithm::Multifactor(m) => m.place(band, standing.rank(c.group), c, waited_ms),
        Algorithm::Fbsng => super::fbsng::place(
            band,
            standing.queues.get(c.group.0),
            standing.lowest_queue(),
            c.passed,
        ),
    };
    let FairPlacement {
        mss_priority,
        score,
        detail,
    } = arm;
    let starved = order.max_wait_ms.is_some_and(|m| waited_ms >= m);
    let mut e = explain(mss_priority, detail);
    let mss_priority = if starved {
        e.mss_priority = order.starved_priority;
        e.starved = order.max_wait_ms.map(|m| Starved {
            max_wait_ms: m,
            starved_priority: order.starved_priority,
        });
        order.starved_priority
    } else {
        mss_priority
    };
    Placement {
        class: sam.class,
        mss_priority,
        score,
        starved,
        explain: e,
    }
}

/// [`place`]'s MSS priority of `c` alone, the same number without the explain and the class
/// (what pass-through's re-prioritisation needs of every pending request): multifactor computes
/// only its score; the group-level policies place as [`place`] does.
///
/// With it, the time until which it holds while `standing`'s Fair Tree ranks stay as they are:
/// the priority is the same at every `now` in `now_ms..until` (`None`: at every later `now`).
/// Multifactor's is worked out from its wait factor ([`Multifactor::mss_priority_until`]) and
/// the starvation bound; a group-level policy's may change at the next millisecond.
pub fn mss_priority_until<U: UsageLookup>(
    order: &OrderSettings,
    standing: &ShareSnapshot<'_, U>,
    c: &Candidate,
    now_ms: i64,
) -> (i64, Option<i64>) {
    if let GroupKind::Priority { mss_priority, .. } = standing.policy.group(c.group).kind {
        return (mss_priority, None);
    }
    let waited_ms = (now_ms - c.created_ms).max(0);
    if order.max_wait_ms.is_some_and(|m| waited_ms >= m) {
        return (order.starved_priority, None);
    }
    let Algorithm::Multifactor(m) = &order.algorithm else {
        let p = place(order, standing, c, now_ms).mss_priority;
        return (p, Some(now_ms.saturating_add(1)));
    };
    let (p, wait) = m.mss_priority_until(standing.rank(c.group), c, waited_ms);
    let starves = order.max_wait_ms.map(|m| c.created_ms.saturating_add(m));
    let until = wait.map(|w| c.created_ms.saturating_add(w));
    (p, until.into_iter().chain(starves).min())
}

/// What one policy says of a fair-share request: its MSS priority, its score in the broker's
/// queue (held mode: higher is released first) and its figures for explain.
pub(super) struct FairPlacement {
    pub mss_priority: i64,
    pub score: f64,
    pub detail: Detail,
}

/// SAM: front or back as [`super::sam::decide`] said, with the fractions it compared.
fn sam_placement<U: UsageLookup>(
    standing: &ShareSnapshot<'_, U>,
    c: &Candidate,
    mss_priority: i64,
    front: bool,
) -> FairPlacement {
    let usage = &standing.usage;
    let add = u128::from(c.benefit).saturating_mul(usage.unit());
    let own = crate::shares::sam::standing_value(standing.policy, usage, c.group);
    let mine = own.saturating_add(add);
    let all = usage.fair_total().saturating_add(add);
    let target = match standing.policy.group(c.group).kind {
        GroupKind::FairShare { share } => share.num() as f64 / share.den() as f64,
        GroupKind::Priority { .. } => 0.0,
    };
    FairPlacement {
        mss_priority,
        score: f64::from(u8::from(front)),
        detail: Detail::Sam {
            group_usage: own.to_string(),
            fair_total: usage.fair_total().to_string(),
            request_benefit: add.to_string(),
            share_with_request: if all == 0 {
                0.0
            } else {
                mine as f64 / all as f64
            },
            target,
            front,
        },
    }
}

/// Fair Tree: rank `r` of `N` leaves onto the band,
/// `band_low + round((r - 1) * (band_high - band_low) / (N - 1))`.
fn fair_tree_placement(band: [i64; 2], (rank, leaves): (u32, u32)) -> FairPlacement {
    let [low, high] = band;
    let step = i128::from(rank.saturating_sub(1)) * i128::from(high - low);
    let denom = i128::from(leaves.saturating_sub(1).max(1));
    let p = low + ((2 * step + denom) / (2 * denom)) as i64;
    FairPlacement {
        mss_priority: p.min(high),
        score: f64::from(rank) / f64::from(leaves),
        detail: Detail::FairTree {
            rank,
            leaves,
            fairshare: f64::from(rank) / f64::from(leaves),
            band,
        },
    }
}

#[cfg(test)]
mod tests;

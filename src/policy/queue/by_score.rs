//! Multifactor's per-request order over a held queue without a scan: the pick's candidates per
//! group in O(log n).
//!
//! A waiting request's multifactor score at `now` (seed 002, [`crate::policy::multifactor`]) is
//! `fair_share_weight * fs(group) + own(request) + wait_weight * min(waited / max_wait, 1)`,
//! `own` the weighted QoS, queue, size and user factors, which do not change while it waits.
//! So within one group, at one instant, the requests that have not yet waited `max_wait` rank
//! by `own - wait_weight * (created - origin) / max_wait` (the rest of the score is the same for
//! all of them; `origin`, an instant fixed when the orders are built, keeps the key small), and
//! those that have rank by `own`. Each group keeps both orders (and the first by
//! creation, to move requests from one to the other as they age); a pick evaluates, per group,
//! only the entries of each order whose key is within a hair of its best, with the same
//! `place` and tie rule as a scan: floating rounding can make the key order and the score
//! order disagree only between keys that close (the hair is relative to the key and to the
//! total weight, which bounds a score). Entries with identical inputs have identical scores,
//! so of those only the smallest id is evaluated (`created` is no input of an old request's
//! score). The orders are rebuilt when the clock goes back past the last pick (a request moved
//! to the old order may be young again). A request created after `now` (a clock stepped back)
//! ranks as if it had waited less than nothing, where `place` scores it as not having waited at
//! all, higher: those are always candidates too (found from the end of the creation order, so
//! none costs nothing). Any request its key ranks below one of them scores below it too.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;

use crate::domain::order::Multifactor;
use crate::domain::GroupId;
use crate::policy::order::Candidate;

/// An `f64` ordered by `total_cmp`.
#[derive(Debug, Clone, Copy)]
struct Key(f64);

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.0.total_cmp(&other.0) == Ordering::Equal
    }
}
impl Eq for Key {}
impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// What a request's score is computed from besides its group and the instant; equal inputs,
/// equal scores.
type Inputs = (i64, u8, u64, u64, u64);

/// An entry of an order: best key first, then identical inputs together, smallest id first.
type Entry = (Reverse<Key>, Inputs, i64);

fn inputs(c: &Candidate) -> Inputs {
    (
        c.created_ms,
        c.qos as u8,
        c.queue.to_bits(),
        c.size_bytes,
        c.user.to_bits(),
    )
}

/// One group's orders within one library.
#[derive(Debug, Clone, Default)]
struct Orders {
    /// Waited less than `max_wait` when last looked at: by `own - w * created / max_wait`.
    young: BTreeSet<Entry>,
    /// Waited `max_wait` or more: by `own`.
    old: BTreeSet<Entry>,
    /// The young ones by creation, to age them.
    by_created: BTreeSet<(i64, i64)>,
}

/// The orders of every group of every library, for one set of weights.
#[derive(Debug, Clone)]
pub(super) struct ByScore {
    weights: Multifactor,
    groups: HashMap<(u32, GroupId), Orders>,
    /// The instant young keys count creation from.
    origin: i64,
    /// The latest instant the orders were aged to.
    aged_to: i64,
    /// What the hair is relative to besides the key: the sum of the weights.
    scale: f64,
}

impl ByScore {
    pub(super) fn new(weights: Multifactor, origin: i64) -> ByScore {
        let scale = weights.total_weight().abs();
        ByScore {
            weights,
            groups: HashMap::new(),
            origin,
            aged_to: i64::MIN,
            scale,
        }
    }

    /// Whether these orders can answer for `weights` at `now_ms` (else build them again).
    pub(super) fn fits(&self, weights: &Multifactor, now_ms: i64) -> bool {
        &self.weights == weights && now_ms >= self.aged_to
    }

    /// The weighted factors of `c` that do not change while it waits.
    fn own(&self, c: &Candidate) -> f64 {
        let f = self.weights.factors(&crate::policy::multifactor::Inputs {
            waited_ms: 0,
            fairshare: 0.0,
            qos: c.qos,
            queue: c.queue,
            size_bytes: c.size_bytes,
            user: c.user,
        });
        self.weights.score(&f)
    }

    fn young_key(&self, c: &Candidate) -> f64 {
        let per_ms = self.weights.wait_weight / self.weights.max_wait_ms.max(1) as f64;
        self.own(c) - per_ms * c.created_ms.saturating_sub(self.origin) as f64
    }

    pub(super) fn insert(&mut self, lib: u32, c: &Candidate) {
        let key = Key(self.young_key(c));
        let orders = self.groups.entry((lib, c.group)).or_default();
        orders.young.insert((Reverse(key), inputs(c), c.id));
        orders.by_created.insert((c.created_ms, c.id));
    }

    pub(super) fn remove(&mut self, lib: u32, c: &Candidate) {
        let (young, old) = (Key(self.young_key(c)), Key(self.own(c)));
        let Some(orders) = self.groups.get_mut(&(lib, c.group)) else {
            return;
        };
        if orders.by_created.remove(&(c.created_ms, c.id)) {
            orders.young.remove(&(Reverse(young), inputs(c), c.id));
        } else {
            orders.old.remove(&(Reverse(old), old_inputs(c), c.id));
        }
        if orders.by_created.is_empty() && orders.old.is_empty() {
            self.groups.remove(&(lib, c.group));
        }
    }

    /// Move the requests of `lib` that have waited `max_wait` by `now_ms` to the old order.
    pub(super) fn age(
        &mut self,
        lib: u32,
        now_ms: i64,
        get: impl Fn(GroupId, i64) -> Option<Candidate>,
    ) {
        self.aged_to = self.aged_to.max(now_ms);
        let bound = now_ms.saturating_sub(self.weights.max_wait_ms);
        let keys: Vec<(u32, GroupId)> = (self.groups.keys())
            .filter(|k| k.0 == lib)
            .copied()
            .collect();
        for k in keys {
            while let Some(orders) = self.groups.get_mut(&k) {
                let Some(&(created, id)) = orders.by_created.first() else {
                    break;
                };
                if created > bound {
                    break;
                }
                orders.by_created.pop_first();
                let Some(c) = get(k.1, id) else {
                    debug_assert!(false, "request {id} is in the orders, not in the queue");
                    continue;
                };
                let (young, old) = (Key(self.young_key(&c)), Key(self.own(&c)));
                if let Some(orders) = self.groups.get_mut(&k) {
                    orders.young.remove(&(Reverse(young), inputs(&c), id));
                    orders.old.insert((Reverse(old), old_inputs(&c), id));
                }
            }
        }
    }

    /// The ids of group `g` of `lib` that may have its best score at `now_ms`: per order,
    /// every distinct inputs' first entry whose key is within a hair of the order's best, and
    /// every request created after `now_ms`.
    pub(super) fn candidates(&self, lib: u32, g: GroupId, now_ms: i64) -> Vec<i64> {
        let mut out = Vec::new();
        if let Some(orders) = self.groups.get(&(lib, g)) {
            near_best(&orders.young, self.scale, &mut out);
            near_best(&orders.old, self.scale, &mut out);
            let future = orders.by_created.iter().rev();
            out.extend(future.take_while(|(c, _)| *c > now_ms).map(|&(_, id)| id));
        }
        out
    }
}

/// An old request's inputs: its score no longer depends on when it was created.
fn old_inputs(c: &Candidate) -> Inputs {
    let (_, qos, queue, size, user) = inputs(c);
    (0, qos, queue, size, user)
}

/// The first entry of each run of identical inputs among those within a hair of the best key.
fn near_best(order: &BTreeSet<Entry>, scale: f64, out: &mut Vec<i64>) {
    let Some(&(Reverse(Key(best)), _, _)) = order.first() else {
        return;
    };
    // Far above the rounding of a key or of a score (at most the total weight), far below a
    // real difference.
    let hair = (best.abs() + scale).max(1.0) * 1e-9;
    let mut at = order.first().copied();
    while let Some((Reverse(Key(k)), inputs, id)) = at {
        if k < best - hair {
            break;
        }
        out.push(id);
        let past = (Reverse(Key(k)), inputs, i64::MAX);
        at = order
            .range((Bound::Excluded(past), Bound::Unbounded))
            .next()
            .copied();
    }
}

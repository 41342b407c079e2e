//! Pass-through mode's fair-share requests pending at the library, per group by their current
//! MSS priority, so a re-prioritisation touches only the requests whose priority changes (what
//! the engine's full scan would change, without the scan): for the group-level policies (SAM,
//! Fair Tree, FBSNG) a pending request's placement depends only on its group, except for the
//! starvation bound, which depends on its arrival ([`AtLibrary::starve`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use mss_adapters::sim::library::Micros;

use crate::domain::GroupId;

#[derive(Debug, Clone, Default)]
pub(super) struct AtLibrary {
    /// Per group (`GroupId.0`): priority -> ids.
    groups: Vec<BTreeMap<i64, BTreeSet<i64>>>,
    /// id -> (group, priority), for the requests in `groups`.
    index: HashMap<i64, (GroupId, i64)>,
    /// (arrival, id) in arrival order: who may starve next.
    arrivals: VecDeque<(Micros, i64)>,
}

impl AtLibrary {
    pub fn new(groups: usize) -> AtLibrary {
        AtLibrary {
            groups: vec![BTreeMap::new(); groups],
            ..AtLibrary::default()
        }
    }

    /// A request sent to the library at `priority` (requests are added in arrival order).
    pub fn add(&mut self, id: i64, g: GroupId, priority: i64, arrived: Micros) {
        if let Some(buckets) = self.groups.get_mut(g.0) {
            buckets.entry(priority).or_default().insert(id);
            self.index.insert(id, (g, priority));
            self.arrivals.push_back((arrived, id));
        }
    }

    /// A request started (or ended): no longer re-prioritised.
    pub fn remove(&mut self, id: i64) {
        let Some((g, p)) = self.index.remove(&id) else {
            return;
        };
        if let Some(buckets) = self.groups.get_mut(g.0) {
            if let Some(ids) = buckets.get_mut(&p) {
                ids.remove(&id);
                if ids.is_empty() {
                    buckets.remove(&p);
                }
            }
        }
    }

    /// Groups with requests pending.
    pub fn groups(&self) -> impl Iterator<Item = GroupId> + '_ {
        self.groups
            .iter()
            .enumerate()
            .filter(|(_, b)| !b.is_empty())
            .map(|(g, _)| GroupId(g))
    }

    /// Group `g`'s requests now at `priority`: those that were at another, moved (returned).
    pub fn regroup(&mut self, g: GroupId, priority: i64) -> Vec<i64> {
        let Some(buckets) = self.groups.get_mut(g.0) else {
            return Vec::new();
        };
        let others: Vec<i64> = buckets.keys().copied().filter(|&p| p != priority).collect();
        let mut moved = Vec::new();
        for p in others {
            if let Some(ids) = buckets.remove(&p) {
                moved.extend(ids);
            }
        }
        let bucket = buckets.entry(priority).or_default();
        for &id in &moved {
            bucket.insert(id);
            self.index.insert(id, (g, priority));
        }
        if bucket.is_empty() {
            buckets.remove(&priority);
        }
        moved
    }

    /// Requests that arrived at or before `bound` and are still pending: they have starved;
    /// they leave the group buckets (a starved request stays starved) and are returned with
    /// their current priority.
    pub fn starve(&mut self, bound: Micros) -> Vec<(i64, i64)> {
        let mut out = Vec::new();
        while let Some(&(arrived, id)) = self.arrivals.front() {
            if arrived > bound {
                break;
            }
            self.arrivals.pop_front();
            if let Some(&(_, p)) = self.index.get(&id) {
                self.remove(id);
                out.push((id, p));
            }
        }
        out
    }
}

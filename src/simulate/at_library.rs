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
    /// id -> group, for the requests in `groups` (a group has few priorities: its bucket is
    /// found by looking in each).
    index: HashMap<i64, GroupId>,
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
            self.index.insert(id, g);
            self.arrivals.push_back((arrived, id));
        }
    }

    /// A request started (or ended): no longer re-prioritised. Its priority, if it was here.
    pub fn remove(&mut self, id: i64) -> Option<i64> {
        let g = self.index.remove(&id)?;
        let buckets = self.groups.get_mut(g.0)?;
        let p = buckets
            .iter_mut()
            .find_map(|(&p, ids)| ids.remove(&id).then_some(p))?;
        if buckets.get(&p).is_some_and(BTreeSet::is_empty) {
            buckets.remove(&p);
        }
        Some(p)
    }

    /// Groups with requests pending.
    pub fn groups(&self) -> impl Iterator<Item = GroupId> + '_ {
        self.groups
            .iter()
            .enumerate()
            .filter(|(_, b)| !b.is_empty())
            .map(|(g, _)| GroupId(g))
    }

    /// Group `g`'s requests now at `priority`: those that were at another are moved and
    /// appended to `moved` as (id, priority).
    pub fn regroup(&mut self, g: GroupId, priority: i64, moved: &mut Vec<(i64, i64)>) {
        let Some(buckets) = self.groups.get_mut(g.0) else {
            return;
        };
        let others: Vec<i64> = buckets.keys().copied().filter(|&p| p != priority).collect();
        if others.is_empty() {
            return;
        }
        let mut target = buckets.remove(&priority).unwrap_or_default();
        for p in others {
            if let Some(mut ids) = buckets.remove(&p) {
                moved.extend(ids.iter().map(|&id| (id, priority)));
                if ids.len() > target.len() {
                    std::mem::swap(&mut ids, &mut target);
                }
                target.append(&mut ids);
            }
        }
        buckets.insert(priority, target);
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
            if let Some(p) = self.remove(id) {
                out.push((id, p));
            }
        }
        out
    }
}

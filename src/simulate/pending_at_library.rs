//! The fair-share requests pending at the library (pass-through and held), per group by their
//! current MSS priority, so a re-prioritisation touches only the requests whose priority
//! changes (what the engine's full scan would change, without the scan): for the group-level
//! policies (SAM, Fair Tree, FBSNG) a pending request's placement depends only on its group,
//! except for the starvation bound, which depends on its arrival ([`PendingAtLibrary::starve`]). A
//! policy that places each request itself (multifactor, [`PendingAtLibrary::per_request`]) keeps them
//! by id, each with the time its priority holds until ([`placed`]), so a pass places only those
//! that may have changed.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use itertools::Itertools;

use mss_adapters::sim::library::Micros;

use crate::domain::GroupId;
use crate::policy::order::Algorithm;
use crate::policy::transition::{pass_changes, Proposed};

mod placed;
use placed::Placed;

/// The fair-share requests pending at the library, kept so a re-prioritisation pass finds the
/// ones whose priority changes without a scan (see the module's doc).
#[derive(Debug, Clone, Default)]
pub(super) struct PendingAtLibrary {
    /// Per group (`GroupId.0`): priority -> ids.
    groups: Vec<BTreeMap<i64, BTreeSet<i64>>>,
    /// id -> group, for the requests in `groups` (a group has few priorities: its bucket is
    /// found by looking in each).
    index: HashMap<i64, GroupId>,
    /// (arrival, id) in arrival order: who may starve next. Requests come in arrival order in
    /// pass-through; a held request released after a later arrival goes to `late`.
    arrivals: VecDeque<(Micros, i64)>,
    late: BTreeSet<(Micros, i64)>,
    /// Starved requests whose starved priority is not sent yet: id -> their priority now.
    starved: BTreeMap<i64, i64>,
    /// A per-request policy's requests, instead of `groups`, `index` and `arrivals`.
    placed: Option<Placed>,
    /// Whether requests may starve (a starvation bound is set): without one, arrivals are not
    /// kept, so a long run's memory does not grow with them.
    starves: bool,
}

impl PendingAtLibrary {
    pub fn new(groups: usize) -> PendingAtLibrary {
        PendingAtLibrary {
            groups: vec![BTreeMap::new(); groups],
            starves: true,
            ..PendingAtLibrary::default()
        }
    }

    /// Keep arrivals for [`Self::starve`] only when `starves` (the policy has a starvation
    /// bound).
    pub fn starving(self, starves: bool) -> PendingAtLibrary {
        PendingAtLibrary { starves, ..self }
    }

    /// Per request for multifactor, whose factors are each request's; by group otherwise.
    pub fn for_algorithm(algorithm: &Algorithm, groups: usize) -> PendingAtLibrary {
        match algorithm {
            Algorithm::Multifactor(_) => PendingAtLibrary::per_request(groups),
            _ => PendingAtLibrary::new(groups),
        }
    }

    /// For a policy that places each request itself (multifactor): [`Self::placed_changes`]
    /// and [`Self::pending`] read the requests in id order; [`Self::changes`] and
    /// [`Self::starve`] see none.
    pub fn per_request(groups: usize) -> PendingAtLibrary {
        PendingAtLibrary {
            placed: Some(Placed::default()),
            ..PendingAtLibrary::new(groups)
        }
    }

    /// A request that arrived at `arrived` sent to the library at `priority` at `now`.
    pub fn add(&mut self, id: i64, g: GroupId, priority: i64, (arrived, now): (Micros, Micros)) {
        if let Some(placed) = &mut self.placed {
            return placed.add(id, g, priority, (now / 1000) as i64);
        }
        if let Some(buckets) = self.groups.get_mut(g.0) {
            buckets.entry(priority).or_default().insert(id);
            self.index.insert(id, g);
            if !self.starves {
                return;
            }
            if self
                .arrivals
                .back()
                .is_none_or(|&(last, _)| last <= arrived)
            {
                self.arrivals.push_back((arrived, id));
            } else {
                self.late.insert((arrived, id));
            }
        }
    }

    /// A request started (or ended): no longer re-prioritised. Its priority, if it was here.
    pub fn remove(&mut self, id: i64) -> Option<i64> {
        if let Some(placed) = &mut self.placed {
            return placed.remove(id);
        }
        if let Some(p) = self.starved.remove(&id) {
            return Some(p);
        }
        self.unbucket(id)
    }

    /// Take `id` out of its group's buckets: its priority, if it was there.
    fn unbucket(&mut self, id: i64) -> Option<i64> {
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

    /// A per-request library's requests and the priority last sent, (id, group, priority), in
    /// id order (none for a group-level one).
    #[cfg(test)]
    pub fn pending(&self) -> impl Iterator<Item = (i64, GroupId, i64)> + '_ {
        self.placed.iter().flat_map(Placed::pending)
    }

    /// Every request pending here and the priority last sent, (id, priority), in id order.
    #[cfg(test)]
    pub fn sent(&self) -> Vec<(i64, i64)> {
        if let Some(placed) = &self.placed {
            return placed.pending().map(|(id, _, p)| (id, p)).collect();
        }
        let buckets = self.groups.iter().flatten();
        let in_groups = buckets.flat_map(|(&p, ids)| ids.iter().map(move |&id| (id, p)));
        let starved = self.starved.iter().map(|(&id, &p)| (id, p));
        let mut all: Vec<(i64, i64)> = in_groups.chain(starved).collect();
        all.sort_unstable();
        all
    }

    /// The priority changes of one pass of a policy that places each request itself
    /// (multifactor) at `now_ms`, `marks` each group's Fair Tree rank: `place` gives a pending
    /// request's priority now and the time it holds until (`None`: leave it); those that
    /// differ from the one last sent are appended to `out`, at most `max`, the lowest ids first
    /// (as [`Self::changes`]), and recorded; the rest wait for the next pass. Only the requests
    /// whose priority may have changed are placed ([`Placed`]).
    pub fn placed_changes(
        &mut self,
        (now_ms, marks): (i64, &[u64]),
        place: impl FnMut(i64, GroupId) -> Option<(i64, Option<i64>)>,
        max: usize,
        out: &mut Vec<(i64, i64)>,
    ) {
        if let Some(placed) = &mut self.placed {
            placed.changes(now_ms, marks, place, max, out);
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

    /// Requests that arrived at or before `bound` and are still pending have starved: they
    /// leave the group buckets (a starved request stays starved) until their starved priority
    /// is sent ([`Self::changes`]).
    pub fn starve(&mut self, bound: Micros) {
        while let Some(&(arrived, id)) = self.arrivals.front() {
            if arrived > bound {
                break;
            }
            self.arrivals.pop_front();
            self.starved_one(id);
        }
        while self
            .late
            .first()
            .is_some_and(|&(arrived, _)| arrived <= bound)
        {
            if let Some((_, id)) = self.late.pop_first() {
                self.starved_one(id);
            }
        }
    }

    fn starved_one(&mut self, id: i64) {
        if let Some(p) = self.unbucket(id) {
            self.starved.insert(id, p);
        }
    }

    /// The priority changes one re-prioritisation pass sends, at most `max`, the lowest ids
    /// first (as the dispatcher reads the ledger: `ledger/live.rs` `reprioritise`, in id order,
    /// stopping at `max`): each starved request to `starved`, each group's request to its
    /// group's priority in `targets`. The changes appended to `out` are made here; the rest
    /// wait for the next pass.
    pub fn changes(
        &mut self,
        targets: &[(GroupId, i64)],
        starved: i64,
        max: usize,
        out: &mut Vec<(i64, i64)>,
    ) {
        self.starved.retain(|_, p| *p != starved);
        let waiting = self.starved.len() + self.pending_moves(targets);
        if waiting <= max {
            out.extend(self.starved.keys().map(|&id| (id, starved)));
            self.starved.clear();
            for &(g, p) in targets {
                self.regroup(g, p, out);
            }
            return;
        }
        // The starved and every bucket off its group's priority, merged into one id order (a
        // merge that stops where the pass does, not a sort of everything moving); the pass's
        // rule (`transition::pass_changes`) takes the lowest `max`.
        type Ids<'a> = Box<dyn Iterator<Item = Proposed<()>> + 'a>;
        let proposed = |id, sent, now| Proposed {
            id,
            sent,
            now,
            with: (),
        };
        let starved_ids: Ids<'_> =
            Box::new((self.starved.iter()).map(move |(&id, &sent)| proposed(id, sent, starved)));
        let moving = targets.iter().flat_map(|&(g, p)| {
            let buckets = self.groups.get(g.0).into_iter().flatten();
            let off = buckets.filter(move |(&q, _)| q != p);
            off.map(move |(&q, ids)| {
                Box::new(ids.iter().map(move |&id| proposed(id, q, p))) as Ids<'_>
            })
        });
        let merged = std::iter::once(starved_ids)
            .chain(moving)
            .kmerge_by(|a, b| a.id < b.id);
        let all: Vec<(i64, i64)> = pass_changes(merged, max).map(|c| (c.id, c.now)).collect();
        for &(id, p) in &all {
            if self.starved.remove(&id).is_none() {
                self.rebucket(id, p);
            }
        }
        out.extend(all);
    }

    /// How many of the groups' requests are not at their group's priority in `targets`.
    fn pending_moves(&self, targets: &[(GroupId, i64)]) -> usize {
        let off = |&(g, p): &(GroupId, i64)| -> usize {
            self.groups.get(g.0).map_or(0, |b| {
                b.iter()
                    .filter(|(&q, _)| q != p)
                    .map(|(_, ids)| ids.len())
                    .sum()
            })
        };
        targets.iter().map(off).sum()
    }

    /// Move request `id` to priority `p` within its group.
    fn rebucket(&mut self, id: i64, p: i64) {
        let Some(&g) = self.index.get(&id) else {
            return;
        };
        if self.unbucket(id).is_none() {
            return;
        }
        if let Some(buckets) = self.groups.get_mut(g.0) {
            buckets.entry(p).or_default().insert(id);
            self.index.insert(id, g);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::PendingAtLibrary;
    use crate::domain::GroupId;

    /// Group 0's ids 1, 3, 5, 7 and group 1's 2, 4, 6, 8, all at priority 10.
    fn library() -> PendingAtLibrary {
        fill(PendingAtLibrary::new(2))
    }

    fn fill(mut lib: PendingAtLibrary) -> PendingAtLibrary {
        for id in 1..=8 {
            lib.add(
                id,
                GroupId((id % 2 == 0) as usize),
                10,
                (id as u64 * 1_000, id as u64 * 1_000),
            );
        }
        lib
    }

    /// Held mode releases requests out of arrival order: each starves at its own arrival's
    /// bound, whichever order it came to the library in.
    #[test]
    fn requests_sent_out_of_arrival_order_starve_by_arrival() {
        let mut lib = PendingAtLibrary::new(1);
        for (id, arrived) in [(1, 5_000), (2, 1_000), (3, 9_000), (4, 3_000)] {
            lib.add(id, GroupId(0), 10, (arrived, 10_000));
        }
        let mut starved = |bound| {
            lib.starve(bound);
            let mut out = Vec::new();
            lib.changes(&[(GroupId(0), 10)], 99, 10, &mut out);
            out
        };
        assert_eq!(starved(500), []);
        assert_eq!(starved(3_000), [(2, 99), (4, 99)]);
        assert_eq!(starved(5_000), [(1, 99)]);
        assert_eq!(starved(20_000), [(3, 99)]);
    }

    #[test]
    fn a_pass_sends_every_change_when_they_fit() {
        let mut lib = library();
        let mut out = Vec::new();
        lib.changes(&[(GroupId(0), 20), (GroupId(1), 10)], 99, 4, &mut out);
        out.sort_unstable();
        assert_eq!(out, [(1, 20), (3, 20), (5, 20), (7, 20)]);
        out.clear();
        lib.changes(&[(GroupId(0), 20), (GroupId(1), 10)], 99, 4, &mut out);
        assert!(out.is_empty(), "sent twice: {out:?}");
    }

    /// Over the cap, the lowest ids across the groups' buckets, interleaved (a merge, not one
    /// group's ids after another's).
    #[test]
    fn a_capped_pass_merges_the_groups_ids() {
        let mut lib = library();
        let mut out = Vec::new();
        lib.changes(&[(GroupId(0), 20), (GroupId(1), 30)], 99, 3, &mut out);
        assert_eq!(out, [(1, 20), (2, 30), (3, 20)]);
    }

    /// Multifactor's pass: only the requests whose priority differs from the one last sent,
    /// at most `max`, the lowest ids first; the rest in the next pass; a request that started
    /// meanwhile is not sent, and one already sent its priority is not sent it again.
    #[test]
    fn a_placed_pass_sends_the_lowest_changed_ids_first_and_the_rest_later() {
        let mut lib = fill(PendingAtLibrary::per_request(2));
        // Odd ids (group 0) to 20, even ids to 10 (unchanged) but 2 and 8 to 30; each may
        // change again at any time (placed at every pass).
        let place = |id: i64, g: GroupId| {
            let p = match (g.0, id) {
                (0, _) => 20,
                (_, 2 | 8) => 30,
                _ => 10,
            };
            Some((p, Some(0)))
        };
        let marks = [0, 0];
        let mut out = Vec::new();
        lib.placed_changes((10, &marks), place, 3, &mut out);
        assert_eq!(out, [(1, 20), (2, 30), (3, 20)]);
        assert_eq!(lib.remove(7), Some(10), "7 was not sent its change");
        out.clear();
        lib.placed_changes((20, &marks), place, 3, &mut out);
        assert_eq!(out, [(5, 20), (8, 30)]);
        out.clear();
        lib.placed_changes((30, &marks), place, 3, &mut out);
        assert!(out.is_empty(), "sent twice: {out:?}");
        assert_eq!(lib.remove(5), Some(20), "5 is at the priority sent");
        let left: Vec<(i64, usize, i64)> = lib.pending().map(|(id, g, p)| (id, g.0, p)).collect();
        let want = [
            (1, 0, 20),
            (2, 1, 30),
            (3, 0, 20),
            (4, 1, 10),
            (6, 1, 10),
            (8, 1, 30),
        ];
        assert_eq!(left, want);
    }

    /// A pass places again only the requests whose priority may have changed: those due by
    /// now (every one at its first pass), the ones over the last pass's cap, and every one
    /// when a group's rank moved.
    #[test]
    fn a_placed_pass_places_only_the_requests_due_or_of_a_moved_rank() {
        let mut lib = fill(PendingAtLibrary::per_request(2));
        // Group 0's priority holds until 1,000 ms, then rises; group 1's never changes.
        let placed = std::cell::RefCell::new(Vec::new());
        let place = |now: i64| {
            let placed = &placed;
            move |id: i64, g: GroupId| {
                placed.borrow_mut().push(id);
                let late = now >= 1_000;
                Some(match g.0 {
                    0 if late => (11, None),
                    0 => (10, Some(1_000)),
                    _ => (10, None),
                })
            }
        };
        let mut pass = |now: i64, marks: [u64; 2], max: usize| {
            placed.borrow_mut().clear();
            let mut out = Vec::new();
            lib.placed_changes((now, &marks), place(now), max, &mut out);
            (std::mem::take(&mut *placed.borrow_mut()), out)
        };
        // Added at 1..8 ms: all placed at the first pass, none changed.
        assert_eq!(pass(100, [0, 0], 10), ((1..=8).collect(), vec![]));
        assert_eq!(pass(999, [0, 0], 10), (vec![], vec![]), "nothing was due");
        // Group 0 due at 1,000: its four placed, two sent under a cap of 2.
        assert_eq!(pass(1_000, [0, 0], 2), (vec![1, 3], vec![(1, 11), (3, 11)]));
        // The cap left 5 and 7 to the next pass.
        assert_eq!(pass(1_001, [0, 0], 2), (vec![5, 7], vec![(5, 11), (7, 11)]));
        assert_eq!(pass(5_000, [0, 0], 2), (vec![], vec![]));
        // Group 1's rank moved: every request placed again.
        assert_eq!(pass(5_001, [0, 1], 2), ((1..=8).collect(), vec![]));
    }

    /// At most `max` changes a pass, the lowest ids first, the starved among them; the rest go
    /// in the next pass, and a request that started meanwhile is not sent.
    #[test]
    fn a_pass_sends_the_lowest_ids_first_and_the_rest_later() {
        let mut lib = library();
        lib.starve(4_000); // ids 1 to 4 starve
        let targets = [(GroupId(0), 20), (GroupId(1), 30)];
        let mut out = Vec::new();
        lib.changes(&targets, 99, 3, &mut out);
        assert_eq!(out, [(1, 99), (2, 99), (3, 99)]);
        assert_eq!(lib.remove(6), Some(10));
        out.clear();
        lib.changes(&targets, 99, 3, &mut out);
        assert_eq!(out, [(4, 99), (5, 20), (7, 20)]);
        out.clear();
        lib.changes(&targets, 99, 3, &mut out);
        assert_eq!(out, [(8, 30)]);
        assert_eq!(
            lib.remove(5),
            Some(20),
            "5 was moved to its group's priority"
        );
    }
}

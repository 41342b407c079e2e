//! The requests pending at the library under a policy that places each request itself
//! (multifactor: its wait, size, QoS and user factors are the request's own), kept by id with
//! the priority last sent and the time before which that priority cannot change
//! (`order::mss_priority_until`). A re-prioritisation pass places again only the requests due
//! by then, or every request when a group's Fair Tree rank (its `mark`) moved; the others are
//! known to be unchanged. The pass sends what a pass over every request would: the lowest ids
//! whose priority changed, at most the cap.

use std::collections::{BTreeMap, BTreeSet};

use crate::domain::GroupId;
use crate::policy::transition::{pass_changes, Proposed};

/// A pending request: its group, the priority last sent, and the time (ms) from which its
/// priority may differ (`i64::MAX`: never).
#[derive(Debug, Clone, Copy)]
struct Entry {
    group: GroupId,
    priority: i64,
    due_ms: i64,
}

#[derive(Debug, Clone, Default)]
pub(super) struct Placed {
    /// id -> its entry, in id order.
    entries: BTreeMap<i64, Entry>,
    /// (due, id) for every entry whose priority may change.
    due: BTreeSet<(i64, i64)>,
    /// Each group's mark at the last pass.
    marks: Vec<u64>,
}

impl Placed {
    /// A request sent at `priority` at `now_ms`: placed again at the next pass.
    pub fn add(&mut self, id: i64, group: GroupId, priority: i64, now_ms: i64) {
        if let Some(old) = self.entries.insert(
            id,
            Entry {
                group,
                priority,
                due_ms: now_ms,
            },
        ) {
            self.due.remove(&(old.due_ms, id));
        }
        self.due.insert((now_ms, id));
    }

    /// A request started (or ended): its priority, if it was pending.
    pub fn remove(&mut self, id: i64) -> Option<i64> {
        let e = self.entries.remove(&id)?;
        self.due.remove(&(e.due_ms, id));
        Some(e.priority)
    }

    /// Every pending request and the priority last sent, (id, group, priority), in id order.
    #[cfg(test)]
    pub fn pending(&self) -> impl Iterator<Item = (i64, GroupId, i64)> + '_ {
        self.entries
            .iter()
            .map(|(&id, e)| (id, e.group, e.priority))
    }

    /// One pass at `now_ms`, each group's rank as `marks`: `place` gives a request's priority
    /// now and the time before which it holds (`None` for the priority: leave it); the changed
    /// ones are appended to `out`, at most `max`, the lowest ids first, and recorded; the rest
    /// are placed again at the next pass.
    pub fn changes(
        &mut self,
        now_ms: i64,
        marks: &[u64],
        mut place: impl FnMut(i64, GroupId) -> Option<(i64, Option<i64>)>,
        max: usize,
        out: &mut Vec<(i64, i64)>,
    ) {
        let ids = self.due_now(now_ms, marks);
        // Each request placed: (id, its next due time), recorded once the pass is decided.
        let mut placed: Vec<(i64, i64)> = Vec::with_capacity(ids.len());
        let entries = &self.entries;
        let proposed = ids.iter().filter_map(|&id| {
            let e = entries.get(&id)?;
            let Some((p, until)) = place(id, e.group) else {
                placed.push((id, now_ms));
                return None;
            };
            placed.push((id, until.unwrap_or(i64::MAX)));
            Some(Proposed {
                id,
                sent: e.priority,
                now: p,
                with: (),
            })
        });
        // The pass's rule decides which are sent (`transition::pass_changes`); it stops asking
        // past the cap, so what it did not reach is placed again at the next pass.
        let sent: Vec<(i64, i64)> = pass_changes(proposed, max).map(|p| (p.id, p.now)).collect();
        let reached = placed.last().map_or(0, |&(id, _)| id);
        for &(id, p) in &sent {
            if let Some(e) = self.entries.get_mut(&id) {
                e.priority = p;
            }
        }
        for (id, due) in placed {
            self.set_due(id, due);
        }
        for &rest in ids.iter().filter(|&&id| id > reached) {
            self.set_due(rest, now_ms);
        }
        out.extend(sent);
    }

    /// The ids a pass at `now_ms` places, in id order, taken out of `due`: every pending one
    /// when a group's mark moved since the last pass, else those due by `now_ms`.
    fn due_now(&mut self, now_ms: i64, marks: &[u64]) -> Vec<i64> {
        if self.marks != marks {
            self.marks = marks.to_vec();
            self.due.clear();
            return self.entries.keys().copied().collect();
        }
        let later = self.due.split_off(&(now_ms.saturating_add(1), i64::MIN));
        let now = std::mem::replace(&mut self.due, later);
        let mut ids: Vec<i64> = now.into_iter().map(|(_, id)| id).collect();
        ids.sort_unstable();
        ids
    }

    /// Record that `id` (taken out of `due`) is placed again from `due_ms`.
    fn set_due(&mut self, id: i64, due_ms: i64) {
        if let Some(e) = self.entries.get_mut(&id) {
            e.due_ms = due_ms;
            if due_ms != i64::MAX {
                self.due.insert((due_ms, id));
            }
        }
    }
}

//! The re-prioritisation of the requests pending at the library, as the dispatcher's periodic
//! `reprioritise` does in `serve`: the pass's decision is `policy::transition`'s (who is
//! re-prioritised: `reprioritised`, checked when a request is sent; its priority now:
//! `priority_now`; which changes a pass sends: `pass_changes`, at most `REPRIORITISE_BATCH`).
//! `pending_at_library::PendingAtLibrary` proposes only the requests whose priority may have
//! changed, without placing every pending one, which is the engine's speed, not a rule of its
//! own; a test here checks, pass by pass, that it sends what `transition::reprioritise_pass`
//! (the live side's) sends over every pending request.

use std::collections::HashMap;

use super::{Arrival, Info, Picker, Run};
use crate::domain::GroupId;
use crate::policy::multifactor::Qos;
use crate::policy::order::{Algorithm, Candidate, ShareSnapshot};
use crate::policy::transition::{priority_now, REPRIORITISE_BATCH};

impl Run<'_> {
    /// Recompute the priority of every fair-share request still pending at the library, and
    /// change those that differ (as the dispatcher's re-prioritisation does). Group-level
    /// policies: one placement per group, the starvation bound by arrival ([`PendingAtLibrary`]);
    /// multifactor (per-request factors): the pending requests whose priority may have
    /// changed since it was last placed (`pending_at_library/placed.rs`).
    pub(super) fn reprioritise(&mut self) {
        if self.by_volume() || self.picker != Picker::Policy {
            return;
        }
        #[cfg(test)]
        let whole_pass = CHECK_PASSES.get().then(|| self.whole_pass());
        self.reprioritise_pending();
        #[cfg(test)]
        if let Some(whole_pass) = whole_pass {
            assert_eq!(
                self.changes, whole_pass,
                "at {} µs the index's pass differs from transition::reprioritise_pass's",
                self.now
            );
            PASSES_CHECKED.set(PASSES_CHECKED.get() + 1);
        }
    }

    /// [`Self::reprioritise`] through the index.
    fn reprioritise_pending(&mut self) {
        if !matches!(self.policy.order.algorithm, Algorithm::Multifactor(_)) {
            return self.reprioritise_groups();
        }
        let order = &self.policy.order;
        let now_ms = self.now_ms();
        let standing = ShareSnapshot::new(self.policy, self.usage.at(now_ms), &self.queues);
        let mut changes = std::mem::take(&mut self.changes);
        changes.clear();
        let (info, load) = (&self.info, self.load);
        let place = |id: i64, group| {
            let c = waiting_candidate(info, load, id, group)?;
            Some(priority_now(order, &standing, c, now_ms))
        };
        // A group's priorities hold only while its Fair Tree rank does.
        let marks: Vec<u64> = (0..self.fair.len())
            .map(|g| {
                let (rank, leaves) = standing.rank(GroupId(g));
                u64::from(rank) << 32 | u64::from(leaves)
            })
            .collect();
        // The dispatcher's pass sends the lowest ids first, at most REPRIORITISE_BATCH.
        let at = (now_ms, marks.as_slice());
        self.pending
            .placed_changes(at, place, REPRIORITISE_BATCH, &mut changes);
        self.send_changes(changes);
    }

    /// Send `changes` (id, priority) to the library in one batch, in their order.
    fn send_changes(&mut self, changes: Vec<(i64, i64)>) {
        let mut events = std::mem::take(&mut self.events);
        let mut key = String::new();
        let mut batch = self.lib.priority_changes(self.now, &mut events);
        for &(id, p) in &changes {
            key.clear();
            // Writing into a String cannot fail.
            let _ = std::fmt::Write::write_fmt(&mut key, format_args!("{id}"));
            // The attempt at the library: a retry's is its own (`engine/retry.rs`).
            let attempt = self.info.get(&id).map_or(1, |i| i.attempt);
            batch.set(&key, attempt, p);
        }
        drop(batch);
        self.changes = changes;
        self.apply(&mut events);
        self.events = events;
    }

    fn reprioritise_groups(&mut self) {
        let order = &self.policy.order;
        let now_ms = self.now_ms();
        let mut changes = std::mem::take(&mut self.changes);
        changes.clear();
        if let Some(max_wait) = order.max_wait_ms {
            // As `place` counts it: starved when now_ms - created_ms >= max_wait_ms, with
            // created_ms the arrival floored to the millisecond, so every arrival up to the
            // last microsecond of millisecond now_ms - max_wait_ms.
            if let Some(ms) = now_ms.checked_sub(max_wait).filter(|&ms| ms >= 0) {
                let bound = (ms as u64).saturating_mul(1000).saturating_add(999);
                self.pending.starve(bound);
            }
        }
        let standing = ShareSnapshot::new(self.policy, self.usage.at(now_ms), &self.queues);
        let targets: Vec<(GroupId, i64)> = (self.pending.groups())
            .map(|g| {
                // The group's placement; the starvation bound is by arrival (`starve` above).
                let c = Candidate {
                    id: 0,
                    group: g,
                    library: String::new(),
                    created_ms: now_ms,
                    size_bytes: 0,
                    benefit: 0,
                    qos: Qos::Normal,
                    user: 1.0,
                    queue: 0.0,
                    slots: 1,
                    passed: 0,
                };
                (g, priority_now(order, &standing, c, now_ms).0)
            })
            .collect();
        let starved = order.starved_priority;
        self.pending
            .changes(&targets, starved, REPRIORITISE_BATCH, &mut changes);
        changes.sort_unstable();
        self.send_changes(changes);
    }
}

/// Request `id` of `group`, pending at the library, as the pass sees it (the figures the live
/// side reads from its row).
fn waiting_candidate(
    info: &HashMap<i64, Info>,
    load: &[Arrival],
    id: i64,
    group: GroupId,
) -> Option<Candidate> {
    let info = info.get(&id)?;
    let size_bytes = usize::try_from(id - 1)
        .ok()
        .and_then(|i| load.get(i))
        .map_or(0, |a| a.size_bytes);
    Some(Candidate {
        id,
        group,
        library: String::new(),
        created_ms: (info.arrived / 1000) as i64,
        size_bytes,
        benefit: info.charge,
        qos: info.qos,
        user: 1.0,
        queue: info.queue,
        slots: info.slots,
        passed: 0,
    })
}

#[cfg(test)]
thread_local! {
    /// A test's switch: every pass of this thread's runs checks its index against
    /// `transition::reprioritise_pass` (a whole pass, so off by default: it places every
    /// pending request).
    pub(in crate::simulate) static CHECK_PASSES: std::cell::Cell<bool> =
        const { std::cell::Cell::new(false) };
    /// How many passes were checked on this thread.
    pub(in crate::simulate) static PASSES_CHECKED: std::cell::Cell<u64> =
        const { std::cell::Cell::new(0) };
}

#[cfg(test)]
impl Run<'_> {
    /// The changes `transition::reprioritise_pass`, the live side's pass, sends now over every
    /// request pending at the library, (id, priority): what [`Self::reprioritise_pending`]'s
    /// index must send.
    fn whole_pass(&self) -> Vec<(i64, i64)> {
        use crate::policy::transition::{reprioritise_pass, Waiting};
        let now_ms = self.now_ms();
        let standing = ShareSnapshot::new(self.policy, self.usage.at(now_ms), &self.queues);
        let waiting = self.pending.sent().into_iter().filter_map(|(id, sent)| {
            let group = self.info.get(&id)?.group;
            let candidate = waiting_candidate(&self.info, self.load, id, group)?;
            Some(Waiting { candidate, sent })
        });
        let order = &self.policy.order;
        let pass = reprioritise_pass(order, &standing, now_ms, waiting, REPRIORITISE_BATCH);
        pass.into_iter().map(|p| (p.id, p.now)).collect()
    }
}

//! The drive reservation for the priority classes in virtual time (`policy::reserve`, as the
//! ledger writer applies it in `serve`): what the engine sees of data taking (arrived and not
//! started; last seen) goes to [`reservation`], whose answer caps the `held` mode's free slots
//! and the `volumes` mode's volumes in flight, and whose window end is a wakeup.

use mss_adapters::sim::library::Micros;

use super::{Info, Run};
use crate::policy::reserve::{reservation, PriorityDemand, Reservation};

impl Run<'_> {
    /// What the reservation holds back now (the simulated library is the default one, "").
    pub(super) fn reservation(&self) -> Reservation {
        let demand = PriorityDemand {
            waiting: self.waiting_priority,
            last_seen_ms: self.priority_seen.last_seen_ms,
        };
        reservation(
            &self.policy.order.release.reserve,
            "",
            demand,
            self.now_ms(),
        )
    }

    /// A request ended at the library: a priority one gives its slots back and is seen (as
    /// the ledger writer sees every move of a priority request).
    pub(super) fn priority_ended(&mut self, info: &Info) {
        if !self.fair[info.group.0] {
            self.priority_slots = self.priority_slots.saturating_sub(info.slots);
            let now_ms = self.now_ms();
            self.priority_seen.seen(now_ms);
        }
    }

    /// When the reservation's window lapses while fair-share work waits in the broker (then
    /// the release must look again without news), in virtual microseconds.
    pub(super) fn reserve_wakeup(&self) -> Option<Micros> {
        if self.queue.is_empty() && self.volumes.is_empty() {
            return None;
        }
        let until = self.reservation().until_ms?;
        Some((until.max(self.now_ms() + 1) as Micros) * 1000)
    }
}

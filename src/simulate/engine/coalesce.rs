//! Duplicate reads coalesce in virtual time by the writer's own rules
//! (`policy::transition`: `may_carry`, `may_ride`, `rider_charged_on_joining`, `riders_follow`, which
//! `ledger::writer::coalesce` calls; docs/coalescing.md): a read of a file another read is
//! transferring, or waits in the broker's queue to, rides on it. It is decided when it arrives,
//! charged to its own group when its carrier is (at once if the carrier is decided, else at the
//! carrier's release), takes no drive, and is done with the carrier's bytes when the carrier
//! is, its charge settled then as the carrier's is. Its wait ends when the carrier starts; it
//! is no start of its own, so it is never a priority inversion. What is kept here is the
//! engine's bookkeeping of carriers and riders, not a rule.

use mss_adapters::sim::library::Micros;

use super::{Arrival, Candidate, Info, Run, SentDecision};
use crate::domain::order::Coalesce;
use crate::domain::RequestState;
use crate::policy::order::place;
use crate::policy::transition::{
    may_carry, may_ride, rider_charged_on_joining, riders_follow, CarrierEnd, CarrierView,
    RidersFollow,
};

/// A request riding on another's transfer.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rider {
    pub(super) info: Info,
    pub(super) benefit: u64,
    /// Its decision's MSS priority (what it is sent at if it takes over a decided carrier).
    pub(super) priority: i64,
    /// Charged to its group (its carrier was decided).
    pub(super) charged: bool,
    /// Its wait has not ended (its carrier has not started).
    pub(super) waiting: bool,
}

/// A read carrying its file: its id, and whether it was decided (sent to the library) and
/// has started.
#[derive(Debug, Clone, Copy)]
pub(super) struct Carrier {
    id: i64,
    decided: bool,
    started: bool,
}

impl Run<'_> {
    /// A new arrival rides on a carrier of its file; returns whether it did.
    pub(super) fn ride(&mut self, c: &Candidate, a: &Arrival, mut info: Info) -> bool {
        let Some(key) = a.file.filter(|_| !a.write) else {
            return false;
        };
        let coalesce = self.policy.order.release.coalesce;
        if coalesce == Coalesce::Off {
            return false;
        }
        // The oldest carrier of the file it may ride on, as the writer's `Carriers` offers
        // them: one it may not ride on (not decided under "in_flight", or a fair-share one for
        // a priority-class read) leaves it a carrier of its own, for the reads after it.
        let found = (self.carriers.get(&key).into_iter().flatten())
            .find(|carrier| may_ride(coalesce, self.fair[c.group.0], self.view(carrier)))
            .copied();
        let Some(carrier) = found else {
            // Queued in the broker until sent (`carrier_sent`).
            self.offer_carrier(key, c.id, true);
            return false;
        };
        let now_ms = self.now_ms();
        let standing = self
            .snapshots
            .snapshot(self.policy, &self.usage, &self.queues, now_ms);
        let p = place(&self.policy.order, &standing, c, now_ms);
        self.out.decisions.push(SentDecision {
            arrival: c.id,
            group: c.group,
            class: Some(p.class),
            mss_priority: p.mss_priority,
        });
        let charged = rider_charged_on_joining(self.view(&carrier));
        if charged {
            self.usage.add(c.group, i128::from(c.benefit), now_ms);
            (info.charge, info.charged_ms) = (c.benefit, now_ms);
        }
        self.out.coalesced += 1;
        if carrier.started {
            self.rider_started(&info, self.now);
        }
        let rider = Rider {
            info,
            benefit: c.benefit,
            priority: p.mss_priority,
            charged,
            waiting: !carrier.started,
        };
        self.riders.entry(carrier.id).or_default().push(rider);
        true
    }

    /// What a rider needs to know of `carrier`.
    fn view(&self, carrier: &Carrier) -> CarrierView {
        let group = self.info.get(&carrier.id).map(|i| i.group);
        CarrierView {
            fair: group.is_some_and(|g| self.fair[g.0]),
            decided: carrier.decided,
        }
    }

    /// `id`, a read of file `key` queued in the broker (`queued`) or just sent, may carry it if
    /// the writer's rule says so: kept in id order, as the writer's `Carriers` keeps them.
    fn offer_carrier(&mut self, key: u64, id: i64, queued: bool) {
        if !may_carry(self.policy.order.release.coalesce, queued) {
            return;
        }
        let list = self.carriers.entry(key).or_default();
        if let Err(at) = list.binary_search_by_key(&id, |c| c.id) {
            let carrier = Carrier {
                id,
                decided: !queued,
                started: false,
            };
            list.insert(at, carrier);
        }
    }

    /// The carrier `id` of `file`, if it is one.
    fn carrier_mut(&mut self, id: i64, file: Option<u64>) -> Option<&mut Carrier> {
        let list = self.carriers.get_mut(&file?)?;
        list.iter_mut().find(|c| c.id == id)
    }

    /// Request `id` was decided and sent to the library: its riders are charged.
    pub(super) fn carrier_sent(&mut self, id: i64, file: Option<u64>) {
        match self.carrier_mut(id, file) {
            Some(c) => c.decided = true,
            None => {
                if let Some(key) = file {
                    self.offer_carrier(key, id, false);
                }
            }
        }
        let now_ms = self.now_ms();
        let Some(riders) = self.riders.get_mut(&id) else {
            return;
        };
        for r in riders.iter_mut().filter(|r| !r.charged) {
            self.usage.add(r.info.group, i128::from(r.benefit), now_ms);
            (r.info.charge, r.info.charged_ms) = (r.benefit, now_ms);
            r.charged = true;
        }
    }

    /// The file request `id` reads, if it is a read of a known file.
    pub(super) fn file_of(&self, id: i64) -> Option<u64> {
        let i = usize::try_from(id - 1).ok()?;
        self.load.get(i)?.file
    }

    /// Carrier `id` (of `file`) started at `at`: its riders' waits end.
    pub(super) fn carrier_started(&mut self, id: i64, file: Option<u64>, at: Micros) {
        if let Some(c) = self.carrier_mut(id, file) {
            c.started = true;
        }
        let Some(mut riders) = self.riders.remove(&id) else {
            return;
        };
        for r in riders.iter_mut().filter(|r| r.waiting) {
            self.rider_started(&r.info, at);
            r.waiting = false;
        }
        self.riders.insert(id, riders);
    }

    /// A rider's wait ended at `at`.
    fn rider_started(&mut self, info: &Info, at: Micros) {
        let g = info.group;
        let wait = at.saturating_sub(info.arrived);
        self.out.max_wait[g.0] = self.out.max_wait[g.0].max(wait);
        self.out.waits[g.0].push(wait);
        self.no_longer_waiting(g);
    }

    /// Carrier `id`'s (of `file`) attempt ended at `at` as `end`: its riders follow by the
    /// writer's own rule (`policy::transition::riders_follow`).
    pub(super) fn carrier_ended(
        &mut self,
        id: i64,
        file: Option<u64>,
        end: CarrierEnd,
        at: Micros,
    ) {
        match riders_follow(id, end) {
            // A read riding on it from now waits for its next start.
            RidersFollow::WaitOn => {
                if let Some(c) = self.carrier_mut(id, file) {
                    c.started = false;
                }
            }
            RidersFollow::Settle { state, bytes, .. } => {
                self.riders_settle(id, file, state, bytes, at);
            }
            // A cancelled carrier (a trace's `cancelled_t`, `engine/cancel.rs`): one of its
            // riders carries the file on, as a request of its own in `state`.
            RidersFollow::FirstTakesOver { state } => self.take_over(id, file, state),
        }
    }

    /// Carrier `id` (of `file`) carries it no more, and no other read of it takes its place.
    pub(super) fn forget_carrier(&mut self, id: i64, file: Option<u64>) {
        if let Some(k) = file {
            if let Some(list) = self.carriers.get_mut(&k) {
                list.retain(|c| c.id != id);
                if list.is_empty() {
                    self.carriers.remove(&k);
                }
            }
        }
    }

    /// A read of `file` (`queued` in the broker, or sent) carries it from now, if it may.
    pub(super) fn carry(&mut self, id: i64, file: Option<u64>, queued: bool) {
        if let Some(key) = file {
            self.offer_carrier(key, id, queued);
        }
    }

    /// Carrier `id` (of `file`) carries no more: its riders end in `state` at `at`, done with
    /// `bytes` or not (the simulator keeps no error texts).
    fn riders_settle(
        &mut self,
        id: i64,
        file: Option<u64>,
        state: RequestState,
        bytes: Option<u64>,
        at: Micros,
    ) {
        self.forget_carrier(id, file);
        let Some(riders) = self.riders.remove(&id) else {
            return;
        };
        for r in riders {
            let g = r.info.group;
            self.info.remove(&r.info.id);
            if r.waiting {
                self.no_longer_waiting(g);
            }
            self.settle_charge(&r.info, bytes, at);
            match (state, bytes) {
                (RequestState::Done, Some(bytes)) => self.done(g, bytes, at),
                _ => self.out.failed += 1,
            }
        }
    }
}

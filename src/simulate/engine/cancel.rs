//! A client's cancel (a trace's `cancelled_t`), replayed as `serve`'s writer carries it out
//! (`ledger/writer/settle.rs`, `cancel`; docs/coalescing.md): a read riding on another's
//! transfer ends at once, its charge (if any) refunded; a request queued in the broker's held
//! queue ends at once, uncharged; one at the library (the MSS) with riders waiting on it is not
//! cancelled there: when its transfer ends the riders take the result and it ends cancelled,
//! refunded (a failure with attempts left passes the transfer to a rider instead); one at the
//! library without riders is cancelled there if it has not started (the library's `Cancelled`
//! event settles it, refunded), else it is past cancelling and is done. A carrier that ends
//! cancelled is followed by its riders by the writer's own rules (`policy::transition`:
//! `riders_follow`, whose `FirstTakesOver` has the first of `take_over_order` carry the file
//! on).
//!
//! Not replayed (the cancel is dropped): a request waiting out a retry's backoff, or queued in
//! the `volumes` mode's volume queue or a baseline picker's queue.

use mss_adapters::sim::library::Micros;
use mss_adapters::EventKind;

use super::arrival::transfer;
use super::coalesce::Rider;
use super::{Candidate, Info, Picker, Run};
use crate::domain::RequestState;
use crate::policy::transition::{reprioritised, take_over_order, AfterFailure, CarrierEnd};

impl Run<'_> {
    /// When the next cancel is due, in virtual microseconds.
    pub(super) fn cancels_wakeup(&self) -> Option<Micros> {
        self.cancels.first().map(|&(at, _)| at)
    }

    /// Carry out every cancel due by now.
    pub(super) fn cancel_due(&mut self) {
        while let Some(&(at, id)) = self.cancels.first() {
            if at > self.now {
                return;
            }
            self.cancels.pop_first();
            self.cancel(id);
        }
    }

    fn cancel(&mut self, id: i64) {
        if self.cancel_rider(id) {
            return;
        }
        let Some(&info) = self.info.get(&id) else {
            return;
        };
        let file = self.file_of(id);
        if !info.started && self.queue.remove(id).is_some() {
            self.info.remove(&id);
            self.no_longer_waiting(info.group);
            self.out.cancelled += 1;
            let end = CarrierEnd::Cancelled { decided: false };
            return self.carrier_ended(id, file, end, self.now);
        }
        if self.riders.contains_key(&id) {
            // At the library with riders waiting: it carries on (`cancel_requested_event`).
            self.cancel_requested.insert(id);
            return;
        }
        if info.started {
            return;
        }
        self.cancel_at_library(id);
    }

    /// Ask the library to cancel `id`: its `Cancelled` event settles it (`Run::apply`); past
    /// cancelling there, the library says so and nothing happens.
    fn cancel_at_library(&mut self, id: i64) {
        let mut events = std::mem::take(&mut self.events);
        self.lib.cancel(&id.to_string(), self.now, &mut events);
        self.apply(&mut events);
        self.events = events;
    }

    /// An event (`kind`, at `at`) of carrier `info` of `file`, whose cancel was asked while
    /// riders waited on it, as the writer applies it (`ledger/writer/settle.rs`): done, its
    /// riders are done with its bytes; failed for good, they fail; failed with attempts left
    /// (or riderless by now), one of them takes the transfer over. The carrier ends cancelled,
    /// refunded. Whether the event was handled here (a start is not).
    pub(super) fn cancel_requested_event(
        &mut self,
        kind: &EventKind,
        at: Micros,
        info: Info,
        file: Option<u64>,
    ) -> bool {
        let riders = self.riders.contains_key(&info.id);
        let end = match kind {
            EventKind::Started => return false,
            EventKind::Done { bytes } if riders => CarrierEnd::Done(*bytes),
            EventKind::Done { .. } => {
                self.cancel_requested.remove(&info.id);
                return false;
            }
            EventKind::Failed { reason, retryable }
                if riders && self.retries.on_failure(&info, *retryable) == AfterFailure::Final =>
            {
                CarrierEnd::Failed(reason)
            }
            EventKind::Failed { .. } | EventKind::Cancelled => {
                CarrierEnd::Cancelled { decided: true }
            }
        };
        self.cancel_requested.remove(&info.id);
        self.settle_charge(&info, None, at);
        self.outstanding = self.outstanding.saturating_sub(info.slots);
        self.priority_ended(&info);
        self.info.remove(&info.id);
        self.volumes_ended(info.id);
        self.pending.remove(info.id);
        if !info.started {
            self.no_longer_waiting(info.group);
        }
        self.out.cancelled += 1;
        self.carrier_ended(info.id, file, end, at);
        true
    }

    /// Rider `id` leaves its carrier, cancelled; whether it was one.
    fn cancel_rider(&mut self, id: i64) -> bool {
        let found = (self.riders.iter())
            .find_map(|(&carrier, rs)| Some((carrier, rs.iter().position(|r| r.info.id == id)?)));
        let Some((carrier, at)) = found else {
            return false;
        };
        let Some(riders) = self.riders.get_mut(&carrier) else {
            return false;
        };
        let r = riders.remove(at);
        if riders.is_empty() {
            self.riders.remove(&carrier);
            // Its riders all gone, a carrier whose cancel was asked is cancelled at the
            // library after all.
            if self.cancel_requested.remove(&carrier) {
                self.cancel_at_library(carrier);
            }
        }
        self.info.remove(&id);
        if r.waiting {
            self.no_longer_waiting(r.info.group);
        }
        self.settle_charge(&r.info, None, self.now);
        self.out.cancelled += 1;
        true
    }

    /// Carrier `carrier` of `file` was cancelled (`riders_follow`'s `FirstTakesOver`): the first
    /// of its riders in `take_over_order` becomes a request of its own in `state` (`accepted`:
    /// sent to the library at its decision's priority, keeping its charge; `queued`: in the
    /// held queue, uncharged), and the others ride on it.
    pub(super) fn take_over(&mut self, carrier: i64, file: Option<u64>, state: RequestState) {
        self.forget_carrier(carrier, file);
        let Some(mut riders) = self.riders.remove(&carrier) else {
            return;
        };
        let fair = &self.fair;
        let order = take_over_order(riders.iter().map(|r| (r.info.id, !fair[r.info.group.0])));
        let Some(at) = (order.first()).and_then(|&id| riders.iter().position(|r| r.info.id == id))
        else {
            return;
        };
        let first = riders.remove(at);
        let id = first.info.id;
        // A rider whose wait ended (its carrier had started) started then, as `serve` keeps its
        // first start; a priority-class one waits again at the library, as a retry does.
        let mut info = first.info;
        info.started = !first.waiting;
        if info.started && !self.fair[info.group.0] {
            self.waiting_priority += 1;
        }
        self.info.insert(id, info);
        if !riders.is_empty() {
            self.riders.insert(id, riders);
        }
        let queued = state == RequestState::Queued;
        self.carry(id, file, queued);
        if queued {
            if let Some(c) = self.candidate_of(&first) {
                self.queue.push(c);
            }
        } else {
            self.send_taken_over(&first);
        }
    }

    /// A rider as the broker's queue sees it, once it is a request of its own.
    fn candidate_of(&self, r: &Rider) -> Option<Candidate> {
        let a = usize::try_from(r.info.id - 1)
            .ok()
            .and_then(|i| self.load.get(i))?;
        Some(Candidate {
            id: r.info.id,
            group: r.info.group,
            library: String::new(),
            created_ms: (r.info.arrived / 1000) as i64,
            size_bytes: a.size_bytes,
            benefit: r.benefit,
            qos: r.info.qos,
            user: 1.0,
            queue: r.info.queue,
            slots: r.info.slots,
            passed: 0,
        })
    }

    /// Send a rider that took over a decided carrier to the library at its decision's
    /// priority, its charge as it is.
    fn send_taken_over(&mut self, r: &Rider) {
        let (id, g) = (r.info.id, r.info.group);
        let Some(a) = usize::try_from(id - 1).ok().and_then(|i| self.load.get(i)) else {
            return;
        };
        let mut t = transfer(id, a, 1);
        t.priority = r.priority;
        self.outstanding += r.info.slots;
        if !self.fair[g.0] {
            self.priority_slots += r.info.slots;
        }
        if reprioritised(self.fair[g.0], self.by_volume()) && self.picker == Picker::Policy {
            (self.pending).add(id, g, r.priority, (r.info.arrived, self.now));
        }
        let mut events = std::mem::take(&mut self.events);
        self.lib.submit(t, self.now, &mut events);
        self.apply(&mut events);
        self.events = events;
    }
}

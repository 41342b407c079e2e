//! What the library's events do to the run: a transfer started (the group no longer waits, a
//! priority request seen), done (its bytes to the share windows, the share error's saturation
//! over all and over eligible demand) or failed (retried, or ended with its charge settled and
//! its riders told), each as the writer does it (`policy::transition`).

use mss_adapters::sim::library::{LibraryEvent, Micros};
use mss_adapters::EventKind;

use super::{Finished, Info, Run};
use crate::domain::GroupId;
use crate::policy::transition::{AfterFailure, CarrierEnd};

impl Run<'_> {
    pub(super) fn apply(&mut self, events: &mut Vec<LibraryEvent>) {
        for e in events.drain(..) {
            let Some(&info) = e.key.parse().ok().and_then(|id: i64| self.info.get(&id)) else {
                continue;
            };
            let g = info.group;
            let file = self.file_of(info.id);
            if self.cancel_requested.contains(&info.id)
                && self.cancel_requested_event(&e.kind, e.at, info, file)
            {
                continue;
            }
            let after_failure = match e.kind {
                EventKind::Failed { retryable, .. } => self.retries.on_failure(&info, retryable),
                _ => AfterFailure::Final,
            };
            match (e.kind, after_failure) {
                (EventKind::Started, _) => {
                    self.started(e.at, info);
                    self.carrier_started(info.id, file, e.at);
                }
                (EventKind::Done { bytes }, _) => {
                    self.settle_charge(&info, Some(bytes), e.at);
                    self.done(g, bytes, e.at);
                    self.outstanding = self.outstanding.saturating_sub(info.slots);
                    self.priority_ended(&info);
                    self.info.remove(&info.id);
                    self.volumes_ended(info.id);
                    self.carrier_ended(info.id, file, CarrierEnd::Done(bytes), e.at);
                }
                (EventKind::Failed { .. }, AfterFailure::Retry { attempt, after }) => {
                    self.retry_later(info, &e.key, e.at, (attempt, after));
                }
                (kind @ (EventKind::Failed { .. } | EventKind::Cancelled), _) => {
                    let end = match &kind {
                        EventKind::Failed { reason, .. } => CarrierEnd::Failed(reason),
                        _ => CarrierEnd::Cancelled { decided: true },
                    };
                    if matches!(end, CarrierEnd::Failed(_)) {
                        self.out.failed += 1;
                    } else {
                        // Cancelled before it started (`engine/cancel.rs`).
                        self.out.cancelled += 1;
                        self.pending.remove(info.id);
                        self.no_longer_waiting(g);
                    }
                    self.settle_charge(&info, None, e.at);
                    self.outstanding = self.outstanding.saturating_sub(info.slots);
                    self.priority_ended(&info);
                    self.info.remove(&info.id);
                    self.volumes_ended(info.id);
                    self.carrier_ended(info.id, file, end, e.at);
                }
            }
        }
    }

    pub(super) fn started(&mut self, at: Micros, info: Info) {
        let g = info.group;
        self.pending.remove(info.id);
        if info.started {
            // A retry: `serve` reports a request's first start; a priority-class retry waited
            // at the library since it was sent again (`engine/retry.rs`).
            if !self.fair[g.0] {
                self.waiting_priority = self.waiting_priority.saturating_sub(1);
            }
            return;
        }
        if let Some(i) = self.info.get_mut(&info.id) {
            i.started = true;
        }
        self.out.starts[g.0] += 1;
        if info.slots > 1 {
            self.out.bulk_starts[g.0] += 1;
        }
        self.out.start_order.push(g);
        self.out.start_times.push((at, g));
        let wait = at.saturating_sub(info.arrived);
        self.out.max_wait[g.0] = self.out.max_wait[g.0].max(wait);
        self.out.waits[g.0].push(wait);
        if self.fair[g.0] && self.waiting_priority > 0 {
            self.out.priority_inversions += 1;
        }
        self.no_longer_waiting(g);
        if !self.policy.order.held() && !self.policy.order.volumes() {
            self.fbsng_started(g);
        }
    }

    /// A request of `g` finished at `at` with `bytes` done.
    pub(super) fn done(&mut self, g: GroupId, bytes: u64, at: Micros) {
        self.out.bytes[g.0] += u128::from(bytes);
        self.out.files[g.0] += 1;
        self.out.makespan = self.out.makespan.max(at);
        if self.fair[g.0] {
            let eligible = self.saturated_eligible();
            self.out.finished.push(Finished {
                at,
                group: g,
                bytes,
                saturated: self.saturated(),
                eligible,
            });
        }
    }

    /// A request of `g` no longer waits (it started, or its carrier did).
    pub(super) fn no_longer_waiting(&mut self, g: GroupId) {
        if self.fair[g.0] {
            self.waiting[g.0] = self.waiting[g.0].saturating_sub(1);
            if self.needs_share[g.0] && self.waiting[g.0] == 0 {
                self.unsaturated += 1;
            }
        } else {
            self.waiting_priority = self.waiting_priority.saturating_sub(1);
            self.priority_seen.seen(self.now_ms());
        }
    }

    /// Every fair-share group with a share above 0 has a request waiting (and there is one).
    pub(super) fn saturated(&self) -> bool {
        self.unsaturated == 0 && self.needs_share.iter().any(|&s| s)
    }

    /// [`Self::saturated`], counting only what the policy could send: in the volumes mode a
    /// group whose waiting requests are all queued on volumes not yet eligible has none.
    pub(super) fn saturated_eligible(&mut self) -> bool {
        if !self.saturated() {
            return false;
        }
        if !self.by_volume() {
            return true;
        }
        let now_ms = self.now_ms();
        let s = &self.policy.order.release.volumes;
        let eligible = self.volumes.eligible_groups(s, now_ms);
        let queued = self.volumes.waiting_per_group();
        (self.needs_share.iter().enumerate())
            .filter(|(_, &needs)| needs)
            .all(|(g, _)| {
                let held = queued.get(&GroupId(g)).map_or(0, |&n| n as u64);
                self.waiting[g] > held || eligible.contains(&GroupId(g))
            })
    }
}

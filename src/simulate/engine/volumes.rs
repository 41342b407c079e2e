//! The `volumes` release mode in virtual time: fair-share requests wait in a
//! [`VolumeQueue`] (as the ledger writer keeps one in `serve`); whenever something changes the
//! queue cuts batches, each request is charged to its own group at release and the batch is
//! submitted to the library at once, in tape-position order, at the chosen group's placement
//! priority; every end at the library is reported back with `request_finished`.

use mss_adapters::sim::library::Micros;

use super::{Arrival, Picker, Run};
use crate::policy::order::{place, Candidate, ShareSnapshot};
use crate::policy::volumes::Batch;

impl Run<'_> {
    /// Whether this run keeps fair-share requests in the volume queue.
    pub(super) fn by_volume(&self) -> bool {
        self.policy.order.volumes() && self.picker == Picker::Policy
    }

    /// Queue an arriving fair-share request on its volume.
    pub(super) fn volumes_push(&mut self, c: Candidate, a: &Arrival) {
        let s = &self.policy.order.release.volumes;
        self.volumes.push(s, c, a.volume.as_deref(), a.position);
    }

    /// Release every batch the queue gives now.
    pub(super) fn volumes_release(&mut self) {
        let now_ms = self.now_ms();
        loop {
            let reserve = self.reservation();
            let batch = {
                let standing = ShareSnapshot::new(self.policy, self.usage.at(now_ms), &self.queues);
                (self.volumes).next_batch_reserving(
                    &self.policy.order,
                    &standing,
                    "",
                    now_ms,
                    reserve,
                )
            };
            let Some(batch) = batch else { return };
            self.volumes_send(&batch, now_ms);
        }
    }

    fn volumes_send(&mut self, batch: &Batch, now_ms: i64) {
        let s = &self.policy.order.release.volumes;
        self.volumes.batch_started(s, self.policy, batch, now_ms);
        let priority = {
            let lead = batch.requests.iter().find(|c| c.group == batch.group);
            let standing = ShareSnapshot::new(self.policy, self.usage.at(now_ms), &self.queues);
            lead.map(|c| {
                let p = place(&self.policy.order, &standing, c, now_ms);
                (p.mss_priority, Some(p.class))
            })
        };
        self.out.batches.push(BatchRecord {
            at: self.now,
            files: batch.requests.len(),
            bytes: batch.bytes,
        });
        self.fbsng_started(batch.group);
        for c in &batch.requests {
            let p = priority.unwrap_or((self.policy.order.band_low, None));
            self.release_one(c.clone(), p);
        }
    }

    /// A released request ended at the library.
    pub(super) fn volumes_ended(&mut self, id: i64) {
        if self.by_volume() {
            self.volumes
                .request_finished(self.policy, id, self.now_ms());
        }
    }

    /// When the queue next needs a look without news (a volume's quiet or age rule comes due,
    /// a sticky volume lapses), in virtual microseconds.
    pub(super) fn volumes_wakeup(&self) -> Option<Micros> {
        if !self.by_volume() {
            return None;
        }
        let now_ms = self.now_ms();
        let t = self.volumes.next_wakeup(now_ms)?;
        // The engine's milliseconds are its microseconds floored: the first microsecond of
        // millisecond t.
        Some((t.max(now_ms + 1) as Micros) * 1000)
    }
}

/// One batch released (what the report's batch figures come from).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchRecord {
    pub at: Micros,
    pub files: usize,
    pub bytes: u64,
}

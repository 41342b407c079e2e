//! The pending transfers of [`super::Enstore`], as Enstore's library manager queues them
//! (`manage_queue.py`): a queue per volume in tape-position order (C-SCAN from the head, or
//! CTA's recommended access order within [`RAO_WINDOW`] files), and one index of the volumes by
//! their best request, highest priority then earliest arrival. With [`Aging`], a volume's best
//! request gains `delta_pri` per period of its queue's age (from when it last became
//! non-empty); a tag is recomputed when its queue changes, and aged tags at most once per
//! `aging_quantum` (`SortedList.update`), only those whose gain stepped since, found in a
//! schedule of each queue's next step.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::BTreeMap;

use super::{end_of, position, Enstore};
use crate::protocol::{Direction, Transfer};
use crate::sim::library::tape::{Order, TapeDrive};
use crate::sim::library::{Aging, Job, Micros};

/// The key a transfer is queued under on its volume: where its file starts (bytes), a write
/// after every read (it goes to the end of data, wherever that is when it starts).
fn queue_key(t: &Transfer, tape: &TapeDrive) -> u64 {
    match t.direction {
        Direction::Write => u64::MAX,
        Direction::Read => position(t).offset(tape),
    }
}

/// At most this many queued files are weighed for the recommended access order (CTA's
/// default `RetrieveFetchBytesFiles` of 4000 files).
const RAO_WINDOW: usize = 4000;

/// The queue a transfer waits in: its volume, or one of its own when it has none.
fn volume_of(t: &Transfer) -> Cow<'_, str> {
    match &t.volume {
        Some(v) => Cow::Borrowed(v),
        None => Cow::Owned(format!("\u{0}file:{}", t.file)),
    }
}

/// (priority, higher first; arrival, earlier first): arrivals are unique, so slots are too.
pub(super) type Slot = (Reverse<i64>, u64);

/// The pending reads of one volume.
#[derive(Debug, Clone)]
pub(super) struct VolQueue {
    /// (position, arrival) -> (key, priority): the C-SCAN order.
    pub(super) by_pos: BTreeMap<(u64, u64), (String, i64)>,
    /// (priority, arrival) -> position: the volume's best request first.
    pub(super) by_pri: BTreeMap<Slot, u64>,
    /// When the queue last became non-empty (aging counts from here).
    pub(super) created: Micros,
    /// Distinguishes this queue from an earlier one of the same volume (for `steps`).
    pub(super) serial: u64,
    /// The volume's entry in the index, if any.
    pub(super) tag: Option<Slot>,
    /// A priority changed and the volume is in `Enstore::touched`, to be re-indexed.
    pub(super) touched: bool,
}

impl Enstore {
    /// Queue a pending job that arrived at `at`.
    pub(in crate::sim::library) fn push(&mut self, job: &Job, aging: Option<Aging>, at: Micros) {
        let volume = volume_of(&job.transfer);
        let pos = queue_key(&job.transfer, &self.tape);
        let pri = job.transfer.priority;
        if let (Some(v), Direction::Read) = (&job.transfer.volume, job.transfer.direction) {
            let end = end_of(position(&job.transfer), job.transfer.size_bytes, &self.tape);
            let eod = self.eod.entry(v.clone()).or_insert(0);
            *eod = (*eod).max(end);
        }
        if !self.volumes.contains_key(volume.as_ref()) {
            self.serials += 1;
            if let Some(aging) = aging {
                let step = at.saturating_add(aging.every_micros.max(1));
                self.steps.insert((step, self.serials), volume.to_string());
            }
            let queue = VolQueue {
                by_pos: BTreeMap::new(),
                by_pri: BTreeMap::new(),
                created: at,
                serial: self.serials,
                tag: None,
                touched: false,
            };
            self.volumes.insert(volume.to_string(), queue);
        }
        let Some(vq) = self.volumes.get_mut(volume.as_ref()) else {
            return;
        };
        let entry = (job.transfer.key.clone(), pri);
        vq.by_pos.insert((pos, job.arrival), entry);
        vq.by_pri.insert((Reverse(pri), job.arrival), pos);
        self.pending += 1;
        self.retag(&volume, aging, at);
    }

    /// Drop a pending job; false when it was not queued.
    pub(in crate::sim::library) fn remove(
        &mut self,
        job: &Job,
        aging: Option<Aging>,
        at: Micros,
    ) -> bool {
        let volume = volume_of(&job.transfer);
        let Some(vq) = self.volumes.get_mut(volume.as_ref()) else {
            return false;
        };
        let Some((_, pri)) = vq
            .by_pos
            .remove(&(queue_key(&job.transfer, &self.tape), job.arrival))
        else {
            return false;
        };
        vq.by_pri.remove(&(Reverse(pri), job.arrival));
        self.pending -= 1;
        self.retag(&volume, aging, at);
        true
    }

    /// Give a pending job a new priority (it keeps its arrival). Its volume is re-indexed by
    /// [`Self::retag_touched`], once for all the changes made at one instant.
    pub(in crate::sim::library) fn reprioritise(&mut self, job: &Job, pri: i64) {
        let volume = volume_of(&job.transfer);
        let Some(vq) = self.volumes.get_mut(volume.as_ref()) else {
            return;
        };
        let pos = queue_key(&job.transfer, &self.tape);
        let Some(entry) = vq.by_pos.get_mut(&(pos, job.arrival)) else {
            return;
        };
        vq.by_pri.remove(&(Reverse(entry.1), job.arrival));
        entry.1 = pri;
        vq.by_pri.insert((Reverse(pri), job.arrival), pos);
        if !vq.touched {
            vq.touched = true;
            self.touched.push(volume.into_owned());
        }
    }

    /// Re-index the volumes whose priorities changed since the last call.
    pub(in crate::sim::library) fn retag_touched(&mut self, aging: Option<Aging>, at: Micros) {
        for volume in std::mem::take(&mut self.touched) {
            if let Some(vq) = self.volumes.get_mut(&volume) {
                vq.touched = false;
            }
            self.retag(&volume, aging, at);
        }
    }

    /// Take a volume's next request: the first position after `head` (wrapping to the lowest),
    /// or the lowest when the volume is just being mounted.
    /// Under [`Order::Rao`], the request with the cheapest locate from the head (from BOT
    /// just after a mount) among the next [`RAO_WINDOW`] from it, the first among equals.
    pub(super) fn take(
        &mut self,
        volume: &str,
        head: Option<u64>,
        aging: Option<Aging>,
        at: Micros,
    ) -> Option<String> {
        let eod = self.eod.get(volume).copied().unwrap_or(0);
        let tape = self.tape;
        let vq = self.volumes.get_mut(volume)?;
        let from = (head.unwrap_or(0), 0);
        let circular = || vq.by_pos.range(from..).chain(vq.by_pos.range(..from));
        let slot = match tape.order {
            Order::Position => {
                let ahead = head.and_then(|_| vq.by_pos.range(from..).next());
                ahead.or_else(|| vq.by_pos.iter().next()).map(|(s, _)| *s)
            }
            Order::Rao => {
                let cost = |&(start, _): &(u64, u64)| {
                    let target = if start == u64::MAX { eod } else { start };
                    tape.locate_micros(from.0, target)
                };
                let window = circular().take(RAO_WINDOW).map(|(s, _)| *s);
                window.min_by_key(cost)
            }
        }?;
        let (key, pri) = vq.by_pos.remove(&slot)?;
        vq.by_pri.remove(&(Reverse(pri), slot.1));
        self.pending -= 1;
        self.retag(volume, aging, at);
        Some(key)
    }

    /// Recompute a volume's tag from its best request (dropping the queue when empty).
    pub(super) fn retag(&mut self, volume: &str, aging: Option<Aging>, at: Micros) {
        let Some(vq) = self.volumes.get_mut(volume) else {
            return;
        };
        let tag = tag_of(vq, aging, at);
        if tag.is_some() && tag == vq.tag {
            // Most priority changes and arrivals leave the volume's best slot as it was.
            return;
        }
        if let Some(old) = vq.tag.take() {
            self.index.remove(&old);
        }
        match tag {
            Some(slot) => {
                vq.tag = Some(slot);
                self.index.insert(slot, volume.to_string());
            }
            None => {
                self.volumes.remove(volume);
            }
        }
    }

    /// Recompute the tags of the queues whose gain stepped by `at`, and schedule their next
    /// step.
    pub(super) fn age(&mut self, aging: Aging, at: Micros) {
        let every = aging.every_micros.max(1);
        while let Some(entry) = self.steps.first_entry() {
            let (step, serial) = *entry.key();
            if step > at {
                return;
            }
            let volume = entry.remove();
            let Some(vq) = self.volumes.get(&volume).filter(|q| q.serial == serial) else {
                continue;
            };
            let periods = at.saturating_sub(vq.created) / every;
            let next = vq
                .created
                .saturating_add((periods + 1).saturating_mul(every));
            self.retag(&volume, Some(aging), at);
            self.steps.insert((next, serial), volume);
        }
    }
}

/// A volume's rank: its best request's priority, aged by the queue's age, and that request's
/// arrival (`manage_queue.py`, `Queue.update_priority`: only the list's head is aged).
fn tag_of(vq: &VolQueue, aging: Option<Aging>, at: Micros) -> Option<Slot> {
    let (&(Reverse(pri), arrival), _) = vq.by_pri.iter().next()?;
    let gain = aging.map_or(0, |a| a.gain(at.saturating_sub(vq.created)));
    Some((Reverse(pri.saturating_add(gain)), arrival))
}

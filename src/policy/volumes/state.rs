//! One library's waiting volumes, per-group tallies and volumes in flight, kept incrementally.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::eligibility::eligible_from;
use super::ride::Allowance;
use super::{Batch, BatchReason, PosSet, VolumeId};
use crate::domain::order::VolumeSettings;
use crate::domain::{GroupId, PolicySettings};
use crate::policy::order::Candidate;
use crate::policy::queue::Waiting;

/// How many of a group's fullest eligible volumes [`Lib::best_volume`] weighs.
const CONSIDERED: usize = 16;

/// The requests waiting on one volume.
#[derive(Debug, Clone, Default)]
pub(crate) struct Vol {
    /// (tape position, id) -> (group, request): the volume's requests in position order, each
    /// kept as a [`Waiting`] (its library is the `Lib`'s: 72 bytes, not a 96-byte `Candidate`).
    pub reqs: BTreeMap<(u64, i64), (GroupId, Waiting)>,
    /// Per group: its requests on this volume.
    pub groups: BTreeMap<GroupId, OnVol>,
    /// (created_ms, id) of every request: oldest and newest.
    created: BTreeSet<(i64, i64)>,
    pub bytes: u64,
    /// Where the volume is indexed: `None` ready (in each group's `ready` under `ready_bytes`),
    /// `Some(t)` in the library's `pending` until `t`.
    index: Option<i64>,
    ready_bytes: u64,
}

/// One group's requests on one volume.
#[derive(Debug, Clone, Default)]
pub(crate) struct OnVol {
    /// (tape position, id) of each.
    pub pos: PosSet,
    pub bytes: u64,
}

impl Vol {
    /// (oldest, newest) creation time.
    pub fn age_span(&self) -> (i64, i64) {
        let first = self.created.first().map_or(0, |k| k.0);
        let last = self.created.last().map_or(0, |k| k.0);
        (first, last)
    }
}

/// A group's waiting requests in one library.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tally {
    pub files: usize,
    pub bytes: u64,
    /// Its eligible volumes, most bytes queued first.
    ready: BTreeSet<(Reverse<u64>, VolumeId)>,
    /// (created_ms, id) of each: its oldest request (found through the queue's index).
    oldest: BTreeSet<(i64, i64)>,
}

/// A volume in flight.
#[derive(Debug, Clone)]
pub(crate) struct Flight {
    /// The group whose choice mounted it (its `max_volumes` counts it).
    pub group: GroupId,
    /// Released requests not yet ended.
    pub outstanding: usize,
    /// Requests in its last batch.
    pub last_batch: usize,
}

impl Flight {
    /// Its last batch is nearly done: at most a tenth of it (and at least one) left.
    fn nearly_done(&self) -> bool {
        self.outstanding <= (self.last_batch / 10).max(1)
    }
}

/// `[targets."path"] max_volumes` along a group's ancestors.
pub(crate) struct NodeCaps<'a> {
    policy: &'a PolicySettings,
}

impl<'a> NodeCaps<'a> {
    pub fn new(policy: &'a PolicySettings) -> Self {
        NodeCaps { policy }
    }

    fn ancestors(&self, g: GroupId) -> &'a [usize] {
        self.policy
            .groups
            .get(g.0)
            .map_or(&[][..], |i| i.ancestors.as_slice())
    }

    /// Whether `g` may lead one more volume with `counts` (node -> volumes in flight).
    pub fn allows(&self, g: GroupId, counts: &HashMap<usize, u32>) -> bool {
        self.ancestors(g).iter().all(|&n| {
            let cap = self
                .policy
                .tree
                .nodes
                .get(n)
                .and_then(|node| node.limits.max_volumes);
            cap.is_none_or(|cap| counts.get(&n).copied().unwrap_or(0) < cap)
        })
    }

    fn count(&self, g: GroupId, counts: &mut HashMap<usize, u32>, up: bool) {
        for &n in self.ancestors(g) {
            let c = counts.entry(n).or_default();
            *c = if up { *c + 1 } else { c.saturating_sub(1) };
        }
    }
}

/// One library.
#[derive(Debug, Clone, Default)]
pub(crate) struct Lib {
    pub vols: HashMap<VolumeId, Vol>,
    pub groups: BTreeMap<GroupId, Tally>,
    /// (eligible_from, volume) of volumes not yet eligible.
    pending: BTreeSet<(i64, VolumeId)>,
    pub flights: BTreeMap<VolumeId, Flight>,
    /// Volumes whose last request ended, and when (sticky for `sticky_ms`).
    recent: BTreeMap<VolumeId, i64>,
    /// Tree node -> volumes in flight led by groups under it.
    pub node_flights: HashMap<usize, u32>,
}

impl Lib {
    pub fn push(&mut self, s: &VolumeSettings, vol: VolumeId, c: Candidate, pos: u64) {
        self.unindex(&vol);
        let t = self.groups.entry(c.group).or_default();
        t.files += 1;
        t.bytes += c.size_bytes;
        t.oldest.insert((c.created_ms, c.id));
        let v = self.vols.entry(vol.clone()).or_default();
        let on = v.groups.entry(c.group).or_default();
        on.pos.insert((pos, c.id));
        on.bytes += c.size_bytes;
        v.created.insert((c.created_ms, c.id));
        v.bytes += c.size_bytes;
        v.reqs.insert((pos, c.id), (c.group, Waiting::of(c)));
        self.index(s, &vol);
    }

    /// Take request `id` at tape position `pos` off `vol`.
    pub fn remove(
        &mut self,
        s: &VolumeSettings,
        vol: &VolumeId,
        id: i64,
        pos: u64,
    ) -> Option<(GroupId, Waiting)> {
        self.unindex(vol);
        let c = self.detach(vol, id, pos);
        self.index(s, vol);
        c
    }

    /// Take the requests `items` (id, tape position) off `vol` together (a batch released):
    /// the volume is re-indexed once, not once per request.
    pub fn take(&mut self, s: &VolumeSettings, vol: &VolumeId, items: &[(i64, u64)]) {
        self.unindex(vol);
        for &(id, pos) in items {
            self.detach(vol, id, pos);
        }
        self.index(s, vol);
    }

    /// [`Self::remove`] without the re-indexing: the caller unindexed `vol` and indexes it again.
    fn detach(&mut self, vol: &VolumeId, id: i64, pos: u64) -> Option<(GroupId, Waiting)> {
        let v = self.vols.get_mut(vol)?;
        let (group, w) = v.reqs.remove(&(pos, id))?;
        let (size, created) = (w.size_bytes(), w.created_ms());
        if let Some(on) = v.groups.get_mut(&group) {
            on.pos.remove(&(pos, id));
            on.bytes -= size;
            if on.pos.is_empty() {
                v.groups.remove(&group);
            }
        }
        v.created.remove(&(created, id));
        v.bytes -= size;
        if v.reqs.is_empty() {
            self.vols.remove(vol);
        }
        if let Some(t) = self.groups.get_mut(&group) {
            t.files -= 1;
            t.bytes -= size;
            t.oldest.remove(&(created, id));
            if t.files == 0 {
                self.groups.remove(&group);
            }
        }
        Some((group, w))
    }

    /// Take `vol` out of the eligibility indexes (before it changes).
    fn unindex(&mut self, vol: &VolumeId) {
        let Some(v) = self.vols.get(vol) else { return };
        match v.index {
            Some(t) => {
                self.pending.remove(&(t, vol.clone()));
            }
            None => {
                for g in v.groups.keys() {
                    if let Some(t) = self.groups.get_mut(g) {
                        t.ready.remove(&(Reverse(v.ready_bytes), vol.clone()));
                    }
                }
            }
        }
    }

    /// Put `vol` back in the indexes: pending until it is eligible (promoted by [`Self::promote`]).
    fn index(&mut self, s: &VolumeSettings, vol: &VolumeId) {
        let Some(v) = self.vols.get_mut(vol) else {
            return;
        };
        let (oldest, newest) = v.age_span();
        let from = match vol {
            VolumeId::Loose(_) => None,
            // Waits for the lookup's answer, its oldest request `lookup_wait_ms` at most.
            VolumeId::Unlocated(_) => {
                Some((oldest.saturating_add(s.lookup_wait_ms.unwrap_or(0)), false))
            }
            VolumeId::Tape(_) => eligible_from(s, v.bytes, v.reqs.len(), oldest, newest),
        };
        match from {
            Some((t, _)) => {
                v.index = Some(t);
                self.pending.insert((t, vol.clone()));
            }
            None => {
                v.index = None;
                v.ready_bytes = v.bytes;
                for g in v.groups.keys() {
                    if let Some(t) = self.groups.get_mut(g) {
                        t.ready.insert((Reverse(v.bytes), vol.clone()));
                    }
                }
            }
        }
    }

    /// Volumes whose time has come move from `pending` to their groups' `ready`.
    pub fn promote(&mut self, now_ms: i64) {
        while let Some((t, vol)) = self.pending.first().cloned() {
            if t > now_ms {
                break;
            }
            self.pending.remove(&(t, vol.clone()));
            let Some(v) = self.vols.get_mut(&vol) else {
                continue;
            };
            v.index = None;
            v.ready_bytes = v.bytes;
            for g in v.groups.keys() {
                if let Some(tally) = self.groups.get_mut(g) {
                    tally.ready.insert((Reverse(v.bytes), vol.clone()));
                }
            }
        }
    }

    /// Sticky volumes older than `sticky_ms` are forgotten.
    pub fn forget_stale(&mut self, s: &VolumeSettings, now_ms: i64) {
        self.recent.retain(|_, t| now_ms - *t <= s.sticky_ms);
    }

    /// Whether `vol` is in flight or sticky at `now_ms`.
    pub fn mounted_at(&self, s: &VolumeSettings, vol: &VolumeId, now_ms: i64) -> bool {
        self.flights.contains_key(vol)
            || self
                .recent
                .get(vol)
                .is_some_and(|t| now_ms - *t <= s.sticky_ms)
    }

    /// Into `out`, the groups with an eligible volume (after [`Self::promote`]) or requests on
    /// a volume in flight or sticky at `now_ms`.
    pub fn eligible_groups(&self, s: &VolumeSettings, now_ms: i64, out: &mut BTreeSet<GroupId>) {
        for (g, t) in &self.groups {
            if !t.ready.is_empty() {
                out.insert(*g);
            }
        }
        let mounted = (self.flights.keys())
            .chain(self.recent.keys())
            .filter(|v| self.mounted_at(s, v, now_ms));
        for v in mounted {
            if let Some(vol) = self.vols.get(v) {
                out.extend(vol.groups.keys().copied());
            }
        }
    }

    /// When a pending volume becomes eligible or a sticky one lapses, after `now_ms`.
    pub fn next_wakeup(&self, now_ms: i64) -> Option<i64> {
        let pending = self.pending.iter().map(|(t, _)| *t).find(|&t| t > now_ms);
        let sticky = self
            .recent
            .values()
            .map(|t| t + 1)
            .filter(|&t| t > now_ms)
            .min();
        pending.into_iter().chain(sticky).min()
    }

    /// Volumes to keep busy, in order: in flight and nearly done, then finished within
    /// `sticky_ms` (if a volume may be added); each with requests waiting.
    pub fn sticky_volumes(&self, max_volumes: u32) -> Vec<VolumeId> {
        // Requests waiting for their lookup are never taken along by a mount.
        let waiting =
            |v: &VolumeId| self.vols.contains_key(v) && !matches!(v, VolumeId::Unlocated(_));
        let room = self.flights.len() < max_volumes as usize;
        let flying = self
            .flights
            .iter()
            .filter(|(v, f)| f.nearly_done() && waiting(v))
            .map(|(v, _)| v);
        let recent = self.recent.keys().filter(|v| room && waiting(v));
        flying.chain(recent).cloned().collect()
    }

    /// Of `g`'s [`CONSIDERED`] oldest requests created at or before `bound_ms` (overdue), the
    /// oldest whose volume is not in flight: its volume and (position, id). `locate` gives a
    /// waiting request's volume and position (the queue's index).
    pub fn overdue<'i>(
        &self,
        g: GroupId,
        bound_ms: i64,
        locate: impl Fn(i64) -> Option<(&'i VolumeId, u64)>,
    ) -> Option<(VolumeId, (u64, i64))> {
        let oldest = self.groups.get(&g)?.oldest.iter();
        oldest
            .take_while(|&&(created, _)| created <= bound_ms)
            .take(CONSIDERED)
            .filter_map(|&(_, id)| locate(id).map(|(vol, pos)| (vol, (pos, id))))
            .find(|(vol, _)| !self.flights.contains_key(*vol))
            .map(|(vol, k)| (vol.clone(), k))
    }

    /// The id of `g`'s oldest waiting request.
    pub fn oldest_of(&self, g: GroupId) -> Option<i64> {
        self.groups.get(&g)?.oldest.first().map(|&(_, id)| id)
    }

    /// Waiting request `id` at tape position `pos` of `vol`, as the policy sees it in `library`.
    pub fn waiting(&self, library: &str, vol: &VolumeId, id: i64, pos: u64) -> Option<Candidate> {
        let (g, w) = self.vols.get(vol)?.reqs.get(&(pos, id))?;
        Some(w.candidate(*g, library))
    }

    /// `g`'s best eligible volume not in flight (after [`Self::promote`]): of its
    /// [`CONSIDERED`] eligible volumes with the most bytes queued, the one whose mount would read
    /// the most (`g`'s bytes and those of the groups `rides` admits).
    pub fn best_volume(&self, g: GroupId, rides: &dyn Fn(GroupId) -> bool) -> Option<VolumeId> {
        let read = |vol: &VolumeId| {
            self.vols.get(vol).map_or(0, |v| {
                v.groups
                    .iter()
                    .filter(|(&o, _)| o == g || rides(o))
                    .map(|(_, on)| on.bytes)
                    .sum::<u64>()
            })
        };
        self.groups
            .get(&g)?
            .ready
            .iter()
            .map(|(_, v)| v)
            .filter(|v| !self.flights.contains_key(*v))
            .take(CONSIDERED)
            .map(|v| (read(v), v))
            .max_by(|a, b| a.0.cmp(&b.0).then_with(|| b.1.cmp(a.1)))
            .map(|(_, v)| v.clone())
    }

    /// The batch of `vol` led by `g`: `first` (a (position, id) of `g` on it, always taken),
    /// then `g`'s requests in position order up to the caps, then those of other groups in
    /// position order while there is room, each group's up to the benefit `rides` allows it (a
    /// group a request of which that allowance left out is named in `ride_capped`); the whole
    /// in position order.
    pub fn cut(
        &self,
        s: &VolumeSettings,
        library: &str,
        (vol, g, reason): (VolumeId, GroupId, BatchReason),
        first: Option<(u64, i64)>,
        (rides, remains): (&dyn Fn(GroupId) -> Allowance, &dyn Fn(GroupId) -> u64),
    ) -> Batch {
        let mut picked: Vec<(u64, i64)> = Vec::new();
        let mut bytes = 0u64;
        let mut capped: BTreeSet<GroupId> = BTreeSet::new();
        let mut spent = Vec::new();
        if let Some(v) = self.vols.get(&vol) {
            if let Some((k, (_, w))) = first.and_then(|k| Some((k, v.reqs.get(&k)?))) {
                bytes += w.size_bytes();
                picked.push(k);
            }
            let fits = |bytes: u64, n: usize, size: u64| {
                n == 0
                    || (n < s.batch_max_files as usize
                        && bytes.saturating_add(size) <= s.batch_max_bytes)
            };
            let own = v.groups.get(&g).into_iter().flat_map(|on| &on.pos);
            let mut riders: BTreeMap<GroupId, u64> = v
                .groups
                .keys()
                .filter(|&&o| o != g)
                .map(|&o| (o, rides(o)))
                .filter(|&(_, room)| room > 0)
                .collect();
            let others: Vec<&(u64, i64)> = v
                .reqs
                .iter()
                .filter(|(_, (o, _))| riders.contains_key(o))
                .map(|(k, _)| k)
                .collect();
            for k in own.chain(others).filter(|&&k| Some(k) != first) {
                let Some((o, w)) = v.reqs.get(k) else {
                    continue;
                };
                if !fits(bytes, picked.len(), w.size_bytes()) {
                    break;
                }
                if let Some(room) = riders.get_mut(o) {
                    if w.benefit() > *room {
                        capped.insert(*o);
                        continue;
                    }
                    *room -= w.benefit();
                }
                bytes += w.size_bytes();
                picked.push(*k);
            }
            picked.sort_unstable();
            if let Some(t) = super::remainder::take(s, &vol, v, &picked, remains) {
                picked.extend(t.keys);
                picked.sort_unstable();
                bytes = bytes.saturating_add(t.bytes);
                spent = t.spent;
            }
        }
        let requests = picked
            .iter()
            .filter_map(|k| {
                let (o, w) = self.vols.get(&vol)?.reqs.get(k)?;
                Some(w.candidate(*o, library))
            })
            .collect();
        Batch {
            library: library.to_owned(),
            volume: vol,
            group: g,
            reason,
            requests,
            bytes,
            ride_capped: capped.into_iter().collect(),
            remainder: spent,
        }
    }

    pub fn started(&mut self, caps: &NodeCaps<'_>, batch: &Batch, _now_ms: i64) {
        self.recent.remove(&batch.volume);
        let f = self.flights.entry(batch.volume.clone()).or_insert_with(|| {
            caps.count(batch.group, &mut self.node_flights, true);
            Flight {
                group: batch.group,
                outstanding: 0,
                last_batch: 0,
            }
        });
        f.outstanding += batch.requests.len();
        f.last_batch = batch.requests.len();
    }

    pub fn finished(&mut self, caps: &NodeCaps<'_>, vol: &VolumeId, now_ms: i64) {
        let Some(f) = self.flights.get_mut(vol) else {
            return;
        };
        f.outstanding = f.outstanding.saturating_sub(1);
        if f.outstanding == 0 {
            let g = f.group;
            self.flights.remove(vol);
            caps.count(g, &mut self.node_flights, false);
            self.recent.insert(vol.clone(), now_ms);
        }
    }

    pub fn is_idle(&self) -> bool {
        self.vols.is_empty() && self.flights.is_empty() && self.recent.is_empty()
    }

    /// What the rows do not hold: its sticky volumes and the size of each flight's last batch.
    pub fn memory(&self) -> LibMemory {
        LibMemory {
            recent: self.recent.clone(),
            last_batches: (self.flights.iter())
                .map(|(v, f)| (v.clone(), f.last_batch))
                .collect(),
        }
    }

    /// `m` again, after this library was rebuilt from the rows: a volume sticky then and not
    /// in flight now is sticky again; a flight of then keeps its last batch's size.
    pub fn restore(&mut self, m: LibMemory) {
        for (vol, at) in m.recent {
            if !self.flights.contains_key(&vol) {
                self.recent.insert(vol, at);
            }
        }
        for (vol, last_batch) in m.last_batches {
            if let Some(f) = self.flights.get_mut(&vol) {
                f.last_batch = last_batch;
            }
        }
    }
}

/// A library's [`Lib::memory`]: O(sticky volumes + volumes in flight).
#[derive(Debug, Clone, Default)]
pub(crate) struct LibMemory {
    recent: BTreeMap<VolumeId, i64>,
    last_batches: Vec<(VolumeId, usize)>,
}

impl LibMemory {
    /// The same memory for another tree (`super::VolumeMemory::regroup`).
    pub fn regroup(self, regroup: &impl Fn(GroupId) -> Option<GroupId>) -> LibMemory {
        LibMemory {
            recent: (self.recent.into_iter())
                .filter_map(|(v, at)| Some((v.regroup(regroup)?, at)))
                .collect(),
            last_batches: (self.last_batches.into_iter())
                .filter_map(|(v, n)| Some((v.regroup(regroup)?, n)))
                .collect(),
        }
    }
}

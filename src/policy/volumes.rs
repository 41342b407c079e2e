//! The broker's own queue in the `volumes` release mode (issue 16, docs/volumes.md): fair-share
//! requests waiting per library and tape volume, which volumes are eligible, and which batch goes
//! to the MSS next. Pure: time is passed in (virtual or wall ms), so the live ledger writer and
//! the simulator's engine drive the same decisions.
//!
//! How a caller (the ledger writer, `simulate::engine`) drives it:
//! 1. a fair-share request arriving in this mode: [`VolumeQueue::push`] (priority classes are
//!    never held: they go to the MSS at once, as in held mode); a request cancelled or removed
//!    while waiting: [`VolumeQueue::remove`];
//! 2. whenever something changed (an arrival, an end, a timer at [`VolumeQueue::next_wakeup`]):
//!    call [`VolumeQueue::next_batch`] per library until it returns `None`; for each batch,
//!    charge each request to its own group (`Candidate::group`: piggy-backed requests of other
//!    groups are charged to theirs), send the batch in one MSS call in its order (tape position),
//!    then [`VolumeQueue::batch_started`] (which takes the requests out of the queue and puts the
//!    volume in flight). Do not call `batch_started` if the batch was not committed;
//! 3. every released request that ends at the MSS (done, failed for good, cancelled):
//!    [`VolumeQueue::request_finished`]. A retried request stays in flight.
//! 4. after a restart: push every queued row again, and for the released rows not yet ended
//!    build one [`Batch`] per (library, volume) (its `group` the one that led it, or any of
//!    theirs) and call [`VolumeQueue::batch_started`], so the volumes in flight count again;
//!    then [`VolumeQueue::repay_every_lead`] (which groups repay a ride's lead is not in the
//!    rows), or, after a rollback or a reload, [`VolumeQueue::restore`] the queue's memory.
//!
//! A volume is eligible when its queued requests reach `min_volume_bytes` or `min_volume_files`,
//! its newest request is `quiet_ms` old, or its oldest `max_age_ms` old; requests without a
//! volume form a pseudo-volume per group ([`VolumeId::Loose`]), always eligible. Every request of
//! a volume in flight or finished within `sticky_ms` is eligible (it costs no mount).
//! Bookkeeping is incremental: each push/remove costs O(log n) (times the groups with requests
//! on that volume); a decision reads the groups of one library and the volumes in flight, never
//! the whole queue.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::order::{Candidate, OrderSettings, ShareSnapshot};
use super::reserve::Reservation;
use crate::domain::order::VolumeSettings;
use crate::domain::GroupId;
use crate::shares::UsageLookup;
use lead::lead_group;

mod eligibility;
mod label;
mod lead;
mod remainder;
mod ride;
mod state;
#[cfg(test)]
mod tests;

pub use eligibility::{locating, rule, Eligibility, VolumeStatus};
pub use label::Label;
pub use ride::lead;
use state::Lib;

/// A tape volume of a library, or the pseudo-volume of a group's requests without one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum VolumeId {
    Tape(Label),
    Loose(GroupId),
    /// A group's requests without a volume waiting for the volume lookup (`[mss.volume_lookup]`,
    /// [`VolumeQueue::push_unlocated`]): eligible only once its oldest has waited
    /// `lookup_wait_ms`, never taken along by a mount; an answer moves a request to its tape
    /// ([`VolumeQueue::relocate`]).
    Unlocated(GroupId),
}

impl VolumeId {
    /// The volume a request names (`None`: its group's pseudo-volume).
    pub fn of(volume: Option<&str>, group: GroupId) -> VolumeId {
        match volume {
            Some(v) if !v.is_empty() => VolumeId::Tape(Label::new(v)),
            _ => VolumeId::Loose(group),
        }
    }

    /// The volume label, or `None` for a pseudo-volume.
    pub fn label(&self) -> Option<&str> {
        match self {
            VolumeId::Tape(v) => Some(v.as_str()),
            VolumeId::Loose(_) | VolumeId::Unlocated(_) => None,
        }
    }
}

/// Why a batch goes now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchReason {
    /// Its volume is in flight and nearly done, or finished within `sticky_ms`: the next batch
    /// keeps the drive on it.
    Sticky,
    /// The policy chose its group, and this is the group's best eligible volume.
    Chosen,
}

/// Requests to release together, in tape-position order, through one MSS call.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub library: String,
    pub volume: VolumeId,
    /// The group the policy chose (it counts against that group's `max_volumes`).
    pub group: GroupId,
    pub reason: BatchReason,
    /// In tape-position order; each charged to its own `group`.
    pub requests: Vec<Candidate>,
    pub bytes: u64,
    /// Groups whose ride `[release.volumes] ride_lead_bytes` cut short: once the batch starts,
    /// they ride no more until they are back at their share (`ride`).
    pub ride_capped: Vec<GroupId>,
    /// Per group, the benefit of its requests taken along as the volume's remainder
    /// (`[release.volumes] remainder_bytes`), which its credit pays (`remainder`).
    pub remainder: Vec<(GroupId, u64)>,
}

impl Batch {
    /// Requests of other groups riding on the chosen group's mount.
    pub fn piggy_backed(&self) -> impl Iterator<Item = &Candidate> {
        self.requests.iter().filter(move |c| c.group != self.group)
    }
}

/// [`VolumeQueue::memory`]: per library, what its rows do not hold, and the groups repaying a
/// ride's lead.
#[derive(Debug, Clone, Default)]
pub struct VolumeMemory {
    libs: Vec<(Label, state::LibMemory)>,
    repaying: BTreeSet<GroupId>,
    credit: remainder::Credit,
}

impl VolumeMemory {
    /// The same memory for another tree (a reload): a group's pseudo-volume and a group
    /// repaying under the id `regroup` gives the group now, left out for a group no longer
    /// configured.
    pub fn regroup(self, regroup: impl Fn(GroupId) -> Option<GroupId>) -> VolumeMemory {
        VolumeMemory {
            libs: (self.libs.into_iter())
                .map(|(name, lib)| (name, lib.regroup(&regroup)))
                .collect(),
            repaying: self.repaying.into_iter().filter_map(&regroup).collect(),
            credit: self.credit.regroup(&regroup),
        }
    }
}

impl VolumeId {
    /// This volume in another tree (see [`VolumeMemory::regroup`]).
    fn regroup(&self, regroup: &impl Fn(GroupId) -> Option<GroupId>) -> Option<VolumeId> {
        match self {
            VolumeId::Tape(label) => Some(VolumeId::Tape(label.clone())),
            VolumeId::Loose(g) => regroup(*g).map(VolumeId::Loose),
            VolumeId::Unlocated(g) => regroup(*g).map(VolumeId::Unlocated),
        }
    }
}

/// Waiting request id -> (library, volume, tape position).
type Index = HashMap<i64, (Label, VolumeId, u64)>;

/// The fair-share requests waiting in the volumes mode, and the volumes in flight.
#[derive(Debug, Clone, Default)]
pub struct VolumeQueue {
    /// Per library, by name (a [`Label`]: compared without reading the heap).
    libs: BTreeMap<Label, Lib>,
    index: Index,
    /// Released request id -> (library, volume), until it ends.
    flying: HashMap<i64, (Label, VolumeId)>,
    /// Groups repaying a ride's lead (`ride_lead_bytes`): they ride no more until they are
    /// back at their share. Kept over a rollback and a reload ([`VolumeMemory`]); after a
    /// restart, rebuilt as every group ahead of its share ([`Self::repay_every_lead`]).
    repaying: BTreeSet<GroupId>,
    /// What each group's remainders may take (`remainder`). Kept as `repaying` is; a start
    /// begins with none.
    credit: remainder::Credit,
}

impl VolumeQueue {
    /// Queue `c` on `volume` (`None`: its group's pseudo-volume) at tape `position` (`None`:
    /// after every positioned request, in arrival order). A request already queued is replaced.
    pub fn push(
        &mut self,
        settings: &VolumeSettings,
        c: Candidate,
        volume: Option<&str>,
        position: Option<u64>,
    ) {
        self.remove(settings, c.id);
        let vol = VolumeId::of(volume, c.group);
        let name = Label::new(&c.library);
        let pos = position.unwrap_or(u64::MAX);
        self.index.insert(c.id, (name.clone(), vol.clone(), pos));
        let lib = self.libs.entry(name).or_default();
        lib.push(settings, vol, c, pos);
    }

    /// Queue `c`, which has no volume yet, on its group's pseudo-volume of requests waiting
    /// for the volume lookup (see [`VolumeId::Unlocated`]).
    pub fn push_unlocated(&mut self, settings: &VolumeSettings, c: Candidate) {
        self.remove(settings, c.id);
        let vol = VolumeId::Unlocated(c.group);
        let name = Label::new(&c.library);
        self.index
            .insert(c.id, (name.clone(), vol.clone(), u64::MAX));
        self.libs
            .entry(name)
            .or_default()
            .push(settings, vol, c, u64::MAX);
    }

    /// The lookup answered for waiting request `id`: it moves to `volume` at `position`
    /// (`None`: no volume found, its group's requests without one). Whether it was waiting.
    pub fn relocate(
        &mut self,
        settings: &VolumeSettings,
        id: i64,
        volume: Option<&str>,
        position: Option<u64>,
    ) -> bool {
        match self.remove(settings, id) {
            Some(c) => {
                self.push(settings, c, volume, position);
                true
            }
            None => false,
        }
    }

    /// Take waiting request `id` out (cancelled, or released by other means).
    pub fn remove(&mut self, settings: &VolumeSettings, id: i64) -> Option<Candidate> {
        let (lib, vol, pos) = self.index.remove(&id)?;
        let l = self.libs.get_mut(&lib)?;
        let (g, w) = l.remove(settings, &vol, id, pos)?;
        Some(w.candidate(g, lib.as_str()))
    }

    pub fn get(&self, id: i64) -> Option<Candidate> {
        let (lib, vol, pos) = self.index.get(&id)?;
        self.libs.get(lib)?.waiting(lib.as_str(), vol, id, *pos)
    }

    /// The volume waiting request `id` is queued on.
    pub fn volume_of(&self, id: i64) -> Option<&VolumeId> {
        self.index.get(&id).map(|(_, v, _)| v)
    }

    /// Waiting requests.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Released requests not yet ended.
    pub fn in_flight_requests(&self) -> usize {
        self.flying.len()
    }

    /// What the rows do not hold (sticky volumes, each flight's last batch, the groups
    /// repaying a lead), so that a queue rebuilt from them after a rollback can be given it
    /// back ([`VolumeQueue::restore`]).
    pub fn memory(&self) -> VolumeMemory {
        VolumeMemory {
            libs: (self.libs.iter())
                .map(|(name, lib)| (name.clone(), lib.memory()))
                .collect(),
            repaying: self.repaying.clone(),
            credit: self.credit.clone(),
        }
    }

    /// `m`, taken before a rolled-back transaction, into this queue rebuilt from the rows.
    /// The groups repaying are `m`'s (those [`Self::repay_every_lead`] assumed are replaced).
    pub fn restore(&mut self, m: VolumeMemory) {
        for (name, memory) in m.libs {
            self.libs.entry(name).or_default().restore(memory);
        }
        self.repaying = m.repaying;
        self.credit = m.credit;
    }

    /// A queue rebuilt from the rows with no memory of which groups repay a lead (a start):
    /// every group ahead of its share in `standing` repays. A group the bound stopped is ahead
    /// of its share until it is repaid (a decision drops the others from the set), so this
    /// holds every group that was repaying, and usage, which is stored, stands as it did: no
    /// group rides again before it is back at its share. The cost: a group ahead of its share
    /// that the bound had not stopped rides only once it is back (the rule without the bound).
    pub fn repay_every_lead<U: UsageLookup>(&mut self, standing: &ShareSnapshot<'_, U>) {
        self.repaying = ride::ahead(standing);
    }

    /// Libraries with waiting requests or volumes in flight.
    pub fn libraries(&self) -> Vec<String> {
        self.libs.keys().map(|l| l.as_str().to_owned()).collect()
    }

    /// Volumes in flight at `library`.
    pub fn volumes_in_flight(&self, library: &str) -> usize {
        self.libs
            .get(&Label::new(library))
            .map_or(0, |l| l.flights.len())
    }

    /// Waiting requests per group, over all libraries (kept as they change).
    pub fn waiting_per_group(&self) -> BTreeMap<GroupId, usize> {
        let mut out = BTreeMap::new();
        for l in self.libs.values() {
            for (g, t) in &l.groups {
                *out.entry(*g).or_default() += t.files;
            }
        }
        out
    }

    /// The groups with a waiting request the policy could release at `now_ms`: on an eligible
    /// volume, or on one in flight or sticky (what the share error over eligible demand counts).
    pub fn eligible_groups(&mut self, settings: &VolumeSettings, now_ms: i64) -> BTreeSet<GroupId> {
        let mut out = BTreeSet::new();
        for lib in self.libs.values_mut() {
            lib.promote(now_ms);
            lib.eligible_groups(settings, now_ms, &mut out);
        }
        out
    }

    /// Volume `volume` of `library` at `now_ms`: its queued bytes and files, and which rule
    /// makes it eligible or which it waits on (what explain shows).
    pub fn status(
        &self,
        settings: &VolumeSettings,
        library: &str,
        volume: &VolumeId,
        now_ms: i64,
    ) -> Option<VolumeStatus> {
        let l = self.libs.get(&Label::new(library))?;
        let v = l.vols.get(volume)?;
        Some(eligibility::status(
            settings,
            volume,
            v,
            l.mounted_at(settings, volume, now_ms),
            now_ms,
        ))
    }

    /// The earliest instant after `now_ms` at which a waiting volume becomes eligible by age or
    /// quiet, or a sticky volume stops being sticky (when to ask [`Self::next_batch`] again
    /// without news).
    pub fn next_wakeup(&self, now_ms: i64) -> Option<i64> {
        self.libs
            .values()
            .filter_map(|l| l.next_wakeup(now_ms))
            .min()
    }

    /// The batch to release next at `library`, if any. First a volume in flight that is nearly
    /// done (or finished within `sticky_ms`, while fewer than `max_volumes` are in flight) and
    /// has requests of a group not ahead of its share or ranked first by the policy (ties
    /// included: under SAM every front group, or every group when none is front), led by the
    /// one of those the policy ranks first. Else, if fewer than `max_volumes` volumes are in
    /// flight, the group the policy ranks first among those with an eligible volume not in
    /// flight and under their `[targets]` `max_volumes` (starved first, then the policy's order, as
    /// [`super::queue::HeldQueue::pick`]; FBSNG by queue priority), and the volume of that
    /// group's oldest request that has waited `max_age_ms` on a volume not in flight (that
    /// request first in the batch), else of the group's fullest eligible volumes the one whose
    /// mount reads the most. The batch is the volume's requests of that group in position order
    /// up to the batch caps, then the requests on it of other groups (riders) in position order
    /// while room is left: of groups not ahead of their share, or, with `ride_lead_bytes`, of
    /// groups not repaying a lead while their lead stays within it (`ride::allowance`).
    /// Nothing changes until [`Self::batch_started`] (but volumes whose time came are marked
    /// eligible).
    pub fn next_batch<U: UsageLookup>(
        &mut self,
        order: &OrderSettings,
        standing: &ShareSnapshot<'_, U>,
        library: &str,
        now_ms: i64,
    ) -> Option<Batch> {
        self.next_batch_reserving(order, standing, library, now_ms, Reservation::default())
    }

    /// [`Self::next_batch`] under a drive reservation for the priority classes
    /// (`policy::reserve`): at most `reserve.fair_cap(max_volumes)` volumes in flight, and while
    /// a priority request waits no sticky volume is extended and no other group rides (the
    /// drives finish their batches and come free for it).
    pub fn next_batch_reserving<U: UsageLookup>(
        &mut self,
        order: &OrderSettings,
        standing: &ShareSnapshot<'_, U>,
        library: &str,
        now_ms: i64,
        reserve: Reservation,
    ) -> Option<Batch> {
        let s = &order.release.volumes;
        ride::repaid(standing, &mut self.repaying);
        let repaying = &self.repaying;
        let lib = self.libs.get_mut(&Label::new(library))?;
        lib.promote(now_ms);
        lib.forget_stale(s, now_ms);
        let max_volumes = reserve.fair_cap(s.max_volumes_of(library));
        let no_riders = reserve.priority_waiting;
        let under = |g: GroupId| ride::not_ahead(standing, g);
        let may_ride = |g: GroupId| ride::allowance(s, standing, repaying, g);
        let rides = |g: GroupId| if no_riders { 0 } else { may_ride(g) };
        let weighs = |g: GroupId| may_ride(g) > 0;
        let credit = &self.credit;
        let remains = |g: GroupId| if no_riders { 0 } else { credit.room(g) };
        let take = (
            &rides as &dyn Fn(GroupId) -> u64,
            &remains as &dyn Fn(GroupId) -> u64,
        );
        let caps = state::NodeCaps::new(standing.policy);
        let sticky = if reserve.priority_waiting {
            Vec::new()
        } else {
            lib.sticky_volumes(max_volumes)
        };
        // The groups the policy ranks first, ties included: one of them leads the next batch
        // anyway, so each may keep a mounted volume it has requests on, ahead of its share or not.
        let first = match sticky.is_empty() {
            true => Vec::new(),
            false => lead::ranked_first(order, standing, (library, &*lib, &self.index), now_ms),
        };
        for vol in sticky {
            let on_it = |g: GroupId| {
                lib.vols
                    .get(&vol)
                    .is_some_and(|v| v.groups.contains_key(&g))
            };
            // A volume no longer in flight starts a new flight, led by `g`: its caps count it.
            let flying = lib.flights.contains_key(&vol);
            let may_lead = |g| flying || caps.allows(g, &lib.node_flights);
            let allowed = |g| on_it(g) && (under(g) || first.contains(&g)) && may_lead(g);
            let at = (library, &*lib, &self.index);
            if let Some(g) = lead_group(order, standing, at, now_ms, allowed) {
                let at = (vol, g, BatchReason::Sticky);
                return Some(lib.cut(s, library, at, None, take));
            }
        }
        if lib.flights.len() >= max_volumes as usize {
            return None;
        }
        let at = (library, &*lib, &self.index);
        let g = lead_group(order, standing, at, now_ms, |g| {
            caps.allows(g, &lib.node_flights) && lib.best_volume(g, &weighs).is_some()
        })?;
        // An old request on a small tape does not wait behind the group's fuller ones: its
        // volume goes, and the request is in the batch whatever its position.
        let index = &self.index;
        let locate = |id| index.get(&id).map(|(_, vol, pos)| (vol, *pos));
        let (vol, first) = match lib.overdue(g, now_ms.saturating_sub(s.max_age_ms), locate) {
            Some((vol, k)) => (vol, Some(k)),
            None => (lib.best_volume(g, &weighs)?, None),
        };
        Some(lib.cut(s, library, (vol, g, BatchReason::Chosen), first, take))
    }

    /// `batch` was committed and sent: its requests leave the queue and its volume is in flight
    /// (counted against its library's and its group's `max_volumes` until its requests end).
    pub fn batch_started(
        &mut self,
        settings: &VolumeSettings,
        policy: &crate::domain::PolicySettings,
        batch: &Batch,
        now_ms: i64,
    ) {
        let caps = state::NodeCaps::new(policy);
        let name = Label::new(&batch.library);
        let mut here = Vec::with_capacity(batch.requests.len());
        for c in &batch.requests {
            // Queued on the batch's volume (the normal case), elsewhere, or not at all (a
            // restart restoring what was in flight).
            match self.index.get(&c.id) {
                Some((lib, vol, pos)) if *lib == name && *vol == batch.volume => {
                    here.push((c.id, *pos));
                    self.index.remove(&c.id);
                }
                Some(_) => {
                    self.remove(settings, c.id);
                }
                None => {}
            }
            self.flying
                .insert(c.id, (name.clone(), batch.volume.clone()));
        }
        let lib = self.libs.entry(name).or_default();
        lib.take(settings, &batch.volume, &here);
        lib.started(&caps, batch, now_ms);
        self.repaying.extend(batch.ride_capped.iter().copied());
        self.credit.started(policy, batch);
    }

    /// The group whose `max_volumes` counts `volume`'s flight in `library` (the group that led
    /// the batch that mounted it), while it is in flight.
    pub fn flight_leader(&self, library: &str, volume: &VolumeId) -> Option<GroupId> {
        let lib = self.libs.get(&Label::new(library))?;
        lib.flights.get(volume).map(|f| f.group)
    }

    /// Request `id` takes over released request `carrier`'s read (a rider promoted when its
    /// carrier is cancelled): it is in the carrier's flight until it ends, so the volume stays
    /// in flight while `id` reads it. Whether it joined (the carrier was in flight).
    pub fn join_flight(&mut self, id: i64, carrier: i64) -> bool {
        let Some((lib, vol)) = self.flying.get(&carrier).cloned() else {
            return false;
        };
        let Some(f) = self
            .libs
            .get_mut(&lib)
            .and_then(|l| l.flights.get_mut(&vol))
        else {
            return false;
        };
        f.outstanding += 1;
        self.flying.insert(id, (lib, vol));
        true
    }

    /// Released request `id` ended at the MSS (done, failed for good or cancelled). When its
    /// volume's last request ends, the volume leaves flight and stays sticky for `sticky_ms`.
    pub fn request_finished(
        &mut self,
        policy: &crate::domain::PolicySettings,
        id: i64,
        now_ms: i64,
    ) {
        let Some((lib, vol)) = self.flying.remove(&id) else {
            return;
        };
        let caps = state::NodeCaps::new(policy);
        if let Some(l) = self.libs.get_mut(&lib) {
            l.finished(&caps, &vol, now_ms);
            if l.is_idle() {
                self.libs.remove(&lib);
            }
        }
    }
}

/// (tape position, id): requests in position order.
type PosSet = BTreeSet<(u64, i64)>;

//! The broker and the library in virtual time: the same placement
//! ([`crate::policy::order::place`]), held queue ([`HeldQueue::pick`]), usage book and FBSNG
//! queues the ledger writer uses, against the simulator's library model
//! ([`mss_adapters::sim::library::Library`]), with the ledger's bookkeeping reduced to what
//! ordering reads (charges at decision, re-dated when the transfer ends; slots outstanding;
//! queue priorities; failed attempts retried after their backoff, `engine/retry.rs`). The
//! engine of `mssbroker simulate` and of the policy tests (FBSNG's worked configurations, the
//! policies' share error held and pass-through). Deterministic: no clock, no randomness beyond
//! the load given, the library's seeded failure coin and the seeded baseline.

use std::collections::HashMap;

use mss_adapters::sim::library::{Library, LibraryConfig, LibraryEvent, Micros};
use mss_adapters::Transfer;

use super::baseline::{Baseline, BaselineQueue};
use super::pending_at_library::PendingAtLibrary;
use crate::domain::{Class, GroupId, PolicySettings, RetrySettings};
use crate::policy::fbsng::Queues;
use crate::policy::multifactor::Qos;
use crate::policy::order::{is_fair, place, Candidate, ShareSnapshotCache};
use crate::policy::queue::HeldQueue;
use crate::policy::reserve::PriorityDemand;
use crate::policy::transition::reprioritised;
use crate::policy::volumes::VolumeQueue;
use crate::shares::UsageBook;

/// Who picks what the broker sends next: the configured policy, or a baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Picker {
    /// `place` and [`HeldQueue::pick`], as `serve` does.
    Policy,
    /// A comparison baseline ([`Baseline`]).
    Baseline(Baseline),
}

mod arrival;
mod cancel;
mod charge;
mod coalesce;
mod library_events;
mod outcome;
mod reprioritise;
mod reserve;
mod retry;
mod volumes;

use arrival::transfer;
pub use arrival::Arrival;
pub use outcome::{target_share, Finished, RunRecord, SentDecision};
#[cfg(test)]
pub(super) use reprioritise::{CHECK_PASSES, PASSES_CHECKED};
pub use volumes::BatchRecord;

/// What the engine keeps of a request between its arrival and its end.
#[derive(Debug, Clone, Copy)]
struct Info {
    id: i64,
    group: GroupId,
    arrived: Micros,
    slots: u32,
    qos: Qos,
    queue: f64,
    /// Its charge while in flight: the benefit, and the date it was charged at (the decision),
    /// both taken back when it ends (`settle`).
    charge: u64,
    charged_ms: i64,
    /// The attempt at the library (from 1), and whether one has started (a retry's start is
    /// no new start: `serve` reports the first).
    attempt: u32,
    started: bool,
}

struct Run<'a> {
    policy: &'a PolicySettings,
    load: &'a [Arrival],
    picker: Picker,
    lib: Library,
    usage: UsageBook,
    /// What decisions read of `usage`, kept while it is current.
    snapshots: ShareSnapshotCache,
    queues: Queues,
    queue: HeldQueue,
    /// Volumes mode: the broker's queue by tape volume.
    volumes: VolumeQueue,
    baseline: BaselineQueue,
    /// Fair-share requests pending at the library by priority (not those of a volume batch).
    pending: PendingAtLibrary,
    outstanding: u32,
    /// id -> what is kept of it, from arrival to end.
    info: HashMap<i64, Info>,
    out: RunRecord,
    now: Micros,
    /// Per group: fair share, and fair share with a share above 0.
    fair: Vec<bool>,
    needs_share: Vec<bool>,
    /// Per group: arrived, not started.
    waiting: Vec<u64>,
    /// Groups with a share above 0 and nothing waiting.
    unsaturated: usize,
    /// Priority-class requests arrived, not started.
    waiting_priority: u64,
    /// When a priority-class request was last seen (arriving or starting), for the drive
    /// reservation's window (`policy::reserve`).
    priority_seen: PriorityDemand,
    /// Slots of priority-class requests at the library.
    priority_slots: u32,
    events: Vec<LibraryEvent>,
    /// Scratch space of re-prioritisation: (id, new priority).
    changes: Vec<(i64, i64)>,
    /// Which read carries each file, and who rides on each carrier.
    /// The reads that may carry each file, oldest first (`engine/coalesce.rs`).
    carriers: HashMap<u64, Vec<coalesce::Carrier>>,
    riders: HashMap<i64, Vec<coalesce::Rider>>,
    /// Failed attempts waiting out their backoff.
    retries: retry::BackoffQueue,
    /// The load's cancels, (when, id), in time order (`engine/cancel.rs`).
    cancels: std::collections::BTreeSet<(Micros, i64)>,
    /// Carriers at the library whose cancel was asked while riders waited on them.
    cancel_requested: std::collections::HashSet<i64>,
}

/// Run `load` (sorted by arrival) until `until` with the configured policy; only what
/// finished by then counts.
pub fn run(
    policy: &PolicySettings,
    library: LibraryConfig,
    load: &[Arrival],
    until: Micros,
) -> RunRecord {
    run_with(policy, library, load, until, Picker::Policy)
}

/// [`run`] with the given picker, failed attempts retried as `[mss]`'s defaults say.
pub fn run_with(
    policy: &PolicySettings,
    library: LibraryConfig,
    load: &[Arrival],
    until: Micros,
    picker: Picker,
) -> RunRecord {
    run_retrying(
        policy,
        library,
        load,
        until,
        picker,
        RetrySettings::default(),
    )
}

/// [`run_with`], failed attempts retried as `retry` says (`[mss] retry_*`).
pub fn run_retrying(
    policy: &PolicySettings,
    library: LibraryConfig,
    load: &[Arrival],
    until: Micros,
    picker: Picker,
    retry: RetrySettings,
) -> RunRecord {
    let mut r = Run::new(policy, load, library, picker, retry);
    let period = policy.order.reprioritise.map(|d| d.as_micros() as Micros);
    let mut next_tick = period;
    let mut i = 0;
    loop {
        if i >= load.len() && r.info.is_empty() {
            // Everything finished: the drives' time is counted up to here (the makespan), not
            // through the dismount delays and unmounts that follow.
            break;
        }
        let next_arrival = load.get(i).map(|a| a.at);
        let next_end = r.lib.next_wakeup();
        let t = [
            next_arrival,
            next_end,
            next_tick.filter(|_| !r.info.is_empty()),
            r.volumes_wakeup(),
            r.reserve_wakeup(),
            r.retries.wakeup(),
            r.cancels_wakeup(),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(t) = t.filter(|&t| t <= until) else {
            break;
        };
        r.now = t;
        let mut events = std::mem::take(&mut r.events);
        r.lib.advance(t, &mut events);
        r.apply(&mut events);
        r.events = events;
        while let Some(a) = load.get(i).filter(|a| a.at <= t) {
            r.arrive(i as i64 + 1, a);
            i += 1;
        }
        r.cancel_due();
        // Ticks that fell in an idle gap (nothing at the library, so left out above) are
        // skipped, not run late: the next is the first on the period's beat at or after now,
        // as `serve`'s timer would have it (now itself: it runs here, before the release).
        if let (Some(nt), Some(p)) = (next_tick, period) {
            if nt < t {
                let p = p.max(1);
                next_tick = Some(nt + (t - nt).div_ceil(p) * p);
            }
        }
        if next_tick == Some(t) {
            r.reprioritise();
            next_tick = period.map(|p| t + p.max(1));
        }
        r.resend_due();
        r.release();
    }
    r.out.unfinished = r.info.len();
    r.out.library = r.lib.stats();
    r.out.priority_changes = r.lib.reprioritised();
    r.out
}

impl<'a> Run<'a> {
    fn new(
        policy: &'a PolicySettings,
        load: &'a [Arrival],
        library: LibraryConfig,
        picker: Picker,
        retry: RetrySettings,
    ) -> Run<'a> {
        let n = policy.groups.len();
        let fair: Vec<bool> = policy.group_ids().map(|g| is_fair(policy, g)).collect();
        let needs_share: Vec<bool> = policy
            .group_ids()
            .map(|g| target_share(policy, g).is_some_and(|t| t > 0.0))
            .collect();
        let seed = library.seed;
        Run {
            policy,
            load,
            picker,
            lib: lean(library),
            usage: UsageBook::new(policy, 0),
            snapshots: ShareSnapshotCache::default(),
            queues: Queues::new(&policy.order.fbsng),
            queue: HeldQueue::default(),
            volumes: VolumeQueue::default(),
            baseline: BaselineQueue::new(seed),
            pending: PendingAtLibrary::for_algorithm(&policy.order.algorithm, n)
                .starving(policy.order.max_wait_ms.is_some()),
            outstanding: 0,
            info: HashMap::with_capacity(load.len()),
            out: RunRecord {
                starts: vec![0; n],
                bytes: vec![0; n],
                max_wait: vec![0; n],
                bulk_starts: vec![0; n],
                max_passed: vec![0; n],
                files: vec![0; n],
                charged: vec![0; n],
                waits: vec![Vec::new(); n],
                start_order: Vec::with_capacity(load.len()),
                start_times: Vec::with_capacity(load.len()),
                finished: Vec::with_capacity(load.len()),
                decisions: Vec::with_capacity(load.len()),
                ..RunRecord::default()
            },
            now: 0,
            unsaturated: needs_share.iter().filter(|&&s| s).count(),
            fair,
            needs_share,
            waiting: vec![0; n],
            waiting_priority: 0,
            priority_seen: PriorityDemand::default(),
            priority_slots: 0,
            events: Vec::new(),
            changes: Vec::new(),
            carriers: HashMap::new(),
            riders: HashMap::new(),
            retries: retry::BackoffQueue::new(retry),
            cancels: (load.iter().zip(1..))
                .filter_map(|(a, id)| Some((a.cancelled_at?.max(a.at), id)))
                .collect(),
            cancel_requested: Default::default(),
        }
    }

    fn now_ms(&self) -> i64 {
        (self.now / 1000) as i64
    }

    fn arrive(&mut self, id: i64, a: &Arrival) {
        let order = &self.policy.order;
        let g = a.group.0;
        let c = Candidate {
            id,
            group: a.group,
            library: String::new(),
            created_ms: self.now_ms(),
            size_bytes: a.size_bytes,
            benefit: a
                .benefit
                .unwrap_or_else(|| crate::policy::benefit(self.policy, "", a.size_bytes)),
            qos: a.qos,
            user: 1.0,
            queue: a.queue,
            slots: order.release.slots("", a.size_bytes),
            passed: 0,
        };
        let info = Info {
            id,
            group: a.group,
            arrived: self.now,
            slots: c.slots,
            qos: a.qos,
            queue: a.queue,
            charge: 0,
            charged_ms: 0,
            attempt: 1,
            started: false,
        };
        self.info.insert(id, info);
        if self.fair[g] {
            self.waiting[g] += 1;
            if self.needs_share[g] && self.waiting[g] == 1 {
                self.unsaturated -= 1;
            }
        } else {
            self.waiting_priority += 1;
            self.priority_seen.seen(self.now_ms());
        }
        if self.ride(&c, a, info) {
            return;
        }
        let fair = self.fair[g];
        if fair && self.by_volume() {
            return self.volumes_push(c, a);
        }
        match (order.held() && fair, self.picker) {
            (true, Picker::Policy) => self.queue.push(c),
            (true, Picker::Baseline(_)) => self.baseline.push(c),
            (false, Picker::Baseline(_)) if fair => {
                let flat = order.band_low;
                self.submit(c, a, Some((flat, None)));
            }
            (false, _) => self.submit(c, a, None),
        }
    }

    /// Decide (unless `decided` says the priority and class already), charge and send to the
    /// library.
    fn submit(&mut self, c: Candidate, a: &Arrival, decided: Option<(i64, Option<Class>)>) {
        let t = transfer(c.id, a, 1);
        self.send(c, t, decided);
    }

    fn send(&mut self, c: Candidate, mut t: Transfer, decided: Option<(i64, Option<Class>)>) {
        let now_ms = self.now_ms();
        let (priority, class) = decided.unwrap_or_else(|| {
            let standing = self
                .snapshots
                .snapshot(self.policy, &self.usage, &self.queues, now_ms);
            let p = place(&self.policy.order, &standing, &c, now_ms);
            (p.mss_priority, Some(p.class))
        });
        t.priority = priority;
        self.out.decisions.push(SentDecision {
            arrival: c.id,
            group: c.group,
            class,
            mss_priority: priority,
        });
        self.usage.add(c.group, i128::from(c.benefit), now_ms);
        let mut arrived = self.now;
        if let Some(info) = self.info.get_mut(&c.id) {
            (info.charge, info.charged_ms) = (c.benefit, now_ms);
            arrived = info.arrived;
        }
        self.outstanding += c.slots;
        if !self.fair[c.group.0] {
            self.priority_slots += c.slots;
        }
        // Re-prioritised at the library as the pass's rule says (a volume's batch keeps its
        // batch's priority); a baseline picker places nothing.
        let fair = self.fair[c.group.0];
        if reprioritised(fair, self.by_volume()) && self.picker == Picker::Policy {
            self.pending
                .add(c.id, c.group, t.priority, (arrived, self.now));
        }
        let file = usize::try_from(c.id - 1)
            .ok()
            .and_then(|i| self.load.get(i))
            .and_then(|a| a.file);
        self.carrier_sent(c.id, file);
        let mut events = std::mem::take(&mut self.events);
        self.lib.submit(t, self.now, &mut events);
        self.apply(&mut events);
        self.events = events;
    }

    fn release(&mut self) {
        if self.by_volume() {
            return self.volumes_release();
        }
        let order = &self.policy.order;
        if !order.held() {
            return;
        }
        loop {
            let limit = order.release.limit_of("");
            let free = (self.reservation()).fair_free(limit, self.outstanding, self.priority_slots);
            if free == 0 {
                return;
            }
            let now_ms = self.now_ms();
            let (c, p) = match self.picker {
                Picker::Policy => {
                    let pick = {
                        let standing =
                            self.snapshots
                                .snapshot(self.policy, &self.usage, &self.queues, now_ms);
                        self.queue.pick(order, &standing, "", free, now_ms)
                    };
                    let Some(pick) = pick else { return };
                    let Some(c) = self.queue.remove(pick.candidate.id) else {
                        return;
                    };
                    for id in &pick.passed_over {
                        if let Some(passed) = self.queue.passed_mut(*id) {
                            *passed += 1;
                        }
                    }
                    let g = c.group.0;
                    self.out.max_passed[g] = self.out.max_passed[g].max(c.passed);
                    (c, (pick.placement.mss_priority, Some(pick.placement.class)))
                }
                Picker::Baseline(b) => {
                    let weights = |g: GroupId| target_share(self.policy, g).unwrap_or(0.0);
                    let Some(c) = self.baseline.pick(b, free, weights) else {
                        return;
                    };
                    (c, (order.band_low, None))
                }
            };
            self.fbsng_started(c.group);
            self.release_one(c, p);
        }
    }

    /// Send a request released from the broker's queue (its volume and position from the load:
    /// request `id` is `load[id - 1]`).
    fn release_one(&mut self, c: Candidate, p: (i64, Option<Class>)) {
        let load = self.load;
        let Some(a) = usize::try_from(c.id - 1).ok().and_then(|i| load.get(i)) else {
            return;
        };
        self.submit(c, a, Some(p));
    }

    fn fbsng_started(&mut self, g: GroupId) {
        if self.policy.order.algorithm != crate::policy::order::Algorithm::Fbsng {
            return;
        }
        self.queues
            .started(&self.policy.order.fbsng, &self.fair, g.0);
    }
}

/// The library with no history: the engine never asks about a finished transfer again, so a
/// week-long trace's memory follows what is in flight.
fn lean(library: LibraryConfig) -> Library {
    let mut lib = Library::new(library);
    lib.forget_finished();
    lib
}

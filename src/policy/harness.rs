//! The ordering policies run against the simulator's library model in virtual time: the same
//! placement ([`super::order::place`]), queue ([`HeldQueue::pick`]), usage book and FBSNG
//! queues the ledger writer uses, with the ledger's bookkeeping reduced to what ordering reads
//! (charges at decision, slots outstanding, queue priorities). Used today only by the policy
//! tests (FBSNG's worked configurations, the policies' share error held and pass-through); it
//! stays in the library, not behind `cfg(test)`, because it is to become the engine of the
//! what-if simulator (the next issue), which will run it from the CLI. Deterministic: no
//! clock, no randomness beyond the load given.

use std::collections::HashMap;

use mss_adapters::sim::library::{Library, LibraryConfig, LibraryEvent, Micros};
use mss_adapters::{Direction, EventKind, Transfer};

use super::fbsng::Queues;
use super::order::{is_fair, place, Candidate, Standing};
use super::queue::HeldQueue;
use crate::domain::{GroupId, PolicySettings};
use crate::shares::UsageBook;

/// One request of the load.
#[derive(Debug, Clone, PartialEq)]
pub struct Arrival {
    pub at: Micros,
    pub group: GroupId,
    pub size_bytes: u64,
    pub volume: Option<String>,
}

/// What happened in a run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// Per group (`GroupId.0`): first starts, bytes done, longest wait from arrival to start.
    pub starts: Vec<u64>,
    pub bytes: Vec<u128>,
    pub max_wait: Vec<Micros>,
    /// Starts of requests taking more than one slot.
    pub bulk_starts: Vec<u64>,
    /// The most times a released request had been passed (FBSNG section priority).
    pub max_passed: Vec<u32>,
    /// Groups in the order their requests started.
    pub start_order: Vec<GroupId>,
    /// (time, group) of each start.
    pub start_times: Vec<(Micros, GroupId)>,
    /// Requests still waiting (broker or MSS) at the end.
    pub unfinished: usize,
}

impl Outcome {
    /// Each fair-share group's share of the bytes done, against its target: the largest
    /// absolute difference in percentage points.
    pub fn share_error(&self, policy: &PolicySettings) -> f64 {
        let fair: Vec<GroupId> = policy.group_ids().filter(|&g| is_fair(policy, g)).collect();
        let total: u128 = fair.iter().map(|g| self.bytes[g.0]).sum();
        if total == 0 {
            return 0.0;
        }
        fair.iter()
            .map(|&g| {
                let share = self.bytes[g.0] as f64 / total as f64;
                let target = match policy.group(g).kind {
                    crate::domain::GroupKind::FairShare { share } => {
                        share.num() as f64 / share.den() as f64
                    }
                    crate::domain::GroupKind::Priority { .. } => 0.0,
                };
                (share - target).abs() * 100.0
            })
            .fold(0.0, f64::max)
    }
}

struct Run<'a> {
    policy: &'a PolicySettings,
    lib: Library,
    usage: UsageBook,
    queues: Queues,
    queue: HeldQueue,
    outstanding: u32,
    /// key -> (group, arrival, slots)
    info: HashMap<String, (GroupId, Micros, u32)>,
    out: Outcome,
    now: Micros,
}

/// Run `load` (sorted by arrival) until `until`; only what finished by then counts.
pub fn run(
    policy: &PolicySettings,
    library: LibraryConfig,
    load: &[Arrival],
    until: Micros,
) -> Outcome {
    let n = policy.groups.len();
    let mut r = Run {
        policy,
        lib: Library::new(library),
        usage: UsageBook::new(policy, 0),
        queues: Queues::new(&policy.order.fbsng),
        queue: HeldQueue::default(),
        outstanding: 0,
        info: HashMap::new(),
        out: Outcome {
            starts: vec![0; n],
            bytes: vec![0; n],
            max_wait: vec![0; n],
            bulk_starts: vec![0; n],
            max_passed: vec![0; n],
            ..Outcome::default()
        },
        now: 0,
    };
    let period = policy.order.reprioritise.map(|d| d.as_micros() as Micros);
    let mut next_tick = period;
    let mut i = 0;
    loop {
        let next_arrival = load.get(i).map(|a| a.at);
        let next_end = r.lib.next_wakeup();
        let t = [
            next_arrival,
            next_end,
            next_tick.filter(|_| !r.info.is_empty()),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(t) = t.filter(|&t| t <= until) else {
            break;
        };
        r.now = t;
        let mut events = Vec::new();
        r.lib.advance(t, &mut events);
        r.apply(events);
        while let Some(a) = load.get(i).filter(|a| a.at <= t) {
            r.arrive(i as i64 + 1, a);
            i += 1;
        }
        if next_tick == Some(t) {
            r.reprioritise();
            next_tick = period.map(|p| t + p);
        }
        r.release();
    }
    r.out.unfinished = r.info.len();
    r.out
}

impl Run<'_> {
    fn now_ms(&self) -> i64 {
        (self.now / 1000) as i64
    }

    fn arrive(&mut self, id: i64, a: &Arrival) {
        let order = &self.policy.order;
        let c = Candidate {
            id,
            group: a.group,
            library: String::new(),
            created_ms: self.now_ms(),
            size_bytes: a.size_bytes,
            benefit: super::benefit(self.policy, "", a.size_bytes),
            qos: super::multifactor::Qos::Normal,
            user: 1.0,
            queue: 0.0,
            slots: order.release.slots("", a.size_bytes),
            passed: 0,
        };
        self.info
            .insert(id.to_string(), (a.group, self.now, c.slots));
        if order.held() && is_fair(self.policy, a.group) {
            self.queue.push(c);
        } else {
            self.submit(c, a.volume.clone(), None);
        }
    }

    /// Decide, charge and send to the library.
    fn submit(&mut self, c: Candidate, volume: Option<String>, priority: Option<i64>) {
        let now_ms = self.now_ms();
        let p = priority.unwrap_or_else(|| {
            let standing = Standing::new(self.policy, self.usage.at(now_ms), &self.queues);
            place(&self.policy.order, &standing, &c, now_ms).mss_priority
        });
        self.usage.add(c.group, i128::from(c.benefit), now_ms);
        self.outstanding += c.slots;
        let t = Transfer {
            key: c.id.to_string(),
            attempt: 1,
            file: String::new(),
            size_bytes: c.size_bytes,
            priority: p,
            volume,
            group: String::new(),
            direction: Direction::Read,
            local_file: None,
            bfid: None,
            position: None,
        };
        let mut events = Vec::new();
        self.lib.submit(t, self.now, &mut events);
        self.apply(events);
    }

    fn release(&mut self) {
        let order = &self.policy.order;
        if !order.held() {
            return;
        }
        loop {
            let free = order.release.limit_of("").saturating_sub(self.outstanding);
            if free == 0 {
                return;
            }
            let now_ms = self.now_ms();
            let pick = {
                let standing = Standing::new(self.policy, self.usage.at(now_ms), &self.queues);
                self.queue.pick(order, &standing, "", free, now_ms)
            };
            let Some(pick) = pick else { return };
            self.queue.remove(pick.candidate.id);
            for id in &pick.passed_over {
                if let Some(w) = self.queue.get_mut(*id) {
                    w.passed += 1;
                }
            }
            let g = pick.candidate.group.0;
            self.out.max_passed[g] = self.out.max_passed[g].max(pick.candidate.passed);
            self.fbsng_started(pick.candidate.group);
            let p = pick.placement.mss_priority;
            self.submit(pick.candidate, None, Some(p));
        }
    }

    fn fbsng_started(&mut self, g: GroupId) {
        if self.policy.order.algorithm != super::order::Algorithm::Fbsng {
            return;
        }
        let fair: Vec<bool> = self
            .policy
            .group_ids()
            .map(|g| is_fair(self.policy, g))
            .collect();
        self.queues.started(&self.policy.order.fbsng, &fair, g.0);
    }

    /// Pass-through: recompute the priority of everything still pending at the library.
    fn reprioritise(&mut self) {
        if self.policy.order.held() {
            return;
        }
        let now_ms = self.now_ms();
        let standing = Standing::new(self.policy, self.usage.at(now_ms), &self.queues);
        let mut changes = Vec::new();
        for (key, &(group, arrived, slots)) in &self.info {
            let Some(job) = self.lib.job(key) else {
                continue;
            };
            if job.phase != mss_adapters::sim::library::Phase::Pending {
                continue;
            }
            let c = Candidate {
                id: key.parse().unwrap_or(0),
                group,
                library: String::new(),
                created_ms: (arrived / 1000) as i64,
                size_bytes: job.transfer.size_bytes,
                benefit: 0,
                qos: super::multifactor::Qos::Normal,
                user: 1.0,
                queue: 0.0,
                slots,
                passed: 0,
            };
            let p = place(&self.policy.order, &standing, &c, now_ms).mss_priority;
            if p != job.transfer.priority {
                changes.push((key.clone(), p));
            }
        }
        changes.sort();
        let mut events = Vec::new();
        for (key, p) in changes {
            self.lib.set_priority(&key, 1, p, self.now, &mut events);
        }
        self.apply(events);
    }

    fn apply(&mut self, events: Vec<LibraryEvent>) {
        for e in events {
            let Some(&(g, arrived, slots)) = self.info.get(&e.key) else {
                continue;
            };
            match e.kind {
                EventKind::Started => {
                    self.out.starts[g.0] += 1;
                    if slots > 1 {
                        self.out.bulk_starts[g.0] += 1;
                    }
                    self.out.start_order.push(g);
                    self.out.start_times.push((e.at, g));
                    let wait = e.at.saturating_sub(arrived);
                    self.out.max_wait[g.0] = self.out.max_wait[g.0].max(wait);
                    if !self.policy.order.held() {
                        self.fbsng_started(g);
                    }
                }
                EventKind::Done { bytes } => {
                    self.out.bytes[g.0] += u128::from(bytes);
                    self.outstanding = self.outstanding.saturating_sub(slots);
                    self.info.remove(&e.key);
                }
                EventKind::Failed { .. } | EventKind::Cancelled => {
                    self.outstanding = self.outstanding.saturating_sub(slots);
                    self.info.remove(&e.key);
                }
            }
        }
    }
}

//! What the writer keeps in memory between transactions ([`WriterState`]), how a transaction
//! changes it ([`Txn`]), and how a failed transaction puts it back: [`WriterState::checkpoint`]
//! before, then [`WriterState::keep`] after COMMIT or [`WriterState::rollback`] after a failure.
//! The small figures are copied at the checkpoint; the large ones (the held queue, the
//! idempotency map of unfinished requests) record each change in a journal that a rollback
//! undoes in reverse.

use std::collections::{BTreeSet, HashMap};

use crate::ledger::db::{params, DbResult, Tx};

use super::coalesce::Carriers;
use super::idempotency::Idempotency;
use super::noted::Changed;
use super::outputs::{Held, Outputs};
use super::queued::{Owner, QueuedBytes};
use crate::domain::{Class, RequestState};
use crate::domain::{GroupId, PolicySettings, RetrySettings};
use crate::ledger::aggregates::ReportDeltas;
use crate::ledger::wide::Wide;
use crate::policy::fbsng::Queues;
use crate::policy::order::VolumeSettings;
use crate::policy::order::{is_fair, place, Algorithm, Candidate, Placement, ShareSnapshot};
use crate::policy::queue::HeldQueue;
use crate::policy::reserve::PriorityDemand;
use crate::policy::volumes::{Batch, VolumeMemory, VolumeQueue};
use crate::shares::{UsageBook, UsageModel};

/// The writer's memory: what a decision reads without a query.
pub(super) struct WriterState {
    /// Every group's usage under the configured model.
    pub usage: UsageBook,
    /// Held requests per group (by group id).
    pub held: Vec<u64>,
    /// Priority-class requests queued at the MSS (submitted, not yet running).
    pub priority_waiting: i64,
    /// When a priority-class request last moved (accepted, submitted, started, ended): the
    /// drive reservation's window runs from it (`policy::reserve`; not kept over a restart).
    pub priority_seen: PriorityDemand,
    /// The held release mode's queue (rows in state `queued`).
    pub queue: HeldQueue,
    /// Slots taken at the MSS per library (requests accepted, submitted or running).
    pub outstanding: HashMap<String, u32>,
    /// FBSNG queue priorities per group.
    pub queues: Queues,
    pub idempotency: Idempotency,
    /// The volumes release mode's queue (rows in state `queued`) and volumes in flight.
    pub volumes: VolumeQueue,
    /// The last `release_seq` given to a request of a volume batch.
    pub release_seq: i64,
    /// `[release.volumes]`, which the volume queue's changes read.
    volume_settings: VolumeSettings,
    /// When time alone next changes what the volume queue may release (a waiting volume
    /// becomes eligible by age, a sticky one lapses), as of the last release pass.
    pub volumes_due: Option<i64>,
    /// Bytes of unfinished requests per group and per user of a station, for the queued-bytes
    /// caps.
    pub queued: QueuedBytes,
    /// Which read may carry each file (`coalesce::Carriers`; changed through
    /// `offer_carrier` and `forget_carrier`, which journal).
    pub carriers: Carriers,
    /// The station-side copy each unfinished read writes (`outputs::Outputs`; changed
    /// through `output_held` and `free_output`, which journal).
    pub outputs: Outputs,
    /// Since the last checkpoint: the copied figures and the journal of the rest.
    checkpoint: Option<Saved>,
    /// From a rolled-back transaction's checkpoint, until the volume queue is reloaded.
    volume_memory: Option<VolumeMemory>,
}

/// The figures copied at a checkpoint (O(groups + libraries); the volume queue's sticky volumes
/// and flights only in a transaction that changes them).
struct Saved {
    usage: UsageBook,
    held: Vec<u64>,
    priority_waiting: i64,
    priority_seen: PriorityDemand,
    outstanding: HashMap<String, u32>,
    queues: Queues,
    release_seq: i64,
    /// What the volume queue's rows do not hold, for a reload after a rollback: taken before
    /// the transaction's first change to the volume queue (`before_volume_change`).
    volume_memory: Option<VolumeMemory>,
    /// The volume queue changed in a way with no cheap inverse (a batch started, a request
    /// ended or left the queue): a rollback reloads it from the rows (see `Writer::rollback`).
    volumes_changed: bool,
    journal: Vec<Undo>,
}

/// One change to the queue, the idempotency map, the carriers or the copies held, undone on
/// rollback.
pub(super) enum Undo {
    Pushed(i64),
    Removed(Candidate),
    Passed(i64),
    Fingerprint(u64, i64),
    FingerprintFinished(u64, i64),
    VolumePushed(i64),
    /// Bytes of (station, user) in a group entered (> 0) or left the tallies.
    Queued(GroupId, String, String, i128),
    CarrierOffered(u64, i64),
    CarrierForgot(u64, i64),
    OutputHeld(i64),
    OutputFreed(i64, Held),
}

impl WriterState {
    pub fn new(
        usage: UsageBook,
        held: Vec<u64>,
        priority_waiting: i64,
        (queue, outstanding, queues): (HeldQueue, HashMap<String, u32>, Queues),
        idempotency: Idempotency,
    ) -> WriterState {
        WriterState {
            usage,
            held,
            priority_waiting,
            priority_seen: PriorityDemand::default(),
            queue,
            outstanding,
            queues,
            idempotency,
            volumes: VolumeQueue::default(),
            release_seq: 0,
            volume_settings: VolumeSettings::default(),
            volumes_due: None,
            queued: QueuedBytes::default(),
            carriers: Carriers::default(),
            outputs: Outputs::default(),
            checkpoint: None,
            volume_memory: None,
        }
    }

    /// The queued-bytes tallies, as loaded.
    pub fn with_queued(mut self, queued: QueuedBytes) -> WriterState {
        self.queued = queued;
        self
    }

    /// The volumes mode's queue and volumes in flight, and the last release sequence, as loaded.
    pub fn with_volumes(
        mut self,
        settings: &VolumeSettings,
        volumes: VolumeQueue,
        release_seq: i64,
    ) -> WriterState {
        self.volume_settings = settings.clone();
        self.volumes = volumes;
        self.release_seq = release_seq;
        self.volumes_due = Some(i64::MIN); // look at once
        self
    }

    /// The volume queue reloaded from the rows after a rollback, given back what the rows do
    /// not hold as it was before the rolled-back transaction.
    pub fn reload_volumes(&mut self, mut volumes: VolumeQueue) {
        if let Some(memory) = self.volume_memory.take() {
            volumes.restore(memory);
        }
        self.volumes = volumes;
    }

    /// Nothing is held or queued, and no waiting volume's time has come at `now`: the release
    /// timer has nothing to do. (A volume that is eligible with room for it was released by the
    /// transaction that made it so; one waiting for room is released by the event that makes
    /// room.)
    pub fn nothing_waiting(&self, now: i64) -> bool {
        let volumes_idle = self.volumes.is_empty() || self.volumes_due.is_none_or(|t| now < t);
        self.held.iter().all(|&h| h == 0) && self.queue.is_empty() && volumes_idle
    }

    /// What the writer sees of the priority classes: requests queued at the MSS, and when one
    /// last moved (`policy::reserve`).
    pub fn priority_demand(&self) -> PriorityDemand {
        PriorityDemand {
            waiting: u64::try_from(self.priority_waiting).unwrap_or(0),
            last_seen_ms: self.priority_seen.last_seen_ms,
        }
    }

    /// Remember the present, so a failed transaction can come back to it.
    pub fn checkpoint(&mut self) {
        self.checkpoint = Some(Saved {
            usage: self.usage.clone(),
            held: self.held.clone(),
            priority_waiting: self.priority_waiting,
            priority_seen: self.priority_seen,
            outstanding: self.outstanding.clone(),
            queues: self.queues.clone(),
            release_seq: self.release_seq,
            volume_memory: None,
            volumes_changed: false,
            journal: Vec::new(),
        });
    }

    /// The transaction committed: forget the checkpoint (and what an earlier rollback left for
    /// a reload that has not happened: it is older than this commit).
    pub fn keep(&mut self) {
        self.checkpoint = None;
        self.volume_memory = None;
    }

    /// The transaction rolled back: back to the checkpoint. Returns whether the volume queue
    /// must be reloaded from the rows (it changed in a way the journal cannot undo).
    pub fn rollback(&mut self) -> bool {
        let Some(saved) = self.checkpoint.take() else {
            return false;
        };
        self.release_seq = saved.release_seq;
        self.volumes_due = Some(i64::MIN); // look again at the next chance
        let reload = saved.volumes_changed;
        if reload {
            self.volume_memory = saved.volume_memory;
        }
        self.usage = saved.usage;
        self.held = saved.held;
        self.priority_waiting = saved.priority_waiting;
        self.priority_seen = saved.priority_seen;
        self.outstanding = saved.outstanding;
        self.queues = saved.queues;
        for op in saved.journal.into_iter().rev() {
            match op {
                Undo::Pushed(id) => {
                    self.queue.remove(id);
                }
                Undo::Removed(c) => self.queue.push(c),
                Undo::Passed(id) => {
                    if let Some(passed) = self.queue.passed_mut(id) {
                        *passed = passed.saturating_sub(1);
                    }
                }
                Undo::Fingerprint(fp, id) => self.idempotency.remove(fp, id),
                Undo::FingerprintFinished(fp, id) => self.idempotency.insert(fp, id),
                Undo::VolumePushed(id) => {
                    if !reload {
                        self.volumes.remove(&self.volume_settings, id);
                    }
                }
                Undo::Queued(g, station, user, delta) => {
                    let owner = Owner {
                        station: &station,
                        user: &user,
                    };
                    self.queued.add(g, owner, -delta);
                }
                Undo::CarrierOffered(key, id) => {
                    self.carriers.forget(key, id);
                }
                Undo::CarrierForgot(key, id) => {
                    self.carriers.offer(key, id);
                }
                Undo::OutputHeld(id) => {
                    self.outputs.free(id);
                }
                Undo::OutputFreed(id, held) => {
                    self.outputs.hold(id, held);
                }
            }
        }
        reload
    }

    pub(super) fn journal(&mut self, op: Undo) {
        if let Some(saved) = &mut self.checkpoint {
            saved.journal.push(op);
        }
    }

    pub fn enqueue(&mut self, c: Candidate) {
        self.journal(Undo::Pushed(c.id));
        self.queue.push(c);
    }

    pub fn dequeue(&mut self, id: i64) {
        if let Some(c) = self.queue.remove(id) {
            self.journal(Undo::Removed(c));
        }
    }

    /// A queued request was passed over by another release.
    pub fn passed_over(&mut self, id: i64) {
        if let Some(passed) = self.queue.passed_mut(id) {
            *passed = passed.saturating_add(1);
            self.journal(Undo::Passed(id));
        }
    }

    /// Queue a request in the volumes mode, on `volume` at `position`.
    pub fn enqueue_volume(&mut self, c: Candidate, volume: Option<&str>, position: Option<u64>) {
        self.journal(Undo::VolumePushed(c.id));
        self.volumes
            .push(&self.volume_settings, c, volume, position);
    }

    /// Put a request without a volume into the volume queue to wait for the volume lookup.
    pub fn enqueue_unlocated(&mut self, c: Candidate) {
        self.journal(Undo::VolumePushed(c.id));
        self.volumes.push_unlocated(&self.volume_settings, c);
    }

    /// A lookup answered for request `id`: if it waits in the volume queue, it moves to
    /// `volume` (`None`: its group's requests without a volume). Whether it moved.
    pub fn relocate_volume(
        &mut self,
        id: i64,
        volume: Option<&str>,
        position: Option<u64>,
    ) -> bool {
        self.before_volume_change();
        let moved = self
            .volumes
            .relocate(&self.volume_settings, id, volume, position);
        if moved {
            self.volumes_changed();
        }
        moved
    }

    /// Take a request out of the volume queue (cancelled, or held again).
    pub fn dequeue_volume(&mut self, id: i64) {
        self.before_volume_change();
        if self.volumes.remove(&self.volume_settings, id).is_some() {
            self.volumes_changed();
        }
    }

    /// A volume batch was released: its requests leave the queue, its volume is in flight.
    pub fn volume_batch_started(&mut self, policy: &PolicySettings, batch: &Batch, now: i64) {
        self.before_volume_change();
        self.volumes
            .batch_started(&self.volume_settings, policy, batch, now);
        self.volumes_changed();
    }

    /// Request `id` takes over released request `carrier`'s read: it joins the carrier's volume
    /// flight, if the carrier is in one. Whether it did.
    pub fn volume_join_flight(&mut self, id: i64, carrier: i64) -> bool {
        self.before_volume_change();
        let joined = self.volumes.join_flight(id, carrier);
        if joined {
            self.volumes_changed();
        }
        joined
    }

    /// A released request ended at the MSS (its volume leaves flight with its last one).
    pub fn volume_request_finished(&mut self, policy: &PolicySettings, id: i64, now: i64) {
        self.before_volume_change();
        let before = self.volumes.in_flight_requests();
        self.volumes.request_finished(policy, id, now);
        if self.volumes.in_flight_requests() != before {
            self.volumes_changed();
        }
    }

    /// The volume queue is about to change in a way a rollback answers with a reload from the
    /// rows: the checkpoint keeps what the rows do not hold, once per transaction
    /// (O(sticky volumes + volumes in flight)).
    fn before_volume_change(&mut self) {
        if let Some(saved) = &mut self.checkpoint {
            if saved.volume_memory.is_none() {
                saved.volume_memory = Some(self.volumes.memory());
            }
        }
    }

    fn volumes_changed(&mut self) {
        if let Some(saved) = &mut self.checkpoint {
            saved.volumes_changed = true;
        }
    }

    pub fn remember(&mut self, fp: u64, id: i64) {
        self.idempotency.insert(fp, id);
        self.journal(Undo::Fingerprint(fp, id));
    }

    /// Request `id` is final: its fingerprint leaves memory (it is looked up on disk now).
    pub fn forget(&mut self, fp: u64, id: i64) {
        self.idempotency.remove(fp, id);
        self.journal(Undo::FingerprintFinished(fp, id));
    }

    /// A fair-share request's bytes entered (`delta` > 0: accepted) or left (it ended) the
    /// tallies.
    pub fn queued_bytes(&mut self, g: GroupId, owner: Owner<'_>, delta: i128) {
        if delta != 0 {
            self.queued.add(g, owner, delta);
            let (station, user) = (owner.station.to_string(), owner.user.to_string());
            self.journal(Undo::Queued(g, station, user, delta));
        }
    }
}

/// One change to a group's figures; summed per group in [`Deltas`].
#[derive(Default, Clone, Copy)]
pub(super) struct Charge {
    /// Benefit charged (negative: refunded) ...
    pub usage: i128,
    /// ... dated (a refund names the date of the charge it takes back; unused in a sum).
    pub at_ms: i64,
    pub bytes: i128,
    pub pending: i64,
    pub held: i64,
}

impl Charge {
    /// A change of the held count only.
    pub fn held(n: i64) -> Charge {
        Charge {
            held: n,
            ..Charge::default()
        }
    }

    fn absorb(&mut self, c: &Charge) {
        self.usage += c.usage;
        self.bytes += c.bytes;
        self.pending += c.pending;
        self.held += c.held;
    }

    fn is_zero(&self) -> bool {
        self.usage == 0 && self.bytes == 0 && self.pending == 0 && self.held == 0
    }
}

/// Per-group changes of one transaction, written once before COMMIT.
#[derive(Default)]
pub(super) struct Deltas {
    groups: HashMap<String, Charge>,
    /// (path, window) -> usage, for the windows model
    windows: HashMap<(String, i64), i128>,
    /// Groups whose half-life accumulator changed (written as absolute values).
    decayed: BTreeSet<GroupId>,
    /// The FBSNG queue priorities changed.
    queues: bool,
}

/// One transaction at work: the open SQL transaction, the writer's memory and what this
/// transaction adds up (deltas, report aggregates, whether something became ready).
pub(super) struct Txn<'a, 'c> {
    pub tx: &'a Tx<'c>,
    /// This ledger's MSS keys (an event's key to its request).
    pub keys: &'a super::super::mss_key::MssKeys,
    pub policy: &'a PolicySettings,
    pub retry: &'a RetrySettings,
    pub st: &'a mut WriterState,
    pub now: i64,
    pub deltas: Deltas,
    pub report: ReportDeltas,
    /// Some request became ready to submit.
    pub ready: bool,
    /// MSS events for keys this ledger did not issue (counted once committed).
    pub unknown_keys: u64,
    /// The `requests` rows this transaction changed, for a reload being prepared.
    pub changed: Changed,
}

impl Txn<'_, '_> {
    /// Request row `id` was inserted or changed: every statement that writes a `requests` row
    /// calls this (a reload being prepared catches up with those rows, `noted.rs`).
    pub fn note(&self, id: i64) {
        self.changed.note(id);
    }

    /// Slots a request takes at the MSS from now (`+`) or no longer (`-`).
    pub fn occupy(&mut self, library: &str, slots: u32, taken: bool) {
        let e = self.st.outstanding.entry(library.to_string()).or_default();
        *e = if taken {
            e.saturating_add(slots)
        } else {
            e.saturating_sub(slots)
        };
    }

    /// FBSNG: a request of `group` started (held mode: was released).
    pub fn fbsng_started(&mut self, group: GroupId) {
        let policy = self.policy;
        if policy.order.algorithm != Algorithm::Fbsng || !is_fair(policy, group) {
            return;
        }
        let fair: Vec<bool> = policy.group_ids().map(|g| is_fair(policy, g)).collect();
        self.st.queues.started(&policy.order.fbsng, &fair, group.0);
        self.deltas.queues = true;
    }

    /// A request of `class` moves from `from` to `to`: keep the count of priority-class
    /// requests queued at the MSS. (One still in the broker is submitted before any fair-share
    /// request, so only the MSS can start a fair-share request over it; counting the moments
    /// between its commit and its submission would count the submit loop's latency.)
    pub fn moved(&mut self, class: Class, from: Option<RequestState>, to: RequestState) {
        if class != Class::Priority {
            return;
        }
        self.st.priority_seen.seen(self.now);
        let waiting = |s: Option<RequestState>| matches!(s, Some(RequestState::Submitted));
        self.st.priority_waiting += i64::from(waiting(Some(to))) - i64::from(waiting(from));
    }

    /// Change a group's usage, bytes and counts, in memory and in this transaction's deltas.
    pub fn charge(&mut self, path: &str, c: Charge) {
        let policy = self.policy;
        if let Some(g) = policy.group_by_path(path) {
            if c.usage != 0 {
                self.st.usage.add(g, c.usage, c.at_ms);
                match policy.usage_model {
                    UsageModel::HalfLife { .. } => {
                        self.deltas.decayed.insert(g);
                    }
                    UsageModel::Windows { .. } => {
                        let w = policy.usage_model.window_of(c.at_ms);
                        *self
                            .deltas
                            .windows
                            .entry((path.to_string(), w))
                            .or_default() += c.usage;
                    }
                    UsageModel::Cumulative => {}
                }
            }
            if let Some(h) = self.st.held.get_mut(g.0) {
                *h = h.saturating_add_signed(c.held);
            }
        }
        self.deltas
            .groups
            .entry(path.to_string())
            .or_default()
            .absorb(&c);
    }

    /// Where request `c` goes now, under the configured policy.
    pub fn placement(&self, c: &Candidate) -> Placement {
        let standing = ShareSnapshot::new(self.policy, self.st.usage.at(self.now), &self.st.queues);
        place(&self.policy.order, &standing, c, self.now)
    }

    /// Write the per-group deltas, the half-life accumulators and the queue priorities (each
    /// row gathered on PostgreSQL: `Db::insert`, `Db::update`).
    pub fn flush_deltas(&self) -> DbResult<()> {
        let (tx, deltas, policy) = (self.tx, &self.deltas, self.policy);
        for (path, c) in deltas.groups.iter().filter(|(_, c)| !c.is_zero()) {
            let (usage, bytes) = (Wide(c.usage), Wide(c.bytes));
            tx.insert(GROUP_DELTAS, params![path, usage, bytes, c.pending, c.held])?;
        }
        // The accumulator is written whole: the stored value is bit for bit the one in memory,
        // so a restart reads back exactly what the decisions used.
        for &g in &deltas.decayed {
            let (path, decayed) = (policy.group(g).path.as_str(), self.st.usage.decayed(g));
            tx.update(
                "UPDATE groups SET decayed = ?2 WHERE path = ?1",
                params![path, decayed],
            )?;
        }
        if deltas.queues {
            for g in policy.group_ids().filter(|&g| is_fair(policy, g)) {
                let (path, queue) = (policy.group(g).path.as_str(), self.st.queues.get(g.0));
                tx.update(
                    "UPDATE groups SET queue_priority = ?2 WHERE path = ?1",
                    params![path, queue],
                )?;
            }
        }
        for ((path, window), usage) in &deltas.windows {
            if *usage != 0 {
                tx.insert(WINDOW_DELTAS, params![path, window, Wide(*usage)])?;
            }
        }
        Ok(())
    }
}

/// A group's changes in a transaction, added to its row.
const GROUP_DELTAS: &str = "INSERT INTO groups(path, usage, usage_bytes, pending, held) \
     VALUES (?1, ?2, ?3, ?4, ?5) \
     ON CONFLICT(path) DO UPDATE SET usage = wide_add(groups.usage, excluded.usage), \
     usage_bytes = wide_add(groups.usage_bytes, excluded.usage_bytes), \
     pending = groups.pending + excluded.pending, \
     held = groups.held + excluded.held";

/// A usage window's benefit in a transaction, added to its row.
const WINDOW_DELTAS: &str =
    "INSERT INTO usage_windows(path, \"window\", usage) VALUES (?1, ?2, ?3) \
     ON CONFLICT(path, \"window\") DO UPDATE SET \
     usage = wide_add(usage_windows.usage, excluded.usage)";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;
    use crate::policy::multifactor::Qos;

    const CONFIG: &str = r#"
[policy]
p_front = 20
p_back = 10
[shares]
a = 1
b = 1
[mss]
adapter = "http"
url = "http://127.0.0.1:1"
"#;

    /// The one owner of the tallies these tests change.
    const U: Owner<'static> = Owner {
        station: "st",
        user: "u",
    };

    /// A writer's state on `policy` with nothing in it but `queue`.
    fn state_with(policy: &PolicySettings, queue: HeldQueue) -> WriterState {
        WriterState::new(
            UsageBook::new(policy, 0),
            vec![0; policy.groups.len()],
            0,
            (queue, HashMap::new(), Queues::new(&policy.order.fbsng)),
            Idempotency::default(),
        )
    }

    fn candidate(id: i64) -> Candidate {
        Candidate {
            id,
            group: GroupId(0),
            library: String::new(),
            created_ms: id,
            size_bytes: 10,
            benefit: 10,
            qos: Qos::Normal,
            user: 1.0,
            queue: 1.0,
            slots: 1,
            passed: 0,
        }
    }

    /// Everything a transaction changed in memory comes back at rollback: the copied figures
    /// and, in reverse, the journalled queue and idempotency changes; `keep` forgets them.
    #[test]
    fn rollback_returns_to_the_checkpoint_and_keep_forgets_it() {
        let settings = Settings::parse(CONFIG, "test").unwrap();
        let policy = &settings.policy;
        let mut queue = HeldQueue::default();
        queue.push(candidate(1));
        queue.push(candidate(2));
        let mut st = state_with(policy, queue);
        st.checkpoint();
        st.usage.add(GroupId(0), 500, 0);
        st.held[1] = 3;
        st.priority_waiting = 2;
        st.outstanding.insert("lib".into(), 4);
        st.enqueue(candidate(3));
        st.dequeue(1);
        st.passed_over(2);
        st.passed_over(2);
        st.remember(42, 3);
        st.queued_bytes(GroupId(0), U, 500);
        st.rollback();
        let q = &st.queued;
        assert!(q.by_user.is_empty() && q.by_group.iter().all(|&b| b == 0));
        assert_eq!(st.usage.cumulative(GroupId(0)), 0);
        assert_eq!((st.held[1], st.priority_waiting), (0, 0));
        assert!(st.outstanding.is_empty());
        assert_eq!(st.queue.len(), 2);
        assert!(st.queue.get(1).is_some() && st.queue.get(3).is_none());
        assert_eq!(st.queue.get(2).map(|c| c.passed), Some(0));
        assert_eq!(st.idempotency.candidates(42).count(), 0);

        st.checkpoint();
        st.enqueue(candidate(3));
        st.remember(42, 3);
        st.keep();
        st.rollback(); // nothing to go back to
        assert!(st.queue.get(3).is_some());
        assert_eq!(st.idempotency.candidates(42).collect::<Vec<_>>(), [3]);
    }

    /// A rollback replays the queued-bytes journal backwards through the tallies' own
    /// arithmetic: exact only if no step of the transaction was clamped. Tallies past u64 (each
    /// size up to i64::MAX) come back to exactly what they were.
    #[test]
    fn a_rollback_restores_queued_tallies_past_u64_exactly() {
        let settings = Settings::parse(CONFIG, "test").unwrap();
        let policy = &settings.policy;
        let mut st = state_with(policy, HeldQueue::default());
        let most = i128::from(i64::MAX);
        st.queued_bytes(GroupId(0), U, most);
        st.queued_bytes(GroupId(0), U, most);
        let before = st.queued.clone();
        st.checkpoint();
        st.queued_bytes(GroupId(0), U, most);
        st.rollback();
        assert_eq!(st.queued, before);
        st.checkpoint();
        st.queued_bytes(GroupId(0), U, most);
        st.keep();
        st.queued_bytes(GroupId(0), U, -most);
        assert_eq!(st.queued, before, "and so does taking bytes away again");
    }

    /// The volume queue: a push is undone from the journal; a batch start or a request's end
    /// has no cheap inverse, so the rollback asks for a reload from the rows; the release
    /// sequence comes back either way; `keep` forgets it all.
    #[test]
    fn volume_queue_changes_are_undone_or_reloaded() {
        let settings = Settings::parse(CONFIG, "test").unwrap();
        let policy = &settings.policy;
        let volumes = &policy.order.release.volumes;
        let mut st = state_with(policy, HeldQueue::default()).with_volumes(
            volumes,
            VolumeQueue::default(),
            7,
        );
        st.enqueue_volume(candidate(1), Some("VA"), Some(10));
        assert!(!st.nothing_waiting(0), "a loaded queue is looked at once");

        st.checkpoint();
        st.enqueue_volume(candidate(2), Some("VA"), Some(5));
        st.release_seq += 2;
        assert!(!st.rollback(), "a push alone is undone from the journal");
        assert_eq!(st.volumes.len(), 1);
        assert!(st.volumes.get(2).is_none());
        assert_eq!(st.release_seq, 7);

        st.checkpoint();
        let batch = Batch {
            library: String::new(),
            volume: crate::policy::volumes::VolumeId::Tape("VA".into()),
            group: GroupId(0),
            reason: crate::policy::volumes::BatchReason::Chosen,
            requests: vec![candidate(1)],
            bytes: 10,
            ride_capped: vec![],
            remainder: vec![],
        };
        st.volume_batch_started(policy, &batch, 0);
        assert!(st.volumes.is_empty());
        assert!(st.rollback(), "a batch start asks for a reload");

        st.checkpoint();
        st.volume_request_finished(policy, 99, 0); // not in flight: no change
        st.dequeue_volume(99);
        assert!(!st.rollback());

        st.checkpoint();
        st.enqueue_volume(candidate(3), None, None);
        st.keep();
        assert!(!st.rollback()); // nothing to go back to
        assert!(st.volumes.get(3).is_some());
    }
}

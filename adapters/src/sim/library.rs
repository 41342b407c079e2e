//! A pure model of an Enstore-like library manager: a queue of pending transfers ordered by
//! priority (higher first) then arrival, N drives, a mount delay whenever a drive has to change
//! volume, a fixed transfer rate and optional failures. Optionally it ages waiting transfers as
//! Enstore's library manager does ([`Aging`]).
//!
//! It does no I/O and owns no clock: callers say what time it is. The simulator server drives it
//! from the wall clock scaled by a factor; tests and the broker's policy tests drive it in virtual
//! time. Failures are decided by a hash of (seed, key, attempt), so a run is reproducible.

use std::collections::{BTreeMap, HashMap};

use crate::protocol::{EventKind, Received, Transfer};

/// Virtual time in microseconds.
pub type Micros = u64;

/// How the simulated library behaves.
#[derive(Debug, Clone, PartialEq)]
pub struct LibraryConfig {
    pub drives: usize,
    /// Time to mount a volume on a drive (dismount included).
    pub mount_micros: Micros,
    /// Transfer rate of one drive.
    pub bytes_per_sec: u64,
    /// Fraction of transfers that fail (retryably) at their end, in [0, 1].
    pub failure_rate: f64,
    pub seed: u64,
    /// Raise waiting transfers' priority with time, as Enstore does (`None`: never).
    pub aging: Option<Aging>,
}

/// Enstore's library manager ages its queues whatever the ticket asks: every `AGE_TIME` (30
/// minutes) a waiting queue gains `DELTA_PRI` (1), and the ticket's `--delpri`/`--age-time`
/// are not used (Enstore-org/enstore `src/manage_queue.py`, `SortedList.update`). Enstore ages
/// a volume's list from its creation; this model ages each transfer from its arrival, which is
/// the same for a list of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aging {
    /// Priority gained per period (`DELTA_PRI`).
    pub delta_pri: i64,
    /// The period (`AGE_TIME`), in virtual microseconds.
    pub every_micros: Micros,
}

impl Aging {
    /// Enstore's constants: 1 every 30 minutes.
    pub const ENSTORE: Aging = Aging {
        delta_pri: 1,
        every_micros: 30 * 60 * 1_000_000,
    };

    /// The priority gained after waiting `waited`.
    pub fn gain(&self, waited: Micros) -> i64 {
        let periods = waited / self.every_micros.max(1);
        self.delta_pri
            .saturating_mul(i64::try_from(periods).unwrap_or(i64::MAX))
    }
}

impl Default for LibraryConfig {
    fn default() -> Self {
        LibraryConfig {
            drives: 4,
            mount_micros: 60_000_000,
            bytes_per_sec: 300_000_000,
            failure_rate: 0.0,
            seed: 1,
            aging: None,
        }
    }
}

/// Where a transfer is in the library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Pending,
    Running,
    Done,
    Failed,
    Cancelled,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "pending",
            Phase::Running => "running",
            Phase::Done => "done",
            Phase::Failed => "failed",
            Phase::Cancelled => "cancelled",
        }
    }

    fn is_final_failure(self) -> bool {
        matches!(self, Phase::Failed | Phase::Cancelled)
    }
}

/// One transfer the library knows about.
#[derive(Debug, Clone)]
pub struct Job {
    pub transfer: Transfer,
    pub mss_id: String,
    pub phase: Phase,
    pub arrival: u64,
    /// When it was queued (for aging).
    pub queued_at: Micros,
    pub bytes_done: u64,
}

/// What the library said to a submission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    pub mss_id: String,
    pub duplicate: bool,
}

/// What the library said to a cancellation (or a priority change).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// Done: cancelled (or re-prioritised).
    Cancelled,
    /// Already running or finished: nothing to cancel.
    TooLate(Phase),
    Unknown,
}

/// An event with the virtual time it happened at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibraryEvent {
    pub at: Micros,
    pub key: String,
    pub attempt: u32,
    pub kind: EventKind,
}

#[derive(Debug, Clone, Default)]
struct Drive {
    volume: Option<String>,
    /// Key of the running job and when it ends.
    busy: Option<(String, Micros)>,
}

/// The library manager.
#[derive(Debug, Clone)]
pub struct Library {
    cfg: LibraryConfig,
    /// (negated priority, arrival) -> key: the first entry is the next to start.
    queue: BTreeMap<(i64, u64), String>,
    jobs: HashMap<String, Job>,
    drives: Vec<Drive>,
    next_arrival: u64,
    received: Vec<Received>,
    duplicates: u64,
    mounts: u64,
    reprioritised: u64,
    /// The time the library has been advanced to.
    now: Micros,
}

impl Library {
    pub fn new(cfg: LibraryConfig) -> Library {
        let drives = vec![Drive::default(); cfg.drives.max(1)];
        Library {
            cfg,
            queue: BTreeMap::new(),
            jobs: HashMap::new(),
            drives,
            next_arrival: 0,
            received: Vec::new(),
            duplicates: 0,
            mounts: 0,
            reprioritised: 0,
            now: 0,
        }
    }

    /// Queue a transfer arriving at `now` (the library is first advanced to `now`, so the
    /// transfer never starts before it arrived). The same key is a duplicate unless its earlier
    /// attempt failed or was cancelled and this one has a higher attempt number.
    pub fn submit(
        &mut self,
        transfer: Transfer,
        now: Micros,
        out: &mut Vec<LibraryEvent>,
    ) -> Admission {
        self.advance(now, out);
        let admission = self.enqueue(transfer);
        self.start_pending(self.now, out);
        admission
    }

    fn enqueue(&mut self, transfer: Transfer) -> Admission {
        if let Some(job) = self.jobs.get(&transfer.key) {
            let again = job.phase.is_final_failure() && transfer.attempt > job.transfer.attempt;
            if !again {
                self.duplicates += 1;
                return Admission {
                    mss_id: job.mss_id.clone(),
                    duplicate: true,
                };
            }
        }
        let arrival = self.next_arrival;
        self.next_arrival += 1;
        let mss_id = format!("sim-{arrival}");
        self.received.push(Received {
            key: transfer.key.clone(),
            attempt: transfer.attempt,
            priority: transfer.priority,
            size_bytes: transfer.size_bytes,
            group: transfer.group.clone(),
        });
        self.queue
            .insert((-transfer.priority, arrival), transfer.key.clone());
        self.jobs.insert(
            transfer.key.clone(),
            Job {
                transfer,
                mss_id: mss_id.clone(),
                phase: Phase::Pending,
                arrival,
                queued_at: self.now,
                bytes_done: 0,
            },
        );
        Admission {
            mss_id,
            duplicate: false,
        }
    }

    /// Drop a pending transfer.
    pub fn cancel(&mut self, key: &str, now: Micros, out: &mut Vec<LibraryEvent>) -> CancelOutcome {
        self.advance(now, out);
        let Some(job) = self.jobs.get_mut(key) else {
            return CancelOutcome::Unknown;
        };
        if job.phase != Phase::Pending {
            return CancelOutcome::TooLate(job.phase);
        }
        self.queue.remove(&(-job.transfer.priority, job.arrival));
        job.phase = Phase::Cancelled;
        out.push(LibraryEvent {
            at: now,
            key: key.to_string(),
            attempt: job.transfer.attempt,
            kind: EventKind::Cancelled,
        });
        CancelOutcome::Cancelled
    }

    /// Give a pending transfer (this attempt) a new priority; it keeps its arrival, so among
    /// equal priorities it stays where it was. Running or finished transfers are too late.
    pub fn set_priority(
        &mut self,
        key: &str,
        attempt: u32,
        priority: i64,
        now: Micros,
        out: &mut Vec<LibraryEvent>,
    ) -> CancelOutcome {
        self.advance(now, out);
        let Some(job) = self.jobs.get_mut(key) else {
            return CancelOutcome::Unknown;
        };
        if job.transfer.attempt != attempt {
            return CancelOutcome::Unknown;
        }
        if job.phase != Phase::Pending {
            return CancelOutcome::TooLate(job.phase);
        }
        if let Some(k) = self.queue.remove(&(-job.transfer.priority, job.arrival)) {
            self.queue.insert((-priority, job.arrival), k);
        }
        job.transfer.priority = priority;
        self.reprioritised += 1;
        CancelOutcome::Cancelled
    }

    /// Priority changes taken.
    pub fn reprioritised(&self) -> u64 {
        self.reprioritised
    }

    /// Run the library up to `now`: finish transfers whose time has come, in time order, and
    /// start pending ones on free drives. Events are appended to `out` in the order they happen.
    pub fn advance(&mut self, now: Micros, out: &mut Vec<LibraryEvent>) {
        let now = now.max(self.now);
        self.start_pending(self.now, out);
        while let Some((drive, end)) = self.earliest_completion() {
            if end > now {
                break;
            }
            self.complete(drive, end, out);
            self.start_pending(end, out);
        }
        self.now = now;
        self.start_pending(now, out);
    }

    /// When the next transfer ends, if any is running.
    pub fn next_wakeup(&self) -> Option<Micros> {
        self.earliest_completion().map(|(_, end)| end)
    }

    pub fn job(&self, key: &str) -> Option<&Job> {
        self.jobs.get(key)
    }

    pub fn received(&self) -> &[Received] {
        &self.received
    }

    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }

    pub fn pending(&self) -> usize {
        self.queue.len()
    }

    pub fn running(&self) -> usize {
        self.drives.iter().filter(|d| d.busy.is_some()).count()
    }

    pub fn mounts(&self) -> u64 {
        self.mounts
    }

    fn earliest_completion(&self) -> Option<(usize, Micros)> {
        self.drives
            .iter()
            .enumerate()
            .filter_map(|(i, d)| d.busy.as_ref().map(|(_, end)| (i, *end)))
            .min_by_key(|&(i, end)| (end, i))
    }

    fn complete(&mut self, drive: usize, at: Micros, out: &mut Vec<LibraryEvent>) {
        let Some((key, _)) = self.drives[drive].busy.take() else {
            return;
        };
        let Some(job) = self.jobs.get_mut(&key) else {
            return;
        };
        let attempt = job.transfer.attempt;
        let kind = if fails(self.cfg.seed, &key, attempt, self.cfg.failure_rate) {
            job.phase = Phase::Failed;
            EventKind::Failed {
                reason: "simulated drive error".to_string(),
                retryable: true,
            }
        } else {
            job.phase = Phase::Done;
            job.bytes_done = job.transfer.size_bytes;
            EventKind::Done {
                bytes: job.transfer.size_bytes,
            }
        };
        out.push(LibraryEvent {
            at,
            key,
            attempt,
            kind,
        });
    }

    /// Start queued transfers on free drives at time `at`, highest priority first; a drive that
    /// already holds the transfer's volume is preferred, to save a mount.
    fn start_pending(&mut self, at: Micros, out: &mut Vec<LibraryEvent>) {
        loop {
            if !self.drives.iter().any(|d| d.busy.is_none()) {
                return;
            }
            let Some((slot, key)) = self.next_pending(at) else {
                return;
            };
            self.queue.remove(&slot);
            self.start(key, at, out);
        }
    }

    /// The pending transfer to start next at `at`: the queue's first, or with aging the highest
    /// aged priority, the earliest arrival among equals.
    fn next_pending(&self, at: Micros) -> Option<((i64, u64), String)> {
        let Some(aging) = self.cfg.aging else {
            return self.queue.iter().next().map(|(s, k)| (*s, k.clone()));
        };
        self.queue
            .iter()
            .max_by_key(|((neg, arrival), key)| {
                let queued_at = self.jobs.get(*key).map_or(at, |j| j.queued_at);
                let aged = (-neg).saturating_add(aging.gain(at.saturating_sub(queued_at)));
                (aged, std::cmp::Reverse(*arrival))
            })
            .map(|(s, k)| (*s, k.clone()))
    }

    fn start(&mut self, key: String, at: Micros, out: &mut Vec<LibraryEvent>) {
        let Some(job) = self.jobs.get_mut(&key) else {
            return;
        };
        let volume = job.transfer.volume.clone();
        let free = |d: &&mut Drive| d.busy.is_none();
        let mounted = volume.is_some();
        let drive = self
            .drives
            .iter_mut()
            .filter(free)
            .find(|d| mounted && d.volume == volume);
        let (drive, mount) = match drive {
            Some(d) => (d, 0),
            None => match self.drives.iter_mut().find(|d| d.busy.is_none()) {
                Some(d) => (d, self.cfg.mount_micros),
                None => return,
            },
        };
        if mount > 0 {
            self.mounts += 1;
        }
        let rate = self.cfg.bytes_per_sec.max(1) as u128;
        let transfer = (job.transfer.size_bytes as u128 * 1_000_000).div_ceil(rate);
        let end = at + mount + transfer.min(u64::MAX as u128) as u64;
        drive.volume = volume;
        drive.busy = Some((key.clone(), end));
        job.phase = Phase::Running;
        out.push(LibraryEvent {
            at,
            key,
            attempt: job.transfer.attempt,
            kind: EventKind::Started,
        });
    }
}

/// Whether this attempt of this transfer fails: a reproducible coin from a hash.
fn fails(seed: u64, key: &str, attempt: u32, rate: f64) -> bool {
    if rate <= 0.0 {
        return false;
    }
    // FNV-1a over seed, key and attempt, then a splitmix finaliser for a uniform 64-bit value.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
    for b in key.bytes().chain(attempt.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^= h >> 31;
    (h as f64 / u64::MAX as f64) < rate
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Direction;

    fn transfer(key: &str, priority: i64, size: u64, volume: Option<&str>) -> Transfer {
        Transfer {
            key: key.to_string(),
            attempt: 1,
            file: format!("/pnfs/{key}"),
            size_bytes: size,
            priority,
            volume: volume.map(str::to_string),
            group: "g".to_string(),
            direction: Direction::Read,
            local_file: None,
            bfid: None,
        }
    }

    fn one_drive() -> LibraryConfig {
        LibraryConfig {
            drives: 1,
            mount_micros: 10,
            bytes_per_sec: 1_000_000,
            failure_rate: 0.0,
            seed: 1,
            aging: None,
        }
    }

    fn done_order(events: &[LibraryEvent]) -> Vec<String> {
        events
            .iter()
            .filter(|e| matches!(e.kind, EventKind::Done { .. }))
            .map(|e| e.key.clone())
            .collect()
    }

    #[test]
    fn higher_priority_then_arrival_order() {
        let mut lib = Library::new(one_drive());
        let mut ev = Vec::new();
        // "a" starts at once on the free drive; the rest queue behind it.
        lib.submit(transfer("a", 1, 100, None), 0, &mut ev);
        lib.submit(transfer("b", 1, 100, None), 0, &mut ev);
        lib.submit(transfer("c", 5, 100, None), 1, &mut ev);
        lib.submit(transfer("d", 5, 100, None), 1, &mut ev);
        lib.submit(transfer("e", 3, 100, None), 2, &mut ev);
        lib.advance(u64::MAX / 2, &mut ev);
        assert_eq!(done_order(&ev), ["a", "c", "d", "e", "b"]);
    }

    /// Issue 18, item 6: Enstore's library manager ages waiting requests by 1 every 30 minutes
    /// whatever the ticket says, so one waiting two hours (+4) passes a fresher one 2 higher.
    #[test]
    fn with_enstore_aging_a_long_wait_passes_a_slightly_higher_priority() {
        const HOUR: Micros = 3_600 * 1_000_000;
        let run = |aging| {
            let mut lib = Library::new(LibraryConfig {
                aging,
                ..one_drive()
            });
            let mut ev = Vec::new();
            // "a" holds the drive for two hours (1 MB/s).
            lib.submit(transfer("a", 1, 7_200_000_000, None), 0, &mut ev);
            lib.submit(transfer("old", 5, 100, None), 0, &mut ev);
            lib.submit(transfer("new", 7, 100, None), HOUR + HOUR * 5 / 6, &mut ev);
            lib.advance(3 * HOUR, &mut ev);
            done_order(&ev)
        };
        assert_eq!(run(None), ["a", "new", "old"]);
        assert_eq!(run(Some(Aging::ENSTORE)), ["a", "old", "new"]);
        assert_eq!(Aging::ENSTORE.gain(HOUR * 2), 4);
        assert_eq!(Aging::ENSTORE.gain(HOUR / 6), 0);
    }

    #[test]
    fn mount_only_when_volume_changes() {
        let mut lib = Library::new(one_drive());
        let mut ev = Vec::new();
        lib.submit(transfer("a", 1, 1_000_000, Some("V1")), 0, &mut ev);
        lib.submit(transfer("b", 1, 1_000_000, Some("V1")), 0, &mut ev);
        lib.submit(transfer("c", 1, 1_000_000, Some("V2")), 0, &mut ev);
        lib.advance(10_000_000, &mut ev);
        assert_eq!(lib.mounts(), 2);
        let done: Vec<Micros> = ev
            .iter()
            .filter(|e| matches!(e.kind, EventKind::Done { .. }))
            .map(|e| e.at)
            .collect();
        // mount 10 + 1 s, then 1 s on the same volume, then mount 10 + 1 s.
        assert_eq!(done, [1_000_010, 2_000_010, 3_000_020]);
    }

    #[test]
    fn a_transfer_never_starts_before_it_arrives() {
        let mut lib = Library::new(one_drive());
        let mut ev = Vec::new();
        lib.submit(transfer("late", 1, 1_000_000, None), 5_000_000, &mut ev);
        lib.advance(20_000_000, &mut ev);
        let times: Vec<(Micros, bool)> = ev
            .iter()
            .map(|e| (e.at, matches!(e.kind, EventKind::Done { .. })))
            .collect();
        assert_eq!(times, [(5_000_000, false), (6_000_010, true)]);
    }

    #[test]
    fn duplicate_submission_creates_nothing() {
        let mut lib = Library::new(one_drive());
        let mut ev = Vec::new();
        let first = lib.submit(transfer("a", 1, 10, None), 0, &mut ev);
        let again = lib.submit(transfer("a", 1, 10, None), 0, &mut ev);
        assert!(!first.duplicate);
        assert!(again.duplicate);
        assert_eq!(first.mss_id, again.mss_id);
        assert_eq!(lib.received().len(), 1);
        assert_eq!(lib.duplicates(), 1);
    }

    #[test]
    fn failed_attempt_may_be_retried_with_a_higher_attempt() {
        let mut cfg = one_drive();
        cfg.failure_rate = 1.0;
        let mut lib = Library::new(cfg);
        let mut ev = Vec::new();
        lib.submit(transfer("a", 1, 10, None), 0, &mut ev);
        lib.advance(1_000_000, &mut ev);
        assert!(matches!(
            ev.last().map(|e| &e.kind),
            Some(EventKind::Failed { .. })
        ));
        let mut retry = transfer("a", 1, 10, None);
        assert!(
            lib.submit(retry.clone(), 1_000_000, &mut ev).duplicate,
            "same attempt is a duplicate"
        );
        retry.attempt = 2;
        assert!(!lib.submit(retry, 1_000_000, &mut ev).duplicate);
        assert_eq!(lib.received().len(), 2);
    }

    #[test]
    fn a_new_priority_reorders_a_pending_transfer() {
        let mut lib = Library::new(one_drive());
        let mut ev = Vec::new();
        lib.submit(transfer("a", 1, 100, None), 0, &mut ev);
        lib.submit(transfer("b", 1, 100, None), 0, &mut ev);
        lib.submit(transfer("c", 1, 100, None), 0, &mut ev);
        assert_eq!(
            lib.set_priority("c", 1, 9, 0, &mut ev),
            CancelOutcome::Cancelled
        );
        assert_eq!(
            lib.set_priority("a", 1, 9, 0, &mut ev),
            CancelOutcome::TooLate(Phase::Running)
        );
        assert_eq!(
            lib.set_priority("b", 2, 9, 0, &mut ev),
            CancelOutcome::Unknown
        );
        lib.advance(u64::MAX / 2, &mut ev);
        assert_eq!(done_order(&ev), ["a", "c", "b"]);
        assert_eq!(lib.reprioritised(), 1);
    }

    #[test]
    fn cancel_only_pending() {
        let mut lib = Library::new(one_drive());
        let mut ev = Vec::new();
        lib.submit(transfer("a", 1, 1_000_000, None), 0, &mut ev);
        lib.submit(transfer("b", 1, 1_000_000, None), 0, &mut ev);
        assert_eq!(
            lib.cancel("a", 0, &mut ev),
            CancelOutcome::TooLate(Phase::Running)
        );
        assert_eq!(lib.cancel("b", 0, &mut ev), CancelOutcome::Cancelled);
        assert_eq!(lib.cancel("zz", 0, &mut ev), CancelOutcome::Unknown);
        assert_eq!(lib.pending(), 0);
        assert_eq!(
            ev.last().map(|e| e.kind.clone()),
            Some(EventKind::Cancelled)
        );
    }

    #[test]
    fn failure_coin_is_reproducible_and_near_its_rate() {
        let n = 20_000;
        let hits = (0..n).filter(|i| fails(7, &i.to_string(), 1, 0.1)).count();
        assert!((1_600..2_400).contains(&hits), "{hits} of {n}");
        assert_eq!(fails(7, "x", 1, 0.5), fails(7, "x", 1, 0.5));
    }
}

//! A pure model of an Enstore-like library manager with N drives, a fixed streaming rate and
//! optional failures, in one of two [`Model`]s:
//!
//! - [`Model::Priority`] (the default): one queue of pending transfers ordered by priority
//!   (higher first) then arrival; a free drive takes the head, preferring a drive that already
//!   holds its volume, and pays `mount_micros` whenever it changes volume. Optionally it ages
//!   waiting transfers ([`Aging`]).
//! - [`Model::Enstore`]: Enstore's library manager and mover as their source shows them
//!   (reads queued per volume in tape-position order, a drive stays on its volume while work
//!   for it waits, a dismount delay) on a tape drive with a geometry ([`tape`]); see
//!   [`enstore`].
//!
//! It does no I/O and owns no clock: callers say what time it is. The simulator server drives it
//! from the wall clock scaled by a factor; tests and the broker's policy tests drive it in virtual
//! time. Failures are decided by a hash of (seed, key, attempt), so a run is reproducible.
//!
//! The pure library-manager model, in virtual microseconds, no I/O, no clock. `library.rs`:
//! `LibraryConfig` (drives, the drive profile, order, dismount delay, mover poll, hash-seeded
//! failures, optional `Aging`); `tape.rs`: the drive (serpentine wraps, bands, direction,
//! longitudinal position; a file's place by `Position::{Fseq, Byte, Hashed}`; CTA's locate cost
//! calibrated to the published average; rewind from the head's position; robot, load, unload;
//! per-file time; writes at end of data; SLTF for `order = "rao"`; the `lto8`, `lto9`, `ts1160`
//! profiles, each figure's source cited), the `Library` facade and `Model::Priority` (one queue by
//! priority then arrival: the default; `forget_finished`: done jobs dropped, no `received` log, for
//! the simulator); `enstore.rs`: `Model::Enstore` (reads queued per volume in position order, a
//! bound drive takes its volume's next position first (C-SCAN), a dismount delay, held volumes
//! skipped by idle drives, volumes ranked by their best request aged per queue; O(log n) per
//! operation; cites Enstore's source, the facts collected in `docs/enstore-model.md`);
//! `enstore/admin.rs`: admin requests (`admin_from`: idle drives take them first, a drive done with
//! a regular transfer leaves its volume for one when none is idle); `stats.rs`: mounts, unmounts,
//! locates and the drives' time split into mount, locate, stream, per-file, unmount, idle with work
//! and idle, adding up to drives x makespan (`drive_efficiency`); `hash.rs`: the maps' fast hasher.

use std::collections::BTreeMap;

use crate::protocol::{EventKind, Received, Transfer};

mod config;
mod enstore;
mod hash;
mod stats;
pub mod tape;

use hash::FastMap;

pub use config::{Aging, LibraryConfig, Model};
pub use enstore::{name_position, POSITION_SPAN};
pub use tape::{DriveKind, LocateCost, Order, Position, TapeDrive};

pub use stats::{DriveTimes, LibraryStats};

/// Virtual time in microseconds.
pub type Micros = u64;

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

/// The jobs by key. Boxed: a map of whole jobs copied hundreds of bytes per entry at every
/// growth, a fifth of a pass-through simulation's time (every request reaches the library).
type Jobs = FastMap<String, Box<Job>>;

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
    /// Mounting and streaming time of the transfers started.
    times: DriveTimes,
}

/// The library manager.
#[derive(Debug, Clone)]
pub struct Library {
    cfg: LibraryConfig,
    /// (negated priority, arrival) -> key: the first entry is the next to start.
    queue: BTreeMap<(i64, u64), String>,
    jobs: Jobs,
    drives: Vec<Drive>,
    next_arrival: u64,
    received: Vec<Received>,
    duplicates: u64,
    mounts: u64,
    reprioritised: u64,
    /// The time the library has been advanced to.
    now: Micros,
    /// The scheduler under [`Model::Enstore`] (then `queue` and `drives` stay empty/unused).
    enstore: Option<enstore::Enstore>,
    /// [`Library::forget_finished`]: no history kept.
    forget: bool,
}

impl Library {
    pub fn new(cfg: LibraryConfig) -> Library {
        let drives = vec![Drive::default(); cfg.drives.max(1)];
        let enstore = match cfg.model {
            Model::Priority => None,
            Model::Enstore => Some(enstore::Enstore::new(cfg.drives.max(1), cfg.tape)),
        };
        Library {
            enstore,
            forget: false,
            cfg,
            queue: BTreeMap::new(),
            jobs: FastMap::default(),
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
        let from = out.len();
        let admission = self.enqueue(transfer);
        match &mut self.enstore {
            Some(e) => e.advance(&self.cfg, &mut self.jobs, self.now, out),
            None => self.start_pending(self.now, out),
        }
        self.drop_done(&out[from..]);
        admission
    }

    /// Keep no history from now on: a transfer that is done is forgotten (its key no longer a
    /// duplicate, [`Library::job`] no longer knows it) and [`Library::received`] stays empty;
    /// failed and cancelled transfers are kept, since a retry's attempt number is checked
    /// against them. For a caller that sends millions of transfers and never asks about a
    /// finished one again (the simulator's engine), so memory follows what is in flight, not
    /// everything ever sent.
    pub fn forget_finished(&mut self) {
        self.forget = true;
    }

    fn drop_done(&mut self, events: &[LibraryEvent]) {
        if !self.forget {
            return;
        }
        for e in events {
            if matches!(e.kind, EventKind::Done { .. }) {
                self.jobs.remove(&e.key);
            }
        }
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
        if !self.forget {
            self.received.push(Received {
                key: transfer.key.clone(),
                attempt: transfer.attempt,
                priority: transfer.priority,
                size_bytes: transfer.size_bytes,
                group: transfer.group.clone(),
                volume: transfer.volume.clone(),
                position: transfer.position,
            });
        }
        let job = Job {
            transfer,
            mss_id: mss_id.clone(),
            phase: Phase::Pending,
            arrival,
            queued_at: self.now,
            bytes_done: 0,
        };
        match &mut self.enstore {
            Some(e) => e.push(&job, self.cfg.aging, self.now),
            None => {
                let slot = (-job.transfer.priority, arrival);
                self.queue.insert(slot, job.transfer.key.clone());
            }
        }
        self.jobs.insert(job.transfer.key.clone(), Box::new(job));
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
        match &mut self.enstore {
            Some(e) => {
                e.remove(job, self.cfg.aging, self.now);
            }
            None => {
                self.queue.remove(&(-job.transfer.priority, job.arrival));
            }
        }
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
        self.priority_changes(now, out).set(key, attempt, priority)
    }

    /// Several priority changes at `now`, each as [`Self::set_priority`] would make it: the
    /// library is advanced to `now` once, and each volume re-indexed once when the returned
    /// batch is dropped. The same as one call per change: between those calls, at the same
    /// instant, a dispatch finds nothing new to start (a priority orders pending work; it does
    /// not make any startable).
    pub fn priority_changes(
        &mut self,
        now: Micros,
        out: &mut Vec<LibraryEvent>,
    ) -> PriorityChanges<'_> {
        self.advance(now, out);
        PriorityChanges { lib: self }
    }

    /// Priority changes taken.
    pub fn reprioritised(&self) -> u64 {
        self.reprioritised
    }

    /// Run the library up to `now`: finish transfers whose time has come, in time order, and
    /// start pending ones on free drives. Events are appended to `out` in the order they happen.
    pub fn advance(&mut self, now: Micros, out: &mut Vec<LibraryEvent>) {
        let now = now.max(self.now);
        let from = out.len();
        if let Some(e) = &mut self.enstore {
            e.advance(&self.cfg, &mut self.jobs, now, out);
        } else {
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
        self.now = now;
        self.drop_done(&out[from..]);
    }

    /// When the next transfer ends, if any is running (under [`Model::Enstore`], also when a
    /// drive's dismount delay runs out or an unmount ends).
    pub fn next_wakeup(&self) -> Option<Micros> {
        match &self.enstore {
            Some(e) => e.next_wakeup(),
            None => self.earliest_completion().map(|(_, end)| end),
        }
    }

    pub fn job(&self, key: &str) -> Option<&Job> {
        self.jobs.get(key).map(|j| &**j)
    }

    pub fn received(&self) -> &[Received] {
        &self.received
    }

    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }

    pub fn pending(&self) -> usize {
        match &self.enstore {
            Some(e) => e.pending(),
            None => self.queue.len(),
        }
    }

    pub fn running(&self) -> usize {
        match &self.enstore {
            Some(e) => e.running(),
            None => self.drives.iter().filter(|d| d.busy.is_some()).count(),
        }
    }

    pub fn mounts(&self) -> u64 {
        match &self.enstore {
            Some(e) => e.mounts(),
            None => self.mounts,
        }
    }

    /// Mounts, unmounts and where each drive's time went (see [`LibraryStats`]).
    pub fn stats(&self) -> LibraryStats {
        match &self.enstore {
            Some(e) => e.stats(),
            None => LibraryStats {
                mounts: self.mounts,
                unmounts: 0,
                locates: 0,
                drives: self.drives.iter().map(|d| d.times).collect(),
            },
        }
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
        finish(&self.cfg, &mut self.jobs, key, at, out);
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
        let transfer = stream_micros(job.transfer.size_bytes, self.cfg.bytes_per_sec);
        let end = at + mount + transfer;
        drive.times.mounting += mount;
        drive.times.streaming += transfer;
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

/// A running transfer ends at `at`: done, or failed when the failure coin says so.
fn finish(
    cfg: &LibraryConfig,
    jobs: &mut Jobs,
    key: String,
    at: Micros,
    out: &mut Vec<LibraryEvent>,
) {
    let Some(job) = jobs.get_mut(&key) else {
        return;
    };
    let attempt = job.transfer.attempt;
    let kind = if fails(cfg.seed, coin_key(&key), attempt, cfg.failure_rate) {
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

/// Time to stream `size` bytes at `bytes_per_sec`, rounded up to the microsecond.
fn stream_micros(size: u64, bytes_per_sec: u64) -> Micros {
    let rate = u128::from(bytes_per_sec.max(1));
    let micros = (u128::from(size) * 1_000_000).div_ceil(rate);
    u64::try_from(micros).unwrap_or(u64::MAX)
}

/// What of a transfer's key the failure coin is drawn on: the request id, without the
/// broker's incarnation nonce (`{id}.{nonce}`), so a live run against the simulator and the
/// replay of its exported ledger (`mssbroker simulate`, whose keys are the ids) fail the same
/// attempts of the same requests.
fn coin_key(key: &str) -> &str {
    key.split_once('.').map_or(key, |(id, _)| id)
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

/// Priority changes made at one instant ([`Library::priority_changes`]); the volumes they touch
/// are re-indexed when it is dropped.
pub struct PriorityChanges<'a> {
    lib: &'a mut Library,
}

impl PriorityChanges<'_> {
    /// As [`Library::set_priority`] at the batch's instant.
    pub fn set(&mut self, key: &str, attempt: u32, priority: i64) -> CancelOutcome {
        let lib = &mut *self.lib;
        let Some(job) = lib.jobs.get_mut(key) else {
            return CancelOutcome::Unknown;
        };
        if job.transfer.attempt != attempt {
            return CancelOutcome::Unknown;
        }
        if job.phase != Phase::Pending {
            return CancelOutcome::TooLate(job.phase);
        }
        match &mut lib.enstore {
            Some(e) => e.reprioritise(job, priority),
            None => {
                if let Some(k) = lib.queue.remove(&(-job.transfer.priority, job.arrival)) {
                    lib.queue.insert((-priority, job.arrival), k);
                }
            }
        }
        job.transfer.priority = priority;
        lib.reprioritised += 1;
        CancelOutcome::Cancelled
    }
}

impl Drop for PriorityChanges<'_> {
    fn drop(&mut self) {
        let lib = &mut *self.lib;
        if let Some(e) = &mut lib.enstore {
            e.retag_touched(lib.cfg.aging, lib.now);
        }
    }
}

#[cfg(test)]
mod tests;

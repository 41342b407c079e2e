//! [`super::Model::Enstore`]: Enstore's library manager and mover, as their source shows them
//! (Enstore-org/enstore at `a154041a`; the research notes are `notes/enstore-model.md`).
//!
//! - Reads are queued per volume, ordered by tape position (`manage_queue.py`, `Queue.put`:
//!   key `external_label`, `'opt'` list sorted by location cookie).
//! - A drive that finishes a transfer keeps its volume (`HAVE_BOUND`) and takes the next
//!   pending request for the same volume first, the first position after the head, wrapping
//!   to the lowest (`library_manager.py`, `next_work_this_volume`; `manage_queue.py`,
//!   `SortedList.get` with `current_location`), whatever waits for other volumes.
//! - With nothing more for its volume it waits `dismount_delay` (mover.py,
//!   `transfer_completed` / `check_dismount_timer`), then unmounts; work arriving for the
//!   volume meanwhile is served with a locate and no mount (mover.py, `setup_transfer`).
//! - An idle drive takes the best volume no other drive holds in any non-idle state, until
//!   that drive has unmounted it (`library_manager.py`, `next_work_any_volume` with
//!   `active_volumes`), and starts with the volume's lowest position (`read_queue.get(key)`).
//! - Volumes rank by their best request: highest priority, then the earlier arrival
//!   (`manage_queue.py`, `compare_priority` over `tags`), aged with [`super::Aging`]; the queues, the
//!   index and the aging are `queues.rs`.
//!
//! - With `admin_from`, admin requests go first: [`admin`].
//!
//! - The drive is [`TapeDrive`]: a file's place on the cartridge from its [`Position`], CTA's
//!   locate cost, a rewind from where the head is, robot, load and unload; see [`super::tape`].
//!   Within a mount the reads go in the [`Order`] configured: Enstore's position order, or
//!   CTA's recommended access order (the cheapest locate from the head next).
//! - Movers poll: an idle drive takes work at its next `mover_poll` tick (drive `d` of `n`
//!   ticks at `d * poll / n + k * poll`), a bound drive takes its volume's next file at once
//!   when it finishes one (`transfer_completed` asks at once) and later arrivals at its next
//!   tick, and the dismount timer is checked at a tick (`check_dismount_timer` runs in
//!   `update_lm`): the wait is idle time with work.
//! - Writes go to the volume's end of data (`mover.py` refuses any other place: "Can only
//!   write at end of tape"), after the volume's reads; the end of data is the end of the
//!   furthest file seen on the volume (0 for a volume never seen: a blank tape), and each
//!   write moves it on.
//!
//! Simplifications: writes' volume families and per-host limits are not modelled (a write
//! waits on its volume like a read); a transfer without a volume gets a volume of its own.
//!
//! Cost: every operation is O(log n) in the pending transfers (a `BTreeMap` per volume by
//! position and one by priority, and one ordered index of volumes by their best request) plus
//! O(drives); no event scans the pending transfers.

use std::collections::{BTreeMap, BTreeSet};

use super::tape::{Position, TapeDrive};
use super::{finish, stream_micros, DriveTimes, LibraryConfig, LibraryEvent};
use super::{FastMap, Jobs, LibraryStats, Micros, Phase};
use crate::protocol::{Direction, EventKind, Transfer};

mod admin;
mod queues;

use queues::{Slot, VolQueue};

/// How often all volumes' aged priorities are recomputed (Enstore's `aging_quantum`, 60 s).
const AGING_QUANTUM: Micros = 60_000_000;

/// Positions derived from file names fall in `0..POSITION_SPAN`, like the file sequence
/// numbers of a tape holding 10,000 files.
pub const POSITION_SPAN: u64 = 10_000;

/// The position of a file with no `position`: the 64-bit FNV-1a hash of the file name's UTF-8
/// bytes (offset basis 0xcbf29ce484222325, prime 0x100000001b3), modulo [`POSITION_SPAN`].
/// Stable across runs and platforms, so a replay is reproducible.
pub fn name_position(file: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in file.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h % POSITION_SPAN
}

/// Where a transfer's file sits on its volume: its byte offset when it gives one, else its
/// file sequence number, else a place hashed from its file name.
pub fn position(t: &Transfer) -> Position {
    match (t.offset_bytes, t.position) {
        (Some(o), _) => Position::Byte(o),
        (None, Some(n)) => Position::Fseq(n),
        (None, None) => Position::Hashed(name_position(&t.file)),
    }
}

/// Where the head is after reading a file at `pos` of `size` bytes: the start of the next
/// file (for a sequence number, the next number's place, so the next file costs nothing).
fn end_of(pos: Position, size: u64, tape: &TapeDrive) -> u64 {
    match pos {
        Position::Fseq(n) => tape.fseq_offset(n.saturating_add(1)),
        other => other.offset(tape).saturating_add(size),
    }
}

#[derive(Debug, Clone)]
enum State {
    Empty,
    /// Transferring `key` (mount and locate included) until `end`.
    Busy {
        volume: String,
        key: String,
        /// Where the head is when it is done (bytes from the first data byte).
        head: u64,
        end: Micros,
        times: DriveTimes,
    },
    /// Holding `volume` with nothing to do until `until`, then unmounting; bound since `since`.
    Bound {
        volume: String,
        until: Micros,
        since: Micros,
    },
    /// Unmounting `volume` until `until`, which takes `took`.
    Unmounting {
        volume: String,
        until: Micros,
        took: Micros,
    },
}

#[derive(Debug, Clone)]
struct Drive {
    state: State,
    /// Where the head is on the mounted volume (bytes from the first data byte; 0 = BOT).
    head: u64,
    /// Bytes read or written since the mount.
    moved: u64,
    /// Whether its last transfer was an admin request.
    admin: bool,
}

/// The scheduler's state; the jobs themselves stay in [`super::Library`].
#[derive(Debug, Clone)]
pub(super) struct Enstore {
    volumes: FastMap<String, VolQueue>,
    /// Tag slot -> volume: the best volume first.
    index: BTreeMap<Slot, String>,
    /// Volumes a drive holds (any state but empty) -> that drive.
    held: FastMap<String, usize>,
    /// (when, volume, drive): a volume a drive left for an admin request of another volume
    /// (`admin_takes_over`) is still in that drive until its unmount ends, then free.
    releasing: BTreeSet<(Micros, String, usize)>,
    drives: Vec<Drive>,
    pending: usize,
    /// With aging: (when a queue's gain next steps, its serial) -> volume. Entries of queues
    /// that emptied meanwhile are dropped when they come up.
    steps: BTreeMap<(Micros, u64), String>,
    serials: u64,
    /// Volumes whose priorities changed and are not yet re-indexed (`retag_touched`).
    touched: Vec<String>,
    /// When the aged tags were last refreshed.
    aged_at: Option<Micros>,
    /// Idle time has been counted up to here.
    clock: Micros,
    stats: LibraryStats,
    /// The drives' model.
    tape: TapeDrive,
    /// Each named volume's end of data (bytes).
    eod: FastMap<String, u64>,
}

impl Enstore {
    pub(super) fn new(drives: usize, tape: TapeDrive) -> Enstore {
        let drive = Drive {
            state: State::Empty,
            head: 0,
            moved: 0,
            admin: false,
        };
        Enstore {
            tape,
            eod: FastMap::default(),
            volumes: FastMap::default(),
            index: BTreeMap::new(),
            held: FastMap::default(),
            releasing: BTreeSet::new(),
            drives: vec![drive; drives],
            pending: 0,
            steps: BTreeMap::new(),
            serials: 0,
            touched: Vec::new(),
            aged_at: None,
            clock: 0,
            stats: LibraryStats {
                drives: vec![DriveTimes::default(); drives],
                ..LibraryStats::default()
            },
        }
    }

    pub(super) fn pending(&self) -> usize {
        self.pending
    }

    pub(super) fn running(&self) -> usize {
        let busy = |d: &&Drive| matches!(d.state, State::Busy { .. });
        self.drives.iter().filter(busy).count()
    }

    /// The counters up to the time the model has run to; an unmount under way counts up to
    /// then (a transfer counts when it ends).
    pub(super) fn stats(&self) -> LibraryStats {
        let mut stats = self.stats.clone();
        for (drive, times) in self.drives.iter().zip(&mut stats.drives) {
            if let State::Unmounting { until, took, .. } = drive.state {
                let started = until.saturating_sub(took);
                times.unmounting += self.clock.min(until).saturating_sub(started);
            }
        }
        stats
    }

    pub(super) fn mounts(&self) -> u64 {
        self.stats.mounts
    }

    /// When the next drive event (transfer end, dismount timer, unmount end) happens.
    pub(super) fn next_wakeup(&self) -> Option<Micros> {
        self.next_event().map(|(_, at)| at)
    }

    /// Run up to `now`: drive events in time order (drive order among equal times), each
    /// followed by a dispatch of pending work to the drives.
    pub(super) fn advance(
        &mut self,
        cfg: &LibraryConfig,
        jobs: &mut Jobs,
        now: Micros,
        out: &mut Vec<LibraryEvent>,
    ) {
        let now = now.max(self.clock);
        self.dispatch(cfg, jobs, self.clock, out);
        while let Some((d, at)) = self.next_event() {
            if at > now {
                break;
            }
            self.accrue(at);
            match d {
                Some(d) => self.fire(cfg, jobs, d, at, out),
                None => self.release_unmounted(at),
            }
            self.dispatch(cfg, jobs, at, out);
        }
        self.accrue(now);
        self.dispatch(cfg, jobs, now, out);
    }

    /// The next thing to happen: a drive's event (`Some(drive)`), or a volume left for an
    /// admin request coming out of its drive (`None`), which goes first at the same instant.
    fn next_event(&self) -> Option<(Option<usize>, Micros)> {
        let when = |d: &Drive| match d.state {
            State::Empty => None,
            State::Busy { end, .. } => Some(end),
            State::Bound { until, .. } | State::Unmounting { until, .. } => Some(until),
        };
        let events = self.drives.iter().enumerate();
        let drive = events
            .filter_map(|(i, d)| when(d).map(|at| (i, at)))
            .min_by_key(|&(i, at)| (at, i));
        let release = self.releasing.first().map(|(at, _, _)| *at);
        match (drive, release) {
            (Some((_, d_at)), Some(r_at)) if r_at <= d_at => Some((None, r_at)),
            (Some((i, d_at)), _) => Some((Some(i), d_at)),
            (None, Some(r_at)) => Some((None, r_at)),
            (None, None) => None,
        }
    }

    /// Volumes whose unmount after an admin takeover has ended by `at` are free again.
    fn release_unmounted(&mut self, at: Micros) {
        while self.releasing.first().is_some_and(|(t, _, _)| *t <= at) {
            let Some((_, volume, d)) = self.releasing.pop_first() else {
                return;
            };
            if self.held.get(&volume) == Some(&d) {
                self.held.remove(&volume);
            }
        }
    }

    /// Count idle time from the clock up to `to`.
    fn accrue(&mut self, to: Micros) {
        let Some(dt) = to.checked_sub(self.clock).filter(|dt| *dt > 0) else {
            return;
        };
        let with_work = self.pending > 0;
        for (drive, times) in self.drives.iter().zip(&mut self.stats.drives) {
            if matches!(drive.state, State::Empty | State::Bound { .. }) {
                if with_work {
                    times.idle_with_work += dt;
                } else {
                    times.idle_without_work += dt;
                }
            }
        }
        self.clock = to;
    }

    /// A drive's event at `at`: a transfer ends (the drive becomes bound), the dismount delay
    /// runs out (it starts unmounting), or the unmount ends (the volume is free again).
    fn fire(
        &mut self,
        cfg: &LibraryConfig,
        jobs: &mut Jobs,
        d: usize,
        at: Micros,
        out: &mut Vec<LibraryEvent>,
    ) {
        let drive = &mut self.drives[d];
        match std::mem::replace(&mut drive.state, State::Empty) {
            State::Busy {
                volume,
                key,
                head,
                times,
                ..
            } => {
                self.stats.drives[d].add(&times);
                if times.locating > 0 {
                    self.stats.locates += 1;
                }
                drive.head = head;
                let delay = at.saturating_add(cfg.dismount_delay_micros);
                let until = self.tick(d, delay);
                let drive = &mut self.drives[d];
                drive.state = State::Bound {
                    volume,
                    until,
                    since: at,
                };
                finish(cfg, jobs, key, at, out);
            }
            State::Bound { volume, .. } => {
                self.stats.unmounts += 1;
                let took = self.tape.unmount_micros(drive.head, drive.moved);
                let until = at.saturating_add(took);
                drive.state = State::Unmounting {
                    volume,
                    until,
                    took,
                };
            }
            State::Unmounting { volume, took, .. } => {
                self.stats.drives[d].unmounting += took;
                drive.head = 0;
                drive.moved = 0;
                self.held.remove(&volume);
            }
            State::Empty => {}
        }
    }

    /// Give pending work to drives at `at`: first every bound drive its own volume's next
    /// request, then every empty drive the best volume nobody holds.
    fn dispatch(
        &mut self,
        cfg: &LibraryConfig,
        jobs: &mut Jobs,
        at: Micros,
        out: &mut Vec<LibraryEvent>,
    ) {
        if self.pending == 0 {
            return;
        }
        if let Some(aging) = cfg.aging {
            if self
                .aged_at
                .is_none_or(|t| at >= t.saturating_add(AGING_QUANTUM))
            {
                self.age(aging, at);
                self.aged_at = Some(at);
            }
        }
        if cfg.admin_from.is_some() {
            self.admin_to_idle(cfg, jobs, at, out);
        }
        for d in 0..self.drives.len() {
            let drive = &self.drives[d];
            let State::Bound { volume, .. } = &drive.state else {
                continue;
            };
            let (volume, head) = (volume.clone(), drive.head);
            if cfg.admin_from.is_some()
                && !self.has_admin(cfg, &volume)
                && self.admin_takes_over(cfg, jobs, (d, &volume), at, out)
            {
                continue;
            }
            if !self.volumes.contains_key(&volume) {
                continue;
            }
            let key = if self.has_admin(cfg, &volume) {
                self.take_best(&volume, cfg.aging, at)
            } else {
                self.take(&volume, Some(head), cfg.aging, at)
            };
            if let Some(key) = key {
                self.start(cfg, jobs, (d, volume, key, false), at, out);
            }
        }
        let mut empty: Vec<(Micros, usize)> = (0..self.drives.len())
            .filter(|&d| matches!(self.drives[d].state, State::Empty))
            .map(|d| (self.tick(d, at), d))
            .collect();
        empty.sort_unstable();
        for (_, d) in empty {
            if self.pending == 0 {
                return;
            }
            let free = self.index.values().find(|v| !self.held.contains_key(*v));
            let Some(volume) = free.cloned() else {
                return;
            };
            let Some(key) = self.take(&volume, None, cfg.aging, at) else {
                return;
            };
            self.start(cfg, jobs, (d, volume, key, true), at, out);
        }
    }

    /// Start `key` on drive `d` (mounting `volume` first when `mount`).
    fn start(
        &mut self,
        cfg: &LibraryConfig,
        jobs: &mut Jobs,
        (d, volume, key, mount): (usize, String, String, bool),
        at: Micros,
        out: &mut Vec<LibraryEvent>,
    ) {
        let wait = self.poll_wait(d, at);
        let Some(job) = jobs.get_mut(&key) else {
            return;
        };
        let tape = &self.tape;
        let size = job.transfer.size_bytes;
        let pos = position(&job.transfer);
        let head = if mount { 0 } else { self.drives[d].head };
        let (target, head_after) = match job.transfer.direction {
            Direction::Read => (pos.offset(tape), end_of(pos, size, tape)),
            Direction::Write => {
                let eod = self.eod.entry(volume.clone()).or_insert(0);
                let start = *eod;
                *eod = start.saturating_add(size);
                (start, *eod)
            }
        };
        let per_file = match job.transfer.direction {
            Direction::Read => tape.per_file_read,
            Direction::Write => tape.per_file_write,
        };
        let times = DriveTimes {
            mounting: if mount { tape.mount_micros() } else { 0 },
            locating: tape.locate_micros(head, target),
            streaming: stream_micros(size, cfg.bytes_per_sec),
            per_file,
            idle_with_work: wait,
            ..DriveTimes::default()
        };
        if mount {
            self.stats.mounts += 1;
            self.held.insert(volume.clone(), d);
            self.drives[d].moved = 0;
        }
        self.drives[d].moved = self.drives[d].moved.saturating_add(size);
        self.drives[d].admin = cfg
            .admin_from
            .is_some_and(|from| job.transfer.priority >= from);
        job.phase = Phase::Running;
        out.push(LibraryEvent {
            at,
            key: key.clone(),
            attempt: job.transfer.attempt,
            kind: EventKind::Started,
        });
        let end = at.saturating_add(times.busy());
        self.drives[d].state = State::Busy {
            volume,
            key,
            head: head_after,
            end,
            times,
        };
    }

    /// The first poll of drive `d` at or after `at`: drive `d` of `n` asks the library
    /// manager at `d * poll / n + k * poll` (at once with no poll).
    fn tick(&self, d: usize, at: Micros) -> Micros {
        let poll = self.tape.mover_poll;
        if poll == 0 {
            return at;
        }
        let n = self.drives.len().max(1) as u64;
        let phase = poll / n * d as u64;
        if at <= phase {
            return phase;
        }
        let k = (at - phase).div_ceil(poll);
        phase.saturating_add(k.saturating_mul(poll))
    }

    /// How long drive `d`, about to start a transfer at `at`, waits for its mover to ask:
    /// nothing when it has just finished one (`transfer_completed` asks at once), else until
    /// its next poll.
    fn poll_wait(&self, d: usize, at: Micros) -> Micros {
        match self.drives[d].state {
            State::Bound { since, .. } if since == at => 0,
            _ => self.tick(d, at) - at,
        }
    }

    /// Drive `d` unmounts its volume now (to go to another at once): how long it takes.
    pub(super) fn unmount_now(&mut self, d: usize) -> Micros {
        let drive = &mut self.drives[d];
        let took = self.tape.unmount_micros(drive.head, drive.moved);
        drive.head = 0;
        drive.moved = 0;
        took
    }
}

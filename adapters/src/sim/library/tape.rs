//! The tape drive of [`super::Model::Enstore`]: where a file lies on a cartridge and what it
//! costs to get there, to rewind and to change cartridges ([`TapeDrive`], its profiles
//! [`TapeDrive::lto8`], [`TapeDrive::lto9`], [`TapeDrive::ts1160`]). The figures and their
//! published sources are in docs/enstore-model.md ("The tape drive").
//!
//! Geometry, after CTA's `InterpolationFilePositionEstimator` (cern-cta/CTA
//! `taped/rao/InterpolationFilePositionEstimator.cpp` at 2993d542, lines 50-97, and
//! `taped/rao/RAOHelpers.cpp` lines 27-43): a cartridge of `capacity_bytes` is written along
//! `wraps` serpentine wraps of equal capacity, even wraps from the beginning of tape (BOT) to
//! its end (EOT), odd wraps back; `bands` data bands of `wraps / bands` wraps each. A byte
//! offset `o` lies on wrap `floor(o / C * W)`, at the fraction `f` along it in the writing
//! direction, so at the longitudinal position `x = f` (even wrap) or `1 - f` (odd), 0 = BOT,
//! 1 = EOT (CTA interpolates LPOS between `minLPos` and `maxLPos`; `x` is that, normalised).
//!
//! Locate cost, CTA's `CTACostHeuristic` (cern-cta/CTA `taped/rao/CTACostHeuristic.cpp` at
//! 2993d542, lines 12-26, a fit of measured LTO-7M locate times; indicators from
//! `RAOHelpers.cpp` lines 45-91), from the end of the file the head last read to the start of
//! the next:
//!
//! ```text
//! base + wrap_change*[wrap differs] + band_change*[band differs] - half_change*[other half]
//!      + direction_change*[direction differs] + step_back*[same wrap, target behind the head]
//!      + per_length * |x_head - x_target|                           (at least 0)
//! ```
//!
//! CTA's constants (4.29, 6.69, 3.2, 6.04, 5.22, 11.32 s) are kept; `per_length` (CTA's
//! 0.0006192 s per LPOS times the tape's LPOS span) is calibrated per profile so that a random
//! file from BOT costs the drive's published average locate: from BOT the mean of the
//! indicator terms is `4.29 + 6.69 (1 - 1/W) + 0.75 * 3.2 - 0.5 * 6.04 + 0.5 * 5.22 = 12.95 s`
//! and the mean distance half a tape length, so `per_length = 2 (avg_locate - 12.95)`. A file
//! that starts where the head is (the next file on tape) costs nothing.

use super::Micros;

/// The order of a mounted volume's reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// Enstore's: ascending position from the head, wrapping to the lowest
    /// (`manage_queue.py`, `SortedList.get`).
    #[default]
    Position,
    /// CTA's recommended access order: the queued file with the lowest locate cost from the
    /// head next (software SLTF, `taped/rao/SLTFRAOAlgorithm.cpp`; also the stand-in for the
    /// drive's own RAO on LTO-9 and enterprise drives).
    Rao,
}

impl Order {
    /// The name used in configuration files.
    pub fn as_str(self) -> &'static str {
        match self {
            Order::Position => "position",
            Order::Rao => "rao",
        }
    }

    /// The order named `name` in configuration files.
    pub fn parse(name: &str) -> Option<Order> {
        match name {
            "position" => Some(Order::Position),
            "rao" => Some(Order::Rao),
            _ => None,
        }
    }
}

/// CTA's locate cost coefficients, in microseconds (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocateCost {
    pub base: Micros,
    pub wrap_change: Micros,
    pub band_change: Micros,
    /// Subtracted when the target is in the other half of the tape (CTA's landing zone).
    pub half_change: Micros,
    pub direction_change: Micros,
    pub step_back: Micros,
    /// Per tape length of longitudinal distance.
    pub per_length: Micros,
}

impl LocateCost {
    /// CTA's fit, with `per_length` calibrated to an average locate from BOT of `avg_secs`.
    pub const fn cta(per_length: Micros) -> LocateCost {
        LocateCost {
            base: 4_290_000,
            wrap_change: 6_690_000,
            band_change: 3_200_000,
            half_change: 6_040_000,
            direction_change: 5_220_000,
            step_back: 11_320_000,
            per_length,
        }
    }

    /// Nothing costs anything.
    pub const ZERO: LocateCost = LocateCost {
        base: 0,
        wrap_change: 0,
        band_change: 0,
        half_change: 0,
        direction_change: 0,
        step_back: 0,
        per_length: 0,
    };
}

/// Which published drive a [`TapeDrive`] was made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DriveKind {
    Lto8,
    #[default]
    Lto9,
    Ts1160,
    /// A site's own figures (the LTO-9 profile's where it gives none).
    Custom,
}

impl DriveKind {
    /// The name used in configuration files.
    pub fn as_str(self) -> &'static str {
        match self {
            DriveKind::Lto8 => "lto8",
            DriveKind::Lto9 => "lto9",
            DriveKind::Ts1160 => "ts1160",
            DriveKind::Custom => "custom",
        }
    }

    /// The kind named `name` in configuration files.
    pub fn parse(name: &str) -> Option<DriveKind> {
        match name {
            "lto8" => Some(DriveKind::Lto8),
            "lto9" => Some(DriveKind::Lto9),
            "ts1160" => Some(DriveKind::Ts1160),
            "custom" => Some(DriveKind::Custom),
            _ => None,
        }
    }

    /// The profile's figures (its rate in bytes per second, and the drive).
    pub fn profile(self) -> (u64, TapeDrive) {
        match self {
            DriveKind::Lto8 => (360_000_000, TapeDrive::lto8()),
            DriveKind::Lto9 | DriveKind::Custom => (400_000_000, TapeDrive::lto9()),
            DriveKind::Ts1160 => (400_000_000, TapeDrive::ts1160()),
        }
    }
}

/// A tape drive and its cartridges (all times in microseconds). The streaming rate is
/// [`super::LibraryConfig::bytes_per_sec`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TapeDrive {
    pub kind: DriveKind,
    /// Native capacity of a cartridge.
    pub capacity_bytes: u64,
    /// Serpentine wraps (LTO: tracks / 32).
    pub wraps: u64,
    /// Data bands (4 on LTO).
    pub bands: u64,
    /// The size a file sequence number stands for: file `n` starts at `(n - 1) * mean_file_bytes`.
    pub mean_file_bytes: u64,
    /// The robot moving a cartridge between slot and drive (each way).
    pub robot: Micros,
    /// Load and thread to ready.
    pub load: Micros,
    /// Enstore's mover sleeps this after a mount (`ftt_driver.py` `mount_delay`, 5 s).
    pub mount_delay: Micros,
    /// Unload (after the rewind).
    pub unload: Micros,
    /// Rewinding from EOT; from longitudinal position `x`, `x` times this.
    pub rewind_full: Micros,
    /// LTO-9's archive-mode unthread: the unload's rewind takes this much longer after 5 GB
    /// moved in the mount, twice this after 50 GB (0: off).
    pub unthread_step: Micros,
    pub locate: LocateCost,
    /// Per file read, beyond locate and streaming (Enstore's callback, CRC and bookkeeping).
    pub per_file_read: Micros,
    /// Per file written (the same, and the file marks).
    pub per_file_write: Micros,
    /// How often an Enstore mover asks the library manager for work (`mover.py`
    /// `update_interval`, 15 s; 0: the library manager answers at once).
    pub mover_poll: Micros,
    /// The order of a mounted volume's reads.
    pub order: Order,
}

const SEC: Micros = 1_000_000;
const TB: u64 = 1_000_000_000_000;
const GB: u64 = 1_000_000_000;

/// `per_length` for an average locate from BOT of `avg` on `wraps` wraps (module doc).
const fn per_length_for(avg: Micros, wraps: u64) -> Micros {
    // 2 (avg - (4.29 + 6.69 (1 - 1/W) + 2.4 - 3.02 + 2.61)) in microseconds.
    let constant = 4_290_000 + 6_690_000 - 6_690_000 / wraps + 2_400_000 - 3_020_000 + 2_610_000;
    2 * (avg - constant)
}

impl TapeDrive {
    /// IBM LTO-9 full height (docs/enstore-model.md has each figure's source).
    pub const fn lto9() -> TapeDrive {
        TapeDrive {
            kind: DriveKind::Lto9,
            capacity_bytes: 18 * TB,
            wraps: 280,
            bands: 4,
            mean_file_bytes: 2 * GB,
            robot: 15 * SEC,
            load: 17 * SEC,
            mount_delay: 5 * SEC,
            unload: 30 * SEC,
            rewind_full: 110 * SEC,
            unthread_step: 55 * SEC,
            locate: LocateCost::cta(per_length_for(45 * SEC, 280)),
            per_file_read: SEC,
            per_file_write: 3 * SEC,
            mover_poll: 15 * SEC,
            order: Order::Position,
        }
    }

    /// IBM LTO-8 full height (locate and rewind from the half-height drive: no full-height
    /// figure is published).
    pub const fn lto8() -> TapeDrive {
        TapeDrive {
            kind: DriveKind::Lto8,
            capacity_bytes: 12 * TB,
            wraps: 208,
            load: 15 * SEC,
            unload: 24 * SEC,
            rewind_full: 118 * SEC,
            unthread_step: 0,
            locate: LocateCost::cta(per_length_for(59 * SEC, 208)),
            ..TapeDrive::lto9()
        }
    }

    /// IBM TS1160 with a JE cartridge: rate and capacity published; no timing or geometry
    /// figure is, so those are LTO-9's, for a site to override.
    pub const fn ts1160() -> TapeDrive {
        TapeDrive {
            kind: DriveKind::Ts1160,
            capacity_bytes: 20 * TB,
            unthread_step: 0,
            ..TapeDrive::lto9()
        }
    }

    /// A drive that costs nothing beyond streaming (for tests and the priority model).
    pub const fn instant() -> TapeDrive {
        TapeDrive {
            robot: 0,
            load: 0,
            mount_delay: 0,
            unload: 0,
            rewind_full: 0,
            unthread_step: 0,
            locate: LocateCost::ZERO,
            per_file_read: 0,
            per_file_write: 0,
            mover_poll: 0,
            ..TapeDrive::lto9()
        }
    }

    /// Robot, load and Enstore's mount delay: from the request to the first locate.
    pub fn mount_micros(&self) -> Micros {
        self.robot
            .saturating_add(self.load)
            .saturating_add(self.mount_delay)
    }

    /// Rewind from where the head is, unload and the robot's move back; `moved` bytes were
    /// read or written in the mount (LTO-9's archive-mode unthread).
    pub fn unmount_micros(&self, head: u64, moved: u64) -> Micros {
        let unthread = match moved {
            m if m < 5 * GB => 0,
            m if m < 50 * GB => self.unthread_step,
            _ => self.unthread_step.saturating_mul(2),
        };
        self.rewind_micros(head)
            .saturating_add(unthread)
            .saturating_add(self.unload)
            .saturating_add(self.robot)
    }

    /// Rewinding to BOT from byte offset `head`: proportional to the longitudinal position.
    pub fn rewind_micros(&self, head: u64) -> Micros {
        scale(self.rewind_full, self.place(head).x)
    }

    /// Where byte offset `offset` lies.
    pub fn place(&self, offset: u64) -> Place {
        let wraps = self.wraps.max(1);
        let q = (offset as f64 / self.capacity_bytes.max(1) as f64).clamp(0.0, 1.0);
        let along = (q * wraps as f64).min(wraps as f64 - 1e-9);
        let wrap = (along.floor() as u64).min(wraps - 1);
        let f = along - wrap as f64;
        let x = if wrap.is_multiple_of(2) { f } else { 1.0 - f };
        let band = wrap * self.bands.max(1) / wraps;
        Place { wrap, band, x }
    }

    /// The locate from the head (at byte offset `from`) to a file starting at `to`: nothing
    /// when `to == from`, else CTA's cost (module doc).
    pub fn locate_micros(&self, from: u64, to: u64) -> Micros {
        if from == to {
            return 0;
        }
        let (a, b) = (self.place(from), self.place(to));
        let c = &self.locate;
        let on = |cond: bool, v: Micros| if cond { i128::from(v) } else { 0 };
        let forward = |p: &Place| p.wrap.is_multiple_of(2);
        let behind = a.wrap == b.wrap && if forward(&a) { b.x < a.x } else { b.x > a.x };
        let cost = i128::from(c.base)
            + on(a.wrap != b.wrap, c.wrap_change)
            + on(a.band != b.band, c.band_change)
            - on(a.half() != b.half(), c.half_change)
            + on(forward(&a) != forward(&b), c.direction_change)
            + on(behind, c.step_back)
            + i128::from(scale(c.per_length, (a.x - b.x).abs()));
        u64::try_from(cost.max(0)).unwrap_or(Micros::MAX)
    }

    /// The byte offset a file sequence number stands for (Enstore's cookie's third field,
    /// CTA's fSeq; file 1 is the first data file).
    pub fn fseq_offset(&self, fseq: u64) -> u64 {
        fseq.saturating_sub(1).saturating_mul(self.mean_file_bytes)
    }
}

/// `micros * fraction`, rounded.
fn scale(micros: Micros, fraction: f64) -> Micros {
    (micros as f64 * fraction).round() as Micros
}

/// Where a byte offset lies on the tape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Place {
    pub wrap: u64,
    pub band: u64,
    /// Longitudinal position: 0 = BOT, 1 = EOT.
    pub x: f64,
}

impl Place {
    /// CTA's landing zone: which half of the tape.
    fn half(&self) -> bool {
        self.x >= 0.5
    }
}

/// Where a transfer's file is on its volume, told apart by where it came from, never by its
/// magnitude: `Transfer.position` is a file sequence number, `Transfer.offset_bytes` a byte
/// offset, and a transfer with neither gets a place hashed from its file name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// A file sequence number (1 = the first data file).
    Fseq(u64),
    /// A byte offset from the first data byte.
    Byte(u64),
    /// [`super::name_position`] of the file name: spread evenly over the cartridge.
    Hashed(u64),
}

impl Position {
    /// The byte offset the file starts at, on `drive`.
    pub fn offset(self, drive: &TapeDrive) -> u64 {
        match self {
            Position::Fseq(n) => drive.fseq_offset(n),
            Position::Byte(o) => o,
            Position::Hashed(h) => {
                let span = u128::from(super::POSITION_SPAN);
                let o = u128::from(h) * u128::from(drive.capacity_bytes) / span;
                u64::try_from(o).unwrap_or(u64::MAX)
            }
        }
    }

    /// The name of its kind, for traces and reports.
    pub fn kind(self) -> &'static str {
        match self {
            Position::Fseq(_) => "fseq",
            Position::Byte(_) => "byte_offset",
            Position::Hashed(_) => "hashed",
        }
    }
}

//! `[mss.simulator]`'s drive: the profile `drive` names, each figure overridden by its key when
//! given, each checked with an error naming the key (the figures' sources are in
//! docs/enstore-model.md and config/broker.toml).

use mss_adapters::sim::library::{DriveKind, LocateCost, Order, TapeDrive};

use super::{Issues, RawSimulator};

/// Seconds (or `fallback` microseconds when absent) as microseconds; an issue naming
/// `mss.simulator.<key>` when negative, not finite or absurd.
pub(super) fn micros(v: Option<f64>, fallback: u64, key: &str, issues: &mut Issues) -> u64 {
    match v {
        None => fallback,
        Some(v) if v >= 0.0 && v.is_finite() && v < 1e9 => (v * 1e6).round() as u64,
        Some(_) => {
            issues.add(
                format!("mss.simulator.{key}"),
                "must be 0 or more (seconds)",
            );
            fallback
        }
    }
}

/// A whole number of at least `min`, or `fallback` when absent.
fn count(v: Option<i64>, fallback: u64, min: i64, key: &str, issues: &mut Issues) -> u64 {
    match v {
        None => fallback,
        Some(v) if v >= min => v as u64,
        Some(_) => {
            issues.add(
                format!("mss.simulator.{key}"),
                format!("must be {min} or more"),
            );
            fallback
        }
    }
}

/// A positive amount scaled by `unit` (TB, MB/s), or `fallback` when absent.
fn amount(v: Option<f64>, unit: f64, fallback: u64, key: &str, issues: &mut Issues) -> u64 {
    match v {
        None => fallback,
        Some(v) if v > 0.0 && v.is_finite() && v * unit < 1e20 => (v * unit).round() as u64,
        Some(_) => {
            issues.add(format!("mss.simulator.{key}"), "must be above 0");
            fallback
        }
    }
}

/// The drive's streaming rate (bytes per second) and the drive.
pub(super) fn tape_drive(s: &RawSimulator, issues: &mut Issues) -> (u64, TapeDrive) {
    refuse_replaced_keys(s, issues);
    let kind = drive_kind(s, issues);
    let order = access_order(s, issues);
    let (rate, p) = kind.profile();
    let rate = amount(s.rate_mb_per_sec, 1e6, rate, "rate_mb_per_sec", issues);
    let wraps = count(s.wraps, p.wraps, 1, "wraps", issues);
    let bands = count(s.bands, p.bands, 1, "bands", issues);
    if bands > wraps {
        issues.add("mss.simulator.bands", "must not exceed mss.simulator.wraps");
    }
    let locate = locate_cost(s, &p.locate, issues);
    let mut m = |v: Option<f64>, fallback: u64, key: &str| micros(v, fallback, key, issues);
    let drive = TapeDrive {
        kind,
        wraps,
        bands,
        robot: m(s.robot_seconds, p.robot, "robot_seconds"),
        load: m(s.load_seconds, p.load, "load_seconds"),
        mount_delay: m(s.mount_delay_seconds, p.mount_delay, "mount_delay_seconds"),
        unload: m(s.unload_seconds, p.unload, "unload_seconds"),
        rewind_full: m(s.rewind_full_seconds, p.rewind_full, "rewind_full_seconds"),
        unthread_step: m(
            s.unthread_step_seconds,
            p.unthread_step,
            "unthread_step_seconds",
        ),
        locate,
        per_file_read: m(
            s.per_file_read_seconds,
            p.per_file_read,
            "per_file_read_seconds",
        ),
        per_file_write: m(
            s.per_file_write_seconds,
            p.per_file_write,
            "per_file_write_seconds",
        ),
        mover_poll: m(s.mover_poll_seconds, p.mover_poll, "mover_poll_seconds"),
        order,
        capacity_bytes: amount(s.capacity_tb, 1e12, p.capacity_bytes, "capacity_tb", issues),
        mean_file_bytes: count(
            s.mean_file_bytes,
            p.mean_file_bytes,
            1,
            "mean_file_bytes",
            issues,
        ),
    };
    (rate, drive)
}

/// The keys of the model before the drive profiles: an issue for each one set.
fn refuse_replaced_keys(s: &RawSimulator, issues: &mut Issues) {
    for (key, set) in [
        ("unmount_seconds", s.unmount_seconds.is_some()),
        ("locate_seconds", s.locate_seconds.is_some()),
        (
            "locate_seconds_per_unit",
            s.locate_seconds_per_unit.is_some(),
        ),
    ] {
        if set {
            issues.add(
                format!("mss.simulator.{key}"),
                "was replaced by the drive model: choose `drive` (lto8, lto9, ts1160, custom) \
                 and set its figures (unload_seconds, rewind_full_seconds, locate_*_seconds)",
            );
        }
    }
}

/// The drive profile `drive` names (LTO-9 after an issue when it names none).
fn drive_kind(s: &RawSimulator, issues: &mut Issues) -> DriveKind {
    DriveKind::parse(&s.drive).unwrap_or_else(|| {
        issues.add(
            "mss.simulator.drive",
            format!(
                "unknown drive `{}`: \"lto8\", \"lto9\", \"ts1160\" or \"custom\"",
                s.drive
            ),
        );
        DriveKind::Lto9
    })
}

/// The order of reads within a mount `order` names (position order after an issue).
fn access_order(s: &RawSimulator, issues: &mut Issues) -> Order {
    Order::parse(&s.order).unwrap_or_else(|| {
        issues.add(
            "mss.simulator.order",
            format!("unknown order `{}`: \"position\" or \"rao\"", s.order),
        );
        Order::Position
    })
}

/// The locate cost: the profile's `profile`, each part overridden by its `locate_*_seconds`.
fn locate_cost(s: &RawSimulator, profile: &LocateCost, issues: &mut Issues) -> LocateCost {
    let mut m = |v: Option<f64>, fallback: u64, key: &str| micros(v, fallback, key, issues);
    let l = profile;
    LocateCost {
        base: m(s.locate_base_seconds, l.base, "locate_base_seconds"),
        wrap_change: m(
            s.locate_wrap_change_seconds,
            l.wrap_change,
            "locate_wrap_change_seconds",
        ),
        band_change: m(
            s.locate_band_change_seconds,
            l.band_change,
            "locate_band_change_seconds",
        ),
        half_change: m(
            s.locate_half_change_seconds,
            l.half_change,
            "locate_half_change_seconds",
        ),
        direction_change: m(
            s.locate_direction_change_seconds,
            l.direction_change,
            "locate_direction_change_seconds",
        ),
        step_back: m(
            s.locate_step_back_seconds,
            l.step_back,
            "locate_step_back_seconds",
        ),
        per_length: m(
            s.locate_per_length_seconds,
            l.per_length,
            "locate_per_length_seconds",
        ),
    }
}

//! Report aggregates: per group per hour, what happened (accepted, held, decided front / back /
//! priority, first starts with their waits, done / failed / cancelled, bytes and benefit done),
//! kept in the same transactions that change the requests, so a report over months reads a few
//! thousand rows instead of scanning every request. Waits are kept as a log-scale histogram
//! (`report_waits`), so medians and percentiles over any range merge exactly from the bins.

use std::collections::HashMap;

use super::db::{params, Db, DbResult};

use super::wide::Wide;
use crate::domain::Class;

pub const HOUR_MS: i64 = 3_600_000;

/// The hour an instant falls in.
pub fn hour_of(ms: i64) -> i64 {
    ms.div_euclid(HOUR_MS)
}

/// Histogram bin of a wait: four bins per doubling of milliseconds (each bin's upper edge is
/// at most 19% above its lower edge).
pub fn wait_bin(wait_ms: i64) -> i64 {
    let w = wait_ms.max(0) as f64 + 1.0;
    (w.log2() * 4.0).floor() as i64
}

/// The upper edge of a bin, in milliseconds.
pub fn bin_upper_ms(bin: i64) -> f64 {
    (((bin + 1) as f64) / 4.0).exp2() - 1.0
}

/// What one hour of one group adds up to. Field order is the column order of `report_hours`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HourRow {
    pub accepted: i64,
    pub held: i64,
    pub released: i64,
    /// Held requests cancelled before release.
    pub held_cancelled: i64,
    pub front: i64,
    pub back: i64,
    pub priority: i64,
    pub started: i64,
    pub wait_ms_sum: i64,
    pub done: i64,
    pub failed: i64,
    pub cancelled: i64,
    /// Sums past `i64` are possible: stored as wide decimals (`wide::Wide`).
    pub bytes_done: i128,
    pub benefit_done: i128,
    /// Fair-share requests that started while a priority-class request was queued at the MSS.
    pub started_over_priority: i64,
    /// Requests that rode on another request's transfer of the same file (coalesced).
    pub coalesced: i64,
}

impl HourRow {
    fn add(&mut self, o: &HourRow) {
        self.accepted += o.accepted;
        self.held += o.held;
        self.released += o.released;
        self.held_cancelled += o.held_cancelled;
        self.front += o.front;
        self.back += o.back;
        self.priority += o.priority;
        self.started += o.started;
        self.wait_ms_sum += o.wait_ms_sum;
        self.done += o.done;
        self.failed += o.failed;
        self.cancelled += o.cancelled;
        self.bytes_done += o.bytes_done;
        self.benefit_done += o.benefit_done;
        self.started_over_priority += o.started_over_priority;
        self.coalesced += o.coalesced;
    }

    fn is_zero(&self) -> bool {
        *self == HourRow::default()
    }
}

impl HourRow {
    /// This row with one decision of `class` counted.
    pub fn decided(mut self, class: Class) -> HourRow {
        match class {
            Class::Front => self.front += 1,
            Class::Back => self.back += 1,
            Class::Priority => self.priority += 1,
        }
        self
    }
}

/// The aggregate changes of one transaction, by group path then hour (looked up by `&str`, so
/// a request costs no allocation once its group has a row).
#[derive(Debug, Default)]
pub struct ReportDeltas {
    hours: HashMap<String, HashMap<i64, HourRow>>,
    waits: HashMap<String, HashMap<(i64, i64), i64>>,
}

impl ReportDeltas {
    /// Add `row` to `path`'s hour of `at_ms`.
    pub fn add(&mut self, path: &str, at_ms: i64, row: HourRow) {
        let hours = match self.hours.get_mut(path) {
            Some(h) => h,
            None => self.hours.entry(path.to_string()).or_default(),
        };
        hours.entry(hour_of(at_ms)).or_default().add(&row);
    }

    /// A first start after `wait_ms` in the queue.
    pub fn started(&mut self, path: &str, at_ms: i64, wait_ms: i64, over_priority: bool) {
        self.add(
            path,
            at_ms,
            HourRow {
                started: 1,
                wait_ms_sum: wait_ms.max(0),
                started_over_priority: i64::from(over_priority),
                ..HourRow::default()
            },
        );
        let waits = match self.waits.get_mut(path) {
            Some(w) => w,
            None => self.waits.entry(path.to_string()).or_default(),
        };
        *waits
            .entry((hour_of(at_ms), wait_bin(wait_ms)))
            .or_default() += 1;
    }

    /// Write the deltas (in the caller's transaction; gathered on PostgreSQL, `Db::insert`).
    pub fn flush(&self, tx: &Db<'_>) -> DbResult<()> {
        const HOURS: &str =
            "INSERT INTO report_hours (path, hour, accepted, held, released, held_cancelled, \
             front, back, priority, started, wait_ms_sum, done, failed, cancelled, bytes_done, \
             benefit_done, started_over_priority, coalesced) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, \
             ?18) \
             ON CONFLICT(path, hour) DO UPDATE SET \
             accepted = report_hours.accepted + excluded.accepted, \
             held = report_hours.held + excluded.held, \
             released = report_hours.released + excluded.released, \
             held_cancelled = report_hours.held_cancelled + excluded.held_cancelled, \
             front = report_hours.front + excluded.front, \
             back = report_hours.back + excluded.back, \
             priority = report_hours.priority + excluded.priority, \
             started = report_hours.started + excluded.started, \
             wait_ms_sum = report_hours.wait_ms_sum + excluded.wait_ms_sum, \
             done = report_hours.done + excluded.done, \
             failed = report_hours.failed + excluded.failed, \
             cancelled = report_hours.cancelled + excluded.cancelled, \
             bytes_done = wide_add(report_hours.bytes_done, excluded.bytes_done), \
             benefit_done = wide_add(report_hours.benefit_done, excluded.benefit_done), \
             started_over_priority = \
             report_hours.started_over_priority + excluded.started_over_priority, \
             coalesced = report_hours.coalesced + excluded.coalesced";
        for (path, hour, r) in self
            .hours
            .iter()
            .flat_map(|(p, h)| h.iter().map(move |(hour, r)| (p, hour, r)))
        {
            if r.is_zero() {
                continue;
            }
            tx.insert(
                HOURS,
                params![
                    path,
                    hour,
                    r.accepted,
                    r.held,
                    r.released,
                    r.held_cancelled,
                    r.front,
                    r.back,
                    r.priority,
                    r.started,
                    r.wait_ms_sum,
                    r.done,
                    r.failed,
                    r.cancelled,
                    Wide(r.bytes_done),
                    Wide(r.benefit_done),
                    r.started_over_priority,
                    r.coalesced
                ],
            )?;
        }
        const WAITS: &str = "INSERT INTO report_waits (path, hour, bin, count) \
             VALUES (?1, ?2, ?3, ?4) ON CONFLICT(path, hour, bin) DO UPDATE SET \
             count = report_waits.count + excluded.count";
        for (path, (hour, bin), n) in self
            .waits
            .iter()
            .flat_map(|(p, w)| w.iter().map(move |(k, n)| (p, k, n)))
        {
            tx.insert(WAITS, params![path, hour, bin, n])?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_bins_are_monotonic_and_tight() {
        let mut last = -1;
        for w in [0, 1, 2, 3, 10, 100, 1_000, 60_000, 3_600_000, 86_400_000] {
            let b = wait_bin(w);
            assert!(b >= last);
            last = b;
            assert!(bin_upper_ms(b) >= w as f64, "{w} within its bin");
            assert!(
                bin_upper_ms(b) <= (w as f64 + 1.0) * 1.19 + 1.0,
                "{w}: {}",
                bin_upper_ms(b)
            );
        }
        assert_eq!(hour_of(HOUR_MS - 1), 0);
        assert_eq!(hour_of(-1), -1);
    }
}

//! Share reports: from the ledger's hourly aggregates (see `ledger::aggregates`) to what
//! an operator reads: per group and tree node, target vs achieved share of bytes and files,
//! what was accepted, done, failed, cancelled, pending and held, front/back decisions, wait
//! time percentiles, the deviation from target; per priority class the same, plus every hour a
//! fair-share request started while a priority-class request waited; and the same figures per
//! bucket (hour, day, week) as a time series. `mssbroker report`, `GET /v1/report` and the HTML
//! page all render a [`Report`].
//!
//! The rendering is pure; `read` and `read_file` query the ledger, and the bins are the ledger's
//! own (`ledger::aggregates`), so `report` sits above the ledger in the layer picture. `report.rs` (`Report` built from the hourly aggregates: per node, class and bucket;
//! wait quantiles from merged histograms; `read`/`read_file` build one from the ledger's
//! `ReportFigures`), `range.rs` (`parse_range`, and `parse_range_for` with a `BucketRule`: the
//! page's charts default to hours up to 7 days), `render.rs` (table, per-bucket tables for
//! `--buckets`, CSV), `charts.rs` (plotters SVG line charts; data series 2 px wide so a test can
//! count them; a single point marked with a dot), `html.rs` (the askama page, template in
//! `templates/report.html`; per-bucket tables with `?buckets=true`).

pub mod charts;
pub mod html;
pub mod range;
pub mod render;

pub use range::{parse_range, Bucket, RangeError, ReportRange};

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::domain::{GroupKind, PolicySettings};
use crate::ledger::aggregates::{bin_upper_ms, HourRow, HOUR_MS};
pub use crate::ledger::ReportRows;
use crate::ledger::{Ledger, LedgerError, LedgerReader, ReportFigures};
use crate::shares::view::{format_ms, SharesView};

/// Counts that carry over from before the range (for pending and held at each instant).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Carry {
    pub accepted: i64,
    pub finished: i64,
    pub held: i64,
    pub unheld: i64,
}

impl Carry {
    fn add(&mut self, r: &HourRow) {
        self.accepted += r.accepted;
        self.finished += r.done + r.failed + r.cancelled;
        self.held += r.held;
        self.unheld += r.released + r.held_cancelled;
    }

    fn pending(&self) -> i64 {
        (self.accepted - self.finished).max(0)
    }

    fn held_now(&self) -> i64 {
        (self.held - self.unheld).max(0)
    }
}

/// One group, tree node or class over a range (or one bucket).
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Figures {
    pub path: String,
    /// `fair_share` (a tree node), `priority` (a priority class), or `all_fair_share`.
    pub kind: String,
    pub leaf: bool,
    /// Target share of fair-share benefit (null for priority classes).
    pub target_share: Option<f64>,
    /// Share of all fair-share bytes done in the range (null for priority classes).
    pub achieved_share_bytes: Option<f64>,
    /// Share of all fair-share files done in the range.
    pub achieved_share_files: Option<f64>,
    /// `(achieved_share_bytes - target_share) * 100`, percentage points.
    pub deviation_pp: Option<f64>,
    /// Exact; may exceed 2^64.
    pub bytes_done: i128,
    pub files_done: i64,
    pub accepted: i64,
    pub done: i64,
    pub failed: i64,
    pub cancelled: i64,
    /// Requests not final at the end of the range (held included).
    pub pending: i64,
    /// Requests held by a feasibility cap at the end of the range.
    pub held: i64,
    pub front: i64,
    pub back: i64,
    /// Requests that started (first start) in the range, and their wait from queueing.
    pub started: i64,
    /// Median wait, queue to first start, ms (upper edge of its histogram bin: within 19%).
    pub wait_median_ms: Option<f64>,
    pub wait_p95_ms: Option<f64>,
    /// Fair-share requests that started while a priority-class request was waiting.
    pub started_over_priority: i64,
    /// Requests that rode on another request's transfer of the same file: one MSS transfer,
    /// each charged to its own group.
    pub coalesced: i64,
}

/// One bucket of the time series.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BucketFigures {
    pub start: String,
    pub start_ms: i64,
    /// Every group, tree node and class, as in [`Report::groups`].
    pub groups: Vec<Figures>,
}

impl BucketFigures {
    /// Whether anything happened in the bucket: a request accepted, started, decided or
    /// finished in any group (pending and held alone carry over from earlier buckets).
    pub fn active(&self) -> bool {
        self.groups.iter().any(|f| {
            f.accepted + f.started + f.front + f.back + f.done + f.failed + f.cancelled > 0
        })
    }
}

/// A whole report.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Report {
    pub since: String,
    pub until: String,
    pub since_ms: i64,
    pub until_ms: i64,
    pub bucket: Bucket,
    /// Tree nodes depth first, then priority classes, then `all_fair_share`.
    pub groups: Vec<Figures>,
    pub series: Vec<BucketFigures>,
    /// Hours (start, RFC 3339) in which a fair-share request started while a priority-class
    /// request waited: should be none.
    pub priority_held_back: Vec<String>,
    /// The current share view: each group's usage windows or decayed sum (`diagnose -f`).
    pub diagnose: SharesView,
}

/// Rows of one group summed, with its waits.
#[derive(Default, Clone)]
struct Acc {
    row: HourRow,
    waits: BTreeMap<i64, i64>,
}

impl Acc {
    fn add(&mut self, r: &HourRow) {
        add_row(&mut self.row, r);
    }

    /// Add another sum: its row and its waits.
    fn merge(&mut self, other: &Acc) {
        self.add(&other.row);
        for (bin, n) in &other.waits {
            *self.waits.entry(*bin).or_default() += n;
        }
    }
}

fn add_row(a: &mut HourRow, r: &HourRow) {
    a.accepted += r.accepted;
    a.held += r.held;
    a.released += r.released;
    a.held_cancelled += r.held_cancelled;
    a.front += r.front;
    a.back += r.back;
    a.priority += r.priority;
    a.started += r.started;
    a.wait_ms_sum += r.wait_ms_sum;
    a.done += r.done;
    a.failed += r.failed;
    a.cancelled += r.cancelled;
    a.bytes_done += r.bytes_done;
    a.benefit_done += r.benefit_done;
    a.started_over_priority += r.started_over_priority;
    a.coalesced += r.coalesced;
}

/// The `q` quantile (0..1) of a histogram, as its bin's upper edge.
fn quantile(waits: &BTreeMap<i64, i64>, q: f64) -> Option<f64> {
    let total: i64 = waits.values().sum();
    if total == 0 {
        return None;
    }
    let rank = ((q * total as f64).ceil() as i64).max(1);
    let mut seen = 0;
    for (bin, n) in waits {
        seen += n;
        if seen >= rank {
            return Some(bin_upper_ms(*bin).round());
        }
    }
    None
}

/// A report over `range` from a running broker's ledger.
pub async fn read(ledger: &Ledger, range: ReportRange, now_ms: i64) -> Result<Report, LedgerError> {
    let figures = ledger
        .report_figures(range.hours(), range.diagnose_at(now_ms), now_ms)
        .await?;
    Ok(from_figures(&ledger.policy(), figures, range))
}

/// A report over `range` from a database opened read-only.
pub fn read_file(
    reader: &LedgerReader,
    policy: &PolicySettings,
    range: ReportRange,
    now_ms: i64,
) -> Result<Report, LedgerError> {
    let figures =
        reader.report_figures(policy, range.hours(), range.diagnose_at(now_ms), now_ms)?;
    Ok(from_figures(policy, figures, range))
}

fn from_figures(policy: &PolicySettings, f: ReportFigures, range: ReportRange) -> Report {
    build(policy, &f.rows, range, f.diagnose)
}

/// Build a report. `diagnose` is the share view at `until` (or now).
pub fn build(
    policy: &PolicySettings,
    rows: &ReportRows,
    range: ReportRange,
    diagnose: SharesView,
) -> Report {
    let since_h = range.since_hour();
    let until_h = range.until_hour();
    let buckets = bucket_sums(rows, &range);
    // Running carry per path, bucket by bucket.
    let mut carry: HashMap<&str, Carry> = HashMap::new();
    for (path, row) in &rows.before {
        carry.entry(path.as_str()).or_default().add(row);
    }
    let mut total: HashMap<&str, Acc> = HashMap::new();
    let mut series = Vec::with_capacity(buckets.len());
    for (start, accs) in &buckets {
        for (path, acc) in accs {
            carry.entry(path).or_default().add(&acc.row);
            total.entry(path).or_default().merge(acc);
        }
        series.push(BucketFigures {
            start: format_ms(start * HOUR_MS),
            start_ms: start * HOUR_MS,
            groups: figures(policy, accs, &carry),
        });
    }
    Report {
        since: format_ms(since_h * HOUR_MS),
        until: format_ms(until_h * HOUR_MS),
        since_ms: since_h * HOUR_MS,
        until_ms: until_h * HOUR_MS,
        bucket: range.bucket,
        groups: figures(policy, &total, &carry),
        series,
        priority_held_back: held_back_hours(rows)
            .into_iter()
            .map(|h| format_ms(h * HOUR_MS))
            .collect(),
        diagnose,
    }
}

/// The hourly rows and wait histograms summed per bucket (every bucket of the range present,
/// empty or not) and per path.
fn bucket_sums<'r>(
    rows: &'r ReportRows,
    range: &ReportRange,
) -> BTreeMap<i64, HashMap<&'r str, Acc>> {
    let mut buckets: BTreeMap<i64, HashMap<&str, Acc>> = BTreeMap::new();
    let until_h = range.until_hour();
    let mut b = range.bucket.start_of(range.since_hour());
    while b < until_h {
        buckets.entry(b).or_default();
        b += range.bucket.hours();
    }
    for (path, hour, row) in &rows.hours {
        let start = range.bucket.start_of(*hour);
        buckets
            .entry(start)
            .or_default()
            .entry(path.as_str())
            .or_default()
            .add(row);
    }
    for (path, hour, bin, n) in &rows.waits {
        let start = range.bucket.start_of(*hour);
        *buckets
            .entry(start)
            .or_default()
            .entry(path.as_str())
            .or_default()
            .waits
            .entry(*bin)
            .or_default() += n;
    }
    buckets
}

/// The hours in which a fair-share request started while a priority-class one waited, sorted.
fn held_back_hours(rows: &ReportRows) -> Vec<i64> {
    let mut held_back: Vec<i64> = rows
        .hours
        .iter()
        .filter(|(_, _, r)| r.started_over_priority > 0)
        .map(|(_, h, _)| *h)
        .collect();
    held_back.sort_unstable();
    held_back.dedup();
    held_back
}

/// Figures of every tree node, priority class and the fair-share total, from per-path sums.
fn figures(
    policy: &PolicySettings,
    accs: &HashMap<&str, Acc>,
    carry: &HashMap<&str, Carry>,
) -> Vec<Figures> {
    let leaf_acc = |path: &str| accs.get(path).cloned().unwrap_or_default();
    let leaf_carry = |path: &str| carry.get(path).copied().unwrap_or_default();
    let fair_paths = policy
        .groups
        .iter()
        .filter(|g| matches!(g.kind, GroupKind::FairShare { .. }))
        .map(|g| g.path.as_str());
    let (fair, fair_carry) = sum_paths(accs, carry, fair_paths);
    let mut out = Vec::new();
    for i in policy.tree.depth_first() {
        let node = &policy.tree.nodes[i];
        let leaves = node.leaves.iter().map(|g| policy.group(*g).path.as_str());
        let (a, c) = sum_paths(accs, carry, leaves);
        let kind = Kind::FairShare {
            target: node.fraction.to_f64(),
            fair: &fair,
        };
        out.push(node_figures(
            node.path.as_str(),
            kind,
            node.is_leaf(),
            &a,
            &c,
        ));
    }
    for g in &policy.groups {
        if let GroupKind::Priority { .. } = g.kind {
            let path = g.path.as_str();
            let (a, c) = (leaf_acc(path), leaf_carry(path));
            out.push(node_figures(path, Kind::Priority, true, &a, &c));
        }
    }
    let all = Kind::AllFairShare { fair: &fair };
    out.push(node_figures(
        "(all fair share)",
        all,
        false,
        &fair,
        &fair_carry,
    ));
    out
}

/// What a row of figures is: a node of the share tree (its target, and the fair-share sums its
/// achieved shares are taken of), a priority class, or all of fair share together.
enum Kind<'a> {
    FairShare { target: f64, fair: &'a Acc },
    Priority,
    AllFairShare { fair: &'a Acc },
}

/// The sums of the given paths' rows, waits and carries.
fn sum_paths<'p>(
    accs: &HashMap<&str, Acc>,
    carry: &HashMap<&str, Carry>,
    paths: impl Iterator<Item = &'p str>,
) -> (Acc, Carry) {
    let mut a = Acc::default();
    let mut c = Carry::default();
    for p in paths {
        if let Some(x) = accs.get(p) {
            a.merge(x);
        }
        let y = carry.get(p).copied().unwrap_or_default();
        c.accepted += y.accepted;
        c.finished += y.finished;
        c.held += y.held;
        c.unheld += y.unheld;
    }
    (a, c)
}

/// One row of figures.
fn node_figures(path: &str, kind: Kind<'_>, leaf: bool, a: &Acc, c: &Carry) -> Figures {
    let share = |part: i128, all: i128| (all > 0).then(|| part as f64 / all as f64);
    let (kind, target, fair) = match kind {
        Kind::FairShare { target, fair } => ("fair_share", Some(target), Some(fair)),
        Kind::Priority => ("priority", None, None),
        Kind::AllFairShare { fair } => ("all_fair_share", Some(1.0), Some(fair)),
    };
    let achieved = fair.and_then(|f| share(a.row.bytes_done, f.row.bytes_done));
    Figures {
        path: path.to_string(),
        kind: kind.to_string(),
        leaf,
        target_share: target,
        achieved_share_bytes: achieved,
        achieved_share_files: fair
            .and_then(|f| share(i128::from(a.row.done), i128::from(f.row.done))),
        deviation_pp: match (achieved, target) {
            (Some(x), Some(t)) => Some((x - t) * 100.0),
            _ => None,
        },
        bytes_done: a.row.bytes_done,
        files_done: a.row.done,
        accepted: a.row.accepted,
        done: a.row.done,
        failed: a.row.failed,
        cancelled: a.row.cancelled,
        pending: c.pending(),
        held: c.held_now(),
        front: a.row.front,
        back: a.row.back,
        started: a.row.started,
        wait_median_ms: quantile(&a.waits, 0.5),
        wait_p95_ms: quantile(&a.waits, 0.95),
        started_over_priority: a.row.started_over_priority,
        coalesced: a.row.coalesced,
    }
}

#[cfg(test)]
mod tests;

//! What a simulation reports (docs/simulation.md): the JSON document `{"runs": [...]}` and its
//! table, computed from a [`RunRecord`].

use serde::Serialize;

use super::engine::{target_share, Finished, RunRecord};
use crate::domain::{GroupId, PolicySettings};
use mss_adapters::sim::library::Micros;

/// Bytes in the TB of `mounts_per_tb`.
pub const TB: f64 = 1e12;

/// The report of `mssbroker simulate`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimulationReport {
    pub runs: Vec<RunReport>,
}

/// One policy/mode run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    pub policy: String,
    pub mode: String,
    pub requests: u64,
    pub makespan_s: f64,
    /// `None` (null) when no share window completed.
    pub share_error_max_pp: Option<f64>,
    pub share_error_mean_pp: Option<f64>,
    /// The same over eligible demand: only requests finished while every fair-share group with
    /// a share had a request the policy could send ([`Finished::eligible`]; in the volumes
    /// mode a group waiting only on volumes not yet eligible does not count as waiting). The
    /// same as the above in the other modes.
    pub share_error_eligible_max_pp: Option<f64>,
    pub share_error_eligible_mean_pp: Option<f64>,
    pub priority_inversions: u64,
    pub mounts: u64,
    /// `None` when nothing was done.
    pub mounts_per_tb: Option<f64>,
    /// `None` when no drive was busy.
    pub drive_efficiency: Option<f64>,
    /// Streaming over the drives' working time (mounting, locating, streaming, unmounting; idle
    /// left out). `None` when no drive worked.
    pub drive_efficiency_working: Option<f64>,
    /// Where the drives' time went, summed over the drives: under the Enstore model, with
    /// every request finished, the parts add up to drives × makespan.
    pub drive_time_s: DriveTimeReport,
    /// Locates that moved the tape (the next file on tape needs none).
    pub locates: u64,
    /// Waits of every fair-share request, arrival to start (nearest rank).
    pub fair_wait_p95_s: f64,
    pub fair_wait_max_s: f64,
    /// Waits of every priority-class request (data taking), arrival to start (nearest rank);
    /// `None` (null) when the trace has none.
    pub priority_wait_p50_s: Option<f64>,
    pub priority_wait_p99_s: Option<f64>,
    /// Volumes mode: batches released and their mean size (null in the other modes).
    pub batches: Option<u64>,
    pub batch_mean_files: Option<f64>,
    /// Reads that rode on another read of the same file (no transfer of their own).
    pub coalesced: u64,
    /// Failed attempts sent again, and requests failed for good (`--failure-rate`).
    pub retried: u64,
    pub failed: u64,
    /// Requests the trace cancelled (`cancelled_t`) that ended cancelled, riders included.
    pub cancelled: u64,
    /// Priority changes of requests pending at the library that it took (the dispatcher's
    /// re-prioritisation).
    pub priority_changes: u64,
    pub groups: Vec<GroupReport>,
}

/// The drives' time by what they did, in seconds summed over the drives, up to the makespan
/// (under the priority model only `stream` and `mount` are kept).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DriveTimeReport {
    /// Robot, load and thread, Enstore's mount delay.
    pub mount: f64,
    /// Positioning the tape before a file.
    pub locate: f64,
    /// Reading or writing data at the drive's rate.
    pub stream: f64,
    /// Per file, beyond locate and streaming (Enstore's callback, CRC, file marks).
    pub per_file: f64,
    /// Rewind, unload and the robot's move back.
    pub unmount: f64,
    /// Idle (empty, waiting for the mover's poll, or waiting out the dismount delay) while a
    /// transfer was pending.
    pub idle_with_work: f64,
    /// Idle with nothing pending.
    pub idle: f64,
}

impl DriveTimeReport {
    /// Every part.
    pub fn total(&self) -> f64 {
        self.mount
            + self.locate
            + self.stream
            + self.per_file
            + self.unmount
            + self.idle_with_work
            + self.idle
    }
}

/// One group of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupReport {
    pub path: String,
    /// Fair-share groups only (null for a priority class).
    pub target_share: Option<f64>,
    /// The group's share of the fair-share bytes done while the trace was saturated (every
    /// fair-share group with a share waiting; all fair-share bytes if never); null for a
    /// priority class.
    pub achieved_share: Option<f64>,
    pub bytes: u64,
    pub files: u64,
    pub wait_p50_s: f64,
    pub wait_p95_s: f64,
    pub wait_p99_s: f64,
    pub wait_max_s: f64,
}

/// The share error over windows: the largest and the mean over every (window, fair-share
/// group) pair, in percentage points, and how many windows there were.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShareError {
    pub max_pp: f64,
    pub mean_pp: f64,
    pub windows: usize,
}

/// The share error of `finished` (fair-share requests done, in finishing order).
///
/// Only requests finished while the trace was saturated ([`Finished::saturated`]: every
/// fair-share group with a share above 0 had a request waiting) count. Taken in finishing
/// order, they are cut into consecutive windows: a window closes with the request that brings
/// its bytes to `window_bytes` or more; the last, incomplete window is dropped. In each window
/// every fair-share group's share of the window's bytes is compared with its target
/// (`targets[g]`, `None` for priority classes, which are left out): `|share - target| * 100`.
/// `None` when no window completed.
pub fn share_error(
    finished: &[Finished],
    targets: &[Option<f64>],
    window_bytes: u64,
) -> Option<ShareError> {
    share_error_of(finished, targets, window_bytes, |f| f.saturated)
}

/// [`share_error`] over the requests `counts` admits (instead of the saturated ones).
pub fn share_error_of(
    finished: &[Finished],
    targets: &[Option<f64>],
    window_bytes: u64,
    counts: impl Fn(&Finished) -> bool,
) -> Option<ShareError> {
    let mut bytes = vec![0u128; targets.len()];
    let mut in_window: u128 = 0;
    let (mut max, mut sum, mut pairs, mut windows) = (0.0_f64, 0.0_f64, 0usize, 0usize);
    for f in finished.iter().filter(|f| counts(f)) {
        let Some(b) = bytes.get_mut(f.group.0) else {
            continue;
        };
        *b += u128::from(f.bytes);
        in_window += u128::from(f.bytes);
        if in_window < u128::from(window_bytes.max(1)) {
            continue;
        }
        for (g, target) in targets.iter().enumerate() {
            let Some(target) = target else { continue };
            let share = bytes[g] as f64 / in_window as f64;
            let e = (share - target).abs() * 100.0;
            max = max.max(e);
            sum += e;
            pairs += 1;
        }
        windows += 1;
        bytes.iter_mut().for_each(|b| *b = 0);
        in_window = 0;
    }
    (windows > 0 && pairs > 0).then(|| ShareError {
        max_pp: max,
        mean_pp: sum / pairs as f64,
        windows,
    })
}

/// The nearest-rank percentile `p` (in (0, 1]) of `sorted` (ascending): the value at rank
/// `ceil(p * n)`; 0 when empty.
pub fn percentile(sorted: &[Micros], p: f64) -> Micros {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn secs(m: Micros) -> f64 {
    m as f64 / 1e6
}

/// The report of one run of `requests` requests.
pub fn run_report(
    policy: &PolicySettings,
    name: &str,
    mode: &str,
    requests: u64,
    o: &RunRecord,
    window_bytes: u64,
) -> RunReport {
    let targets: Vec<Option<f64>> = policy
        .group_ids()
        .map(|g| target_share(policy, g))
        .collect();
    let err = share_error(&o.finished, &targets, window_bytes);
    let err_eligible = share_error_of(&o.finished, &targets, window_bytes, |f| f.eligible);
    let achieved = achieved_bytes(o, targets.len());
    let fair_bytes: u128 = achieved.iter().sum();
    let all_bytes: u128 = o.bytes.iter().sum();
    let groups = policy
        .group_ids()
        .map(|g| group_report(policy, o, g, targets[g.0], (achieved[g.0], fair_bytes)))
        .collect();
    let mounts = o.library.mounts;
    let mut fair_waits: Vec<Micros> = policy
        .group_ids()
        .filter(|g| targets[g.0].is_some())
        .flat_map(|g| o.waits[g.0].iter().copied())
        .collect();
    fair_waits.sort_unstable();
    let mut priority_waits: Vec<Micros> = policy
        .group_ids()
        .filter(|g| targets[g.0].is_none())
        .flat_map(|g| o.waits[g.0].iter().copied())
        .collect();
    priority_waits.sort_unstable();
    let priority_wait =
        |p: f64| (!priority_waits.is_empty()).then(|| secs(percentile(&priority_waits, p)));
    let batched = mode == "volumes";
    let batch_files: usize = o.batches.iter().map(|b| b.files).sum();
    RunReport {
        policy: name.to_string(),
        mode: mode.to_string(),
        requests,
        makespan_s: secs(o.makespan),
        share_error_max_pp: err.map(|e| e.max_pp),
        share_error_mean_pp: err.map(|e| e.mean_pp),
        share_error_eligible_max_pp: err_eligible.map(|e| e.max_pp),
        share_error_eligible_mean_pp: err_eligible.map(|e| e.mean_pp),
        priority_inversions: o.priority_inversions,
        mounts,
        mounts_per_tb: (all_bytes > 0).then(|| mounts as f64 / (all_bytes as f64 / TB)),
        drive_efficiency: o.library.drive_efficiency(),
        drive_efficiency_working: o.library.working_efficiency(),
        drive_time_s: drive_times(&o.library),
        locates: o.library.locates,
        fair_wait_p95_s: secs(percentile(&fair_waits, 0.95)),
        fair_wait_max_s: secs(fair_waits.last().copied().unwrap_or(0)),
        priority_wait_p50_s: priority_wait(0.50),
        priority_wait_p99_s: priority_wait(0.99),
        batches: batched.then_some(o.batches.len() as u64),
        batch_mean_files: (batched && !o.batches.is_empty())
            .then(|| batch_files as f64 / o.batches.len() as f64),
        coalesced: o.coalesced,
        retried: o.retried,
        failed: o.failed,
        cancelled: o.cancelled,
        priority_changes: o.priority_changes,
        groups,
    }
}

fn drive_times(library: &mss_adapters::sim::library::LibraryStats) -> DriveTimeReport {
    let t = library.total();
    DriveTimeReport {
        mount: secs(t.mounting),
        locate: secs(t.locating),
        stream: secs(t.streaming),
        per_file: secs(t.per_file),
        unmount: secs(t.unmounting),
        idle_with_work: secs(t.idle_with_work),
        idle: secs(t.idle_without_work),
    }
}

fn group_report(
    policy: &PolicySettings,
    o: &RunRecord,
    g: GroupId,
    target: Option<f64>,
    (achieved, fair_bytes): (u128, u128),
) -> GroupReport {
    let mut waits = o.waits[g.0].clone();
    waits.sort_unstable();
    let bytes = o.bytes[g.0];
    GroupReport {
        path: policy.group(g).path.to_string(),
        target_share: target,
        achieved_share: target.map(|_| {
            if fair_bytes == 0 {
                0.0
            } else {
                achieved as f64 / fair_bytes as f64
            }
        }),
        bytes: u64::try_from(bytes).unwrap_or(u64::MAX),
        files: o.files[g.0],
        wait_p50_s: secs(percentile(&waits, 0.50)),
        wait_p95_s: secs(percentile(&waits, 0.95)),
        wait_p99_s: secs(percentile(&waits, 0.99)),
        wait_max_s: secs(waits.last().copied().unwrap_or(0)),
    }
}

/// Per group, the fair-share bytes `achieved_share` is computed from: those finished while the
/// trace was saturated (the bytes the share windows cut, the last incomplete window included),
/// or, when nothing finished saturated, every fair-share byte done.
fn achieved_bytes(o: &RunRecord, groups: usize) -> Vec<u128> {
    let mut bytes = vec![0u128; groups];
    for f in o.finished.iter().filter(|f| f.saturated) {
        if let Some(b) = bytes.get_mut(f.group.0) {
            *b += u128::from(f.bytes);
        }
    }
    if bytes.iter().all(|&b| b == 0) {
        for f in &o.finished {
            if let Some(b) = bytes.get_mut(f.group.0) {
                *b += u128::from(f.bytes);
            }
        }
    }
    bytes
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.digits$}"))
}

/// The report as text: one line per run, then each run's groups.
pub fn table(report: &SimulationReport) -> String {
    let header = vec![
        "policy/mode",
        "requests",
        "makespan_s",
        "share_err_max_pp",
        "share_err_mean_pp",
        "share_err_elig_max_pp",
        "prio_inversions",
        "mounts",
        "mounts_per_tb",
        "drive_eff",
        "fair_wait_p95_s",
        "fair_wait_max_s",
        "prio_wait_p50_s",
        "prio_wait_p99_s",
        "batches",
        "mount%",
        "locate%",
        "stream%",
        "per_file%",
        "unmount%",
        "idle_work%",
        "idle%",
    ];
    let rows: Vec<Vec<String>> = report
        .runs
        .iter()
        .map(|r| {
            vec![
                format!("{}/{}", r.policy, r.mode),
                r.requests.to_string(),
                format!("{:.0}", r.makespan_s),
                opt(r.share_error_max_pp, 2),
                opt(r.share_error_mean_pp, 2),
                opt(r.share_error_eligible_max_pp, 2),
                r.priority_inversions.to_string(),
                r.mounts.to_string(),
                opt(r.mounts_per_tb, 1),
                opt(r.drive_efficiency, 3),
                format!("{:.0}", r.fair_wait_p95_s),
                format!("{:.0}", r.fair_wait_max_s),
                opt(r.priority_wait_p50_s, 0),
                opt(r.priority_wait_p99_s, 0),
                r.batches.map_or_else(|| "-".to_string(), |b| b.to_string()),
            ]
            .into_iter()
            .chain(shares(&r.drive_time_s))
            .collect()
        })
        .collect();
    let (header, rows) = with_failures(header, rows, &report.runs);
    let mut out = crate::text_table::aligned(&header, &rows);
    for r in &report.runs {
        out.push_str(&format!("\n{}/{}\n", r.policy, r.mode));
        out.push_str(&groups_table(&r.groups));
    }
    out
}

/// Each part of the drives' time as a percentage of all of it.
fn shares(t: &DriveTimeReport) -> Vec<String> {
    let total = t.total();
    let pct = |v: f64| {
        if total > 0.0 {
            format!("{:.1}", 100.0 * v / total)
        } else {
            "-".to_string()
        }
    };
    [
        t.mount,
        t.locate,
        t.stream,
        t.per_file,
        t.unmount,
        t.idle_with_work,
        t.idle,
    ]
    .into_iter()
    .map(pct)
    .collect()
}

/// The runs' `retried` and `failed` as two more columns, when any run had a failure
/// (`--failure-rate`); without failures the table stays as it was.
fn with_failures(
    mut header: Vec<&'static str>,
    mut rows: Vec<Vec<String>>,
    runs: &[RunReport],
) -> (Vec<&'static str>, Vec<Vec<String>>) {
    if runs.iter().all(|r| r.retried == 0 && r.failed == 0) {
        return (header, rows);
    }
    header.extend(["retried", "failed"]);
    for (row, r) in rows.iter_mut().zip(runs) {
        row.extend([r.retried.to_string(), r.failed.to_string()]);
    }
    (header, rows)
}

fn groups_table(groups: &[GroupReport]) -> String {
    let header = [
        "group",
        "target",
        "achieved",
        "bytes",
        "files",
        "wait_p50_s",
        "wait_p95_s",
        "wait_p99_s",
        "wait_max_s",
    ];
    let rows: Vec<Vec<String>> = groups
        .iter()
        .map(|g| {
            vec![
                g.path.clone(),
                opt(g.target_share, 3),
                opt(g.achieved_share, 3),
                g.bytes.to_string(),
                g.files.to_string(),
                format!("{:.0}", g.wait_p50_s),
                format!("{:.0}", g.wait_p95_s),
                format!("{:.0}", g.wait_p99_s),
                format!("{:.0}", g.wait_max_s),
            ]
        })
        .collect();
    crate::text_table::aligned(&header, &rows)
}

//! The operator's HTML page: a server-rendered askama template (`templates/report.html`) with
//! the report's table, the SVG charts of [`super::charts`] and the diagnose table. No
//! JavaScript.

use askama::Template;

use super::render::bytes;
use super::{Figures, Report};
use crate::ledger::aggregates::HOUR_MS;
use crate::shares::view::format_ms;

/// One table row, formatted.
pub struct Row {
    pub class: &'static str,
    pub path: String,
    pub name: String,
    pub target: String,
    pub achieved: String,
    pub deviation: String,
    pub dev_class: &'static str,
    pub files_share: String,
    pub bytes: String,
    pub files: i64,
    pub accepted: i64,
    pub failed: i64,
    pub cancelled: i64,
    pub pending: i64,
    pub held: i64,
    pub front_back: String,
    pub wait_p50: String,
    pub wait_p95: String,
}

/// group, target, effective usage, share, rank, SAM class, cap state, windows.
type DiagnoseRow = (
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    String,
);

/// One bucket's table (`?buckets=true`).
pub struct BucketTable {
    pub start: String,
    pub start_ms: i64,
    pub rows: Vec<Row>,
}

#[derive(Template)]
#[template(path = "report.html")]
struct Page<'a> {
    r: &'a Report,
    /// Per-bucket tables were asked for.
    per_bucket: bool,
    /// The buckets in which anything happened, each a table like the totals'.
    bucket_tables: Vec<BucketTable>,
    bucket: &'static str,
    generated: String,
    last_day: i64,
    last_week: i64,
    last_month: i64,
    rows: Vec<Row>,
    charts: Vec<(&'static str, &'static str, String)>,
    diagnose: Vec<DiagnoseRow>,
}

fn pct(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format!("{:.1}%", v * 100.0))
}

fn wait(v: Option<f64>) -> String {
    match v {
        None => "–".into(),
        Some(v) if v >= 3_600_000.0 => format!("{:.1} h", v / 3_600_000.0),
        Some(v) if v >= 60_000.0 => format!("{:.1} min", v / 60_000.0),
        Some(v) if v >= 1_000.0 => format!("{:.1} s", v / 1000.0),
        // Under a second in ms: a 12 ms wait is "12 ms", not "0.0 s".
        Some(v) => format!("{v:.0} ms"),
    }
}

fn row(f: &Figures) -> Row {
    let depth = f.path.matches('/').count();
    let (class, name) = match f.kind.as_str() {
        "fair_share" => (
            if f.leaf { "leaf" } else { "inner" },
            format!(
                "{}{}",
                "\u{a0}\u{a0}\u{a0}".repeat(depth),
                f.path.rsplit('/').next().unwrap_or(&f.path)
            ),
        ),
        "priority" => ("priority", format!("{} (priority class)", f.path)),
        _ => ("total", "all fair-share groups".to_string()),
    };
    Row {
        class,
        path: f.path.clone(),
        name,
        target: pct(f.target_share),
        achieved: pct(f.achieved_share_bytes),
        deviation: f.deviation_pp.map_or("–".into(), |d| format!("{d:+.1} pp")),
        dev_class: match f.deviation_pp {
            Some(d) if d > 2.0 => "over",
            Some(d) if d < -2.0 => "under",
            _ => "",
        },
        files_share: pct(f.achieved_share_files),
        bytes: bytes(f.bytes_done),
        files: f.files_done,
        accepted: f.accepted,
        failed: f.failed,
        cancelled: f.cancelled,
        pending: f.pending,
        held: f.held,
        front_back: format!("{} / {}", f.front, f.back),
        wait_p50: wait(f.wait_median_ms),
        wait_p95: wait(f.wait_p95_ms),
    }
}

/// The page for `r`, generated at `now_ms`; with `per_bucket`, a table per bucket in which
/// anything happened (`?buckets=true`) after the totals.
pub fn page(r: &Report, now_ms: i64, per_bucket: bool) -> Result<String, askama::Error> {
    let diagnose = r
        .diagnose
        .groups
        .iter()
        .map(|g| {
            (
                g.path.clone(),
                pct(Some(g.target_share)),
                bytes(g.effective_usage as i128),
                pct(Some(g.usage_share)),
                g.fairtree_rank.map_or(String::new(), |v| v.to_string()),
                g.sam_class
                    .map_or(String::new(), |c| c.as_str().to_string()),
                g.cap_state.clone(),
                g.windows.as_ref().map_or("–".into(), |w| {
                    w.iter()
                        .map(|v| bytes(*v as i128))
                        .collect::<Vec<_>>()
                        .join(" · ")
                }),
            )
        })
        .collect();
    let bucket_tables = if per_bucket {
        (r.series.iter().filter(|b| b.active()))
            .map(|b| BucketTable {
                start: b.start.clone(),
                start_ms: b.start_ms,
                rows: b.groups.iter().map(row).collect(),
            })
            .collect()
    } else {
        Vec::new()
    };
    Page {
        r,
        per_bucket,
        bucket_tables,
        bucket: match r.bucket {
            super::Bucket::Hour => "hour",
            super::Bucket::Day => "day",
            super::Bucket::Week => "week",
        },
        generated: format_ms(now_ms),
        last_day: now_ms - 24 * HOUR_MS,
        last_week: now_ms - 7 * 24 * HOUR_MS,
        last_month: now_ms - 30 * 24 * HOUR_MS,
        rows: r.groups.iter().map(row).collect(),
        charts: super::charts::charts(r),
        diagnose,
    }
    .render()
}

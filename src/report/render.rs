//! A report as a table for people, and as CSV (one row per bucket and group, for spreadsheets).

use super::{Figures, Report};

fn pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{:.2}%", v * 100.0))
}

fn ms(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v >= 3_600_000.0 => format!("{:.1}h", v / 3_600_000.0),
        Some(v) if v >= 60_000.0 => format!("{:.1}m", v / 60_000.0),
        Some(v) if v >= 1_000.0 => format!("{:.1}s", v / 1_000.0),
        Some(v) => format!("{v:.0}ms"),
    }
}

/// Bytes with a unit (decimal, as tape sites count).
pub fn bytes(v: i128) -> String {
    let units = [
        (1e18, "EB"),
        (1e15, "PB"),
        (1e12, "TB"),
        (1e9, "GB"),
        (1e6, "MB"),
        (1e3, "kB"),
    ];
    for (size, name) in units {
        if v as f64 >= size {
            return format!("{:.2} {name}", v as f64 / size);
        }
    }
    format!("{v} B")
}

fn row(f: &Figures) -> Vec<String> {
    let depth = f.path.matches('/').count();
    let name = if f.kind == "fair_share" {
        format!(
            "{}{}",
            "  ".repeat(depth),
            f.path.rsplit('/').next().unwrap_or(&f.path)
        )
    } else {
        f.path.clone()
    };
    vec![
        name,
        pct(f.target_share),
        pct(f.achieved_share_bytes),
        f.deviation_pp.map_or("-".into(), |d| format!("{d:+.2}")),
        bytes(f.bytes_done),
        f.files_done.to_string(),
        f.accepted.to_string(),
        f.failed.to_string(),
        f.cancelled.to_string(),
        f.pending.to_string(),
        f.held.to_string(),
        format!("{}/{}", f.front, f.back),
        ms(f.wait_median_ms),
        ms(f.wait_p95_ms),
    ]
}

const HEADER: [&str; 14] = [
    "group",
    "target",
    "achieved",
    "dev pp",
    "bytes",
    "files",
    "accepted",
    "failed",
    "cancelled",
    "pending",
    "held",
    "front/back",
    "wait p50",
    "wait p95",
];

/// The table: totals over the range, then what to look at.
pub fn table(r: &Report) -> String {
    let rows: Vec<Vec<String>> = r.groups.iter().map(row).collect();
    let mut out = heading(&r.since, &r.until, r.series.len(), r.bucket);
    out.push_str(&crate::text_table::aligned(&HEADER, &rows));
    out.push('\n');
    if r.priority_held_back.is_empty() {
        out.push_str("data taking: never behind a fair-share request in this range\n");
    } else {
        out.push_str(&format!(
            "data taking: a fair-share request started while a priority-class request waited, in the hours starting {}\n",
            r.priority_held_back.join(", ")
        ));
    }
    out
}

/// Per-bucket tables (`mssbroker report --buckets`): for every bucket in which anything
/// happened, a line `bucket <start> .. <end>` and a table with the same columns as the totals,
/// one row per group, tree node and class (pending and held at the bucket's end); then how many
/// quiet buckets were left out.
pub fn bucket_tables(r: &Report) -> String {
    let mut out = String::new();
    let span = r.bucket.hours() * crate::ledger::aggregates::HOUR_MS;
    let mut quiet = 0;
    for b in &r.series {
        if !b.active() {
            quiet += 1;
            continue;
        }
        let end = crate::shares::view::format_ms(b.start_ms + span);
        out.push_str(&format!("\nbucket {} .. {end}\n", b.start));
        let rows: Vec<Vec<String>> = b.groups.iter().map(row).collect();
        out.push_str(&crate::text_table::aligned(&HEADER, &rows));
        out.push('\n');
    }
    out.push_str(&format!(
        "\n{} of {} buckets shown; {quiet} without activity left out\n",
        r.series.len() - quiet,
        r.series.len()
    ));
    out
}

/// The table's first line: the instants as the report gives them (RFC 3339, upper-case `T`
/// and `Z`), the bucket's name in lower case.
fn heading(since: &str, until: &str, buckets: usize, bucket: super::Bucket) -> String {
    let bucket = format!("{bucket:?}").to_lowercase();
    format!("report {since} .. {until}  ({buckets} buckets of one {bucket})\n\n")
}

/// CSV: one row per bucket and group, then one row per group for the whole range (bucket
/// `total`).
pub fn csv(r: &Report) -> String {
    let mut out = String::from(
        "bucket,group,kind,target_share,achieved_share_bytes,achieved_share_files,deviation_pp,bytes_done,files_done,accepted,done,failed,cancelled,pending,held,front,back,started,wait_median_ms,wait_p95_ms,started_over_priority,coalesced\n",
    );
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| v.to_string());
    let mut put = |bucket: &str, f: &Figures| {
        let path = if f.path.contains([',', '"']) {
            format!("\"{}\"", f.path.replace('"', "\"\""))
        } else {
            f.path.clone()
        };
        out.push_str(&format!(
            "{bucket},{path},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
            f.kind,
            opt(f.target_share),
            opt(f.achieved_share_bytes),
            opt(f.achieved_share_files),
            opt(f.deviation_pp),
            f.bytes_done,
            f.files_done,
            f.accepted,
            f.done,
            f.failed,
            f.cancelled,
            f.pending,
            f.held,
            f.front,
            f.back,
            f.started,
            opt(f.wait_median_ms),
            opt(f.wait_p95_ms),
            f.started_over_priority,
            f.coalesced
        ));
    };
    for b in &r.series {
        for f in &b.groups {
            put(&b.start, f);
        }
    }
    for f in &r.groups {
        put("total", f);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heading_prints_instants_as_given() {
        let h = heading(
            "2026-11-16T02:00:00.000Z",
            "2026-11-16T05:00:00.000Z",
            3,
            super::super::Bucket::Hour,
        );
        assert_eq!(
            h,
            "report 2026-11-16T02:00:00.000Z .. 2026-11-16T05:00:00.000Z  (3 buckets of one hour)\n\n"
        );
    }
}

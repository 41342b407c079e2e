//! `mssbroker simulate --sweep KEY=V1,V2,... [--sweep ...] [--chart FILE.svg]`: the volumes
//! mode over the cross product of `[release.volumes]` values, with `held` and `pass_through` as
//! baselines, printed as a table (mounts per TB, fair-share p95 wait, share error, drive
//! efficiency, makespan, data taking's p99 wait: the figures a default is chosen on) and drawn as
//! mounts per TB against the fair-share p95 wait.

use anyhow::{bail, Context};

use super::{run_pair, SimulateArgs};
use crate::simulate::tradeoff::{self, Point};
use crate::simulate::RunReport;
use crate::trace::TraceRecord;
use mss_adapters::sim::library::LibraryConfig;

/// The `[release.volumes]` keys a sweep may vary.
const KEYS: [&str; 10] = [
    "min_volume_bytes",
    "min_volume_files",
    "quiet_secs",
    "max_age_secs",
    "batch_max_bytes",
    "batch_max_files",
    "sticky_secs",
    "max_volumes",
    "ride_lead_bytes",
    "remainder_bytes",
];

/// `KEY=V1,V2,...` read.
fn axis(spec: &str) -> anyhow::Result<(String, Vec<i64>)> {
    let Some((key, values)) = spec.split_once('=') else {
        bail!("--sweep {spec}: expected KEY=V1,V2,...");
    };
    let key = key.trim();
    if !KEYS.contains(&key) {
        bail!("--sweep {key}: expected one of {}", KEYS.join(", "));
    }
    let values = values
        .split(',')
        .map(|v| {
            let v = v.trim().replace('_', "");
            v.parse::<f64>()
                .ok()
                .filter(|f| f.is_finite() && f.fract() == 0.0 && f.abs() < 9e18)
                .map(|f| f as i64)
                .with_context(|| format!("--sweep {key}: `{v}` is not a whole number"))
        })
        .collect::<anyhow::Result<Vec<i64>>>()?;
    if values.is_empty() {
        bail!("--sweep {key}: no values");
    }
    Ok((key.to_string(), values))
}

/// Every combination of the axes' values, first axis slowest.
fn combinations(axes: &[(String, Vec<i64>)]) -> Vec<Vec<(String, i64)>> {
    let mut out: Vec<Vec<(String, i64)>> = vec![Vec::new()];
    for (key, values) in axes {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                values.iter().map(move |v| {
                    let mut p = prefix.clone();
                    p.push((key.clone(), *v));
                    p
                })
            })
            .collect();
    }
    out
}

/// The configuration text with `[release.volumes]` keys set.
fn with_volumes(text: &str, set: &[(String, i64)]) -> anyhow::Result<String> {
    let mut doc: toml::Table = toml::from_str(text)?;
    let release = doc
        .entry("release")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    let Some(release) = release.as_table_mut() else {
        bail!("[release] is not a table");
    };
    let volumes = release
        .entry("volumes")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    let Some(volumes) = volumes.as_table_mut() else {
        bail!("[release.volumes] is not a table");
    };
    for (k, v) in set {
        volumes.insert(k.clone(), toml::Value::Integer(*v));
    }
    Ok(toml::to_string(&doc)?)
}

fn point(run: &RunReport, label: String, line: Option<String>) -> Point {
    Point {
        label,
        line,
        wait_p95_s: run.fair_wait_p95_s,
        mounts_per_tb: run.mounts_per_tb.unwrap_or(0.0),
        share_error_pp: run.share_error_max_pp.unwrap_or(0.0),
    }
}

/// Run the sweep; print its table; write the chart if asked.
pub(super) fn run(
    args: &SimulateArgs,
    text: &str,
    records: &[TraceRecord],
    library: &LibraryConfig,
) -> anyhow::Result<()> {
    let axes = args
        .sweep
        .iter()
        .map(|s| axis(s))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let Some(x) = tradeoff::XAxis::parse(&args.chart_x) else {
        bail!(
            "--chart-x {}: expected wait_p95 or share_error",
            args.chart_x
        );
    };
    let policy = args.policy.clone().unwrap_or_default();
    let mut points = Vec::new();
    for mode in ["held", "pass_through"] {
        let run = run_pair(args, text, records, library, &policy, Some(mode))?;
        points.push((point(&run, mode.to_string(), None), run));
    }
    for combo in combinations(&axes) {
        let patched = with_volumes(text, &combo)?;
        let run = run_pair(args, &patched, records, library, &policy, Some("volumes"))?;
        let label = combo
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ");
        // One key swept: its runs are one curve; more: one line per value of the first.
        let line = match combo.as_slice() {
            [(k, _)] => Some(k.clone()),
            _ => combo.first().map(|(k, v)| format!("{k}={v}")),
        };
        points.push((point(&run, label, line), run));
    }
    print!("{}", table(&points));
    if let Some(path) = &args.chart {
        let only: Vec<Point> = points.iter().map(|(p, _)| p.clone()).collect();
        let title = match x {
            tradeoff::XAxis::WaitP95 => "volumes mode: mounts per TB against fair-share p95 wait",
            tradeoff::XAxis::ShareError => "volumes mode: mounts per TB against share error",
        };
        let svg = tradeoff::svg(title, x, &only).map_err(|e| anyhow::anyhow!("the chart: {e}"))?;
        std::fs::write(path, svg).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

fn table(points: &[(Point, RunReport)]) -> String {
    let header = [
        "run",
        "mounts_per_tb",
        "fair_wait_p95_s",
        "share_err_max_pp",
        "drive_eff",
        "makespan_s",
        "prio_wait_p99_s",
    ];
    let rows: Vec<Vec<String>> = points
        .iter()
        .map(|(p, r)| {
            vec![
                p.label.clone(),
                format!("{:.1}", p.mounts_per_tb),
                format!("{:.0}", p.wait_p95_s),
                r.share_error_max_pp
                    .map_or_else(|| "-".into(), |v| format!("{v:.2}")),
                r.drive_efficiency
                    .map_or_else(|| "-".into(), |v| format!("{v:.3}")),
                format!("{:.0}", r.makespan_s),
                r.priority_wait_p99_s
                    .map_or_else(|| "-".into(), |v| format!("{v:.0}")),
            ]
        })
        .collect();
    crate::text_table::aligned(&header, &rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_are_read_and_crossed() {
        let a = axis("batch_max_bytes=1e11, 2_000").expect("valid");
        assert_eq!(a, ("batch_max_bytes".into(), vec![100_000_000_000, 2000]));
        let b = axis("min_volume_bytes=5").expect("valid");
        let c = combinations(&[a, b]);
        assert_eq!(c.len(), 2);
        assert_eq!(c[1][0], ("batch_max_bytes".into(), 2000));
        assert!(axis("colour=1").is_err());
        assert!(axis("batch_max_bytes=1.5").is_err());
        assert!(axis("batch_max_bytes").is_err());
    }

    #[test]
    fn values_land_in_release_volumes() {
        let t = with_volumes("[release]\nmode = \"held\"\n", &[("max_volumes".into(), 3)])
            .expect("valid");
        let doc: toml::Table = toml::from_str(&t).expect("toml");
        assert_eq!(
            doc["release"]["volumes"]["max_volumes"].as_integer(),
            Some(3)
        );
        assert_eq!(doc["release"]["mode"].as_str(), Some("held"));
    }
}

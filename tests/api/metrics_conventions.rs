//! `/metrics` of the real `serve` process against Prometheus' own checks: `promtool check
//! metrics` passes its default answer (what curl gets) with no lint warning, and every metric the Grafana dashboard
//! (`contrib/grafana/mssbroker.json`) queries is in it.
//!
//! promtool comes with Debian's `prometheus` package (`scripts/test` installs it). When it is
//! missing, the promtool test fails if the environment variable `CI` or
//! `MSSBROKER_REQUIRE_PROMTOOL` is set (`scripts/test` sets the latter), and otherwise says so
//! on stderr and passes without checking.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::helpers::{request, test_config, wait_final, ServeProcess};

/// A real `serve` after some traffic (fair-share and data-taking requests, all done), and its
/// `/metrics` text asked for with `accept` (OpenMetrics when `None`): every family then has a
/// sample.
async fn scrape_after_traffic(accept: Option<&str>) -> String {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("broker.toml");
    std::fs::write(&config, test_config(None)).unwrap();
    let broker = ServeProcess::start(&config, &dir.path().join("broker.db"));
    let client = reqwest::Client::new();
    let mut ids = Vec::new();
    for (i, (mode, group, size)) in [
        ("analysis", "top", 3_000_000_000u64),
        ("mc", "x", 2_000_000_000),
        ("datataking", "x", 4_000_000_000),
    ]
    .iter()
    .enumerate()
    {
        let resp = client
            .post(format!("{}/v1/requests", broker.base))
            .json(&request(&format!("pm{i}"), mode, group, *size))
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success(), "{}", resp.status());
        let body: Value = resp.json().await.unwrap();
        ids.push(body["id"].as_i64().expect("id"));
    }
    wait_final(&client, &broker.base, &ids, Duration::from_secs(60)).await;
    let mut get = client.get(format!("{}/metrics", broker.base));
    if let Some(accept) = accept {
        get = get.header("accept", accept);
    }
    let resp = get.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.text().await.unwrap()
}

fn promtool_required() -> bool {
    std::env::var_os("CI").is_some() || std::env::var_os("MSSBROKER_REQUIRE_PROMTOOL").is_some()
}

fn promtool_present() -> bool {
    Command::new("promtool")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promtool_check_metrics_passes_with_no_lint_warning() {
    if !promtool_present() {
        assert!(
            !promtool_required(),
            "promtool is missing (Debian's prometheus package; scripts/test installs it)"
        );
        eprintln!("promtool is missing: `promtool check metrics` not run (set CI to require it)");
        return;
    }
    // The default answer: what `curl .../metrics | promtool check metrics` reads (curl asks
    // for `*/*`).
    let text = scrape_after_traffic(Some("*/*")).await;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start promtool");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write to promtool");
    let out = child.wait_with_output().expect("promtool");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool: {said}\n{text}");
    assert!(said.trim().is_empty(), "promtool warns: {said}\n{text}");
}

/// Every `mssbroker_*` name in any string of `v` (expressions, variable queries).
fn metric_names(v: &Value, into: &mut BTreeSet<String>) {
    match v {
        Value::String(s) => {
            let mut rest = s.as_str();
            while let Some(at) = rest.find("mssbroker_") {
                let tail = &rest[at..];
                let end = tail
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(tail.len());
                into.insert(tail[..end].to_string());
                rest = &tail[end..];
            }
        }
        Value::Array(a) => a.iter().for_each(|x| metric_names(x, into)),
        Value::Object(o) => o.values().for_each(|x| metric_names(x, into)),
        _ => {}
    }
}

/// The family names of an exposition (`# TYPE` lines), with `_total` for counters: the names
/// a query may use once `_bucket`, `_sum` and `_count` are stripped.
fn exposed(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        if let (Some("#"), Some("TYPE"), Some(name), Some(kind)) =
            (words.next(), words.next(), words.next(), words.next())
        {
            names.insert(name.to_string());
            if kind == "counter" && !name.ends_with("_total") {
                names.insert(format!("{name}_total"));
            }
        }
    }
    names
}

fn dashboard() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("contrib/grafana/mssbroker.json");
    let text = std::fs::read_to_string(&path).expect("read the dashboard");
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_queries_is_in_metrics() {
    let d = dashboard();
    assert!(
        d["schemaVersion"].as_i64().unwrap_or(0) >= 36,
        "schemaVersion"
    );
    let input = d["__inputs"]
        .as_array()
        .and_then(|a| a.iter().find(|i| i["name"] == "DS"))
        .expect("a DS input");
    assert_eq!(input["pluginId"], "prometheus");
    let titles: Vec<&str> = d["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .filter_map(|p| p["title"].as_str())
        .collect();
    for want in [
        "Share vs target per group",
        "Pending and held requests",
        "Data-taking waits",
        "Ledger commit latency",
        "MSS call errors",
    ] {
        assert!(titles.contains(&want), "no panel {want:?} in {titles:?}");
    }
    // Data taking's waits are the wait histogram's quantiles, not a proxy of counts and rates.
    let waits = d["panels"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["title"] == "Data-taking waits"))
        .expect("the data-taking panel");
    let exprs: Vec<&str> = waits["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .filter_map(|t| t["expr"].as_str())
        .collect();
    for phi in ["0.5", "0.95"] {
        assert!(
            exprs
                .iter()
                .any(|e| e.starts_with(&format!("histogram_quantile({phi},"))
                    && e.contains("mssbroker_request_wait_seconds_bucket{kind=\"priority\"}")),
            "no p{phi} of data taking's wait in {exprs:?}"
        );
    }
    let mut used = BTreeSet::new();
    metric_names(&d, &mut used);
    assert!(used.len() >= 6, "{used:?}");
    let text = scrape_after_traffic(None).await;
    let families = exposed(&text);
    for name in &used {
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        assert!(
            families.contains(family),
            "the dashboard queries {name}, not in /metrics: {families:?}"
        );
    }
}

//! `GET /metrics`: the exposition Prometheus asks for parses with an OpenMetrics parser, names
//! follow the conventions, and the figures are the ledger's. (The answer to a client that does
//! not ask for OpenMetrics is linted by promtool in `metrics_conventions.rs`.)

use std::time::Duration;

use openmetrics_parser::{MetricsExposition, OpenMetricsType, OpenMetricsValue};

use crate::helpers::{request, test_config, wait_final, ServeProcess, TestApp};

type Exposition = MetricsExposition<OpenMetricsType, OpenMetricsValue>;

/// The `Accept` of a Prometheus scrape (2.x and 3.x): OpenMetrics first.
const OPENMETRICS: &str = "application/openmetrics-text;version=1.0.0;q=0.5,\
                           application/openmetrics-text;version=0.0.1;q=0.4,\
                           text/plain;version=0.0.4;q=0.3,*/*;q=0.2";

/// The value of the sample of `family` whose labels include `labels` (a histogram: its count).
fn value(e: &Exposition, family: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let f = e.families.get(family)?;
    f.iter_samples().find_map(|s| {
        let set = s.get_labelset().ok()?;
        let all = labels
            .iter()
            .all(|(k, v)| set.iter().any(|(n, x)| n == k && x == v));
        if !all {
            return None;
        }
        Some(match &s.value {
            OpenMetricsValue::Counter(c) => c.value.as_f64(),
            OpenMetricsValue::Gauge(n) | OpenMetricsValue::Unknown(n) => n.as_f64(),
            OpenMetricsValue::Histogram(h) => h.count.unwrap_or(0) as f64,
            _ => return None,
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_parse_and_carry_the_ledgers_figures() {
    let app = TestApp::spawn(&test_config(None)).await;
    let mut ids = Vec::new();
    for (i, (mode, group, size)) in [
        ("analysis", "top", 3_000_000_000u64),
        ("analysis", "top", 1_000_000_000),
        ("mc", "x", 2_000_000_000),
        ("datataking", "x", 4_000_000_000),
    ]
    .iter()
    .enumerate()
    {
        let (_, body) = app
            .post(
                "/v1/requests",
                &request(&format!("m{i}"), mode, group, *size),
            )
            .await;
        ids.push(body["id"].as_i64().unwrap());
    }
    app.wait_final(&ids, Duration::from_secs(60)).await;
    let resp = app
        .client
        .get(format!("{}/metrics", app.base))
        .header("accept", OPENMETRICS)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let content_type = resp.headers()["content-type"].to_str().unwrap().to_string();
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    let text = resp.text().await.unwrap();
    let e = openmetrics_parser::openmetrics::parse_openmetrics(&text)
        .unwrap_or_else(|err| panic!("does not parse: {err}\n{text}"));
    // Conventions: base units in the names, counters end in _total (the parser strips it from
    // the family name), every family has help.
    for (name, family) in &e.families {
        assert!(name.starts_with("mssbroker_"), "{name}");
        assert!(!family.help.is_empty(), "{name} has no help");
        if !family.unit.is_empty() {
            assert!(
                name.ends_with(&format!("_{}", family.unit)),
                "{name} vs unit {}",
                family.unit
            );
        }
    }
    assert!(text.contains("mssbroker_group_done_bytes_total{"), "{text}");
    assert!(text.contains("mssbroker_group_requests_total{"), "{text}");
    let top = [("group", "analysis/top")];
    assert_eq!(value(&e, "mssbroker_group_done_bytes", &top), Some(4e9));
    assert_eq!(
        value(
            &e,
            "mssbroker_group_requests",
            &[("group", "analysis/top"), ("state", "done")]
        ),
        Some(2.0)
    );
    assert_eq!(
        value(
            &e,
            "mssbroker_group_requests",
            &[
                ("group", "datataking"),
                ("kind", "priority"),
                ("state", "accepted")
            ]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&e, "mssbroker_group_pending_requests", &top),
        Some(0.0)
    );
    assert_eq!(
        value(&e, "mssbroker_group_target_share_ratio", &top),
        Some(0.3)
    );
    let share = value(&e, "mssbroker_group_usage_share_ratio", &top).unwrap();
    assert!((share - 4.0 / 6.0).abs() < 1e-6, "{share}");
    // Histograms: every request was committed, submitted and reported on.
    assert!(value(&e, "mssbroker_ledger_commit_seconds", &[]).unwrap() >= 4.0);
    assert!(value(&e, "mssbroker_ledger_commit_commands", &[]).unwrap() >= 4.0);
    assert!(
        value(
            &e,
            "mssbroker_mss_call_seconds",
            &[("call", "submit_batch"), ("outcome", "ok")]
        )
        .unwrap()
            >= 1.0
    );
    assert!(value(&e, "mssbroker_mss_call_seconds", &[("call", "events")]).unwrap() >= 1.0);
}

/// A histogram's sum, count and cumulative buckets (upper bound, count).
type WaitHistogram = (f64, u64, Vec<(f64, f64)>);

/// One group's `mssbroker_request_wait_seconds` histogram.
fn wait_histogram(e: &Exposition, group: &str, kind: &str) -> Option<WaitHistogram> {
    let f = e.families.get("mssbroker_request_wait_seconds")?;
    f.iter_samples().find_map(|s| {
        let set = s.get_labelset().ok()?;
        let has = |k: &str, v: &str| set.iter().any(|(n, x)| n == k && x == v);
        if !(has("group", group) && has("kind", kind)) {
            return None;
        }
        match &s.value {
            OpenMetricsValue::Histogram(h) => Some((
                h.sum.as_ref().map_or(f64::NAN, |n| n.as_f64()),
                h.count.unwrap_or(0),
                h.buckets
                    .iter()
                    .map(|b| (b.upper_bound, b.count.as_f64()))
                    .collect(),
            )),
            _ => None,
        }
    })
}

async fn scrape(client: &reqwest::Client, base: &str) -> Exposition {
    let resp = (client.get(format!("{base}/metrics")))
        .header("accept", OPENMETRICS)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    openmetrics_parser::openmetrics::parse_openmetrics(&text)
        .unwrap_or_else(|err| panic!("does not parse: {err}\n{text}"))
}

/// The histogram holds exactly the one wait `wait_ms`: its sum, count 1, and every bucket from
/// the first whose bound holds the wait on counts it, none before.
fn assert_holds_one_wait(h: &WaitHistogram, wait_ms: i64, what: &str) {
    let (sum, count, buckets) = h;
    let wait = wait_ms as f64 / 1000.0;
    assert_eq!(*count, 1, "{what}: {h:?}");
    assert!(
        (sum - wait).abs() < 1e-9,
        "{what}: sum {sum} vs wait {wait}"
    );
    assert!(buckets.len() > 10, "{what}: {buckets:?}");
    assert!(buckets.iter().any(|b| b.0.is_infinite()), "{what}: no +Inf");
    for (le, n) in buckets {
        let want = if wait <= *le { 1.0 } else { 0.0 };
        assert_eq!(
            *n, want,
            "{what}: bucket le={le} for a wait of {wait} s: {buckets:?}"
        );
    }
}

/// A data-taking request's wait from acceptance to its MSS start is counted in
/// `mssbroker_request_wait_seconds` (kind `priority`) once it completes, equal to what its
/// record says (`started_ms - created_ms`); so is a fair-share request's under its group; and
/// both are still there after `serve` restarts on the same database (they come from the ledger).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_data_taking_requests_wait_is_counted_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("broker.toml");
    std::fs::write(&config, test_config(None)).unwrap();
    let db = dir.path().join("broker.db");
    let mut broker = ServeProcess::start(&config, &db);
    let client = reqwest::Client::new();
    let before = scrape(&client, &broker.base).await;
    assert!(
        wait_histogram(&before, "datataking", "priority").is_none_or(|h| h.1 == 0),
        "a wait before any request"
    );
    let mut ids = Vec::new();
    for (i, (mode, group)) in [("datataking", "x"), ("analysis", "top")]
        .iter()
        .enumerate()
    {
        let resp = client
            .post(format!("{}/v1/requests", broker.base))
            .json(&request(&format!("w{i}"), mode, group, 1_000_000_000))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 202);
        let body: serde_json::Value = resp.json().await.unwrap();
        ids.push(body["id"].as_i64().expect("id"));
    }
    let done = wait_final(&client, &broker.base, &ids, Duration::from_secs(60)).await;
    let wait_of = |r: &serde_json::Value| {
        assert_eq!(r["state"], "done", "{r}");
        let started = r["started_ms"].as_i64().expect("started_ms");
        started - r["created_ms"].as_i64().expect("created_ms")
    };
    let (taking, fair) = (wait_of(&done[0]), wait_of(&done[1]));
    for round in ["running", "restarted"] {
        let e = scrape(&client, &broker.base).await;
        let h = wait_histogram(&e, "datataking", "priority").expect("data taking's waits");
        assert_holds_one_wait(&h, taking, &format!("data taking, {round}"));
        let h = wait_histogram(&e, "analysis/top", "fair_share").expect("analysis/top's waits");
        assert_holds_one_wait(&h, fair, &format!("analysis/top, {round}"));
        if round == "running" {
            broker.kill();
            broker = ServeProcess::start(&config, &db);
        }
    }
}

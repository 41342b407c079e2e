//! `GET /metrics`: the exposition parses with an OpenMetrics parser, names follow the
//! conventions, and the figures are the ledger's.

use std::time::Duration;

use openmetrics_parser::{MetricsExposition, OpenMetricsType, OpenMetricsValue};

use crate::helpers::{request, test_config, TestApp};

type Exposition = MetricsExposition<OpenMetricsType, OpenMetricsValue>;

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

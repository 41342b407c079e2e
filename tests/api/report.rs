//! Reports end to end: `GET /v1/report`, and `mssbroker report` against the running broker and
//! against its database file.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;

use crate::helpers::{request, run_ok, test_config, TestApp};

fn figures<'a>(report: &'a Value, path: &str) -> &'a Value {
    report["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["path"] == path)
        .unwrap_or_else(|| panic!("no {path} in {report}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_over_http_and_from_the_database() {
    let config = test_config(None);
    let dir = tempfile::tempdir().unwrap();
    let app = TestApp::spawn_on(&config, dir.path().join("broker.db")).await;
    let load = [
        ("analysis", "higgs", 1_000_000_000u64),
        ("analysis", "top", 3_000_000_000),
        ("analysis", "top", 2_000_000_000),
        ("mc", "x", 5_000_000_000),
        ("datataking", "x", 7_000_000_000),
    ];
    let mut ids = Vec::new();
    for (i, (mode, group, size)) in load.iter().enumerate() {
        let (status, body) = app
            .post(
                "/v1/requests",
                &request(&format!("r{i}"), mode, group, *size),
            )
            .await;
        assert_eq!(status, 202, "{body}");
        ids.push(body["id"].as_i64().unwrap());
    }
    let finals = app.wait_final(&ids, Duration::from_secs(60)).await;
    let mut done: HashMap<String, i64> = HashMap::new();
    for r in &finals {
        assert_eq!(r["state"], "done");
        *done
            .entry(r["group"].as_str().unwrap().to_string())
            .or_default() += r["bytes_done"].as_i64().unwrap();
    }
    let (status, report) = app.get("/v1/report").await;
    assert_eq!(status, 200, "{report}");
    for (group, bytes) in &done {
        let f = figures(&report, group);
        assert_eq!(f["bytes_done"].as_i64(), Some(*bytes), "{group}: {f}");
        assert_eq!(
            (f["pending"].as_i64(), f["held"].as_i64()),
            (Some(0), Some(0))
        );
    }
    // The inner node sums its leaves; shares are of fair-share bytes (11 GB; data taking is
    // not part of them).
    let analysis = figures(&report, "analysis");
    assert_eq!(analysis["bytes_done"], 6_000_000_000i64);
    assert_eq!(analysis["achieved_share_bytes"], 6.0 / 11.0);
    assert_eq!(analysis["accepted"], 3);
    let all = figures(&report, "(all fair share)");
    assert_eq!(
        (
            all["bytes_done"].as_i64(),
            all["achieved_share_bytes"].as_f64()
        ),
        (Some(11_000_000_000), Some(1.0))
    );
    let daq = figures(&report, "datataking");
    assert_eq!(
        (daq["kind"].as_str(), daq["target_share"].is_null()),
        (Some("priority"), true)
    );
    assert_eq!(daq["started"], 1);
    assert!(daq["wait_median_ms"].as_f64().is_some());
    assert_eq!(report["bucket"], "day", "seven days by default, in days");

    // Bad parameters name themselves and change nothing.
    for (query, field) in [
        ("?bucket=month", "bucket"),
        ("?since=yesterday", "since"),
        (
            "?since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z",
            "since",
        ),
        ("?since=0&until=4000000000000&bucket=hour", "bucket"),
        ("?colour=red", ""),
    ] {
        let (status, body) = app.get(&format!("/v1/report{query}")).await;
        assert_eq!(status, 400, "{query}: {body}");
        if !field.is_empty() {
            assert_eq!(body["field"], field, "{query}: {body}");
        }
    }

    // The CLI asks the broker...
    let csv = run_ok(&[
        "report", "--url", &app.base, "--format", "csv", "--bucket", "hour",
    ]);
    assert!(csv.starts_with("bucket,group,kind,target_share,"), "{csv}");
    assert!(
        csv.lines()
            .any(|l| l.starts_with("total,analysis/top,fair_share,0.3,")
                && l.contains(",5000000000,2,")),
        "{csv}"
    );
    let db = app.db.clone();
    app.stop().await;
    // ...or reads the database, with the same figures.
    let cfg = dir.path().join("broker.toml");
    std::fs::write(&cfg, &config).unwrap();
    let (db, cfg) = (db.to_str().unwrap(), cfg.to_str().unwrap());
    let from_db: Value = serde_json::from_str(&run_ok(&[
        "report", "--db", db, "--config", cfg, "--format", "json",
    ]))
    .unwrap();
    assert_eq!(from_db["groups"], report["groups"]);
    let table = run_ok(&["report", "--db", db, "--config", cfg]);
    assert!(
        table.contains("higgs") && table.contains("wait p95"),
        "{table}"
    );
}

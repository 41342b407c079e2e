//! Usage past 2^63 (and past 2^64): every sum a client's input drives is exact end to end, in
//! `GET /v1/groups`, `GET /metrics` and `GET /v1/report`, and a restart of the real `serve`
//! binary on the same database reads back the same figures. SQLite's INTEGER is i64; before the
//! wide columns, the sums became REAL 1.0e19 and every one of these answered 503 (and `serve`
//! refused to start).

use std::time::Duration;

use serde::Deserialize;

use crate::helpers::{request, run_ok, test_config, ServeProcess, TestApp};

/// 4 * 10^18 bytes: a few of these pass i64::MAX (~9.22 * 10^18) and u64::MAX (~1.84 * 10^19).
const SIZE: u64 = 4_000_000_000_000_000_000;
/// analysis/higgs: 5 * SIZE = 2 * 10^19 (past u64); mc: 3 * SIZE = 1.2 * 10^19 (past i64 only).
const LOAD: [(&str, &str, u64); 2] = [("analysis", "higgs", 5), ("mc", "x", 3)];

/// The test configuration with requests that large allowed, and a simulator fast enough to
/// complete them at once (10^18 bytes per second per drive).
fn config() -> String {
    test_config(None)
        .replace(
            "max_size_bytes = 1000000000000",
            &format!("max_size_bytes = {SIZE}"),
        )
        .replace(
            "rate_mb_per_sec = 500.0",
            "rate_mb_per_sec = 1000000000000.0",
        )
}

#[derive(Debug, Deserialize)]
struct Groups {
    groups: Vec<GroupFigures>,
}

/// What `/v1/groups` says of a node, read exactly (serde_json's `Value` would make a number
/// past u64 a float).
#[derive(Debug, Deserialize, PartialEq)]
struct GroupFigures {
    path: String,
    usage: u128,
    usage_bytes: u128,
}

#[derive(Debug, Deserialize)]
struct Report {
    groups: Vec<ReportFigures>,
    diagnose: Groups,
}

#[derive(Debug, Deserialize, PartialEq)]
struct ReportFigures {
    path: String,
    bytes_done: i128,
    files_done: i64,
}

/// The figures every read must show, per group path: (usage = bytes, files).
fn expected() -> Vec<(String, u128, i64)> {
    let mut out: Vec<(String, u128, i64)> = LOAD
        .iter()
        .map(|(mode, group, n)| {
            let path = if *mode == "analysis" {
                format!("analysis/{group}")
            } else {
                mode.to_string()
            };
            (path, u128::from(SIZE) * u128::from(*n), *n as i64)
        })
        .collect();
    let analysis: u128 = out
        .iter()
        .filter(|(p, _, _)| p.starts_with("analysis/"))
        .map(|(_, u, _)| u)
        .sum();
    out.push(("analysis".into(), analysis, LOAD[0].2 as i64));
    out
}

async fn get_text(client: &reqwest::Client, base: &str, path: &str) -> String {
    let resp = client.get(format!("{base}{path}")).send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    assert_eq!(status, 200, "GET {path}: {text}");
    text
}

/// The sample of `mssbroker_group_done_bytes_total` for `group`.
fn done_bytes(metrics: &str, group: &str) -> f64 {
    let prefix = format!("mssbroker_group_done_bytes_total{{group=\"{group}\",");
    let line = metrics
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no bytes done for {group} in\n{metrics}"));
    let value = line.rsplit(' ').next().unwrap_or_default();
    value.parse().unwrap_or_else(|_| panic!("sample {line:?}"))
}

/// Read `/v1/groups`, `/metrics` and `/v1/report` from the broker at `base` and check every
/// figure against `expected()`.
async fn check_figures(base: &str) {
    let client = reqwest::Client::new();
    let groups: Groups =
        serde_json::from_str(&get_text(&client, base, "/v1/groups").await).unwrap();
    let report: Report =
        serde_json::from_str(&get_text(&client, base, "/v1/report").await).unwrap();
    let metrics = get_text(&client, base, "/metrics").await;
    for (path, usage, files) in expected() {
        for view in [&groups, &report.diagnose] {
            let g = view.groups.iter().find(|g| g.path == path).unwrap();
            assert_eq!((g.usage, g.usage_bytes), (usage, usage), "{path}");
        }
        let f = report.groups.iter().find(|f| f.path == path).unwrap();
        assert_eq!(
            (f.bytes_done, f.files_done),
            (usage as i128, files),
            "report of {path}"
        );
        if path != "analysis" {
            // Per leaf; Prometheus samples are floats, so to 2^-52 relative.
            let got = done_bytes(&metrics, &path);
            assert!(
                (got - usage as f64).abs() <= usage as f64 * 1e-12,
                "{path}: {got} bytes done in /metrics, want {usage}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_past_two_to_the_63_reads_back_exactly_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("broker.db");
    let config = config();
    let app = TestApp::spawn_on(&config, db.clone()).await;
    let mut ids = Vec::new();
    for (mode, group, n) in LOAD {
        for i in 0..n {
            let crid = format!("{mode}-{i}");
            let (status, body) = app
                .post("/v1/requests", &request(&crid, mode, group, SIZE))
                .await;
            assert_eq!(status, 202, "{body}");
            ids.push(body["id"].as_i64().unwrap());
        }
    }
    for r in app.wait_final(&ids, Duration::from_secs(60)).await {
        assert_eq!(r["state"], "done", "{r}");
    }
    check_figures(&app.base).await;
    app.stop().await;

    // The real binary on the same file: it starts, and reads the same figures back.
    let config_file = dir.path().join("broker.toml");
    std::fs::write(&config_file, &config).unwrap();
    let serve = ServeProcess::start(&config_file, &db);
    check_figures(&serve.base).await;

    // The CLI: `report` from the broker and from the file, `shares` from the file.
    let (db, cfg) = (db.to_str().unwrap(), config_file.to_str().unwrap());
    let from_url: Report = serde_json::from_str(&run_ok(&[
        "report",
        "--url",
        &serve.base,
        "--format",
        "json",
    ]))
    .unwrap();
    let from_db: Report = serde_json::from_str(&run_ok(&[
        "report", "--db", db, "--config", cfg, "--format", "json",
    ]))
    .unwrap();
    let shares: Groups = serde_json::from_str(&run_ok(&[
        "shares", "--db", db, "--config", cfg, "--format", "json",
    ]))
    .unwrap();
    for (path, usage, files) in expected() {
        for report in [&from_url, &from_db] {
            let f = report.groups.iter().find(|f| f.path == path).unwrap();
            assert_eq!(
                (f.bytes_done, f.files_done),
                (usage as i128, files),
                "{path}"
            );
        }
        let g = shares.groups.iter().find(|g| g.path == path).unwrap();
        assert_eq!((g.usage, g.usage_bytes), (usage, usage), "shares of {path}");
    }
}

/// A whole number past u64 in `size_bytes` or `position` is read by serde_json as a float, and
/// refused as `must be a whole number`: a message that names the wrong problem (2^64 is whole;
/// it is too large). One past u64::MAX must get the same answer as u64::MAX itself, the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_integer_past_u64_is_refused_as_too_large_not_as_a_fraction() {
    let app = TestApp::spawn(&test_config(None)).await;
    for field in ["size_bytes", "position"] {
        for value in ["18446744073709551615", "18446744073709551616"] {
            let text = request("big", "mc", "top", 10).to_string();
            let text = if field == "size_bytes" {
                text.replace("\"size_bytes\":10", &format!("\"size_bytes\":{value}"))
            } else {
                format!("{},\"position\":{value}}}", text.trim_end_matches('}'))
            };
            let resp = app
                .client
                .post(format!("{}/v1/requests", app.base))
                .header("content-type", "application/json")
                .body(text.clone())
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            let answer: serde_json::Value = resp.json().await.unwrap();
            assert_eq!(
                (status, answer["field"].as_str()),
                (422, Some(field)),
                "{text}: {answer}"
            );
            let message = answer["error"].as_str().unwrap_or_default();
            assert!(
                message.contains("at most"),
                "{field} = {value}: {message:?} does not say it is too large"
            );
        }
    }
    app.stop().await;
}

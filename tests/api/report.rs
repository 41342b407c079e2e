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

const HOUR_MS: i64 = 3_600_000;
/// 08:00 UTC: the three hours of load below fall in one UTC day.
const START: i64 = 1_800_000_000_000 / HOUR_MS * HOUR_MS;

/// The text of `GET path` (the HTML page).
async fn page(app: &TestApp, path: &str) -> (u16, String) {
    let resp = app
        .client
        .get(format!("{}{path}", app.base))
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// The markup of the element that starts with `open` (up to `close`).
fn section<'a>(html: &'a str, open: &str, close: &str) -> &'a str {
    let start = html
        .find(open)
        .unwrap_or_else(|| panic!("no {open} in {html:.2000}"));
    let end = html[start..].find(close).unwrap() + start;
    &html[start..end]
}

/// Per data series (2 px polylines) of an SVG chart, how many points it has.
fn series_points(svg: &str) -> Vec<usize> {
    svg.split("<polyline")
        .skip(1)
        .map(|p| &p[..p.find("/>").unwrap_or(p.len())])
        .filter(|p| p.contains("stroke-width=\"2\""))
        .map(|p| {
            let pts = p.split("points=\"").nth(1).unwrap_or("");
            pts[..pts.find('"').unwrap_or(0)].split_whitespace().count()
        })
        .collect()
}

/// The cells of the row of `group` in a table's markup.
fn cells(table: &str, group: &str) -> Vec<String> {
    let row = section(table, &format!("data-group=\"{group}\""), "</tr>");
    row.split("<td")
        .skip(1)
        .map(|c| {
            let c = &c[c.find('>').unwrap() + 1..];
            c[..c.find("</td>").unwrap()].to_string()
        })
        .collect()
}

/// Load in three hours of one day (GB): 08:00 higgs 1, mc 2; 09:00 top 3, mc 1; 10:00 higgs 2,
/// top 1. The page's default range (the last 7 days) is drawn by the hour, so each of the four
/// leaves' achieved shares is a line through the three hours with fair-share bytes done (a
/// leaf with nothing done in an hour has 0% of it); by the day (the JSON's default) each has
/// one point, marked with a dot. `?buckets=true` adds a table per hour with activity, and
/// `mssbroker report --buckets` prints the same per-bucket figures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_draws_hourly_lines_by_default_and_shows_tables_per_bucket() {
    let dir = tempfile::tempdir().unwrap();
    let clock = mssbroker::clock::ManualClock::new(START + 60_000);
    let app = TestApp::spawn_with_clock(
        &test_config(None),
        dir.path().join("b.db"),
        std::sync::Arc::new(clock.clone()),
    )
    .await;
    let gb = 1_000_000_000u64;
    let hours: [&[(&str, &str, u64)]; 3] = [
        &[("analysis", "higgs", gb), ("mc", "x", 2 * gb)],
        &[("analysis", "top", 3 * gb), ("mc", "x", gb)],
        &[("analysis", "higgs", 2 * gb), ("analysis", "top", gb)],
    ];
    for (h, load) in hours.iter().enumerate() {
        let mut ids = Vec::new();
        for (i, (mode, group, size)) in load.iter().enumerate() {
            let (status, body) = app
                .post(
                    "/v1/requests",
                    &request(&format!("h{h}-{i}"), mode, group, *size),
                )
                .await;
            assert_eq!(status, 202, "{body}");
            ids.push(body["id"].as_i64().unwrap());
        }
        let finals = app.wait_final(&ids, Duration::from_secs(60)).await;
        assert!(finals.iter().all(|r| r["state"] == "done"), "{finals:?}");
        clock.advance_ms(HOUR_MS);
    }

    // The default range: by the hour, a line of three points per leaf.
    let (status, html) = page(&app, "/report").await;
    assert_eq!(status, 200, "{html:.500}");
    assert!(html.contains(", by hour;"), "{:.600}", html);
    let share = section(&html, "<figure id=\"chart-share\"", "</figure>");
    let lines = series_points(share);
    assert_eq!(
        lines,
        [3, 3, 3, 3],
        "higgs, top, reprocessing and mc each draw a line"
    );
    assert!(!share.contains("<circle"), "lines need no dots");
    assert!(
        !html.contains("id=\"bucket-count\""),
        "no per-bucket tables unless asked"
    );
    // The same data by the day: one point per series, each marked.
    let (_, by_day) = page(&app, "/report?bucket=day").await;
    let share = section(&by_day, "<figure id=\"chart-share\"", "</figure>");
    assert_eq!(series_points(share), [1, 1, 1, 1]);
    assert_eq!(
        share.matches("<circle").count(),
        4,
        "one dot per single point"
    );
    // The JSON keeps its default: seven days in days.
    let (_, json) = app.get("/v1/report").await;
    assert_eq!(json["bucket"], "day");

    // Per-bucket tables: three hours with activity of the 169 in the default range.
    let (status, html) = page(&app, "/report?buckets=true").await;
    assert_eq!(status, 200);
    assert!(
        html.contains("3 of 169 buckets of one hour had activity"),
        "{}",
        section(&html, "<h2>Per bucket", "</p>")
    );
    let table = section(
        &html,
        &format!("id=\"bucket-{}\"", START + HOUR_MS),
        "</table>",
    );
    let top = cells(table, "analysis/top");
    // name, target, achieved, deviation, files share, bytes, files, accepted, ...
    assert_eq!(
        (top[5].as_str(), top[6].as_str(), top[7].as_str()),
        ("3.00 GB", "1", "1")
    );
    let mc = cells(table, "mc");
    assert_eq!((mc[5].as_str(), mc[7].as_str()), ("1.00 GB", "1"));
    // top has 3 of the hour's 4 GB: 75.0%.
    assert_eq!(top[2], "75.0%");
    let first = section(&html, &format!("id=\"bucket-{START}\""), "</table>");
    assert_eq!(cells(first, "analysis/higgs")[5], "1.00 GB");
    assert_eq!(cells(first, "analysis/top")[7], "0");
    let (status, body) = app.get("/report?buckets=yes").await;
    assert_eq!(
        (status, body["field"].as_str()),
        (400, Some("buckets")),
        "{body}"
    );
    // The JSON always has every bucket: `buckets` is not one of its parameters.
    let (status, body) = app.get("/v1/report?buckets=true").await;
    assert_eq!(
        (status, body["field"].as_str()),
        (400, Some("buckets")),
        "{body}"
    );

    // The CLI's per-bucket tables: the same hours, the same figures.
    let (since, until) = (START.to_string(), (START + 3 * HOUR_MS).to_string());
    let out = run_ok(&[
        "report",
        "--url",
        &app.base,
        "--since",
        &since,
        "--until",
        &until,
        "--bucket",
        "hour",
        "--buckets",
    ]);
    let (_, json) = app
        .get(&format!(
            "/v1/report?since={since}&until={until}&bucket=hour"
        ))
        .await;
    let starts: Vec<&str> = json["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["start"].as_str().unwrap())
        .collect();
    assert_eq!(starts.len(), 3);
    assert!(
        out.contains(&format!("bucket {} .. {}\n", starts[1], starts[2])),
        "{out}"
    );
    assert!(
        out.contains("3 of 3 buckets shown; 0 without activity left out"),
        "{out}"
    );
    let hour1 = &out[out.find(&format!("bucket {} ..", starts[1])).unwrap()..];
    let top_line = hour1
        .lines()
        .find(|l| l.trim_start().starts_with("top"))
        .unwrap();
    assert!(
        top_line.contains("3.00 GB") && top_line.contains("75.00%"),
        "{top_line}"
    );
    let plain = run_ok(&[
        "report", "--url", &app.base, "--since", &since, "--until", &until,
    ]);
    assert!(!plain.contains("buckets shown"), "only on request: {plain}");
    app.stop().await;
}

//! The HTML report in a real headless Chromium (Debian's `chromium`; `scripts/test` installs it
//! when missing): the page renders its charts with one series per group (checked in the DOM
//! Chromium built), and a screenshot is saved as a test artifact.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use mssbroker::clock::ManualClock;

use crate::helpers::{request, test_config, TestApp};

const HOUR_MS: i64 = 3_600_000;
const START: i64 = 1_800_000_000_000 / HOUR_MS * HOUR_MS;

fn chromium() -> String {
    if let Ok(p) = std::env::var("MSSBROKER_CHROMIUM") {
        return p;
    }
    for p in [
        "/usr/bin/chromium",
        "/usr/bin/chromium-browser",
        "/usr/bin/google-chrome",
    ] {
        if std::path::Path::new(p).exists() {
            return p.to_string();
        }
    }
    panic!(
        "no Chromium: install Debian's `chromium` (scripts/test does) or set MSSBROKER_CHROMIUM"
    );
}

fn headless(args: &[&str]) -> std::process::Output {
    let profile = tempfile::tempdir().unwrap();
    Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--no-first-run",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .output()
        .expect("run chromium")
}

/// The HTML of `<figure id="ID">...</figure>` in `dom`.
fn figure<'a>(dom: &'a str, id: &str) -> &'a str {
    let start = dom
        .find(&format!("<figure id=\"{id}\""))
        .unwrap_or_else(|| panic!("no figure {id}"));
    let end = dom[start..].find("</figure>").unwrap() + start;
    &dom[start..end]
}

/// Data series are the 2 px lines (axes, grid and targets are 1 px).
fn series(fig: &str) -> usize {
    fig.split("<polyline")
        .skip(1)
        .filter(|p| p[..p.find('>').unwrap_or(p.len())].contains("stroke-width=\"2\""))
        .count()
}

/// Per data series (2 px polyline), how many points it draws.
fn series_points(fig: &str) -> Vec<usize> {
    fig.split("<polyline")
        .skip(1)
        .map(|p| &p[..p.find('>').unwrap_or(p.len())])
        .filter(|p| p.contains("stroke-width=\"2\""))
        .map(|p| {
            let pts = p.split("points=\"").nth(1).unwrap_or("");
            pts[..pts.find('"').unwrap_or(0)].split_whitespace().count()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_html_report_renders_one_series_per_group_in_chromium() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START + 60_000);
    let app = TestApp::spawn_with_clock(
        &test_config(None),
        dir.path().join("b.db"),
        Arc::new(clock.clone()),
    )
    .await;
    let load = [
        ("analysis", "higgs"),
        ("analysis", "top"),
        ("reprocessing", "x"),
        ("mc", "x"),
        ("datataking", "x"),
    ];
    for hour in 0..3u64 {
        let mut ids = Vec::new();
        for (i, (mode, group)) in load.iter().enumerate() {
            for k in 0..=(i as u64 + hour) % 3 {
                let size = 1_000_000_000 * (1 + (i as u64 * 7 + hour * 3 + k) % 5);
                let (_, body) = app
                    .post(
                        "/v1/requests",
                        &request(&format!("h{hour}-{i}-{k}"), mode, group, size),
                    )
                    .await;
                ids.push(body["id"].as_i64().unwrap());
            }
        }
        app.wait_final(&ids, Duration::from_secs(60)).await;
        clock.advance_ms(HOUR_MS);
    }
    let url = format!(
        "{}/report?since={START}&until={}&bucket=hour",
        app.base,
        START + 3 * HOUR_MS
    );
    let out = headless(&["--dump-dom", &url]);
    let dom = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        dom.contains("mssbroker share report"),
        "chromium gave: {dom:.500} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let groups = ["analysis/higgs", "analysis/top", "reprocessing", "mc"];
    for (id, expected) in [
        ("chart-share", 4),
        ("chart-bytes", 4),
        ("chart-pending", 2),
        ("chart-wait", 2),
    ] {
        let fig = figure(&dom, id);
        assert!(fig.contains("<svg"), "{id} has no svg");
        assert_eq!(series(fig), expected, "{id}: one series per group or class");
    }
    for g in groups {
        assert!(figure(&dom, "chart-share").contains(g), "legend of {g}");
        assert!(
            dom.contains(&format!("data-group=\"{g}\"")),
            "table row of {g}"
        );
    }
    assert!(figure(&dom, "chart-pending").contains("datataking (priority)"));
    assert!(dom.contains("id=\"datataking\""), "the data-taking banner");

    // The page's default range (the last 7 days, no parameters) draws lines by the hour: every
    // leaf's share is a line through the three hours, not one point for the day.
    let default_dom = headless(&["--dump-dom", &format!("{}/report", app.base)]);
    let default_dom = String::from_utf8_lossy(&default_dom.stdout).to_string();
    let share = figure(&default_dom, "chart-share");
    assert_eq!(series_points(share), [3, 3, 3, 3], "{share:.2000}");

    // A screenshot for people, kept with the build's test artifacts.
    let shot: PathBuf = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report.png");
    let _ = std::fs::remove_file(&shot);
    let out = headless(&[
        "--window-size=1400,2300",
        &format!("--screenshot={}", shot.display()),
        &url,
    ]);
    let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
    assert!(
        size > 20_000,
        "screenshot {} is {size} bytes: {}",
        shot.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("screenshot: {}", shot.display());
    app.stop().await;
}

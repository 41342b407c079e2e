//! Issue 15: "a trace exported from a real broker run and replayed gives the same decisions the
//! live broker made". The real `serve` (pass-through release, SAM, the embedded simulator)
//! takes a known load one request at a time; each request's live decision is read back with
//! `GET /v1/requests/{id}`; `mssbroker trace export --db` writes the trace; the simulator's
//! engine replays it with the same configuration, and every request must get the same group,
//! class and MSS priority.
//!
//! Why this load can tell: under SAM a request goes front iff `(B[g] + b) / (U + b) < share`,
//! so a decision depends on every charge before it. The load (found by a search over seeded
//! random loads; its decisions without decay listed at [`LOAD`]) puts every fair-share group
//! both front and back when nothing decays. If the replay charged nothing, every request would go back; if it counted
//! the data-taking writes (a priority class) in `U`, 18 of its 32 decisions would change; a
//! charge of the wrong size or to the wrong group moves the fractions the same way.
//!
//! Time: the shipped usage model (half-life) with a half-life of one second, and a pause of
//! one and a half seconds between the two halves of the load, so decay changes the fractions
//! the second half is judged by. The live broker decides at the wall clock; the replay at the
//! trace's `t` (the requests' `created_ms` from the first), so the two see the same decay.

use std::path::Path;
use std::time::Duration;

use mss_adapters::sim::library::Micros;
use mssbroker::clock::{Clock, SystemClock};
use mssbroker::config::Settings;
use mssbroker::simulate;
use mssbroker::trace::{read_trace, TraceRecord};
use serde_json::{json, Value};

use crate::helpers::{request, run_ok, test_config, ServeProcess};

/// Decay that matters within the test's few seconds.
const USAGE: &str = "\n[usage]\nmodel = \"half_life\"\nhalf_life_secs = 1\n";

/// The load: (group letter, megabytes). H analysis/higgs (target 10 %), T analysis/top (30 %),
/// R reprocessing (30 %), M mc (30 %), D a data-taking write (priority class). Without the
/// pause, SAM decides (P: priority class) PBPBPBBBBBBBPBFFFFBBPBBBBBBFPFFP.
const LOAD: [(char, u64); 32] = [
    ('D', 24),
    ('R', 5),
    ('D', 31),
    ('T', 7),
    ('D', 33),
    ('T', 2),
    ('R', 5),
    ('T', 5),
    ('H', 4),
    ('T', 6),
    ('R', 5),
    ('H', 1),
    ('D', 39),
    ('T', 4),
    ('M', 7),
    ('M', 8),
    ('R', 2),
    ('H', 1),
    ('M', 6),
    ('T', 1),
    ('D', 28),
    ('T', 1),
    ('M', 8),
    ('H', 6),
    ('H', 6),
    ('H', 6),
    ('M', 2),
    ('R', 9),
    ('D', 31),
    ('T', 4),
    ('R', 7),
    ('D', 15),
];

fn body(i: usize, (group, mb): (char, u64)) -> Value {
    let (mode, physics) = match group {
        'H' => ("analysis", "higgs"),
        'T' => ("analysis", "top"),
        'R' => ("reprocessing", "any"),
        'M' => ("mc", "x"),
        _ => ("datataking", "raw"),
    };
    let mut r = request(&format!("r-{i}"), mode, physics, mb * 1_000_000);
    if group == 'D' {
        r["direction"] = json!("write");
        r["volume"] = json!("DT000001");
    }
    r
}

/// (group, class, mss_priority) of one decision.
type Decided = (String, String, i64);

async fn submit_and_read(client: &reqwest::Client, base: &str, r: &Value) -> Decided {
    let resp = client
        .post(format!("{base}/v1/requests"))
        .json(r)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 202, "{r}");
    let id = resp.json::<Value>().await.unwrap()["id"].as_i64().unwrap();
    let live: Value = client
        .get(format!("{base}/v1/requests/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    (
        live["group"].as_str().unwrap().to_string(),
        live["class"].as_str().unwrap().to_string(),
        live["mss_priority"].as_i64().unwrap(),
    )
}

fn export(dir: &std::path::Path, db: &std::path::Path) -> Vec<TraceRecord> {
    let out = dir.join("export.jsonl");
    run_ok(&[
        "trace",
        "export",
        "--db",
        db.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    read_trace(std::io::BufReader::new(std::fs::File::open(&out).unwrap())).unwrap()
}

/// The replay's decisions, in arrival order.
fn replay(config: &Path, trace: &[TraceRecord]) -> Vec<Decided> {
    let settings = Settings::load(config).unwrap();
    let policy = &settings.policy;
    let load = simulate::arrivals(policy, trace).unwrap();
    let out = simulate::run(policy, simulate::library(4, 0), &load, Micros::MAX);
    let mut decisions = out.decisions.clone();
    decisions.sort_by_key(|d| d.arrival);
    let arrivals: Vec<i64> = decisions.iter().map(|d| d.arrival).collect();
    assert_eq!(
        arrivals,
        (1..=trace.len() as i64).collect::<Vec<_>>(),
        "one decision per request"
    );
    decisions
        .iter()
        .map(|d| {
            (
                policy.group(d.group).path.as_str().to_string(),
                d.class.expect("the policy decided").as_str().to_string(),
                d.mss_priority,
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_export_makes_the_live_brokers_decisions() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("broker.toml");
    std::fs::write(&config, test_config(None) + USAGE).unwrap();
    let db = dir.path().join("broker.db");
    let serve = ServeProcess::start(&config, &db);
    let client = reqwest::Client::new();

    let mut live = Vec::new();
    for (i, &item) in LOAD.iter().enumerate() {
        if i == LOAD.len() / 2 {
            // Half-lives pass before the second half: wait for the clock, not a fixed sleep.
            let until = SystemClock.now_ms() + 1_500;
            while SystemClock.now_ms() < until {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        live.push(submit_and_read(&client, &serve.base, &body(i, item)).await);
    }

    let trace = export(dir.path(), &db);
    assert_eq!(trace.len(), LOAD.len(), "one record per request");
    let half = &trace[LOAD.len() / 2];
    assert!(half.t >= 1.5, "the pause is in the trace: t = {}", half.t);
    let replayed = replay(&config, &trace);

    for (i, (l, r)) in live.iter().zip(&replayed).enumerate() {
        assert_eq!(l, r, "request r-{i} ({:?}): live vs replayed", LOAD[i]);
    }
    assert_eq!(live.len(), replayed.len());
    // The load could tell: fair-share requests went both front and back, some group both
    // ways. (Which ones depends on how fast the live broker took the load: decay runs on the
    // wall clock, so the classes are not fixed, only the replay's agreement with them.)
    let fair = |class: &str| {
        live.iter()
            .filter(|(_, c, _)| c == class)
            .map(|(g, _, _)| g.clone())
            .collect::<std::collections::HashSet<_>>()
    };
    let (front, back) = (fair("front"), fair("back"));
    assert!(
        front.intersection(&back).next().is_some(),
        "a group decided both ways: {live:?}"
    );
    assert!(live
        .iter()
        .any(|(g, c, _)| g == "datataking" && c == "priority"));
}

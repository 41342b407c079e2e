//! A drive for data taking (`[release.reserve]`, issue 39) through the real service and the
//! real simulator process (Enstore's model: a drive on a volume serves that volume's queue before
//! anything else): a data-taking request arriving while fair-share batches hold the drives the
//! broker may fill starts on the reserved drive within a mount and a locate, not after a batch;
//! a waiting fair-share request's explain says a drive is held.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::helpers::{request, test_config, wait_for_count, SimProcess, TestApp};

/// Ten GB: 25 s at an LTO-9's 400 MB/s, 2.5 s at the simulator's time scale of 10.
const SIZE: u64 = 10_000_000_000;
/// Files per fair-share volume: 20 x 2.5 s, so a batch holds its drive for about a minute.
const FILES: u64 = 20;

/// Volumes mode, two volumes in flight on the simulator's two drives, every volume eligible at
/// once, batches as large as a volume, and `[release.reserve]` with `drives`.
fn config(sim: &SimProcess, drives: u32) -> String {
    format!(
        "{}\n[release]\nmode = \"volumes\"\n\n[release.volumes]\n\
         min_volume_bytes = 1\nmin_volume_files = 1\nquiet_secs = 0\nmax_age_secs = 7200\n\
         batch_max_bytes = 1000000000000000\nbatch_max_files = 100\nsticky_secs = 0\n\
         max_volumes = 2\n\n[release.reserve]\ndrives = {drives}\nwindow_secs = 3600\n",
        test_config(Some(&sim.url))
    )
}

fn on_volume(crid: &str, mode: &str, volume: &str, position: u64, size: u64) -> Value {
    let mut body = request(crid, mode, "higgs", size);
    body["volume"] = volume.into();
    body["position"] = position.into();
    body
}

async fn submit(app: &TestApp, body: &Value) -> i64 {
    let (status, r) = app.post("/v1/requests", body).await;
    assert_eq!(status, 202, "{r}");
    r["id"].as_i64().unwrap()
}

/// The request once its state is one of `states` (panics after `limit`), and how long that took.
async fn wait_state(app: &TestApp, id: i64, states: &[&str], limit: Duration) -> (Value, Duration) {
    let start = Instant::now();
    loop {
        let (status, body) = app.get(&format!("/v1/requests/{id}")).await;
        assert_eq!(status, 200, "{body}");
        if states.iter().any(|s| body["state"] == *s) {
            return (body, start.elapsed());
        }
        assert!(
            start.elapsed() < limit,
            "request {id} not {states:?} after {limit:?}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_data_taking_request_arriving_while_batches_hold_the_drives_starts_on_the_reserved_one() {
    let sim = SimProcess::start_with_drives(2, 10.0, &["--model", "enstore"]);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("broker.db");
    let app = TestApp::spawn_on(&config(&sim, 1), db.clone()).await;
    // Data taking was seen: the window opens.
    let first = submit(&app, &on_volume("dt1", "datataking", "DT1", 1, 1_000)).await;
    wait_state(&app, first, &["running", "done"], Duration::from_secs(30)).await;
    // Two groups' volumes, each a batch of FILES files: the broker may fill two drives.
    let mut queued = Vec::new();
    for (mode, volume) in [("reprocessing", "VA"), ("analysis", "VB")] {
        for k in 1..=FILES {
            let crid = format!("{volume}-{k}");
            queued.push(submit(&app, &on_volume(&crid, mode, volume, k, SIZE)).await);
        }
    }
    // One volume goes; the other's FILES requests wait while a drive is held for data taking.
    let waiting = "SELECT COUNT(*) FROM requests WHERE state = 'queued'";
    wait_for_count(&db, waiting, FILES as i64, Duration::from_secs(15)).await;
    // A request waiting in the broker says why.
    let mut explained = None;
    for &id in &queued {
        let (_, body) = app.get(&format!("/v1/requests/{id}")).await;
        if body["state"] == "queued" {
            explained = Some(body);
            break;
        }
    }
    let body = explained.expect("a fair-share request waits");
    let reserve = &body["drive_reserve"];
    assert_eq!(reserve["reserved_drives"], 1, "{body}");
    assert_eq!(reserve["library"], "", "{body}");
    assert!(reserve["until_ms"].as_i64().is_some(), "{body}");
    // The fair-share volume in flight is being read.
    let running = "SELECT COUNT(*) FROM requests WHERE state = 'running' AND class != 'priority'";
    wait_for_count(&db, running, 1, Duration::from_secs(30)).await;
    // Data taking arrives while the batch holds its drive: it starts on the reserved one within
    // a mount and a locate (LTO-9: under 2 minutes, 12 s here), not after the batch (20 files
    // of 25 s each: over 8 minutes, 50 s here).
    let second = submit(&app, &on_volume("dt2", "datataking", "DT1", 2, 1_000)).await;
    let (_, took) = wait_state(&app, second, &["running", "done"], Duration::from_secs(12)).await;
    let (status, doc) = app.get("/v1/openapi.json").await;
    assert_eq!(status, 200);
    let schema = &doc["components"]["schemas"]["DriveReserveBody"]["properties"];
    for field in ["library", "reserved_drives", "priority_waiting", "until_ms"] {
        assert!(schema[field].is_object(), "{field}: {schema}");
    }
    assert!(took < Duration::from_secs(12), "{took:?}");
}

//! The `volumes` release mode through the real service and the real simulator process: a
//! volume's requests reach the MSS in one submission and in tape-position order, each charged to
//! its own group; a request waiting explains its volume; a restart keeps the waiting volumes and
//! the volumes in flight; priority classes are never held.

use std::time::Duration;

use mss_adapters::protocol::{Received, ReceivedResponse};
use serde_json::Value;

use crate::helpers::{key_id, open_db, received_all, request, test_config, SimProcess, TestApp};

/// Ten GB: 20 s at the simulator's 500 MB/s, so nothing finishes while a test looks.
const SIZE: u64 = 10_000_000_000;

/// Volumes eligible at 4 files (never by bytes or age within a test), one volume in flight.
fn config(sim: &SimProcess) -> String {
    format!(
        "{}\n[release]\nmode = \"volumes\"\n\n[release.volumes]\n\
         min_volume_bytes = 1000000000000000\nmin_volume_files = 4\nquiet_secs = 3600\n\
         max_age_secs = 7200\nbatch_max_bytes = 1000000000000000\nbatch_max_files = 100\n\
         sticky_secs = 0\nmax_volumes = 1\n",
        test_config(Some(&sim.url))
    )
}

/// A request of access mode `mode` on `volume` at `position`.
fn on_volume(crid: &str, mode: &str, volume: &str, position: u64) -> Value {
    let mut body = request(crid, mode, "higgs", SIZE);
    body["volume"] = volume.into();
    body["position"] = position.into();
    body
}

/// Submit; insist on a 202 in state `state`; the id.
async fn submit(app: &TestApp, body: &Value, state: &str) -> i64 {
    let (status, r) = app.post("/v1/requests", body).await;
    assert_eq!(status, 202, "{r}");
    assert_eq!(r["state"], state, "{r}");
    r["id"].as_i64().unwrap()
}

fn count(db: &std::path::Path, sql: &str) -> i64 {
    open_db(db).query_row(sql, [], |r| r.get(0)).unwrap()
}

/// The transfers of `ids` as the MSS received them, checked to have come in one submission call
/// and nothing else in between.
fn one_call(r: &ReceivedResponse, ids: &[i64]) -> Vec<Received> {
    let at: Vec<usize> = (r.received.iter().enumerate())
        .filter(|(_, t)| ids.contains(&key_id(&t.key)))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(at.len(), ids.len(), "each once: {r:?}");
    let call_of = |i: usize| {
        let mut end = 0;
        r.calls
            .iter()
            .position(|&n| {
                end += n;
                i < end
            })
            .expect("every received transfer belongs to a call")
    };
    let first = call_of(at[0]);
    assert!(
        at.iter().all(|&i| call_of(i) == first),
        "the batch came in more than one call: {at:?} of {:?}",
        r.calls
    );
    assert_eq!(
        r.calls[first],
        ids.len(),
        "the call carried something else too"
    );
    at.iter().map(|&i| r.received[i].clone()).collect()
}

async fn volume_wait(app: &TestApp, id: i64) -> Value {
    let (status, body) = app.get(&format!("/v1/requests/{id}")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "queued", "{body}");
    assert_eq!(body["explain"]["release_mode"], "volumes", "{body}");
    body["volume_wait"].clone()
}

#[tokio::test]
async fn a_volume_goes_to_the_mss_in_one_call_in_position_order_each_charged_to_its_group() {
    let sim = SimProcess::start_with(1, 1.0);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("broker.db");
    let app = TestApp::spawn_on(&config(&sim), db.clone()).await;
    // Three of reprocessing on VA (not yet eligible: 3 files), one of analysis on VB.
    let mut va = Vec::new();
    for (i, pos) in [30, 10, 40].into_iter().enumerate() {
        va.push(
            submit(
                &app,
                &on_volume(&format!("a{i}"), "reprocessing", "VA", pos),
                "queued",
            )
            .await,
        );
    }
    let vb = submit(&app, &on_volume("b0", "analysis", "VB", 1), "queued").await;

    let w = volume_wait(&app, va[0]).await;
    assert_eq!(w["volume"], "VA", "{w}");
    assert_eq!(
        (w["queued_files"].as_u64(), w["queued_bytes"].as_u64()),
        (Some(3), Some(3 * SIZE))
    );
    assert_eq!(w["eligible"], false, "{w}");
    assert_eq!(w["rule"], "waiting_quiet_secs", "{w}");
    assert_eq!(
        w["eligible_at_ms"].as_i64(),
        w["newest_ms"].as_i64().map(|t| t + 3_600_000),
        "{w}"
    );
    assert_eq!(
        (w["volumes_in_flight"].as_u64(), w["max_volumes"].as_u64()),
        (Some(0), Some(1))
    );
    assert_eq!(w["groups_waiting"], 2, "{w}");
    let mine = w["group_position"].as_u64().unwrap();
    let theirs = volume_wait(&app, vb).await["group_position"]
        .as_u64()
        .unwrap();
    assert_eq!(
        (mine.min(theirs), mine.max(theirs)),
        (1, 2),
        "the two groups hold the two places"
    );
    assert!(
        sim.received().await.received.is_empty(),
        "nothing released yet"
    );
    let (_, doc) = app.get("/v1/openapi.json").await;
    let schema = &doc["components"]["schemas"]["VolumeWaitBody"]["properties"];
    for field in [
        "volume",
        "queued_bytes",
        "queued_files",
        "rule",
        "group_position",
    ] {
        assert!(
            schema[field].is_object(),
            "{field} in the OpenAPI document: {schema}"
        );
    }

    // A fourth file on VA, of another group (mc), makes the volume eligible: the whole volume
    // goes in one call, in position order, one of the groups riding on the other's mount.
    va.push(submit(&app, &on_volume("a3", "mc", "VA", 20), "queued").await);
    let r = received_all(&sim, &va).await;
    let batch = one_call(&r, &va);
    let positions: Vec<Option<u64>> = batch.iter().map(|t| t.position).collect();
    assert_eq!(positions, [Some(10), Some(20), Some(30), Some(40)]);
    assert!(batch.iter().all(|t| t.volume.as_deref() == Some("VA")));
    assert!(
        batch.iter().all(|t| t.priority == batch[0].priority),
        "one priority per batch: {batch:?}"
    );
    for &id in &va {
        let (_, body) = app.get(&format!("/v1/requests/{id}")).await;
        let group = if id == va[3] { "mc" } else { "reprocessing" };
        assert_eq!(body["group"], group, "{body}");
        assert_eq!(
            body["charged"].as_u64(),
            Some(SIZE),
            "charged at release: {body}"
        );
    }
    assert_eq!(app.group("mc").await["usage_bytes"].as_u64(), Some(SIZE));

    // VB waits for the one volume slot VA holds; data taking on VB is never held.
    let w = volume_wait(&app, vb).await;
    assert_eq!(
        (w["volumes_in_flight"].as_u64(), w["queued_files"].as_u64()),
        (Some(1), Some(1))
    );
    let daq = submit(&app, &on_volume("daq", "datataking", "VB", 5), "accepted").await;
    let r = received_all(&sim, &[daq]).await;
    assert_eq!(r.received.last().map(|t| t.priority), Some(100));
    assert_eq!(
        count(
            &db,
            &format!("SELECT COUNT(*) FROM requests WHERE id = {vb} AND state = 'queued'")
        ),
        1
    );
    app.stop().await;
}

#[tokio::test]
async fn a_restart_keeps_the_waiting_volumes_and_the_volumes_in_flight() {
    let sim = SimProcess::start_with(1, 1.0);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("broker.db");
    let config = config(&sim);
    let app = TestApp::spawn_on(&config, db.clone()).await;
    let mut va = Vec::new();
    for (i, (mode, pos)) in [("reprocessing", 7), ("mc", 3), ("reprocessing", 5)]
        .into_iter()
        .enumerate()
    {
        va.push(
            submit(
                &app,
                &on_volume(&format!("a{i}"), mode, "VA", pos),
                "queued",
            )
            .await,
        );
    }
    let mut vb = Vec::new();
    for (i, pos) in [2, 9, 1].into_iter().enumerate() {
        vb.push(
            submit(
                &app,
                &on_volume(&format!("b{i}"), "analysis", "VB", pos),
                "queued",
            )
            .await,
        );
    }
    let mut before = Vec::new();
    for &id in va.iter().chain(&vb) {
        before.push(volume_wait(&app, id).await);
    }
    app.stop().await;

    let app = TestApp::spawn_on(&config, db.clone()).await;
    for (&id, was) in va.iter().chain(&vb).zip(&before) {
        let now = volume_wait(&app, id).await;
        assert_eq!(&now, was, "request {id}'s volume survives the restart");
    }
    // VA's fourth file: the requests from before the restart go with it, in position order.
    va.push(submit(&app, &on_volume("a3", "analysis", "VA", 4), "queued").await);
    let r = received_all(&sim, &va).await;
    let positions: Vec<Option<u64>> = one_call(&r, &va).iter().map(|t| t.position).collect();
    assert_eq!(positions, [Some(3), Some(4), Some(5), Some(7)]);
    // VB's fourth file makes it eligible, but VA holds the one volume slot ...
    vb.push(submit(&app, &on_volume("b3", "analysis", "VB", 4), "queued").await);
    let w = volume_wait(&app, vb[0]).await;
    assert_eq!(
        (w["eligible"].as_bool(), w["rule"].as_str()),
        (Some(true), Some("min_volume_files"))
    );
    assert_eq!(w["volumes_in_flight"], 1, "{w}");
    app.stop().await;

    // ... and still after a restart: the volume in flight was loaded from its rows. (The commit
    // answering this submission ran a release.)
    let app = TestApp::spawn_on(&config, db.clone()).await;
    submit(&app, &on_volume("c0", "mc", "VC", 1), "queued").await;
    let queued_vb = "SELECT COUNT(*) FROM requests WHERE state = 'queued' AND volume = 'VB'";
    assert_eq!(count(&db, queued_vb), 4);
    assert_eq!(volume_wait(&app, vb[3]).await["volumes_in_flight"], 1);
    // Cancelling VA's requests at the MSS frees its slot once the MSS has dropped or finished
    // them; then VB goes, in one call and in position order.
    for &id in &va {
        let (status, body) = app.delete(&format!("/v1/requests/{id}")).await;
        assert!(matches!(status, 200 | 202), "{status} {body}");
    }
    app.wait_final(&va, Duration::from_secs(60)).await;
    let r = received_all(&sim, &vb).await;
    let positions: Vec<Option<u64>> = one_call(&r, &vb).iter().map(|t| t.position).collect();
    assert_eq!(positions, [Some(1), Some(2), Some(4), Some(9)]);
    app.stop().await;
}

/// A feasibility cap counts the requests a batch has already let go, as one-at-a-time releases
/// would: with reprocessing capped at 25 GB, a volume of four 10 GB reprocessing requests
/// releases two (10 + 10 fits, a third would pass 25) and holds the other two; before, every
/// request of the batch was checked against the usage before the batch and all four went.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_counts_its_own_requests_against_a_feasibility_cap() {
    let sim = SimProcess::start();
    let config = config(&sim) + "\n[targets.\"reprocessing\"]\nfeasibility_cap = 25000000000\n";
    let app = TestApp::spawn(&config).await;
    let mut ids = Vec::new();
    for (i, position) in [10, 20, 30, 40].into_iter().enumerate() {
        let body = on_volume(&format!("c{i}"), "reprocessing", "VOL9", position);
        ids.push(submit(&app, &body, "queued").await);
    }
    let released = received_all(&sim, &ids[..2]).await;
    let got = one_call(&released, &ids[..2]);
    let positions: Vec<Option<u64>> = got.iter().map(|t| t.position).collect();
    assert_eq!(positions, [Some(10), Some(20)]);
    let held = count(
        &app.db,
        "SELECT COUNT(*) FROM requests WHERE state = 'held' AND volume = 'VOL9'",
    );
    assert_eq!(held, 2, "the two that would pass the cap are held");
    let r = sim.received().await;
    for id in &ids[2..] {
        assert!(
            !r.received.iter().any(|t| key_id(&t.key) == *id),
            "{id} passed the cap: {r:?}"
        );
    }
}

/// A volume's batch larger than the simulator takes in one body (axum's 2 MiB: 2,500 requests
/// with 900-character paths, `submit_batch` raised to hold them) still reaches it: the http
/// adapter halves a call refused with 413 instead of resending it forever, and data taking,
/// read into the same call first, is not held back with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_batch_over_the_simulators_body_limit_still_reaches_it() {
    const N: usize = 2500;
    let sim = SimProcess::start();
    let base = test_config(Some(&sim.url)).replace(
        "adapter = \"http\"\n",
        "adapter = \"http\"\nsubmit_batch = 3000\nsubmit_burst = 3000\n",
    );
    assert!(base.contains("submit_batch = 3000"), "the batch size took");
    let config = format!(
        "{base}\n[release]\nmode = \"volumes\"\n\n[release.volumes]\n\
         min_volume_bytes = 1000000000000000\nmin_volume_files = {N}\nquiet_secs = 3600\n\
         max_age_secs = 7200\nbatch_max_bytes = 1000000000000000\nbatch_max_files = {N}\n\
         sticky_secs = 0\nmax_volumes = 1\n"
    );
    let app = TestApp::spawn(&config).await;
    let dir = "d".repeat(900);
    let mut ids = Vec::new();
    for chunk in (0..N).collect::<Vec<_>>().chunks(500) {
        let items: Vec<Value> = chunk
            .iter()
            .map(|&i| {
                let mut body = on_volume(&format!("big{i}"), "reprocessing", "VA", i as u64);
                body["file"] = format!("/pnfs/test/{dir}/big{i}").into();
                body
            })
            .collect();
        let (status, body) = app
            .post(
                "/v1/requests/batch",
                &serde_json::json!({ "requests": items }),
            )
            .await;
        assert_eq!(status, 202, "{body}");
        for r in body["results"].as_array().unwrap() {
            ids.push(r["id"].as_i64().unwrap());
        }
    }
    let dt = submit(
        &app,
        &request("dt1", "datataking", "higgs", 1_000),
        "accepted",
    )
    .await;
    received_all(&sim, &[dt]).await;
    let r = received_all(&sim, &ids).await;
    assert_eq!(r.received.len(), N + 1);
    app.stop().await;
}

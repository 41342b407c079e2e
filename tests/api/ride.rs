//! Riding with a repaid lead (`[release.volumes] ride_lead_bytes`, issue 39) through the real
//! service and the real simulator process: a group ahead of its share whose lead stays within
//! the bound rides on the batch another group leads on a volume, in the same MSS call, charged
//! to its own group; a group the ride would carry past the bound does not ride, and after a
//! restart it still does not ride before it is back at its share. And remainders
//! (`[release.volumes] remainder_bytes`): what a batch would leave on its volume goes with it,
//! whatever its groups' standing, when it is small enough and their credit covers it.
//!
//! Shares (tests/fixtures/base.toml): reprocessing 30 %, mc 30 %, analysis/top 30 %,
//! analysis/higgs 10 %. The bound is 25 GB. mc and top are led to 40 GB each (a lead of
//! 40 - 0.3 * 80 = 16 GB each); then reprocessing, behind its share, leads a volume on which mc
//! has 10 GB (16 + 0.7 * 10 = 23 GB: within the bound) and top 20 GB (16 + 0.7 * 20 = 30 GB:
//! past it).

use mss_adapters::protocol::ReceivedResponse;
use serde_json::Value;

use crate::helpers::{key_id, open_db, received_all, request, test_config, SimProcess, TestApp};

const GB: u64 = 1_000_000_000;
/// The bound, in bytes (benefit units: the base configuration's benefit is bytes).
const BOUND: u64 = 25 * GB;

/// Volumes eligible at 4 files (never by bytes or age within a test), batches as large as a
/// volume, room for every volume of the test in flight, and riding with `ride` (`None`: unset).
/// With `ride` set, remainders are off: these tests pin the bound alone, and a remainder is
/// bounded by its group's credit, not by it (`remainder_bytes` below).
fn config(sim: &SimProcess, ride: Option<u64>) -> String {
    let ride = ride.map_or(String::new(), |b| {
        format!("ride_lead_bytes = {b}\nremainder_bytes = 0\n")
    });
    format!(
        "{}\n[release]\nmode = \"volumes\"\n\n[release.volumes]\n\
         min_volume_bytes = 1000000000000000\nmin_volume_files = 4\nquiet_secs = 3600\n\
         max_age_secs = 7200\nbatch_max_bytes = 1000000000000000\nbatch_max_files = 100\n\
         sticky_secs = 0\nmax_volumes = 8\n{ride}",
        test_config(Some(&sim.url))
    )
}

/// A request of `group` ("reprocessing", "mc" or "top") on `volume` at `position`.
fn on_volume(crid: &str, group: &str, volume: &str, position: u64, size: u64) -> Value {
    let mut body = match group {
        "top" => request(crid, "analysis", "top", size),
        mode => request(crid, mode, "higgs", size),
    };
    body["volume"] = volume.into();
    body["position"] = position.into();
    body
}

async fn submit(app: &TestApp, body: &Value) -> i64 {
    let (status, r) = app.post("/v1/requests", body).await;
    assert_eq!(status, 202, "{r}");
    r["id"].as_i64().unwrap()
}

/// The ids of the MSS call that carried request `id`, in the order the MSS received them.
fn call_of(r: &ReceivedResponse, id: i64) -> Vec<i64> {
    let at = (r.received.iter())
        .position(|t| key_id(&t.key) == id)
        .expect("received");
    let mut start = 0;
    for &n in &r.calls {
        if at < start + n {
            return r.received[start..start + n]
                .iter()
                .map(|t| key_id(&t.key))
                .collect();
        }
        start += n;
    }
    panic!("request {id} in no call: {r:?}");
}

/// A released request's row: (group, state, release_lead, charged bytes).
fn row(db: &std::path::Path, id: i64) -> (String, String, Option<String>, i64) {
    open_db(db)
        .query_row(
            "SELECT group_path, state, release_lead, charged FROM requests WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap()
}

/// A volume of four requests of `group`, `size` each; waits for the simulator to have it.
async fn lead(app: &TestApp, sim: &SimProcess, group: &str, volume: &str, size: u64) {
    let mut ids = Vec::new();
    for k in 1..=4 {
        let crid = format!("{volume}-{k}");
        ids.push(submit(app, &on_volume(&crid, group, volume, k, size)).await);
    }
    received_all(sim, &ids).await;
}

/// mc and top 40 GB each, through two volumes of their own.
async fn mc_and_top_ahead(app: &TestApp, sim: &SimProcess) {
    lead(app, sim, "mc", "VM", 10 * GB).await;
    lead(app, sim, "top", "VT", 10 * GB).await;
    for g in ["mc", "analysis/top"] {
        let usage = app.group(g).await["usage_bytes"].as_u64();
        assert_eq!(usage, Some(40 * GB), "{g}");
    }
}

/// Volume VA: reprocessing's two 10 GB requests, mc's 10 GB, top's 20 GB (the fourth file
/// makes it eligible). Returns (reprocessing's, mc's, top's) ids.
async fn shared_volume(app: &TestApp) -> (Vec<i64>, i64, i64) {
    let r1 = submit(app, &on_volume("va-r1", "reprocessing", "VA", 10, 10 * GB)).await;
    let mc = submit(app, &on_volume("va-mc", "mc", "VA", 20, 10 * GB)).await;
    let top = submit(app, &on_volume("va-top", "top", "VA", 30, 20 * GB)).await;
    let r2 = submit(app, &on_volume("va-r2", "reprocessing", "VA", 40, 10 * GB)).await;
    (vec![r1, r2], mc, top)
}

#[tokio::test]
async fn a_group_ahead_of_its_share_rides_a_mounted_volume_within_the_bound_and_one_past_it_does_not(
) {
    let sim = SimProcess::start_with(1, 1.0);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("broker.db");
    let app = TestApp::spawn_on(&config(&sim, Some(BOUND)), db.clone()).await;
    mc_and_top_ahead(&app, &sim).await;
    let (reprocessing, mc, top) = shared_volume(&app).await;

    // reprocessing, behind its share, leads VA; mc rides in the same MSS call, in position
    // order; top, whose ride would pass the bound, is not in it.
    let r = received_all(&sim, &[reprocessing[0], reprocessing[1], mc]).await;
    let call = call_of(&r, mc);
    assert_eq!(call, [reprocessing[0], mc, reprocessing[1]], "{r:?}");
    // mc's request is charged to mc, released in the flight reprocessing leads.
    let (group, _, led_by, charged) = row(&db, mc);
    assert_eq!(
        (group.as_str(), led_by.as_deref(), charged),
        ("mc", Some("reprocessing"), (10 * GB) as i64)
    );
    assert_eq!(app.group("mc").await["usage_bytes"].as_u64(), Some(50 * GB));
    assert_eq!(
        app.group("reprocessing").await["usage_bytes"].as_u64(),
        Some(20 * GB)
    );
    // top's waits, uncharged, and reached no MSS.
    let (_, state, _, charged) = row(&db, top);
    assert_eq!((state.as_str(), charged), ("queued", 0));
    assert_eq!(
        app.group("analysis/top").await["usage_bytes"].as_u64(),
        Some(40 * GB)
    );
    assert!(!sim
        .received()
        .await
        .received
        .iter()
        .any(|t| key_id(&t.key) == top));
    app.stop().await;
}

#[tokio::test]
async fn a_group_the_bound_stopped_does_not_ride_again_after_a_restart() {
    let sim = SimProcess::start_with(1, 1.0);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("broker.db");
    let config = config(&sim, Some(BOUND));
    let app = TestApp::spawn_on(&config, db.clone()).await;
    mc_and_top_ahead(&app, &sim).await;
    let (reprocessing, mc, top) = shared_volume(&app).await;
    received_all(&sim, &[reprocessing[0], reprocessing[1], mc]).await;
    assert_eq!(row(&db, top).1, "queued", "the bound stopped top");
    app.stop().await;

    // Usage now: 40 + 40 + 20 + 10 = 110 GB; top's lead 40 - 33 = 7 GB, still ahead of its
    // share: it repays. A ride of 10 GB would take its lead to 14 GB, within the bound, but a
    // group repaying rides no more until it is back at its share, over a restart too.
    let app = TestApp::spawn_on(&config, db.clone()).await;
    let mut ids = Vec::new();
    for k in [1, 3, 4] {
        let crid = format!("vb-r{k}");
        ids.push(submit(&app, &on_volume(&crid, "reprocessing", "VB", k, GB)).await);
    }
    let top_vb = submit(&app, &on_volume("vb-top", "top", "VB", 2, 10 * GB)).await;
    let r = received_all(&sim, &ids).await;
    let call = call_of(&r, ids[0]);
    assert_eq!(call, ids, "reprocessing's batch alone: {r:?}");
    let (_, state, _, charged) = row(&db, top_vb);
    assert_eq!((state.as_str(), charged), ("queued", 0));
    assert_eq!(
        app.group("analysis/top").await["usage_bytes"].as_u64(),
        Some(40 * GB)
    );
    app.stop().await;
}

/// Remainders through the service: with `ride_lead_bytes` unset, mc and top are ahead of their
/// shares and may not ride on reprocessing's batch on VA, but their 10 + 20 GB are all that
/// batch would leave on the tape. Each has earned 30 % of the 80 GB released (24 GB of credit),
/// which covers its part: at `remainder_bytes` = 30 GB both go in reprocessing's MSS call, each
/// charged to its own group; at 25 GB the 30 GB left are too many and neither goes (all or
/// none: a mount is needed for what stays anyway).
#[tokio::test]
async fn a_small_remainder_goes_with_the_batch_charged_to_its_own_group_and_a_larger_one_waits() {
    for (limit, taken) in [(30 * GB, true), (25 * GB, false)] {
        let sim = SimProcess::start_with(1, 1.0);
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("broker.db");
        let config = format!("{}remainder_bytes = {limit}\n", config(&sim, None));
        let app = TestApp::spawn_on(&config, db.clone()).await;
        mc_and_top_ahead(&app, &sim).await;
        let (reprocessing, mc, top) = shared_volume(&app).await;
        if taken {
            let r = received_all(&sim, &[reprocessing[0], mc, top, reprocessing[1]]).await;
            let call = call_of(&r, top);
            assert_eq!(call, [reprocessing[0], mc, top, reprocessing[1]], "{r:?}");
            for (id, group, bytes) in [(mc, "mc", 10 * GB), (top, "analysis/top", 20 * GB)] {
                let (g, _, led_by, charged) = row(&db, id);
                assert_eq!(
                    (g.as_str(), led_by.as_deref(), charged),
                    (group, Some("reprocessing"), bytes as i64)
                );
            }
            let top_usage = app.group("analysis/top").await["usage_bytes"].as_u64();
            assert_eq!(top_usage, Some(60 * GB));
        } else {
            let r = received_all(&sim, &reprocessing).await;
            assert_eq!(call_of(&r, reprocessing[0]), reprocessing, "{r:?}");
            for id in [mc, top] {
                let (_, state, _, charged) = row(&db, id);
                assert_eq!((state.as_str(), charged), ("queued", 0), "{id}");
            }
        }
        app.stop().await;
    }
}

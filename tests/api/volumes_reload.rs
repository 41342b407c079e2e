//! A live switch into the `volumes` release mode through the real `serve` and the real simulator
//! process: what `pass_through` or `held` sent to the MSS before the reload is in flight as much
//! as a volume batch is, so it counts against `max_volumes`, and no volume goes to the MSS over
//! the limit until those requests have ended.

use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::{
    open_db, request, test_config, wait_final, wait_for_count, ServeProcess, SimProcess,
};

/// Two GB: 4 s at the simulator's 500 MB/s after a 5 s mount, one drive: the two requests
/// sent before the reload end one after the other, about 9 and 18 s after they were sent.
const SIZE: u64 = 2_000_000_000;

/// The test configuration in release mode `mode`; volumes eligible at 4 files, one in flight.
fn config(sim: &SimProcess, mode: &str) -> String {
    format!(
        "{}\n[release]\nmode = \"{mode}\"\n\n[release.volumes]\n\
         min_volume_bytes = 1000000000000000\nmin_volume_files = 4\nquiet_secs = 3600\n\
         max_age_secs = 7200\nbatch_max_bytes = 1000000000000000\nbatch_max_files = 100\n\
         sticky_secs = 0\nmax_volumes = 1\n",
        test_config(Some(&sim.url))
    )
}

fn on_volume(crid: &str, mode: &str, volume: &str, position: u64) -> Value {
    let mut body = request(crid, mode, "higgs", SIZE);
    body["volume"] = volume.into();
    body["position"] = position.into();
    body
}

async fn call(method: reqwest::Method, url: String, body: Option<&Value>) -> (u16, Value) {
    let mut rb = reqwest::Client::new().request(method, url);
    if let Some(b) = body {
        rb = rb.json(b);
    }
    let resp = rb.timeout(Duration::from_secs(30)).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn submit(base: &str, body: &Value) -> i64 {
    let (status, r) = call(
        reqwest::Method::POST,
        format!("{base}/v1/requests"),
        Some(body),
    )
    .await;
    assert_eq!(status, 202, "{r}");
    r["id"].as_i64().unwrap()
}

/// The volume wait of a request still queued in the volumes mode.
async fn volume_wait(base: &str, id: i64) -> Value {
    let (status, body) = call(
        reqwest::Method::GET,
        format!("{base}/v1/requests/{id}"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["state"], "queued",
        "still waiting in the broker: {body}"
    );
    body["volume_wait"].clone()
}

/// Two requests on two volumes sent to the MSS in `mode` (one drive: one runs, the other waits
/// at the MSS); a reload into `volumes` with `max_volumes = 1`; then a volume made eligible. It
/// waits while both earlier volumes are at the MSS, still while one is, and goes once both have
/// ended: never two volumes at the MSS at once from then on.
async fn switch_into_volumes_from(mode: &str) {
    let sim = SimProcess::start_with(1, 1.0);
    let dir = tempfile::tempdir().unwrap();
    let (file, db, log) = (
        dir.path().join("broker.toml"),
        dir.path().join("broker.db"),
        dir.path().join("serve.log"),
    );
    std::fs::write(&file, config(&sim, mode)).unwrap();
    let broker = ServeProcess::start_logged(&file, &db, &log);
    let base = broker.base.clone();
    let a = submit(&base, &on_volume("a0", "reprocessing", "VA", 1)).await;
    let b = submit(&base, &on_volume("b0", "analysis", "VB", 1)).await;
    let at_mss = format!(
        "SELECT COUNT(*) FROM requests WHERE id IN ({a}, {b}) \
         AND state IN ('submitted', 'running')"
    );
    wait_for_count(&db, &at_mss, 2, Duration::from_secs(15)).await;

    std::fs::write(&file, config(&sim, "volumes")).unwrap();
    let reload = format!("{base}/v1/admin/reload");
    let (status, body) = call(reqwest::Method::POST, reload, Some(&json!({}))).await;
    assert_eq!(status, 200, "{body}");

    // VC eligible (four files), but VA and VB are at the MSS: it waits, counting both.
    let mut vc = Vec::new();
    for (i, pos) in [4, 2, 3, 1].into_iter().enumerate() {
        vc.push(submit(&base, &on_volume(&format!("c{i}"), "mc", "VC", pos)).await);
    }
    let w = volume_wait(&base, vc[0]).await;
    assert_eq!(w["eligible"], true, "{w}");
    assert_eq!(
        (w["volumes_in_flight"].as_u64(), w["max_volumes"].as_u64()),
        (Some(2), Some(1)),
        "{w}"
    );
    // The first ends: the other still holds the one volume the limit allows.
    let first = wait_any_final(&base, &[a, b]).await;
    let w = volume_wait(&base, vc[0]).await;
    assert_eq!(w["volumes_in_flight"], 1, "{w}");
    // The other ends: VC goes, after both.
    wait_final(
        &reqwest::Client::new(),
        &base,
        &[a, b],
        Duration::from_secs(60),
    )
    .await;
    let ids = |v: &[i64]| v.iter().map(i64::to_string).collect::<Vec<_>>().join(", ");
    let released = format!(
        "SELECT COUNT(*) FROM requests WHERE id IN ({}) AND release_seq IS NOT NULL",
        ids(&vc)
    );
    wait_for_count(&db, &released, 4, Duration::from_secs(15)).await;
    let conn = open_db(&db);
    let at = |sql: String| -> i64 { conn.query_row(&sql, [], |r| r.get(0)).unwrap() };
    let ended = at(format!(
        "SELECT MAX(finished_ms) FROM requests WHERE id IN ({a}, {b})"
    ));
    let went = at(format!(
        "SELECT MIN(released_ms) FROM requests WHERE id IN ({})",
        ids(&vc)
    ));
    assert!(
        went >= ended,
        "VC was released at {went}, before the volumes sent in {mode} had ended ({ended}; \
         request {first} ended first)"
    );
}

/// Poll until one of `ids` is final; its id (panics after 60 s).
async fn wait_any_final(base: &str, ids: &[i64]) -> i64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        for &id in ids {
            let (_, body) = call(
                reqwest::Method::GET,
                format!("{base}/v1/requests/{id}"),
                None,
            )
            .await;
            if matches!(
                body["state"].as_str(),
                Some("done" | "failed" | "cancelled")
            ) {
                return id;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "none of {ids:?} ended"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_from_pass_through_into_volumes_counts_what_is_at_the_mss() {
    switch_into_volumes_from("pass_through").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_from_held_into_volumes_counts_what_is_at_the_mss() {
    switch_into_volumes_from("held").await;
}

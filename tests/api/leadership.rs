//! A broker's life under a leadership role (issue 42, step 5): a real broker on a random port,
//! its SQLite file, the simulator as its own process, and a `Role` the test drives through the
//! `watch::Sender` it holds (the seam a `Contender`'s `role()` plugs into). Standby: `/readyz`
//! and every write and read answer 503, nothing is written; promoted: a submit is committed and
//! sent; demoted: 503 at once and the MSS hears nothing more from it; promoted again at a higher
//! epoch: what the first term accepted is there and was sent once.

use std::time::{Duration, Instant};

use mss_adapters::protocol::Faults;
use mssbroker::leadership::Role;
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::helpers::{
    assert_each_attempt_once, key_id, open_db, received_all, request, set_faults, test_config,
    SimProcess, TestApp,
};

/// The value of the sample `name` (no labels) in `/metrics`.
async fn metric(app: &TestApp, name: &str) -> f64 {
    let text = (app.client.get(format!("{}/metrics", app.base)).send().await)
        .expect("scrape")
        .text()
        .await
        .expect("metrics text");
    let line = text.lines().find(|l| l.split(' ').next() == Some(name));
    let value = line.and_then(|l| l.split(' ').nth(1));
    value
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no sample {name} in\n{text}"))
}

/// Wait until `/metrics` shows `name` at `want` (panics after 20 s).
async fn wait_metric(app: &TestApp, name: &str, want: f64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(app, name).await != want {
        assert!(Instant::now() < deadline, "{name} never became {want}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Wait until `/readyz` says `role`, `leader` (no `standby` in the body) or `standby` (panics
/// after 20 s); returns its status and body.
async fn wait_role(app: &TestApp, role: &str) -> (u16, Value) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = app.get("/readyz").await;
        let now = if body["standby"].is_object() {
            "standby"
        } else {
            "leader"
        };
        if now == role {
            return (status, body);
        }
        assert!(Instant::now() < deadline, "never {role}: {status} {body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A write's or read's answer from a standby: 503 with `Retry-After`, saying so.
async fn assert_standby_answer(app: &TestApp, method: &str, path: &str, body: Option<Value>) {
    let url = format!("{}{path}", app.base);
    let req = match method {
        "POST" => app.client.post(url).json(&body.unwrap_or(json!({}))),
        "DELETE" => app.client.delete(url),
        _ => app.client.get(url),
    };
    let resp = req.send().await.expect("answered");
    let status = resp.status().as_u16();
    let retry = resp.headers().get("retry-after").cloned();
    let text = resp.text().await.unwrap_or_default();
    assert_eq!(status, 503, "{method} {path}: {text}");
    assert_eq!(
        retry.as_ref().and_then(|v| v.to_str().ok()),
        Some("2"),
        "{method} {path}: Retry-After"
    );
    assert!(text.contains("standby"), "{method} {path}: {text}");
}

/// Every write endpoint and every ledger read of a standby. Not the `mssbroker_leader` gauge:
/// after a demotion it turns 0 only once the term's loops have stopped (its help says so), so
/// the callers check it where it is settled.
async fn assert_standby(app: &TestApp) {
    let one = request("lead-c", "analysis", "top", 1_000);
    let batch = json!({"requests": [request("lead-d", "analysis", "top", 1_000)]});
    let group = json!({"group": "analysis/top"});
    for (method, path, body) in [
        ("POST", "/v1/requests", Some(one)),
        ("POST", "/v1/requests/batch", Some(batch)),
        ("DELETE", "/v1/requests/1", None),
        ("POST", "/v1/requests/1/release", None),
        ("POST", "/v1/admin/reload", None),
        ("POST", "/v1/admin/cancel-group", Some(group)),
        ("GET", "/v1/requests/1", None),
        ("GET", "/v1/groups", None),
        ("GET", "/v1/report", None),
        ("GET", "/v1/mss", None),
    ] {
        assert_standby_answer(app, method, path, body).await;
    }
    let (status, body) = app.get("/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["ready"], false, "{body}");
    assert!(
        body["problems"][0]["error"]
            .as_str()
            .unwrap_or("")
            .contains("standby"),
        "{body}"
    );
    let (status, _) = app.get("/healthz").await;
    assert_eq!(status, 200);
}

fn requests_in(db: &std::path::Path) -> i64 {
    (open_db(db).query_row("SELECT COUNT(*) FROM requests", [], |r| r.get(0))).expect("count")
}

/// Standby, promoted, demoted, promoted again at a higher epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_acknowledges_and_sends_only_while_it_leads() {
    let sim = SimProcess::start();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("broker.db");
    let (role, watched) = watch::channel(Role::Standby);
    let app = TestApp::spawn_with_role(&test_config(Some(&sim.url)), db.clone(), watched).await;

    // A standby: 503 everywhere but /healthz and /metrics, and no ledger opened at all.
    let (_, body) = wait_role(&app, "standby").await;
    assert_eq!(body["standby"]["epoch"], Value::Null, "{body}");
    assert_standby(&app).await;
    assert_eq!(metric(&app, "mssbroker_leader").await, 0.0);
    assert!(
        !db.exists(),
        "a standby that never led wrote {}",
        db.display()
    );
    assert_eq!(metric(&app, "mssbroker_leader_terms_total").await, 0.0);

    // Promoted: a submit is committed, answered 202 and sent to the MSS.
    role.send(Role::Leader { epoch: 7 }).unwrap();
    wait_role(&app, "leader").await;
    assert_eq!(metric(&app, "mssbroker_leader").await, 1.0);
    assert_eq!(metric(&app, "mssbroker_leader_epoch").await, 7.0);
    assert_eq!(metric(&app, "mssbroker_leader_terms_total").await, 1.0);
    let (status, a) = app
        .post("/v1/requests", &request("lead-a", "analysis", "top", 1_000))
        .await;
    assert_eq!(status, 202, "{a}");
    let a = a["id"].as_i64().expect("id");
    received_all(&sim, &[a]).await;

    // The MSS goes down: a second request is committed and its sends are refused and retried,
    // so the dispatcher calls the MSS all the time (each call counted in `refused`).
    let down = Faults {
        down_for_ms: 600_000,
        ..Faults::default()
    };
    set_faults(&sim, &down).await;
    let (status, b) = app
        .post("/v1/requests", &request("lead-b", "analysis", "top", 1_000))
        .await;
    assert_eq!(status, 202, "{b}");
    let b = b["id"].as_i64().expect("id");
    let before = sim.received().await.refused;
    wait_refused(&sim, before + 3).await;

    // Demoted: readiness and writes answer 503 as soon as the role says so; nothing written.
    role.send(Role::Lost { epoch: 7 }).unwrap();
    let (status, body) = wait_role(&app, "standby").await;
    assert_eq!(
        (status, body["standby"]["epoch"].clone()),
        (503, json!(7)),
        "{body}"
    );
    let rows = requests_in(&db);
    assert_standby(&app).await;
    assert_eq!(
        requests_in(&db),
        rows,
        "a standby's refused writes wrote rows"
    );

    // Its dispatcher stopped (the gauge turns 0 once the term's loops are stopped and its
    // writer closed): across the time a running dispatcher with the same settings makes three
    // calls (a second broker on a second, equally down simulator), this one makes none.
    wait_metric(&app, "mssbroker_leader", 0.0).await;
    let quiet = sim.received().await;
    let witness_sim = SimProcess::start();
    set_faults(&witness_sim, &down).await;
    let witness = TestApp::spawn(&test_config(Some(&witness_sim.url))).await;
    let (status, w) = witness
        .post("/v1/requests", &request("lead-w", "analysis", "top", 1_000))
        .await;
    assert_eq!(status, 202, "{w}");
    wait_refused(&witness_sim, 3).await;
    let after = sim.received().await;
    assert_eq!(
        (after.refused, after.received.len()),
        (quiet.refused, quiet.received.len()),
        "the demoted broker called the MSS after its dispatcher stopped"
    );
    witness.stop().await;

    // Promoted again at a higher epoch, the MSS back: a new term, which finds what the first
    // accepted and sends the unsent one; each was sent once.
    set_faults(&sim, &Faults::default()).await;
    role.send(Role::Leader { epoch: 8 }).unwrap();
    wait_role(&app, "leader").await;
    assert_eq!(metric(&app, "mssbroker_leader_terms_total").await, 2.0);
    assert_eq!(metric(&app, "mssbroker_leader_epoch").await, 8.0);
    let received = received_all(&sim, &[a, b]).await;
    assert_each_attempt_once(&received);
    for id in [a, b] {
        let sent = (received.received.iter()).filter(|t| key_id(&t.key) == id);
        assert_eq!(sent.count(), 1, "request {id} sent {received:?}");
        let (status, r) = app.get(&format!("/v1/requests/{id}")).await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(r["id"], id, "{r}");
    }
    let (status, c) = app
        .post("/v1/requests", &request("lead-c", "analysis", "top", 1_000))
        .await;
    assert_eq!(status, 202, "{c}");
    // A resubmission of the first term's request is its replay, not a second request.
    let (status, again) = app
        .post("/v1/requests", &request("lead-a", "analysis", "top", 1_000))
        .await;
    assert_eq!((status, again["id"].as_i64()), (202, Some(a)), "{again}");

    // The role's source ends (a `Contender` gone): the role is no longer known, so standby.
    drop(role);
    let (status, body) = wait_role(&app, "standby").await;
    assert_eq!(
        (status, body["standby"]["epoch"].clone()),
        (503, json!(8)),
        "{body}"
    );
    app.stop().await;
}

/// Wait until `sim` has refused at least `want` calls (panics after 20 s).
async fn wait_refused(sim: &SimProcess, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = sim.received().await.refused;
        if got >= want {
            return;
        }
        assert!(Instant::now() < deadline, "only {got} refused calls");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// With no leadership configured the broker leads for good at epoch 1: ready, one term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_without_leadership_leads_at_epoch_one() {
    let sim = SimProcess::start();
    let app = TestApp::spawn(&test_config(Some(&sim.url))).await;
    wait_role(&app, "leader").await;
    assert_eq!(metric(&app, "mssbroker_leader").await, 1.0);
    assert_eq!(metric(&app, "mssbroker_leader_epoch").await, 1.0);
    assert_eq!(metric(&app, "mssbroker_leader_terms_total").await, 1.0);
    app.stop().await;
}

//! What the dispatcher does with the MSS's status of a transfer and with cancels: a status
//! that cannot be read for one transfer holds up no other, after an MSS restart included; a
//! cancel the MSS could not take is sent again until it does; a cancel of a request the MSS
//! may hold (its submission's answer lost) reaches the MSS; a carrier's cancel that waits on
//! its rider is still followed after a restart.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mss_adapters::protocol::{BadAnswer, Faults};
use serde_json::Value;

use crate::helpers::{
    key_id, mss_key, request, set_faults, test_config, wait_for_count, SimProcess, TestApp,
};

async fn wait_state(app: &TestApp, id: i64, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, r) = app.get(&format!("/v1/requests/{id}")).await;
        if r["state"] == want {
            return;
        }
        assert!(Instant::now() < deadline, "never {want}: {r}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// A proxy in front of the simulator that answers `GET /v1/transfers/{victim}` with a body that
/// cannot be read (200, not JSON) and forwards everything else.
async fn garbling_proxy(sim_url: String, victim: Arc<std::sync::Mutex<String>>) -> String {
    use axum::body::Body;
    use axum::extract::Request;
    use axum::response::{IntoResponse, Response};
    let client = reqwest::Client::new();
    let handler = move |req: Request| {
        let (client, sim_url, victim) = (client.clone(), sim_url.clone(), victim.clone());
        async move {
            let path = req
                .uri()
                .path_and_query()
                .map(|p| p.to_string())
                .unwrap_or_default();
            let garble = format!("/v1/transfers/{}", victim.lock().unwrap());
            if req.method() == axum::http::Method::GET && req.uri().path() == garble {
                return (axum::http::StatusCode::OK, "{\"state\": garbled").into_response();
            }
            let method = reqwest::Method::from_bytes(req.method().as_str().as_bytes()).unwrap();
            let ct = req.headers().get("content-type").cloned();
            let body = axum::body::to_bytes(req.into_body(), usize::MAX)
                .await
                .unwrap();
            let mut rb = client
                .request(method, format!("{sim_url}{path}"))
                .body(body);
            if let Some(ct) = ct {
                rb = rb.header("content-type", ct.to_str().unwrap().to_string());
            }
            match rb.send().await {
                Ok(resp) => {
                    let status = axum::http::StatusCode::from_u16(resp.status().as_u16()).unwrap();
                    let bytes = resp.bytes().await.unwrap_or_default();
                    Response::builder()
                        .status(status)
                        .header("content-type", "application/json")
                        .body(Body::from(bytes))
                        .unwrap()
                }
                Err(_) => (axum::http::StatusCode::BAD_GATEWAY, "").into_response(),
            }
        }
    };
    let app = axum::Router::new().fallback(handler);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// After an MSS restart (a new event log) every in-flight request is settled from the MSS's
/// status before the new log is read: one transfer whose status cannot be read (its answer
/// garbled by a proxy) must not hold up the others, whose events of the new log then apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_unreadable_status_does_not_stop_every_other_request_after_an_mss_restart() {
    let sim = SimProcess::start_with(1, 1.0);
    let sim_addr = sim.url.trim_start_matches("http://").to_string();
    let victim = Arc::new(std::sync::Mutex::new(String::from("none")));
    let proxy = garbling_proxy(sim.url.clone(), victim.clone()).await;
    let app = TestApp::spawn(&test_config(Some(&proxy))).await;
    // A runs for a long while; B queues behind it.
    let (_, a) = app
        .post("/v1/requests", &request("p0", "mc", "top", 500_000_000_000))
        .await;
    let a = a["id"].as_i64().unwrap();
    wait_state(&app, a, "running").await;
    let (_, b) = app
        .post("/v1/requests", &request("p1", "mc", "top", 1_000))
        .await;
    let b = b["id"].as_i64().unwrap();
    wait_state(&app, b, "submitted").await;
    // From now on A's status answer cannot be read; then the MSS restarts (a new epoch).
    *victim.lock().unwrap() = mss_key(&app, a).await;
    drop(sim);
    let _sim = SimProcess::start_on(&sim_addr, 1, 1000.0);
    // B is unknown to the restarted MSS: recovered (resubmitted), it finishes in well under a
    // second there. Expected: B done.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, rb) = app.get(&format!("/v1/requests/{b}")).await;
        if rb["state"] == "done" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "B never settled after the mss restart (A's status unreadable): {}",
            rb["state"]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    app.stop().await;
}

/// The simulator's own view of a transfer (`GET /v1/transfers/{key}`).
async fn sim_state(sim: &SimProcess, key: &str) -> Value {
    reqwest::get(format!("{}/v1/transfers/{key}", sim.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap_or(Value::Null)
}

/// The simulator's view of transfer `key` once it has ended there (done, cancelled or failed).
async fn mss_end(sim: &SimProcess, key: &str, limit: Duration) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let s = sim_state(sim, key).await;
        if ["done", "cancelled", "failed"].contains(&s["state"].as_str().unwrap_or("")) {
            return s;
        }
        assert!(Instant::now() < deadline, "mss still has {key}: {s}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Wait until the simulator has cancelled transfer `key`; `what` names the wait when it fails.
async fn wait_mss_cancelled(sim: &SimProcess, key: &str, limit: Duration, what: &str) {
    let deadline = Instant::now() + limit;
    loop {
        let at_mss = sim_state(sim, key).await;
        if at_mss["state"] == "cancelled" {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {at_mss}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A broker in front of a one-drive simulator at `time_scale`, its drive busy with a read of
/// `size` bytes (running when this returns): what is submitted next queues at the MSS.
async fn one_busy_drive(time_scale: f64, size: u64) -> (SimProcess, TestApp) {
    let sim = SimProcess::start_with(1, time_scale);
    let app = TestApp::spawn(&test_config(Some(&sim.url))).await;
    let (_, a) = app
        .post("/v1/requests", &request("blocker", "mc", "top", size))
        .await;
    wait_state(&app, a["id"].as_i64().unwrap(), "running").await;
    (sim, app)
}

/// A cancel asked while the MSS is briefly down is refused by the outage (503): once the MSS
/// is back, the cancel reaches it (the dispatcher sends it again with its retry backoff), and
/// the request ends cancelled instead of running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_refused_by_an_mss_outage_reaches_the_mss_once_it_is_back() {
    // One slow drive: the first transfer runs for a long while, the second queues at the MSS.
    let (sim, app) = one_busy_drive(1.0, 500_000_000_000).await;
    let (_, b) = app
        .post("/v1/requests", &request("o1", "mc", "top", 1_000))
        .await;
    let b = b["id"].as_i64().unwrap();
    wait_state(&app, b, "submitted").await;
    // The MSS is down for 1.5 s; the cancel is asked during the outage.
    set_faults(
        &sim,
        &Faults {
            down_for_ms: 1_500,
            ..Faults::default()
        },
    )
    .await;
    let (status, body) = app.delete(&format!("/v1/requests/{b}")).await;
    assert_eq!(status, 202, "{body}");
    // Well after the outage, the MSS must have been asked to drop it.
    let what = "the cancel never reached the mss after its outage";
    wait_mss_cancelled(&sim, &mss_key(&app, b).await, Duration::from_secs(12), what).await;
    let finals = app.wait_final(&[b], Duration::from_secs(10)).await;
    assert_eq!(finals[0]["state"], "cancelled");
    app.stop().await;
}

/// The MSS queued a transfer but its answer could not be read (garbled): the request stays
/// `accepted` and is resent with the same key and attempt. A cancel meanwhile must reach the
/// MSS: ended in the broker at once, the MSS would transfer the file anyway, uncharged. (The
/// request is taken as at the MSS, `submitted`, and its cancel goes there by its key.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_of_a_request_the_mss_queued_under_a_lost_answer_reaches_the_mss() {
    // One drive, ten virtual seconds a second: a 20 GB blocker keeps the drive for seconds.
    let (sim, app) = one_busy_drive(10.0, 20_000_000_000).await;
    // From now on the MSS queues each submission, then answers it with garbage.
    set_faults(
        &sim,
        &Faults {
            submit_answer: Some(BadAnswer::Garbled),
            queue_before_bad_answer: true,
            ..Faults::default()
        },
    )
    .await;
    let (_, b) = app
        .post("/v1/requests", &request("g1", "mc", "top", 1_000))
        .await;
    let b = b["id"].as_i64().unwrap();
    // Queued, and sent again (a duplicate): the broker has read the first answer (garbage).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let seen = sim.received().await;
        if seen.received.iter().any(|r| key_id(&r.key) == b) && seen.duplicates >= 1 {
            break;
        }
        assert!(Instant::now() < deadline, "the mss never got {b} twice");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, body) = app.delete(&format!("/v1/requests/{b}")).await;
    assert_eq!(
        (status, body["state"].as_str()),
        (202, Some("submitted")),
        "{body}"
    );
    set_faults(&sim, &Faults::default()).await;
    let at_mss = mss_end(&sim, &mss_key(&app, b).await, Duration::from_secs(30)).await;
    let finals = app.wait_final(&[b], Duration::from_secs(10)).await;
    assert_eq!(
        at_mss["state"], "cancelled",
        "the broker reports {}, but the mss transferred the file: {at_mss}",
        finals[0]
    );
    assert_eq!(
        (finals[0]["state"].as_str(), finals[0]["charged"].as_i64()),
        (Some("cancelled"), Some(0)),
        "{}",
        finals[0]
    );
    app.stop().await;
}

/// A carrier's cancel waits while a rider (a duplicate read of its file) still waits on its
/// transfer. After a restart it is still followed: once the rider is cancelled too, the
/// carrier's cancel reaches the MSS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_carriers_cancel_waiting_on_its_rider_reaches_the_mss_after_a_restart() {
    // One drive at real time: a 500 GB blocker runs for the whole test, the carrier queues.
    let sim = SimProcess::start_with(1, 1.0);
    let config = test_config(Some(&sim.url));
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("broker.db");
    let app = TestApp::spawn_on(&config, db.clone()).await;
    let (_, a) = app
        .post("/v1/requests", &request("r0", "mc", "top", 500_000_000_000))
        .await;
    wait_state(&app, a["id"].as_i64().unwrap(), "running").await;
    let shared = |crid: &str, station: &str| {
        let mut body = request(crid, "mc", "top", 1_000);
        body["file"] = "/pnfs/test/shared.dat".into();
        body["station"] = station.into();
        body
    };
    let (_, c) = app.post("/v1/requests", &shared("r1", "station-a")).await;
    let c = c["id"].as_i64().unwrap();
    wait_state(&app, c, "submitted").await;
    let (_, r) = app.post("/v1/requests", &shared("r2", "station-b")).await;
    assert_eq!(r["state"], "riding", "{r}");
    let r = r["id"].as_i64().unwrap();
    let (status, body) = app.delete(&format!("/v1/requests/{c}")).await;
    assert_eq!(status, 202, "{body}");
    app.stop().await;

    let app = TestApp::spawn_on(&config, db).await;
    let (status, body) = app.delete(&format!("/v1/requests/{r}")).await;
    assert_eq!(
        (status, &body["state"]),
        (200, &Value::from("cancelled")),
        "{body}"
    );
    let what = "the carrier's cancel never reached the mss";
    wait_mss_cancelled(&sim, &mss_key(&app, c).await, Duration::from_secs(15), what).await;
    let finals = app.wait_final(&[c], Duration::from_secs(10)).await;
    assert_eq!(finals[0]["state"], "cancelled", "{}", finals[0]);
    app.stop().await;
}

/// A broker in front of a one-drive simulator (ten virtual seconds a second) with `faults` set,
/// and one small request `crid` whose submission has been marked (`sent_attempt`) for sending.
async fn one_marked_request(faults: Faults, crid: &str) -> (SimProcess, TestApp, i64) {
    let sim = SimProcess::start_with(1, 10.0);
    let app = TestApp::spawn(&test_config(Some(&sim.url))).await;
    set_faults(&sim, &faults).await;
    let (_, r) = app
        .post("/v1/requests", &request(crid, "mc", "top", 1_000))
        .await;
    let id = r["id"].as_i64().unwrap();
    wait_for_count(
        &app.db,
        &format!("SELECT COUNT(*) FROM requests WHERE id = {id} AND sent_attempt = 1"),
        1,
        Duration::from_secs(10),
    )
    .await;
    (sim, app, id)
}

/// A cancel asked while a request's first submission is on its way (sent, not yet answered)
/// is not final at once: the MSS may take the transfer and start it before any cancel reaches
/// it. Whatever the MSS does with it, the broker agrees: transferred means charged, cancelled
/// means refunded. (Found by review: the request was ended at once, refunded, and the MSS,
/// a drive being free, transferred the file.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_while_the_first_submission_is_unanswered_is_not_final_at_once() {
    // One free drive: a transfer starts as soon as it arrives. Every MSS call waits 1.5 s
    // before it is served (well within the broker's timeout): the cancel comes while the
    // submission, marked, is on its way.
    let faults = Faults {
        delay_ms: 1_500,
        ..Faults::default()
    };
    let (sim, app, b) = one_marked_request(faults, "w0").await;
    let (status, body) = app.delete(&format!("/v1/requests/{b}")).await;
    assert_eq!(
        (status, body["state"].as_str()),
        (202, Some("submitted")),
        "{body}"
    );
    let at_mss = mss_end(&sim, &mss_key(&app, b).await, Duration::from_secs(30)).await;
    set_faults(&sim, &Faults::default()).await;
    let finals = app.wait_final(&[b], Duration::from_secs(10)).await;
    let (state, charged) = (
        finals[0]["state"].as_str().unwrap_or(""),
        finals[0]["charged"].as_i64().unwrap_or(-1),
    );
    match at_mss["state"].as_str() {
        Some("done") => assert_eq!((state, charged > 0), ("done", true), "{}", finals[0]),
        _ => assert_eq!((state, charged), ("cancelled", 0), "{}", finals[0]),
    }
    app.stop().await;
}

/// A cancel of a request whose submission met an MSS outage: nothing reached the MSS, but the
/// broker cannot tell that from the answer, so the request is taken as at the MSS. It is not
/// sent again just to be cancelled: once the MSS is back, its status there (unknown) ends it
/// cancelled and refunded, and the MSS never queued it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_after_an_outage_refused_the_submission_sends_nothing_again() {
    let faults = Faults {
        down_for_ms: 3_000,
        ..Faults::default()
    };
    let (sim, app, b) = one_marked_request(faults, "u0").await;
    // Sent at least once (refused: 503).
    let deadline = Instant::now() + Duration::from_secs(10);
    while sim.received().await.refused == 0 {
        assert!(
            Instant::now() < deadline,
            "the submission never reached the outage"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, body) = app.delete(&format!("/v1/requests/{b}")).await;
    assert_eq!(
        (status, body["state"].as_str()),
        (202, Some("submitted")),
        "{body}"
    );
    let finals = app.wait_final(&[b], Duration::from_secs(20)).await;
    assert_eq!(
        (finals[0]["state"].as_str(), finals[0]["charged"].as_i64()),
        (Some("cancelled"), Some(0)),
        "{}",
        finals[0]
    );
    let seen = sim.received().await;
    assert!(
        !seen.received.iter().any(|r| key_id(&r.key) == b),
        "sent again after its cancel: {:?}",
        seen.received
    );
    app.stop().await;
}

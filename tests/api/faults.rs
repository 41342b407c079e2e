//! MSS faults injected by the simulator: failing and slow submissions, an outage, lost and
//! duplicated events. Each run must end with every request done, each attempt queued at the MSS
//! once, and usage equal to the bytes done.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::helpers::{assert_each_attempt_once, request, test_config, SimProcess, TestApp};

async fn submit(app: &TestApp, prefix: &str, n: u64) -> Vec<i64> {
    let items: Vec<Value> = (0..n)
        .map(|i| request(&format!("{prefix}{i}"), "mc", "top", 1_000_000 + i))
        .collect();
    let (status, body) = app
        .post("/v1/requests/batch", &json!({ "requests": items }))
        .await;
    assert_eq!(status, 202, "{body}");
    body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect()
}

/// Everything done, each (key, attempt) queued once, usage exact.
async fn assert_settled(app: &TestApp, sim: &SimProcess, ids: &[i64]) {
    let finals = app.wait_final(ids, Duration::from_secs(60)).await;
    assert!(finals.iter().all(|r| r["state"] == "done"), "{finals:?}");
    let received = sim.received().await;
    assert_each_attempt_once(&received);
    let mc = app.group("mc").await;
    let want: u64 = finals
        .iter()
        .map(|r| r["bytes_done"].as_u64().unwrap())
        .sum();
    assert_eq!(mc["usage_bytes"].as_u64().unwrap(), want);
    assert_eq!(mc["pending"], 0);
}

/// Poll the broker's `/metrics` until it counts a submission the MSS refused.
async fn wait_submit_refused(app: &TestApp) {
    let start = Instant::now();
    loop {
        let text = app
            .client
            .get(format!("{}/metrics", app.base))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let refused = text.lines().any(|l| {
            l.starts_with("mssbroker_mss_call_seconds_count{")
                && l.contains("call=\"submit_batch\"")
                && l.contains("outcome=\"error\"")
        });
        if refused {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no refused submission in /metrics:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_and_slow_submissions_are_retried_without_duplicates() {
    let sim = SimProcess::start_with_args(&["--submit-failure-rate", "0.5", "--delay-ms", "20"]);
    // Five transfers per submission call: at least sixteen calls, each a coin.
    let config = test_config(Some(&sim.url))
        .replace("adapter = \"http\"", "adapter = \"http\"\nsubmit_batch = 5");
    let app = TestApp::spawn(&config).await;
    let ids = submit(&app, "s", 80).await;
    assert_settled(&app, &sim, &ids).await;
    let received = sim.received().await;
    assert!(received.refused > 0, "the fault was injected");
    assert_eq!(
        received.received.len(),
        80,
        "no transfer failed, so one attempt each"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_holds_submissions_without_hammering_and_they_catch_up() {
    let sim = SimProcess::start();
    let app = TestApp::spawn(&test_config(Some(&sim.url))).await;
    let client = reqwest::Client::new();
    // Down for three seconds: the check below comes as soon as a submission has been refused.
    let down = json!({"down_for_ms": 3000});
    assert!(client
        .put(format!("{}/v1/faults", sim.url))
        .json(&down)
        .send()
        .await
        .unwrap()
        .status()
        .is_success());
    let ids = submit(&app, "o", 50).await;
    // The dispatcher has tried to submit and been refused: only then is "held" tested.
    wait_submit_refused(&app).await;
    for id in &ids {
        let (_, r) = app.get(&format!("/v1/requests/{id}")).await;
        assert_eq!(r["state"], "accepted", "held while the MSS is down");
    }
    assert_settled(&app, &sim, &ids).await;
    // Backoff (50 ms doubling to 500 ms in the test config) across the submit, event and stale
    // loops: a few dozen calls in three seconds, not thousands.
    let refused = sim.received().await.refused;
    assert!(
        (1..100).contains(&refused),
        "{refused} calls refused during the outage"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_and_duplicated_events_are_recovered_and_change_nothing() {
    let sim =
        SimProcess::start_with_args(&["--drop-event-rate", "0.3", "--duplicate-event-rate", "0.3"]);
    let app = TestApp::spawn(&test_config(Some(&sim.url))).await;
    let ids = submit(&app, "e", 60).await;
    // Dropped `done` events are found by the stale sweep (400 ms in the test config).
    assert_settled(&app, &sim, &ids).await;
    let received = sim.received().await;
    assert_eq!(received.received.len(), 60);
    app.stop().await;
}

/// With every MSS event lost, the stale sweep settles each request from the MSS's status: a
/// request done there has a start too (at the sweep, no earlier than its creation), so its wait
/// counts in the report like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_settled_from_the_mss_status_has_a_start_and_a_wait() {
    let sim = SimProcess::start_with_args(&["--drop-event-rate", "1.0"]);
    let app = TestApp::spawn(&test_config(Some(&sim.url))).await;
    let ids = submit(&app, "s", 5).await;
    assert_settled(&app, &sim, &ids).await;
    for id in &ids {
        let (_, r) = app.get(&format!("/v1/requests/{id}")).await;
        let at = |k: &str| r[k].as_i64().unwrap_or_else(|| panic!("{k}: {r}"));
        assert!(at("created_ms") <= at("started_ms"), "{r}");
        assert!(at("started_ms") <= at("finished_ms"), "{r}");
    }
    let (_, report) = app.get("/v1/report").await;
    let mc = report["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["path"] == "mc")
        .expect("mc");
    assert_eq!(
        (mc["done"].as_i64(), mc["started"].as_i64()),
        (Some(5), Some(5)),
        "{mc}"
    );
    app.stop().await;
}

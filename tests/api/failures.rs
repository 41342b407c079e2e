//! Transfers that fail at the MSS: retried as new attempts, then failed and refunded.

use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::{request, SimProcess, TestApp};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_transfers_are_retried_then_refunded_with_exact_accounting() {
    let sim = SimProcess::start_with_args(&["--failure-rate", "0.5", "--seed", "7"]);
    let config = crate::helpers::test_config(Some(&sim.url)).replace(
        "adapter = \"http\"",
        "adapter = \"http\"\nretry_max_attempts = 3",
    );
    let app = TestApp::spawn(&config).await;
    let items: Vec<Value> = (0..60u64)
        .map(|i| request(&format!("f{i}"), "mc", "top", 1_000_000 + i))
        .collect();
    let (status, body) = app
        .post("/v1/requests/batch", &json!({ "requests": items }))
        .await;
    assert_eq!(status, 202, "{body}");
    let ids: Vec<i64> = body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    let finals = app.wait_final(&ids, Duration::from_secs(60)).await;

    let done: Vec<&Value> = finals.iter().filter(|r| r["state"] == "done").collect();
    let failed: Vec<&Value> = finals.iter().filter(|r| r["state"] == "failed").collect();
    assert_eq!(done.len() + failed.len(), 60);
    // With a 50% coin over three attempts, both outcomes occur (seed 7 is reproducible).
    assert!(
        !done.is_empty() && !failed.is_empty(),
        "done {} failed {}",
        done.len(),
        failed.len()
    );
    for f in &failed {
        assert_eq!(f["attempt"], 3, "{f}");
        assert_eq!(f["charged"], 0, "refunded: {f}");
        assert!(f["last_error"].as_str().unwrap().contains("attempt 3 of 3"));
    }
    assert!(
        done.iter().any(|d| d["attempt"].as_u64().unwrap() > 1),
        "some succeeded on a retry"
    );
    // Usage is exactly the bytes of what was done.
    let want: u64 = done.iter().map(|d| d["bytes_done"].as_u64().unwrap()).sum();
    let mc = app.group("mc").await;
    assert_eq!(mc["usage_bytes"].as_u64().unwrap(), want);
    assert_eq!(mc["pending"], 0);
    // The MSS saw each attempt exactly once.
    let attempts: u64 = finals.iter().map(|r| r["attempt"].as_u64().unwrap()).sum();
    let received = sim.received().await;
    assert_eq!(received.received.len() as u64, attempts);
    assert_eq!(received.duplicates, 0);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mss_that_restarts_and_loses_its_queue_loses_no_request() {
    // A slow library: one drive, real time, so the requests are still queued when it dies.
    let sim = SimProcess::start_with(1, 1.0);
    let listen = sim.url.trim_start_matches("http://").to_string();
    let app = TestApp::spawn(&crate::helpers::test_config(Some(&sim.url))).await;
    let items: Vec<Value> = (0..6u64)
        .map(|i| request(&format!("q{i}"), "mc", "top", 50_000_000_000 + i))
        .collect();
    let (status, body) = app
        .post("/v1/requests/batch", &json!({ "requests": items }))
        .await;
    assert_eq!(status, 202, "{body}");
    let ids: Vec<i64> = body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    // Wait until all six are at the MSS (one running, five queued).
    let start = std::time::Instant::now();
    loop {
        let mut at_mss = 0;
        for id in &ids {
            let (_, r) = app.get(&format!("/v1/requests/{id}")).await;
            at_mss += usize::from(matches!(r["state"].as_str(), Some("submitted" | "running")));
        }
        if at_mss == ids.len() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "requests never reached the mss"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // The MSS dies with its queue and comes back empty, fast this time, on the same address.
    drop(sim);
    let sim = SimProcess::start_on(&listen, 2, 1000.0);
    let finals = app.wait_final(&ids, Duration::from_secs(60)).await;
    for r in &finals {
        assert_eq!(r["state"], "done", "{r}");
        assert_eq!(r["attempt"], 2, "submitted again as a new attempt: {r}");
    }
    let received = sim.received().await;
    assert_eq!(
        received.received.len(),
        6,
        "the new MSS got each request once"
    );
    let mc = app.group("mc").await;
    let want: u64 = (0..6u64).map(|i| 50_000_000_000 + i).sum();
    assert_eq!(
        mc["usage_bytes"].as_u64().unwrap(),
        want,
        "charged once each"
    );
    assert_eq!(mc["pending"], 0);
    app.stop().await;
}

//! Request ids through the real `serve` process: a caller's `x-request-id` is echoed and names
//! the request's lines in the log (the HTTP span's line and the ledger writer's line for the
//! requests it committed); a request without one, or with one unfit for a log, gets a
//! generated id.

use std::time::Duration;

use crate::helpers::{request, test_config, wait_for_text};
use crate::ready::serve_in;

const LOG_FILTER: &str = "info,tower_http=debug,mssbroker::ledger::writer=debug";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_given_request_id_is_echoed_and_names_the_log_lines_of_its_work() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("RUST_LOG", LOG_FILTER), ("NO_COLOR", "1")];
    let (broker, log) = serve_in(dir.path(), &test_config(None), &env);
    let client = reqwest::Client::new();
    let resp = client
        .post(format!("{}/v1/requests", broker.base))
        .header("x-request-id", "station-7.req-0042")
        .json(&request("rid-1", "analysis", "higgs", 1_000_000))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 202);
    assert_eq!(resp.headers()["x-request-id"], "station-7.req-0042");
    let body: serde_json::Value = resp.json().await.unwrap();
    let id = body["id"].as_i64().expect("an id");

    // The HTTP span's line: method, route, status, latency and the id.
    let text = wait_for_text(&log, "status=202", Duration::from_secs(10)).await;
    let line = text
        .lines()
        .find(|l| l.contains("status=202"))
        .expect("the request's line");
    for part in [
        "x_request_id=station-7.req-0042",
        "method=POST",
        "route=\"/v1/requests\"",
        "latency=",
    ] {
        assert!(line.contains(part), "{part} not in {line}");
    }
    // The writer's line for the commit that carried it, with the broker's id of the request.
    let text = wait_for_text(&log, "requests committed", Duration::from_secs(10)).await;
    let line = text
        .lines()
        .find(|l| l.contains("requests committed"))
        .expect("the writer's line");
    assert!(
        line.contains("x_request_id=station-7.req-0042")
            && line.contains(&format!("request_ids=[{id}]")),
        "{line}"
    );
    // A cancellation: the writer's line names the HTTP request and the broker's request.
    let resp = client
        .delete(format!("{}/v1/requests/{id}", broker.base))
        .header("x-request-id", "station-7.cancel-0042")
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
    assert_eq!(resp.headers()["x-request-id"], "station-7.cancel-0042");
    let text = wait_for_text(&log, "cancellation committed", Duration::from_secs(10)).await;
    let line = text
        .lines()
        .find(|l| l.contains("cancellation committed"))
        .expect("the writer's line");
    assert!(
        line.contains("x_request_id=station-7.cancel-0042")
            && line.contains(&format!("request_id={id}")),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_a_usable_id_gets_a_generated_one() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("RUST_LOG", LOG_FILTER), ("NO_COLOR", "1")];
    let (broker, log) = serve_in(dir.path(), &test_config(None), &env);
    let client = reqwest::Client::new();
    let too_long = "x".repeat(129);
    let mut seen = Vec::new();
    for given in [None, Some("has space"), Some(too_long.as_str())] {
        let mut req = client.get(format!("{}/healthz", broker.base));
        if let Some(given) = given {
            req = req.header("x-request-id", given);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        let echoed = resp.headers()["x-request-id"].to_str().unwrap().to_string();
        assert_ne!(Some(echoed.as_str()), given);
        // A UUID: 36 characters, hex digits and 4 dashes.
        assert_eq!(echoed.len(), 36, "{echoed}");
        assert_eq!(echoed.matches('-').count(), 4, "{echoed}");
        assert!(echoed.chars().all(|c| c == '-' || c.is_ascii_hexdigit()));
        wait_for_text(
            &log,
            &format!("x_request_id={echoed}"),
            Duration::from_secs(10),
        )
        .await;
        seen.push(echoed);
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 3, "each request its own id: {seen:?}");
}

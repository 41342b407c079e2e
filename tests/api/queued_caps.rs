//! Queued-bytes caps through the real service: a submission that would pass a node's or a
//! user's cap of bytes not yet at the MSS is refused with 429, `Retry-After` and the cap's key,
//! and changes nothing; data taking is never capped; a batch is refused item by item.

use serde_json::{json, Value};

use crate::helpers::{request, test_config, TestApp};

/// Nothing listens at the MSS address, so accepted requests stay in the broker (they count).
fn config() -> String {
    test_config(Some("http://127.0.0.1:9")).replacen(
        "[limits]\n",
        "[limits]\nmax_queued_bytes_per_user = 3000\n",
        1,
    ) + "\n[targets.\"reprocessing\"]\nmax_queued_bytes = 1500\n"
}

async fn post_full(app: &TestApp, path: &str, body: &Value) -> (u16, Option<String>, Value) {
    let resp = app
        .client
        .post(format!("{}{path}", app.base))
        .json(body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let retry = (resp.headers().get("retry-after")).map(|v| v.to_str().unwrap().to_string());
    (status, retry, resp.json().await.unwrap())
}

fn sized(crid: &str, mode: &str, user: &str, size: u64) -> Value {
    let mut r = request(crid, mode, "x", size);
    r["user"] = json!(user);
    r
}

async fn count(app: &TestApp) -> i64 {
    let conn = crate::helpers::open_db(&app.db);
    conn.query_row("SELECT COUNT(*) FROM requests", [], |r| r.get(0))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_past_a_queued_bytes_cap_is_429_naming_the_cap() {
    let app = TestApp::spawn(&config()).await;
    // The node's cap: 1000 + 500 reach it exactly; one byte more is refused.
    let (s, _, b) = post_full(
        &app,
        "/v1/requests",
        &sized("r1", "reprocessing", "ann", 1000),
    )
    .await;
    assert_eq!(s, 202, "{b}");
    let (s, _, b) = post_full(
        &app,
        "/v1/requests",
        &sized("r2", "reprocessing", "ann", 500),
    )
    .await;
    assert_eq!(s, 202, "{b}");
    let before = count(&app).await;
    let (s, retry, b) =
        post_full(&app, "/v1/requests", &sized("r3", "reprocessing", "bob", 1)).await;
    assert_eq!(s, 429, "{b}");
    assert_eq!(retry.as_deref(), Some("60"));
    assert_eq!(
        b["field"], "targets.\"reprocessing\".max_queued_bytes",
        "{b}"
    );
    assert!(b["error"].as_str().unwrap().contains("1500"), "{b}");
    assert_eq!(count(&app).await, before, "a refusal records nothing");
    // Data taking is never capped.
    let (s, _, b) = post_full(
        &app,
        "/v1/requests",
        &sized("d1", "datataking", "ann", 5000),
    )
    .await;
    assert_eq!(s, 202, "{b}");
    // The user's cap, across groups: ann has 1500 queued; 1500 more reach 3000, then refused.
    let (s, _, b) = post_full(&app, "/v1/requests", &sized("m1", "mc", "ann", 1500)).await;
    assert_eq!(s, 202, "{b}");
    let (s, retry, b) = post_full(&app, "/v1/requests", &sized("m2", "mc", "ann", 1)).await;
    assert_eq!((s, retry.as_deref()), (429, Some("60")), "{b}");
    assert_eq!(b["field"], "limits.max_queued_bytes_per_user", "{b}");
    // Another user of the same group still fits.
    let (s, _, b) = post_full(&app, "/v1/requests", &sized("m3", "mc", "bob", 1)).await;
    assert_eq!(s, 202, "{b}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_capped_item_by_item() {
    let app = TestApp::spawn(&config()).await;
    let batch = json!({"requests": [
        sized("b1", "reprocessing", "ann", 1000),
        sized("b2", "reprocessing", "bob", 1000),
        sized("b3", "mc", "bob", 10),
    ]});
    let (s, _, b) = post_full(&app, "/v1/requests/batch", &batch).await;
    assert_eq!(s, 202, "{b}");
    assert_eq!(
        (b["accepted"].as_u64(), b["refused"].as_u64()),
        (Some(2), Some(1)),
        "{b}"
    );
    assert_eq!(
        b["results"][1]["field"], "targets.\"reprocessing\".max_queued_bytes",
        "{b}"
    );
    assert!(b["results"][2]["id"].is_i64(), "{b}");
    // Every item over a cap and none accepted: 429 with the batch's results and Retry-After.
    let all_over = json!({"requests": [sized("b4", "reprocessing", "cy", 600)]});
    let (s, retry, b) = post_full(&app, "/v1/requests/batch", &all_over).await;
    assert_eq!((s, retry.as_deref()), (429, Some("60")), "{b}");
    assert_eq!(b["accepted"], 0, "{b}");
    assert_eq!(
        b["results"][0]["field"], "targets.\"reprocessing\".max_queued_bytes",
        "{b}"
    );
}

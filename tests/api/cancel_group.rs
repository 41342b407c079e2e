//! `POST /v1/admin/cancel-group` on a large group (issue 37: 300k queued stalled submissions up
//! to 4.9 s and answered 35 MB): through the real service, the cancels are committed in several
//! ledger transactions with a submission answered between them, and the answer counts every
//! request but lists only the first ones.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::helpers::{open_db, request, test_config, TestApp};

/// Requests queued in the group before it is cancelled: many chunks' worth.
const QUEUED: usize = 20_000;

/// Held mode with one slot and the MSS unreachable: all but one request wait in the broker's
/// queue (`queued`), and a cancel ends each at once.
fn config() -> String {
    test_config(Some("http://127.0.0.1:9")) + "\n[release]\nmode = \"held\"\nlimit = 1\n"
}

fn count(app: &TestApp, sql: &str) -> i64 {
    open_db(&app.db).query_row(sql, [], |r| r.get(0)).unwrap()
}

const UNFINISHED_MC: &str = "SELECT COUNT(*) FROM requests WHERE group_path = 'mc' \
    AND state NOT IN ('done', 'failed', 'cancelled')";
const CANCELLED_MC: &str =
    "SELECT COUNT(*) FROM requests WHERE group_path = 'mc' AND state = 'cancelled'";

/// Fill `mc` with `QUEUED` requests, in batches.
async fn fill(app: &TestApp) {
    let mut n = 0;
    while n < QUEUED {
        let items: Vec<Value> = (n..QUEUED.min(n + 500))
            .map(|i| request(&format!("fill-{i}"), "mc", "x", 1_000_000))
            .collect();
        n += items.len();
        let (status, b) = app
            .post("/v1/requests/batch", &json!({ "requests": items }))
            .await;
        assert_eq!(status, 202, "{b}");
    }
    assert_eq!(count(app, UNFINISHED_MC), QUEUED as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_cancel_group_lets_submissions_in_between_and_answers_a_bounded_list() {
    let app = TestApp::spawn(&config()).await;
    fill(&app).await;
    let (client, url) = (
        app.client.clone(),
        format!("{}/v1/admin/cancel-group", app.base),
    );
    let cancel = tokio::spawn(async move {
        let resp = client
            .post(url)
            .json(&json!({"group": "mc"}))
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.text().await.unwrap())
    });
    // Once the first cancels are committed, a submission to another group is answered while
    // the group still has unfinished requests: the cancel is not one transaction holding the
    // writer until it is all done.
    let start = Instant::now();
    while count(&app, CANCELLED_MC) == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "nothing cancelled"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (status, b) = app
        .post(
            "/v1/requests",
            &request("meanwhile", "reprocessing", "x", 1),
        )
        .await;
    assert_eq!(status, 202, "{b}");
    let left = count(&app, UNFINISHED_MC);
    assert!(
        left > 0,
        "the submission was answered only after the whole group was cancelled"
    );

    let (status, text) = cancel.await.unwrap();
    assert_eq!(status, 200, "{text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    let total = answer["total"].as_u64().unwrap();
    assert_eq!(total, QUEUED as u64, "{}", &text[..text.len().min(500)]);
    let counted = ["cancelled", "cancel_requested", "already_final"]
        .iter()
        .map(|k| answer[k].as_u64().unwrap())
        .sum::<u64>();
    assert_eq!(counted, total, "every request counted once");
    // Those whose send to the (unreachable) MSS was out are settled by its failed connection.
    let all_ended = async {
        while count(&app, UNFINISHED_MC) > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), all_ended)
        .await
        .expect("every request of the group ended");
    assert_eq!(count(&app, CANCELLED_MC), QUEUED as i64);
    assert!(
        answer["transactions"].as_u64().unwrap() > 1,
        "{}",
        answer["transactions"]
    );
    // Bounded: the first requests by id, with the rest only counted.
    let listed: Vec<i64> = (answer["requests"].as_array().unwrap().iter())
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    let max = answer["requests_listed_max"].as_u64().unwrap() as usize;
    assert!(max > 0 && max < QUEUED, "{max}");
    let conn = open_db(&app.db);
    let mut stmt = conn
        .prepare("SELECT id FROM requests WHERE group_path = 'mc' ORDER BY id LIMIT ?1")
        .unwrap();
    let lowest: Vec<i64> = (stmt.query_map([max as i64], |r| r.get(0)).unwrap())
        .map(Result::unwrap)
        .collect();
    assert_eq!(listed, lowest);
    assert!(
        text.len() < 64 * 1024,
        "{} bytes for {QUEUED} requests",
        text.len()
    );
    app.stop().await;
}

//! Queued-bytes caps through the real service: a submission that would pass a node's or a
//! station's user's cap of bytes in unfinished requests is refused with 429, `Retry-After` and
//! the cap's key, and changes nothing; riders count, so a carrier's cancel cannot promote one
//! past a cap; data taking is never capped; a batch is refused item by item.

use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::{request, test_config, ServeProcess, TestApp};

/// Nothing listens at the MSS address, so accepted requests stay unfinished (they count).
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

/// The bytes of `station`'s `user` in requests not finished, and of group `group`'s, from the
/// rows: what the caps bound.
fn unfinished_bytes(db: &std::path::Path, column: &str, value: &str) -> i64 {
    let sql = format!(
        "SELECT COALESCE(SUM(size_bytes), 0) FROM requests WHERE {column} = ?1 \
         AND state NOT IN ('done', 'failed', 'cancelled')"
    );
    let conn = crate::helpers::open_db(db);
    conn.query_row(&sql, [value], |r| r.get(0)).unwrap()
}

/// The request carrying `file` now: its unfinished read that rides on nothing.
fn carrier_of(db: &std::path::Path, file: &str) -> Option<i64> {
    use rusqlite::OptionalExtension;
    crate::helpers::open_db(db)
        .query_row(
            "SELECT id FROM requests WHERE file = ?1 AND rides_on IS NULL \
             AND state NOT IN ('done', 'failed', 'cancelled') ORDER BY id LIMIT 1",
            [file],
            |r| r.get(0),
        )
        .optional()
        .unwrap()
}

async fn post_to(client: &reqwest::Client, base: &str, body: &Value) -> (u16, Value) {
    let resp = client
        .post(format!("{base}/v1/requests"))
        .json(body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

/// Issue 37's attack: reads of one file, each riding on the first, submitted until refused;
/// then the carrier cancelled, which promotes a rider; again, `rounds` times. `who(i)` is the
/// user of the i-th read. After every step the unfinished bytes under the cap (`column` =
/// `value` in the rows) must be within `cap`, and a refusal names exactly those bytes.
async fn ride_and_cancel(
    client: &reqwest::Client,
    base: &str,
    db: &std::path::Path,
    (mode, file, size): (&str, &str, u64),
    who: impl Fn(usize) -> String,
    (column, value, cap): (&str, &str, i64),
    rounds: usize,
) {
    let mut n = 0;
    for round in 0..rounds {
        let mut refused = None;
        for _ in 0..8 {
            let mut r = sized(&format!("{file}-{n}"), mode, &who(n), size);
            r["file"] = json!(format!("/pnfs/test/{file}"));
            n += 1;
            let (status, b) = post_to(client, base, &r).await;
            let counted = unfinished_bytes(db, column, value);
            assert!(
                counted <= cap,
                "round {round}: {counted} bytes past the cap {cap}: {b}"
            );
            if status == 429 {
                refused = Some(b);
                break;
            }
            assert_eq!(status, 202, "{b}");
        }
        let b = refused.unwrap_or_else(|| panic!("round {round}: 8 riders and no refusal"));
        let counted = unfinished_bytes(db, column, value);
        assert!(
            b["error"]
                .as_str()
                .unwrap()
                .contains(&format!(" {counted} bytes queued")),
            "the refusal names the {counted} bytes the rows hold: {b}"
        );
        let carrier = carrier_of(db, &format!("/pnfs/test/{file}")).expect("a carrier");
        let resp = client
            .delete(format!("{base}/v1/requests/{carrier}"))
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success(), "{}", resp.status());
        crate::helpers::wait_final(client, base, &[carrier], Duration::from_secs(30)).await;
        let counted = unfinished_bytes(db, column, value);
        assert!(
            counted <= cap,
            "after a promotion: {counted} past the cap {cap}"
        );
    }
}

/// A broker process on `config` with the MSS unreachable, its database in `dir`.
fn serve(dir: &tempfile::TempDir, config: &str) -> (ServeProcess, std::path::PathBuf) {
    let path = dir.path().join("broker.toml");
    std::fs::write(&path, config).unwrap();
    let db = dir.path().join("broker.db");
    (ServeProcess::start(&path, &db), db)
}

/// Issue 37: riders passed the cap check and then stopped counting, and a rider promoted by
/// its carrier's cancel entered the queue with no check, so user `m` queued 13 GB against a
/// 3 GB cap and `mc` 13 GB against a 5 GB node cap. Through the real `serve` with the MSS
/// unreachable, in both the shipped mode (`coalesce = "in_flight"`, riding on accepted
/// requests) and held mode with `coalesce = "queued"` (riding on requests in the broker's
/// queue): every step keeps the rows within the caps, and after a SIGKILL and a restart the
/// tallies rebuilt from the rows refuse at exactly the bytes the rows hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn riders_and_promoted_riders_count_against_the_caps_in_every_mode() {
    let held = "\n[release]\nmode = \"held\"\nlimit = 8\ncoalesce = \"queued\"\n";
    for release in ["", held] {
        let dir = tempfile::tempdir().unwrap();
        let (mut broker, db) = serve(&dir, &(config() + release));
        let client = reqwest::Client::new();
        // The user cap (3000): one user's reads of 1000 across the mc group.
        let user = ("mc", "hot-user", 1000);
        let m = |_: usize| "m".to_string();
        ride_and_cancel(
            &client,
            &broker.base,
            &db,
            user,
            m,
            ("user_name", "m", 3000),
            3,
        )
        .await;
        // The node cap (1500): a different user each time, so only the node's cap binds.
        let node = ("reprocessing", "hot-node", 500);
        let each = |i: usize| format!("u{i}");
        let cap = ("group_path", "reprocessing", 1500);
        ride_and_cancel(&client, &broker.base, &db, node, each, cap, 3).await;

        // The tallies at start are the rows' sums: one byte more is refused naming them.
        broker.kill();
        let (broker, _) = serve(&dir, &(config() + release));
        for (mode, user, column, value) in [
            ("mc", "m", "user_name", "m"),
            ("reprocessing", "new", "group_path", "reprocessing"),
        ] {
            let counted = unfinished_bytes(&db, column, value);
            let room = if column == "user_name" { 3000 } else { 1500 } - counted;
            let mut r = sized(&format!("after-{mode}"), mode, user, room as u64 + 1);
            r["file"] = json!(format!("/pnfs/test/other-{mode}"));
            let (status, b) = post_to(&client, &broker.base, &r).await;
            assert_eq!(status, 429, "{release}: {b}");
            let named = format!(" {counted} bytes queued");
            assert!(b["error"].as_str().unwrap().contains(&named), "{b}");
        }
    }
}

/// The user cap is per station's user: `alice` of one station filling her cap leaves
/// another station's `alice` hers, and the refusal names the station.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stations_users_of_one_name_each_have_their_own_cap() {
    let app = TestApp::spawn(&config()).await;
    let of = |crid: &str, station: &str, size: u64| {
        let mut r = sized(crid, "mc", "alice", size);
        r["station"] = json!(station);
        r
    };
    let (s, _, b) = post_full(&app, "/v1/requests", &of("a1", "st-a", 3000)).await;
    assert_eq!(s, 202, "{b}");
    let (s, _, b) = post_full(&app, "/v1/requests", &of("b1", "st-b", 3000)).await;
    assert_eq!(s, 202, "another station's alice has her own cap: {b}");
    let (s, _, b) = post_full(&app, "/v1/requests", &of("a2", "st-a", 1)).await;
    assert_eq!(s, 429, "{b}");
    assert_eq!(b["field"], "limits.max_queued_bytes_per_user", "{b}");
    assert!(b["error"].as_str().unwrap().contains("`st-a`"), "{b}");
}

//! Bad input gets a 4xx naming the field and changes nothing.

use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::{answer_before_the_body, open_db, request, test_config, SimProcess, TestApp};

fn with(mut v: Value, key: &str, value: Value) -> Value {
    v[key] = value;
    v
}

fn without(mut v: Value, key: &str) -> Value {
    v.as_object_mut().unwrap().remove(key);
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bodies_get_4xx_naming_the_field_and_change_nothing() {
    let sim = SimProcess::start();
    let app = TestApp::spawn(&test_config(Some(&sim.url))).await;
    let (s, _) = app
        .post("/v1/requests", &request("ok", "mc", "top", 10))
        .await;
    assert_eq!(s, 202);
    let (_, groups_before) = app.get("/v1/groups").await;
    let good = request("bad", "mc", "top", 10);
    let cases: Vec<(Value, u16, &str)> = vec![
        (
            without(good.clone(), "client_request_id"),
            422,
            "client_request_id",
        ),
        (without(good.clone(), "station"), 422, "station"),
        (
            with(good.clone(), "size_bytes", json!(0)),
            422,
            "size_bytes",
        ),
        (
            with(good.clone(), "size_bytes", json!(-1)),
            422,
            "size_bytes",
        ),
        (
            with(good.clone(), "size_bytes", json!("12")),
            422,
            "size_bytes",
        ),
        (
            with(good.clone(), "size_bytes", json!(2.5)),
            422,
            "size_bytes",
        ),
        (
            with(good.clone(), "size_bytes", json!(10_000_000_000_000u64)),
            422,
            "size_bytes",
        ),
        (with(good.clone(), "position", json!(-1)), 422, "position"),
        (with(good.clone(), "position", json!(1.5)), 422, "position"),
        (with(good.clone(), "position", json!("7")), 422, "position"),
        (
            with(good.clone(), "position", json!(u64::MAX)),
            422,
            "position",
        ),
        (with(good.clone(), "user", json!(42)), 422, "user"),
        (with(good.clone(), "file", json!("/a\nb")), 422, "file"),
        (with(good.clone(), "station", json!("")), 422, "station"),
        // `mc` is a leaf, so any physics group of mode mc goes to it; `analysis/susy` is nothing.
        (
            with(
                with(good.clone(), "access_mode", json!("analysis")),
                "physics_group",
                json!("susy"),
            ),
            422,
            "physics_group",
        ),
        (
            with(good.clone(), "access_mode", json!("nonsense")),
            422,
            "physics_group",
        ),
        (with(good.clone(), "surprise", json!(1)), 422, "surprise"),
        (
            with(good.clone(), "direction", json!("up")),
            422,
            "direction",
        ),
        (json!([1, 2]), 422, "body"),
        // The fields' values in order: serde's derived reading would take it as the request.
        (
            Value::Array(
                mssbroker::api::request::FIELDS[..7]
                    .iter()
                    .map(|k| good[*k].clone())
                    .collect(),
            ),
            422,
            "body",
        ),
    ];
    for (body, want, field) in cases {
        let (status, answer) = app.post("/v1/requests", &body).await;
        assert_eq!(status, want, "{body} -> {answer}");
        assert_eq!(answer["field"], field, "{body} -> {answer}");
        assert!(answer["error"].as_str().is_some_and(|e| !e.is_empty()));
    }
    let (status, answer) = app
        .post_raw("/v1/requests", "application/json", b"{not json".to_vec())
        .await;
    assert_eq!((status, answer["field"].as_str()), (400, Some("body")));
    let mut not_utf8 = serde_json::to_vec(&good).unwrap();
    let at = not_utf8.windows(5).position(|w| w == b"\"bad\"").unwrap();
    not_utf8.splice(at + 1..at + 2, [0xff, 0xfe]);
    let (status, answer) = app
        .post_raw("/v1/requests", "application/json", not_utf8)
        .await;
    assert_eq!((status, answer["field"].as_str()), (400, Some("body")));
    let error = answer["error"].as_str().unwrap_or_default();
    assert!(error.contains("not valid UTF-8"), "{answer}");
    let (status, answer) = app
        .post_raw(
            "/v1/requests",
            "text/plain",
            serde_json::to_vec(&good).unwrap(),
        )
        .await;
    assert_eq!(
        (status, answer["field"].as_str()),
        (415, Some("content-type"))
    );
    let (status, answer) = app
        .post("/v1/requests/batch", &json!({"requests": "no"}))
        .await;
    assert_eq!((status, answer["field"].as_str()), (422, Some("requests")));
    let (status, answer) = app
        .post(
            "/v1/requests/batch",
            &json!({"requests": vec![good.clone(); 501]}),
        )
        .await;
    assert_eq!((status, answer["field"].as_str()), (413, Some("requests")));
    let (status, answer) = app
        .post(
            "/v1/requests/batch",
            &json!({"requests": [without(good.clone(), "user")]}),
        )
        .await;
    assert_eq!(status, 422);
    assert_eq!(answer["results"][0]["field"], "requests[0].user");
    let (status, answer) = app.get("/v1/requests/abc").await;
    assert_eq!((status, answer["field"].as_str()), (400, Some("id")));
    let (status, _) = app.get("/v1/requests/424242").await;
    assert_eq!(status, 404);

    // Nothing changed: one request on disk, usage as before.
    let (_, groups_after) = app.get("/v1/groups").await;
    assert_eq!(
        groups_before["fair_share_usage"],
        groups_after["fair_share_usage"]
    );
    let count: i64 = open_db(&app.db)
        .query_row("SELECT COUNT(*) FROM requests", [], |r| r.get(0))
        .unwrap();
    assert_eq!(count, 1);
    // And the service still answers.
    let (status, _) = app.get("/healthz").await;
    assert_eq!(status, 200);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_accepts_its_valid_items_in_order() {
    let sim = SimProcess::start();
    let app = TestApp::spawn(&test_config(Some(&sim.url))).await;
    let items = json!({"requests": [
        request("b0", "mc", "top", 10),
        with(request("b1", "mc", "top", 10), "size_bytes", json!(0)),
        request("b2", "datataking", "daq", 10),
        request("b0", "mc", "top", 10),
    ]});
    let (status, body) = app.post("/v1/requests/batch", &items).await;
    assert_eq!(status, 202, "{body}");
    let r = body["results"].as_array().unwrap();
    assert_eq!(r.len(), 4);
    assert_eq!(r[0]["group"], "mc");
    assert_eq!(r[1]["field"], "requests[1].size_bytes");
    assert_eq!(r[2]["class"], "priority");
    assert_eq!(
        r[3]["id"], r[0]["id"],
        "a repeat inside the batch is the same request"
    );
    assert_eq!(r[3]["duplicate"], true);
    assert_eq!(
        (body["accepted"].as_u64(), body["refused"].as_u64()),
        (Some(3), Some(1))
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_body_is_413_and_a_database_failure_is_503_with_retry_after() {
    let sim = SimProcess::start();
    let config = test_config(Some(&sim.url))
        .replace("max_batch = 500", "max_batch = 500\nmax_body_bytes = 4096");
    let app = TestApp::spawn(&config).await;
    let big = request(&"x".repeat(200), "mc", "top", 10);
    let items = json!({"requests": vec![big; 40]});
    let (status, answer) = app.post("/v1/requests/batch", &items).await;
    assert_eq!(
        (status, answer["field"].as_str()),
        (413, Some("body")),
        "{answer}"
    );

    // The disk fails under the ledger: 503 with Retry-After, and nothing is stored.
    let side = rusqlite::Connection::open(&app.db).unwrap();
    side.execute_batch("CREATE TRIGGER full BEFORE INSERT ON requests BEGIN SELECT RAISE(ABORT, 'disk full (simulated)'); END;")
        .unwrap();
    let resp = app
        .client
        .post(format!("{}/v1/requests", app.base))
        .json(&request("d1", "mc", "top", 10))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 503);
    assert_eq!(
        resp.headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap()),
        Some("1")
    );
    let body: Value = resp.json().await.unwrap();
    assert!(
        !body["error"].as_str().unwrap().contains("disk full"),
        "internals are not sent: {body}"
    );
    let count: i64 = open_db(&app.db)
        .query_row("SELECT COUNT(*) FROM requests", [], |r| r.get(0))
        .unwrap();
    assert_eq!(count, 0);
    // The disk recovers; the client's retry succeeds.
    side.execute_batch("DROP TRIGGER full").unwrap();
    let (status, _) = app
        .post("/v1/requests", &request("d1", "mc", "top", 10))
        .await;
    assert_eq!(status, 202);
    app.stop().await;
}

/// Issue 13, item 11: repeated keys, hidden characters and blank names, ids spelled with a sign
/// or leading zeros, and the refusals axum makes itself (405, 413) all get a 4xx naming the
/// field in the `{error, field}` shape, and store nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_keys_hidden_characters_odd_ids_and_axum_refusals_name_their_field() {
    let sim = SimProcess::start();
    let app = TestApp::spawn(&test_config(Some(&sim.url))).await;
    let (s, first) = app
        .post("/v1/requests", &request("ok", "mc", "top", 10))
        .await;
    assert_eq!(s, 202);
    let good = request("bad", "mc", "top", 10);

    // The same key twice: the last one used to win.
    let text = serde_json::to_string(&good).unwrap();
    let twice = format!("{},\"user\":\"mallory\"}}", text.trim_end_matches('}'));
    let (status, answer) = app
        .post_raw(
            "/v1/requests",
            "application/json",
            twice.clone().into_bytes(),
        )
        .await;
    assert_eq!(
        (status, answer["field"].as_str()),
        (422, Some("user")),
        "{answer}"
    );
    let zero = with(good.clone(), "size_bytes", json!(0));
    let batch = format!("{{\"requests\": [{zero}, {twice}]}}");
    let (status, answer) = app
        .post_raw("/v1/requests/batch", "application/json", batch.into_bytes())
        .await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["results"][1]["field"], "requests[1].user");

    // Names that hide or reorder text, and blank names.
    for (key, value) in [
        ("station", "cms\u{2028}fake log line"),
        ("user", "alice\u{202e}txt.exe"),
        ("user", "   "),
        ("physics_group", "to\u{200b}p"),
        // Item 6: operands of the MSS's command line.
        ("file", "--library=EVIL"),
        ("file", "--get-bfid"),
        ("file", "/pnfs/cms/x/.."),
        ("file", "/"),
        ("bfid", "-x"),
    ] {
        let (status, answer) = app
            .post("/v1/requests", &with(good.clone(), key, json!(value)))
            .await;
        assert_eq!(
            (status, answer["field"].as_str()),
            (422, Some(key)),
            "{value:?}: {answer}"
        );
    }

    // One spelling per id.
    let id = first["id"].as_i64().unwrap();
    for spelled in [
        format!("+{id}"),
        format!("0{id}"),
        format!("{id}%20"),
        format!("%2B{id}"),
    ] {
        let (status, answer) = app.get(&format!("/v1/requests/{spelled}")).await;
        assert_eq!(
            (status, answer["field"].as_str()),
            (400, Some("id")),
            "{spelled}: {answer}"
        );
    }
    let (status, _) = app.get(&format!("/v1/requests/{id}")).await;
    assert_eq!(status, 200);

    // A method the path does not take: axum's 405, in the shape of every other refusal.
    let resp = app
        .client
        .put(format!("{}/v1/requests", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 405);
    assert!(
        resp.headers().get("allow").is_some(),
        "the Allow header is kept"
    );
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["field"], "method", "{body}");
    assert!(
        body["error"].as_str().is_some_and(|e| e.contains("Allow")),
        "{body}"
    );

    let count: i64 = open_db(&app.db)
        .query_row("SELECT COUNT(*) FROM requests", [], |r| r.get(0))
        .unwrap();
    assert_eq!(count, 1, "nothing refused was stored");
    app.stop().await;
}

/// Issue 13, item 7: a report of more buckets than `limits.max_report_buckets` is a 400 naming
/// the field and the limit (it was 71 MB of JSON for 1972 to now by day).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_of_too_many_buckets_is_refused_with_the_limit() {
    let sim = SimProcess::start();
    let app = TestApp::spawn(&test_config(Some(&sim.url))).await;
    let (status, answer) = app
        .get("/v1/report?since=1972-03-01T00:00:00Z&bucket=day")
        .await;
    assert_eq!(
        (status, answer["field"].as_str()),
        (400, Some("bucket")),
        "{answer}"
    );
    assert!(
        answer["error"].as_str().unwrap().contains("2000"),
        "{answer}"
    );
    let (status, answer) = app.get("/v1/report?since=1972-03-01T00:00:00Z").await;
    assert_eq!(
        (status, answer["field"].as_str()),
        (400, Some("since")),
        "{answer}"
    );
    let (status, answer) = app
        .get("/v1/report?since=2025-01-01T00:00:00Z&until=2026-01-01T00:00:00Z&bucket=day")
        .await;
    assert_eq!(status, 200, "a year by day is within the limit: {answer}");
    let (status, answer) = app.get("/v1/report?buckets=day").await;
    assert_eq!(
        (status, answer["field"].as_str()),
        (400, Some("buckets")),
        "{answer}"
    );
    // The same limit for `mssbroker report` from the database file.
    let db = app.db.display().to_string();
    let out = std::process::Command::new(crate::helpers::BIN)
        .args(["report", "--db", &db, "--since", "1972-03-01T00:00:00Z"])
        .args(["--bucket", "day"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("--bucket") && stderr.contains("2000"),
        "{stderr}"
    );
    app.stop().await;
}

/// Issue 13, item 6 through the broker: with `{station}` in encp's `local_roots`, a request may
/// name a local file only in its own station's area; a link there that leads out, and a
/// directory, are refused too, with a 422 naming `local_file`, and nothing is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encp_local_files_stay_in_the_stations_own_area() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let own = dir.path().join("station-a");
    std::fs::create_dir_all(&own).unwrap();
    std::fs::create_dir_all(dir.path().join("station-b")).unwrap();
    std::os::unix::fs::symlink(outside.path(), own.join("out")).unwrap();
    let base = test_config(Some("http://127.0.0.1:9"));
    let head = &base[..base.find("[mss]").unwrap()];
    let config = format!(
        "{head}[mss]\nadapter = \"encp\"\n[mss.encp]\ncommand = \"{script}\"\n\
         local_roots = [\"{root}/{{station}}\"]\nenv = {{ ENCP_STANDIN_DIR = \"{root}\" }}\n",
        script = mss_adapters::standin::encp::script().display(),
        root = dir.path().display(),
    );
    let app = TestApp::spawn(&config).await;
    let at = |p: &std::path::Path| {
        let mut r = request("l1", "mc", "top", 10);
        r["local_file"] = json!(p.display().to_string());
        r
    };
    for (path, why) in [
        (dir.path().join("station-b/f"), "local_roots"),
        (own.join("out/f"), "leads to"),
        (own.clone(), "directory"),
    ] {
        let (status, answer) = app.post("/v1/requests", &at(&path)).await;
        assert_eq!(
            (status, answer["field"].as_str()),
            (422, Some("local_file")),
            "{path:?}: {answer}"
        );
        assert!(answer["error"].as_str().unwrap().contains(why), "{answer}");
    }
    let count: i64 = open_db(&app.db)
        .query_row("SELECT COUNT(*) FROM requests", [], |r| r.get(0))
        .unwrap();
    assert_eq!(count, 0);
    let (status, answer) = app.post("/v1/requests", &at(&own.join("f"))).await;
    assert_eq!(status, 202, "its own area: {answer}");
    app.stop().await;
}

/// A body declared longer than `max_body_bytes` is answered 413 naming `body` before any of it
/// is read, and takes none of the bodies' budget: a client that announces a huge body and sends
/// nothing more keeps no other body waiting.
#[tokio::test]
async fn a_body_declared_over_the_limit_is_refused_before_it_is_read() {
    // Room for one body of the limit: a reservation for the stalled one would leave none.
    let config = test_config(None).replace(
        "[limits]\n",
        "[limits]\nmax_body_bytes = 65536\nmax_bodies_in_memory_bytes = 65536\n",
    );
    let app = TestApp::spawn(&config).await;
    let head = "POST /v1/requests HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
                content-length: 1000000000000\r\n\r\n{\"client_";
    let (status_head, body, stream) = answer_before_the_body(&app, head).await;
    assert!(status_head.starts_with("HTTP/1.1 413"), "{status_head}");
    assert_eq!(body["field"], "body", "{body}");
    let message = body["error"].as_str().unwrap();
    assert!(message.contains("limits.max_body_bytes"), "{message}");
    // With that client still connected, a body within the limit is taken.
    let (status, answer) = app
        .post("/v1/requests", &request("small", "mc", "top", 1))
        .await;
    assert_eq!(status, 202, "{answer}");
    drop(stream);
    app.stop().await;
}

/// Bodies being read share one memory budget: while stalled bodies hold it all, another body
/// is answered 503 naming `body` (after a short wait) and stores nothing; once they are gone,
/// the same request is accepted.
#[tokio::test]
async fn request_bodies_share_a_bounded_memory_budget() {
    use tokio::io::AsyncWriteExt;
    let config = test_config(None).replace(
        "[limits]\n",
        "[limits]\nmax_body_bytes = 65536\nmax_bodies_in_memory_bytes = 131072\n",
    );
    let app = TestApp::spawn(&config).await;
    let addr = app.base.trim_start_matches("http://").to_string();
    // Two clients announce 64 KiB bodies and send a few bytes of each: the budget is spent.
    let mut stalled = Vec::new();
    for _ in 0..2 {
        let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let head = "POST /v1/requests HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
                    content-length: 65536\r\n\r\n{\"client_";
        stream.write_all(head.as_bytes()).await.unwrap();
        stalled.push(stream);
    }
    // A small request waits for room in vain; the answer names the body, and that request is
    // not stored. (The stalled heads may reach the broker after the first tries: until they
    // do, a try is accepted.)
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut tries = 0;
    let refused = loop {
        tries += 1;
        let crid = format!("budget-{tries}");
        let (status, body) = app
            .post("/v1/requests", &request(&crid, "mc", "top", 1))
            .await;
        match status {
            503 => break (crid, body),
            202 => assert!(
                std::time::Instant::now() < deadline,
                "still accepted while two stalled bodies hold the whole budget"
            ),
            other => panic!("unexpected {other}: {body}"),
        }
    };
    assert_eq!(refused.1["field"], "body", "{}", refused.1);
    let stored: i64 = open_db(&app.db)
        .query_row(
            "SELECT COUNT(*) FROM requests WHERE client_request_id = ?1",
            [&refused.0],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(stored, 0);
    // The stalled clients go: their room comes back, and the request is taken.
    drop(stalled);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = app
            .post("/v1/requests", &request("after", "mc", "top", 1))
            .await;
        if status == 202 {
            break;
        }
        assert_eq!(status, 503, "{body}");
        assert!(
            std::time::Instant::now() < deadline,
            "room never came back: {body}"
        );
    }
    app.stop().await;
}

/// An id that is not even UTF-8 once percent-decoded (`%FF`) is refused by axum's `Path`
/// extractor before `parse_id` sees it; its 400 must still name the field, `id`, as every other
/// bad id does (`abc`, `+1`, `01`), for GET, DELETE and release alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_that_is_not_utf8_is_refused_naming_the_id() {
    let app = TestApp::spawn(&test_config(None)).await;
    for (method, path) in [
        ("GET", "/v1/requests/%FF"),
        ("DELETE", "/v1/requests/%FF"),
        ("POST", "/v1/requests/%C3%28/release"),
    ] {
        let resp = app
            .client
            .request(method.parse().unwrap(), format!("{}{path}", app.base))
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        assert_eq!(
            (status, body["field"].as_str()),
            (400, Some("id")),
            "{method} {path}: {body}"
        );
    }
    app.stop().await;
}

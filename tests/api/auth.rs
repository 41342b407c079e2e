//! Authentication and authorisation over every endpoint and role, per-token rate limits, and
//! the refusal to expose demo tokens.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::{
    answer_before_the_body, open_db, request, test_config, SimProcess, TestApp, BIN,
};

const TOKENS: [(&str, &str, &str, Option<&str>); 5] = [
    ("station a", "tok-a", "station", Some("station-a")),
    ("station b", "tok-b", "station", Some("station-b")),
    ("mss", "tok-mss", "mss", None),
    ("reader", "tok-reader", "reader", None),
    ("operator", "tok-op", "operator", None),
];

fn token_file(dir: &std::path::Path) -> std::path::PathBuf {
    let mut text = String::new();
    for (name, token, role, station) in TOKENS {
        text.push_str(&format!(
            "[[tokens]]\nname = \"{name}\"\nsha256 = \"{}\"\nrole = \"{role}\"\n{}",
            mssbroker::auth::sha256_hex(token),
            station
                .map(|s| format!("station = \"{s}\"\n"))
                .unwrap_or_default()
        ));
    }
    let path = dir.join("tokens.toml");
    std::fs::write(&path, text).unwrap();
    path
}

async fn call(
    app: &TestApp,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> (u16, Value) {
    let url = format!("{}{path}", app.base);
    let mut req = match method {
        "GET" => app.client.get(url),
        "POST" => app.client.post(url),
        _ => app.client.delete(url),
    };
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req.json(b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    if status == 401 {
        assert_eq!(
            resp.headers()
                .get("www-authenticate")
                .map(|v| v.to_str().unwrap()),
            Some("Bearer, Basic realm=\"mssbroker\"")
        );
    }
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_role_on_every_endpoint() {
    let sim = SimProcess::start();
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}\n[auth]\ntoken_file = {:?}\n",
        test_config(Some(&sim.url)),
        token_file(dir.path())
    );
    let app = TestApp::spawn(&config).await;
    let mut a = request("r1", "mc", "top", 10);
    a["station"] = json!("station-a");
    let (s, body) = call(&app, "POST", "/v1/requests", Some("tok-a"), Some(&a)).await;
    assert_eq!(s, 202, "{body}");
    let id = body["id"].as_i64().unwrap();
    let req_path = format!("/v1/requests/{id}");
    let release_path = format!("/v1/requests/{id}/release");
    let empty = json!({});
    let mut a2 = a.clone();
    a2["client_request_id"] = json!("r2");
    let batch_a = json!({"requests": [a2]});
    let cancel_group = json!({"group": "reprocessing"});

    // (method, path, body, [none, unknown, station a, station b, mss, reader, operator])
    let table: Vec<(&str, &str, Option<&Value>, [u16; 7])> = vec![
        (
            "POST",
            "/v1/requests",
            Some(&a),
            [401, 401, 202, 403, 403, 403, 202],
        ),
        (
            "POST",
            "/v1/requests/batch",
            Some(&batch_a),
            [401, 401, 202, 403, 403, 403, 202],
        ),
        ("GET", &req_path, None, [401, 401, 200, 404, 403, 403, 200]),
        (
            "GET",
            "/v1/groups",
            None,
            [401, 401, 403, 403, 403, 200, 200],
        ),
        (
            "GET",
            "/v1/report",
            None,
            [401, 401, 403, 403, 403, 200, 200],
        ),
        ("GET", "/metrics", None, [401, 401, 403, 403, 403, 200, 200]),
        ("GET", "/report", None, [401, 401, 403, 403, 403, 200, 200]),
        ("GET", "/healthz", None, [200, 200, 200, 200, 200, 200, 200]),
        ("GET", "/v1/mss", None, [401, 401, 200, 200, 403, 200, 200]),
        // The simulator keeps no disk copies: the owner and the operator get 409, not 403.
        (
            "POST",
            &release_path,
            Some(&empty),
            [401, 401, 409, 404, 403, 403, 409],
        ),
        ("DELETE", &req_path, None, [401, 401, 0, 404, 403, 403, 0]),
        (
            "POST",
            "/v1/admin/reload",
            Some(&empty),
            [401, 401, 403, 403, 403, 403, 200],
        ),
        (
            "POST",
            "/v1/admin/cancel-group",
            Some(&cancel_group),
            [401, 401, 403, 403, 403, 403, 200],
        ),
    ];
    let callers = [
        None,
        Some("not-a-token"),
        Some("tok-a"),
        Some("tok-b"),
        Some("tok-mss"),
        Some("tok-reader"),
        Some("tok-op"),
    ];
    for (method, path, body, want) in &table {
        for (caller, &expect) in callers.iter().zip(want) {
            if expect == 0 {
                continue; // checked below: a cancel succeeds once
            }
            let (status, answer) = call(&app, method, path, *caller, *body).await;
            assert_eq!(status, expect, "{method} {path} as {caller:?}: {answer}");
            if status >= 400 {
                assert!(
                    answer["field"].is_string(),
                    "{method} {path} as {caller:?}: {answer}"
                );
            }
        }
    }
    // A browser logs in to the HTML report with HTTP Basic: any user, the token as password.
    for (password, want) in [("tok-reader", 200), ("tok-a", 403), ("wrong", 401)] {
        let resp = app
            .client
            .get(format!("{}/report", app.base))
            .basic_auth("operator-on-a-laptop", Some(password))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), want, "basic auth with {password}");
        if want == 200 {
            assert!(resp
                .text()
                .await
                .unwrap()
                .contains("mssbroker share report"));
        }
    }
    // HTTP Basic is documented for every endpoint (README, Authentication), with the same roles
    // as the bearer token.
    for (path, password, want) in [
        ("/v1/groups", "tok-reader", 200),
        ("/v1/groups", "tok-a", 403),
        ("/metrics", "tok-op", 200),
        ("/v1/mss", "tok-a", 200),
        ("/v1/mss", "wrong", 401),
    ] {
        let resp = app
            .client
            .get(format!("{}{path}", app.base))
            .basic_auth("any", Some(password))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), want, "{path} basic {password}");
    }
    let (_, doc) = app.get("/v1/openapi.json").await;
    assert_eq!(
        doc["components"]["securitySchemes"]["basic"]["scheme"],
        "basic"
    );
    // Station b's refusal names the field; nothing of its batch was committed.
    let (_, answer) = call(
        &app,
        "POST",
        "/v1/requests/batch",
        Some("tok-b"),
        Some(&batch_a),
    )
    .await;
    assert_eq!(answer["field"], "requests[0].station");
    // The owner may cancel its request; the operator may cancel anyone's. Authorised means the
    // broker acted on the request's state: cancelled (200), asked the MSS (202), or already
    // finished (409) since these small transfers end fast; never 403 or 404.
    let authorised = |s: u16| matches!(s, 200 | 202 | 409);
    let (s, _) = call(&app, "DELETE", &req_path, Some("tok-a"), None).await;
    assert!(authorised(s), "{s}");
    let (_, other) = call(
        &app,
        "POST",
        "/v1/requests",
        Some("tok-op"),
        Some(&json!({
        "client_request_id": "op1", "station": "station-b", "user": "u", "file": "/f",
        // Large enough that it cannot finish before the cancel (which would be a 409).
        "size_bytes": 900_000_000_000u64, "access_mode": "mc", "physics_group": "x"})),
    )
    .await;
    assert!(other["id"].is_i64(), "{other}");
    let (s, _) = call(
        &app,
        "DELETE",
        &format!("/v1/requests/{}", other["id"]),
        Some("tok-op"),
        None,
    )
    .await;
    assert!(s == 200 || s == 202, "{s}");
    app.stop().await;
}

/// A broker whose station tokens may send 1 request a second, 5 at once.
async fn rate_limited_app(sim: &SimProcess, dir: &std::path::Path) -> TestApp {
    let config = format!(
        "{}\n[auth]\ntoken_file = {:?}\n",
        test_config(Some(&sim.url)),
        token_file(dir)
    )
    .replace(
        "max_batch = 500",
        "max_batch = 5\nstation_rate_per_sec = 1\nstation_burst = 5",
    );
    TestApp::spawn(&config).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_station_over_its_rate_gets_429_with_retry_after() {
    let sim = SimProcess::start();
    let dir = tempfile::tempdir().unwrap();
    let app = rate_limited_app(&sim, dir.path()).await;
    let mut statuses = Vec::new();
    let mut retry_after = None;
    for i in 0..8 {
        let mut r = request(&format!("rl{i}"), "mc", "top", 10);
        r["station"] = json!("station-a");
        let resp = app
            .client
            .post(format!("{}/v1/requests", app.base))
            .bearer_auth("tok-a")
            .json(&r)
            .send()
            .await
            .unwrap();
        if resp.status() == StatusCode::TOO_MANY_REQUESTS {
            retry_after = resp
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_string());
        }
        statuses.push(resp.status().as_u16());
    }
    assert_eq!(&statuses[..5], &[202; 5], "the burst passes");
    assert!(statuses[5..].contains(&429), "{statuses:?}");
    assert!(retry_after.is_some_and(|s| s.parse::<u64>().unwrap() >= 1));
    // Another token has its own budget; operators are not limited.
    let mut r = request("rl-b", "mc", "top", 10);
    r["station"] = json!("station-b");
    let (s, _) = call(&app, "POST", "/v1/requests", Some("tok-b"), Some(&r)).await;
    assert_eq!(s, 202);
    for i in 0..8 {
        let (s, _) = call(
            &app,
            "POST",
            "/v1/requests",
            Some("tok-op"),
            Some(&request(&format!("op{i}"), "mc", "top", 10)),
        )
        .await;
        assert_eq!(s, 202);
    }
    app.stop().await;
}

#[test]
fn serve_refuses_to_expose_the_demo_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(BIN)
        .args(["serve", "--listen", "0.0.0.0:0", "--db"])
        .arg(dir.path().join("b.db"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refusing to listen on 0.0.0.0") && err.contains("demo"),
        "{err}"
    );
}

/// A station's batch in which a refused item names another station (its `station` key given
/// twice, or beside a field of the wrong type) is refused whole, as one naming it parsed is:
/// 403 naming that item's station, and nothing of the batch committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_item_naming_another_station_refuses_the_batch() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}\n[auth]\ntoken_file = {:?}\n",
        test_config(None),
        token_file(dir.path())
    );
    let app = TestApp::spawn(&config).await;
    let mut mine = request("mine", "mc", "top", 10);
    mine["station"] = json!("station-a");
    let mut theirs = request("theirs", "mc", "top", 10);
    theirs["station"] = json!("station-a");
    let text = serde_json::to_string(&theirs).unwrap();
    let twice = format!("{},\"station\":\"station-b\"}}", text.trim_end_matches('}'));
    let mut wrong_type = theirs.clone();
    wrong_type["station"] = json!("station-b");
    wrong_type["size_bytes"] = json!("ten");
    for second in [twice, serde_json::to_string(&wrong_type).unwrap()] {
        let body = format!("{{\"requests\":[{mine},{second}]}}");
        let resp = app
            .client
            .post(format!("{}/v1/requests/batch", app.base))
            .bearer_auth("tok-a")
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let answer: Value = resp.json().await.unwrap();
        assert_eq!(status, 403, "{second}: {answer}");
        assert_eq!(answer["field"], "requests[1].station", "{answer}");
    }
    let stored: i64 = open_db(&app.db)
        .query_row("SELECT COUNT(*) FROM requests", [], |r| r.get(0))
        .unwrap();
    assert_eq!(stored, 0, "nothing committed");
    app.stop().await;
}

/// A request with a body is authenticated before any of its body is read (every handler that
/// takes a body reads its `Caller` first): without a valid token it is answered 401 at once
/// and gives its room in the bodies' memory budget straight back, so a client without a token
/// that announces a body and sends nothing more keeps no station waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_without_a_token_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    // Room for one body of the limit.
    let config = format!(
        "{}\n[auth]\ntoken_file = {:?}\n",
        test_config(None).replace(
            "[limits]\n",
            "[limits]\nmax_body_bytes = 65536\nmax_bodies_in_memory_bytes = 65536\n",
        ),
        token_file(dir.path())
    );
    let app = TestApp::spawn(&config).await;
    for auth in ["", "authorization: Bearer wrong\r\n"] {
        let head = format!(
            "POST /v1/requests HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
             {auth}content-length: 65536\r\n\r\n{{\"client_"
        );
        let (status_head, body, stream) = answer_before_the_body(&app, &head).await;
        assert!(status_head.starts_with("HTTP/1.1 401"), "{status_head}");
        assert!(
            status_head
                .to_ascii_lowercase()
                .contains("www-authenticate: bearer"),
            "{status_head}"
        );
        assert_eq!(body["field"], "authorization", "{body}");
        // With that client still connected, a station's body is taken.
        let mut mine = request(&format!("mine{}", auth.len()), "mc", "top", 1);
        mine["station"] = json!("station-a");
        let (status, answer) = call(&app, "POST", "/v1/requests", Some("tok-a"), Some(&mine)).await;
        assert_eq!(status, 202, "{answer}");
        drop(stream);
    }
    app.stop().await;
}

/// Cancels and releases count against a station token's rate as submissions do (each takes a
/// writer transaction or calls the MSS): past the burst, 429; an operator is not limited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancels_and_releases_count_against_a_stations_rate() {
    let sim = SimProcess::start();
    let dir = tempfile::tempdir().unwrap();
    let app = rate_limited_app(&sim, dir.path()).await;
    let mut statuses = Vec::new();
    for i in 0..8 {
        let (method, path) = if i % 2 == 0 {
            ("DELETE", "/v1/requests/424242")
        } else {
            ("POST", "/v1/requests/424242/release")
        };
        let body = (method == "POST").then(|| json!({}));
        let (s, _) = call(&app, method, path, Some("tok-a"), body.as_ref()).await;
        statuses.push(s);
    }
    assert!(
        statuses[..5].iter().all(|&s| s != 429),
        "the burst passes: {statuses:?}"
    );
    assert!(statuses[5..].contains(&429), "{statuses:?}");
    let (s, _) = call(&app, "DELETE", "/v1/requests/424242", Some("tok-op"), None).await;
    assert_eq!(s, 404, "an operator is not limited");
    app.stop().await;
}

//! Issue 37, item 7: two unfinished reads may not write one station-side file. Through `serve`
//! with the stand-in encp: a read of another file to a copy an unfinished read writes (the same
//! `local_file`, or the same basename under `read_dir`) is refused 409 on arrival, naming the
//! field, and the read holding the copy only to a caller who may read it; nothing is stored.
//! A read of the same file to the same copy still rides on it, and the copy is free again once
//! the reads writing it have ended.

use std::path::Path;
use std::time::{Duration, Instant};

use mss_adapters::standin::encp as encp_standin;
use serde_json::{json, Value};

use crate::adapters::{config_with, encp_mss};
use crate::helpers::{open_db, TestApp};

/// Station a, station b and an operator.
fn tokens(dir: &Path) -> std::path::PathBuf {
    let mut text = String::new();
    for (name, token, role, station) in [
        ("a", "tok-a", "station", Some("station-a")),
        ("b", "tok-b", "station", Some("station-b")),
        ("op", "tok-op", "operator", None),
    ] {
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

async fn call(app: &TestApp, token: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let url = format!("{}{path}", app.base);
    let req = match body {
        Some(b) => app.client.post(url).json(b),
        None => app.client.get(url),
    };
    let resp = req.bearer_auth(token).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// A read of `file` by `station` to `local` (`None`: encp's `read_dir`).
fn read(crid: &str, station: &str, file: &str, local: Option<&Path>) -> Value {
    let mut r = json!({
        "client_request_id": crid,
        "station": station,
        "user": "alice",
        "file": file,
        "size_bytes": 10,
        "access_mode": "mc",
        "physics_group": "x",
    });
    if let Some(l) = local {
        r["local_file"] = json!(l.display().to_string());
    }
    r
}

/// The stored rows and `mc`'s pending count: what a refusal must leave as it was.
async fn state_of(app: &TestApp) -> (i64, Value) {
    let rows: i64 = open_db(&app.db)
        .query_row("SELECT COUNT(*) FROM requests", [], |r| r.get(0))
        .unwrap();
    let (status, groups) = call(app, "tok-op", "/v1/groups", None).await;
    assert_eq!(status, 200, "{groups}");
    let mc = (groups["groups"].as_array().unwrap().iter())
        .find(|g| g["path"] == "mc")
        .map(|g| g["pending"].clone())
        .unwrap();
    (rows, mc)
}

/// Poll until every id is done, failed or cancelled.
async fn wait_ended(app: &TestApp, ids: &[i64]) {
    let start = Instant::now();
    for id in ids {
        loop {
            let (_, r) = call(app, "tok-op", &format!("/v1/requests/{id}"), None).await;
            if ["done", "failed", "cancelled"].contains(&r["state"].as_str().unwrap_or("")) {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "{id}: {r}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_of_another_file_to_a_copy_in_use_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("stage")).unwrap();
    let config = format!(
        "{}\n[auth]\ntoken_file = {:?}\n",
        config_with(&encp_mss(d, 4)),
        tokens(d)
    );
    let app = TestApp::spawn(&config).await;
    // Every run waits for `go`: the reads stay unfinished until then.
    let go = d.join("go");
    for name in ["f.root", "k.root", "g.root"] {
        let lines = format!("wait_for {}\nbytes 10\n", go.display());
        encp_standin::control(d, name, &lines).unwrap();
    }
    let x = d.join("x.out");
    let (status, a) = call(
        &app,
        "tok-a",
        "/v1/requests",
        Some(&read("a", "station-a", "/pnfs/cms/a/f.root", Some(&x))),
    )
    .await;
    assert_eq!(status, 202, "{a}");
    let a = a["id"].as_i64().unwrap();
    let before = state_of(&app).await;

    // Station a's read of another file to the same copy (spelt with `//`): refused, naming a.
    let other = read("b", "station-a", "/pnfs/cms/b/g.root", Some(&x));
    let mut other_spelt = other.clone();
    other_spelt["local_file"] = json!(format!("{}//x.out", d.display()));
    let (status, body) = call(&app, "tok-a", "/v1/requests", Some(&other_spelt)).await;
    assert_eq!(
        (status, body["field"].as_str()),
        (409, Some("local_file")),
        "{body}"
    );
    let said = body["error"].as_str().unwrap();
    assert!(
        said.contains(&format!("request {a}")) && said.contains("/pnfs/cms/a/f.root"),
        "{said}"
    );
    // Station b may not read station a's request: told the copy is in use, nothing more.
    let theirs = read("c", "station-b", "/pnfs/cms/c/h.root", Some(&x));
    let (status, body) = call(&app, "tok-b", "/v1/requests", Some(&theirs)).await;
    assert_eq!(
        (status, body["field"].as_str()),
        (409, Some("local_file")),
        "{body}"
    );
    let said = body["error"].as_str().unwrap();
    assert!(said.contains("in use"), "{said}");
    assert!(
        !said.contains(&format!("request {a}")) && !said.contains("/pnfs/cms/a"),
        "{said}"
    );
    assert_eq!(state_of(&app).await, before, "a refusal changes nothing");

    // The same file to the same copy rides on a: coalescing is untouched.
    let same = read("d", "station-b", "/pnfs/cms/a/f.root", Some(&x));
    let (status, body) = call(&app, "tok-b", "/v1/requests", Some(&same)).await;
    assert_eq!(
        (status, body["state"].as_str()),
        (202, Some("riding")),
        "{body}"
    );
    let rider = body["id"].as_i64().unwrap();

    // Without local_file encp writes the file's basename in read_dir: one name, one copy.
    let (status, e) = call(
        &app,
        "tok-a",
        "/v1/requests",
        Some(&read("e", "station-a", "/pnfs/cms/e/k.root", None)),
    )
    .await;
    assert_eq!(status, 202, "{e}");
    let e = e["id"].as_i64().unwrap();
    let (status, body) = call(
        &app,
        "tok-a",
        "/v1/requests",
        Some(&read("f", "station-a", "/pnfs/cms/f/k.root", None)),
    )
    .await;
    assert_eq!(
        (status, body["field"].as_str()),
        (409, Some("file")),
        "{body}"
    );
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains(&format!("request {e}")),
        "{body}"
    );

    // A batch: each item on its own, the refused one named by its place.
    let batch = json!({"requests": [
        read("g", "station-a", "/pnfs/cms/g/g.root", Some(&d.join("y.out"))),
        read("h", "station-a", "/pnfs/cms/h/h.root", Some(&x)),
    ]});
    let (status, body) = call(&app, "tok-a", "/v1/requests/batch", Some(&batch)).await;
    assert_eq!(status, 202, "{body}");
    let results = body["results"].as_array().unwrap();
    assert_eq!(results[1]["field"], "requests[1].local_file", "{body}");
    let g = results[0]["id"].as_i64().unwrap();

    // Once the reads writing x.out have ended, a read of another file may take it.
    std::fs::write(&go, "").unwrap();
    wait_ended(&app, &[a, rider, e, g]).await;
    let (status, body) = call(&app, "tok-a", "/v1/requests", Some(&other)).await;
    assert_eq!(
        (status, body["duplicate"].as_bool()),
        (202, Some(false)),
        "{body}"
    );
    app.stop().await;
}

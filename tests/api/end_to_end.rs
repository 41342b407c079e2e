//! The whole path: stations submit over HTTP, the broker decides and commits, the dispatcher
//! submits to a simulator process, its events reconcile the ledger.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::{key_id, open_db, request, test_config, SimProcess, TestApp, BIN};

/// A mixed load: data taking plus several fair-share groups, singles and a batch.
fn mixed_load() -> (Vec<Value>, Vec<Value>) {
    let groups = [
        ("analysis", "higgs"),
        ("analysis", "top"),
        ("reprocessing", "any"),
        ("mc", "top"),
    ];
    let mut singles = Vec::new();
    let mut batch = Vec::new();
    for i in 0..120u64 {
        let size = 1_000_000_000 + (i * 7_919 % 97) * 50_000_000;
        let (mode, group) = if i % 5 == 0 {
            ("datataking", "daq")
        } else {
            groups[(i % 4) as usize]
        };
        let r = request(&format!("req-{i}"), mode, group, size);
        if i % 3 == 0 {
            singles.push(r)
        } else {
            batch.push(r)
        }
    }
    (singles, batch)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_load_completes_with_exact_accounting() {
    let sim = SimProcess::start();
    let app = TestApp::spawn(&test_config(Some(&sim.url))).await;
    let (singles, batch) = mixed_load();

    let mut accepted: Vec<Value> = Vec::new();
    for r in &singles {
        let (status, body) = app.post("/v1/requests", r).await;
        assert_eq!(status, 202, "{body}");
        accepted.push(body);
    }
    let (status, body) = app
        .post("/v1/requests/batch", &json!({"requests": batch}))
        .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["accepted"], 80);
    accepted.extend(body["results"].as_array().unwrap().iter().cloned());
    assert_eq!(accepted.len(), 120);
    for a in &accepted {
        assert_eq!(a["state"], "accepted");
        assert_eq!(a["duplicate"], false);
    }

    let ids: Vec<i64> = accepted.iter().map(|a| a["id"].as_i64().unwrap()).collect();
    assert_eq!(
        ids.iter().collect::<HashSet<_>>().len(),
        120,
        "ids are unique"
    );
    let finals = app.wait_final(&ids, Duration::from_secs(60)).await;

    // Every request reached done with its bytes.
    for r in &finals {
        assert_eq!(r["state"], "done", "{r}");
        assert_eq!(r["bytes_done"], r["size_bytes"]);
    }

    // Data taking always had the top priority, at the broker and at the MSS.
    let fair_max = finals
        .iter()
        .filter(|r| r["class"] != "priority")
        .map(|r| r["mss_priority"].as_i64().unwrap())
        .max()
        .unwrap();
    let daq: Vec<&Value> = finals
        .iter()
        .filter(|r| r["access_mode"] == "datataking")
        .collect();
    assert_eq!(daq.len(), 24);
    for r in &daq {
        assert_eq!(r["class"], "priority");
        assert_eq!(r["group"], "datataking");
        assert!(r["mss_priority"].as_i64().unwrap() > fair_max);
    }
    let received = sim.received().await;
    assert_eq!(received.duplicates, 0);
    assert_eq!(
        received.received.len(),
        120,
        "the MSS got each request exactly once"
    );
    let keys: HashSet<&str> = received.received.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys.len(), 120);
    let by_id: HashMap<i64, &Value> = finals
        .iter()
        .map(|r| (r["id"].as_i64().unwrap(), r))
        .collect();
    for got in &received.received {
        let r = by_id[&key_id(&got.key)];
        assert_eq!(
            got.priority,
            r["mss_priority"].as_i64().unwrap(),
            "the MSS got the decided priority"
        );
        if r["class"] == "priority" {
            assert!(got.priority > fair_max);
        }
    }
    // Both fair-share classes occurred, so the priority checks were not vacuous.
    assert!(finals.iter().any(|r| r["class"] == "front"));
    assert!(finals.iter().any(|r| r["class"] == "back"));

    // Usage in the ledger equals the sum of completed bytes, per group: via the API...
    let mut done_bytes: HashMap<String, u64> = HashMap::new();
    for r in &finals {
        *done_bytes
            .entry(r["group"].as_str().unwrap().to_string())
            .or_default() += r["bytes_done"].as_u64().unwrap();
    }
    let (status, groups) = app.get("/v1/groups").await;
    assert_eq!(status, 200);
    let mut reported = HashMap::new();
    for g in groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .chain(groups["priority_classes"].as_array().unwrap())
    {
        assert_eq!(g["pending"], 0, "{g}");
        reported.insert(
            g["path"].as_str().unwrap().to_string(),
            g["usage_bytes"].as_u64().unwrap(),
        );
    }
    for (group, bytes) in &done_bytes {
        assert_eq!(reported[group], *bytes, "group {group}");
    }
    assert!(
        groups["priority_classes"][0]["target_share"].is_null(),
        "priority classes have no target"
    );
    // ...and on disk.
    let db = open_db(&app.db);
    let mut stmt = db.prepare("SELECT g.path, CAST(g.usage AS INTEGER), COALESCE(SUM(r.bytes_done), 0) FROM groups g LEFT JOIN requests r ON r.group_path = g.path GROUP BY g.path").unwrap();
    let rows: Vec<(String, i64, i64)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(rows.len() >= 5);
    for (path, usage, sum) in rows {
        assert_eq!(
            usage, sum,
            "group {path}: stored usage vs sum of completed bytes"
        );
    }

    // Resubmission is idempotent: same id, nothing created, nothing charged.
    let (status, again) = app.post("/v1/requests", &singles[0]).await;
    assert_eq!(status, 202);
    assert_eq!(again["id"], accepted[0]["id"]);
    assert_eq!(again["duplicate"], true);
    assert_eq!(again["state"], "done");
    let (_, again_batch) = app
        .post("/v1/requests/batch", &json!({"requests": &batch[..10]}))
        .await;
    for (a, b) in again_batch["results"]
        .as_array()
        .unwrap()
        .iter()
        .zip(&accepted[40..50])
    {
        assert_eq!(a["id"], b["id"]);
        assert_eq!(a["duplicate"], true);
    }
    let count: i64 = db
        .query_row("SELECT COUNT(*) FROM requests", [], |r| r.get(0))
        .unwrap();
    assert_eq!(count, 120);
    // Replays charge nothing: every group's cumulative usage is unchanged. (The decayed
    // `fair_share_usage` moves with time, so it is not the figure to compare.)
    let cumulative = |v: &Value| -> Vec<(String, u64)> {
        v["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| {
                (
                    g["path"].as_str().unwrap().to_string(),
                    g["usage"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let (_, groups_after) = app.get("/v1/groups").await;
    assert_eq!(cumulative(&groups_after), cumulative(&groups));
    assert_eq!(
        sim.received().await.received.len(),
        120,
        "nothing re-sent to the MSS"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeps_usage_and_finishes_the_work() {
    let sim = SimProcess::start();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("broker.db");
    let config = test_config(Some(&sim.url));
    let app = TestApp::spawn_on(&config, db.clone()).await;
    let mut ids = Vec::new();
    for i in 0..20u64 {
        let (s, b) = app
            .post(
                "/v1/requests",
                &request(&format!("r{i}"), "analysis", "top", 2_000_000_000 + i),
            )
            .await;
        assert_eq!(s, 202);
        ids.push(b["id"].as_i64().unwrap());
    }
    app.stop().await;
    // Read what the stopped broker left on disk, then compare with the restarted one's view.
    let usage = |v: &Value| -> Vec<(String, u64)> {
        v["groups"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|g| g["leaf"] == true)
            .map(|g| {
                (
                    g["path"].as_str().unwrap().to_string(),
                    g["usage"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let stored: Vec<(String, i64)> = {
        let db = open_db(&db);
        let mut st = db.prepare("SELECT path, CAST(usage AS INTEGER) FROM groups WHERE path IN ('analysis/higgs', 'analysis/top', 'reprocessing', 'mc') ORDER BY path").unwrap();
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(
        stored.iter().find(|(p, _)| p == "analysis/top").unwrap().1,
        40_000_000_190
    );

    let app = TestApp::spawn_on(&config, db).await;
    let (_, after) = app.get("/v1/groups").await;
    let mut after = usage(&after);
    after.sort();
    let stored: Vec<(String, u64)> = stored.into_iter().map(|(p, u)| (p, u as u64)).collect();
    assert_eq!(
        after, stored,
        "the restarted broker reports the stored usage"
    );
    let finals = app.wait_final(&ids, Duration::from_secs(60)).await;
    assert!(finals.iter().all(|r| r["state"] == "done"));
    let received = sim.received().await;
    assert_eq!(
        received.received.len(),
        20,
        "each reached the MSS once across the restart"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_before_and_at_the_mss() {
    // One slow drive: the first transfer runs for a while, the rest queue at the MSS.
    let sim = SimProcess::start_with(1, 1.0);
    let app = TestApp::spawn(&test_config(Some(&sim.url))).await;
    let (_, a) = app
        .post("/v1/requests", &request("c0", "mc", "top", 500_000_000_000))
        .await;
    let (_, b) = app
        .post("/v1/requests", &request("c1", "mc", "top", 1_000))
        .await;
    let (a, b) = (a["id"].as_i64().unwrap(), b["id"].as_i64().unwrap());
    // Wait until both reached the MSS, then cancel the queued one there.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (_, rb) = app.get(&format!("/v1/requests/{b}")).await;
        if rb["state"] == "submitted" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never reached the mss: {rb}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let (status, body) = app.delete(&format!("/v1/requests/{b}")).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["cancel_requested"], true);
    let finals = app.wait_final(&[b], Duration::from_secs(20)).await;
    assert_eq!(finals[0]["state"], "cancelled");
    assert_eq!(finals[0]["charged"], 0, "refunded");
    // The running one cannot be cancelled at the MSS; cancelling a finished one is a conflict.
    let (status, _) = app.delete(&format!("/v1/requests/{b}")).await;
    assert_eq!(status, 409);
    let (status, _) = app.delete("/v1/requests/999999").await;
    assert_eq!(status, 404);
    let (_, ra) = app.get(&format!("/v1/requests/{a}")).await;
    assert_eq!(ra["state"], "running");
    let mc = app.group("mc").await;
    assert_eq!(
        mc["usage_bytes"], 500_000_000_000u64,
        "only the running request is charged"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_binary_runs_on_the_shipped_config() {
    // The README's first command, on a temporary database and a free port.
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("b.db");
    let mut child = std::process::Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--db"])
        .arg(&db)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    // Read the first line only, then drop stdout: the broker must keep serving regardless.
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let base = line.trim().rsplit(' ').next().unwrap().to_string();
    let client = reqwest::Client::new();
    let resp = client
        .post(format!("{base}/v1/requests"))
        .bearer_auth("demo-operator")
        .json(&request("x", "datataking", "daq", 1_000_000))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 202);
    let id = resp.json::<Value>().await.unwrap()["id"].as_i64().unwrap();
    let mut state = String::new();
    for _ in 0..400 {
        let r: Value = client
            .get(format!("{base}/v1/requests/{id}"))
            .bearer_auth("demo-operator")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        state = r["state"].as_str().unwrap().to_string();
        if state == "done" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        state, "done",
        "the embedded simulator finished the transfer"
    );
}

/// Issue 15: a request's `position` on its volume is stored, shown, and reaches the MSS with
/// the volume (here the simulator in its Enstore model, which reads a volume in that order); a
/// request without one reaches it without one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requests_position_on_its_volume_reaches_the_mss() {
    let sim = SimProcess::start_with_args(&["--model", "enstore"]);
    let app = TestApp::spawn(&test_config(Some(&sim.url))).await;
    let mut placed = request("placed", "mc", "top", 10);
    placed["volume"] = json!("VR0001");
    placed["position"] = json!(4_000_000_000u64);
    let (status, accepted) = app.post("/v1/requests", &placed).await;
    assert_eq!(status, 202, "{accepted}");
    let (status, _) = app
        .post("/v1/requests", &request("unplaced", "mc", "top", 10))
        .await;
    assert_eq!(status, 202);
    let id = accepted["id"].as_i64().unwrap();
    let (_, body) = app.get(&format!("/v1/requests/{id}")).await;
    assert_eq!(body["position"], json!(4_000_000_000u64), "{body}");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let received = loop {
        let r = sim.received().await;
        if r.received.len() >= 2 {
            break r;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the MSS never got both: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    let by_id: HashMap<i64, _> = received
        .received
        .iter()
        .map(|r| (key_id(&r.key), r))
        .collect();
    let placed_at_mss = by_id[&id];
    assert_eq!(placed_at_mss.position, Some(4_000_000_000));
    assert_eq!(placed_at_mss.volume.as_deref(), Some("VR0001"));
    let other = received
        .received
        .iter()
        .find(|r| key_id(&r.key) != id)
        .unwrap();
    assert_eq!(other.position, None);
}

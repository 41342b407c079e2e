//! A restored backup and the MSS (issue 37): the restored database hands out again the ids its
//! lost life used, and the MSS deduplicates by key, so a key must never be reused. Through the
//! real `serve`, `backup`, `restore` and `unknown-keys` commands, against the simulator as its
//! own process (which answers a key it has seen with the old transfer).

use std::time::Duration;

use serde_json::Value;

use crate::helpers::{key_id, run_ok, BrokerFiles, ServeProcess, SimProcess};

/// POST one request to a `serve` process; its answer's id.
async fn submit(client: &reqwest::Client, base: &str, crid: &str, size: u64) -> i64 {
    let body = crate::helpers::request(crid, "mc", "x", size);
    let resp = client
        .post(format!("{base}/v1/requests"))
        .json(&body)
        .send()
        .await
        .expect("post");
    assert_eq!(resp.status().as_u16(), 202);
    let v: Value = resp.json().await.expect("json");
    v["id"].as_i64().expect("id")
}

/// Wait until request `id` is final; its record.
async fn final_state(client: &reqwest::Client, base: &str, id: i64) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let r: Value = client
            .get(format!("{base}/v1/requests/{id}"))
            .send()
            .await
            .expect("get")
            .json()
            .await
            .expect("json");
        if ["done", "failed", "cancelled"].contains(&r["state"].as_str().unwrap_or("")) {
            return r;
        }
        assert!(std::time::Instant::now() < deadline, "{id} not final: {r}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The value of a counter in `/metrics` (0 when absent).
async fn counter(client: &reqwest::Client, base: &str, name: &str) -> f64 {
    let text = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_request_after_a_restore_is_transferred_and_the_lost_ones_are_listed() {
    let sim = SimProcess::start();
    let files = BrokerFiles::for_sim(&sim);
    let backup = files.config.with_file_name("backup.db");
    let (db, to) = (files.db.to_str().unwrap(), backup.to_str().unwrap());
    let client = reqwest::Client::new();

    // The first life: a backup before any request, then A, transferred.
    let mut broker = ServeProcess::start(&files.config, &files.db);
    run_ok(&["backup", "--db", db, "--to", to]);
    let a = submit(&client, &broker.base, "a", 1_000_000).await;
    let a_final = final_state(&client, &broker.base, a).await;
    assert_eq!(a_final["state"], "done", "{a_final}");
    let a_key = a_final["mss_key"].as_str().expect("mss_key").to_string();
    broker.kill();

    // Restored: A is lost with the database it was in.
    let said = run_ok(&["restore", "--from", to, "--db", db]);
    assert!(said.contains("replaced is kept as"), "{said}");
    let broker = ServeProcess::start(&files.config, &files.db);
    let b = submit(&client, &broker.base, "b", 2_000_000).await;
    assert_eq!(b, a, "the restored database gives B the id A had");
    let b_final = final_state(&client, &broker.base, b).await;
    assert_eq!(b_final["state"], "done", "{b_final}");
    assert_eq!(b_final["bytes_done"], 2_000_000, "{b_final}");
    let b_key = b_final["mss_key"].as_str().expect("mss_key").to_string();
    assert_ne!(b_key, a_key, "one key for two requests");

    // The MSS got two transfers, B's in one of its own, at B's size.
    let received = sim.received().await;
    assert_eq!(received.received.len(), 2, "{received:?}");
    assert_eq!(received.duplicates, 0, "{received:?}");
    let at_mss = |key: &str| received.received.iter().find(|t| t.key == key);
    assert_eq!(at_mss(&b_key).expect("B at the MSS").size_bytes, 2_000_000);
    assert_eq!(at_mss(&a_key).expect("A at the MSS").size_bytes, 1_000_000);
    assert!(received.received.iter().all(|t| key_id(&t.key) == a));

    // What the MSS says of A reaches the restored broker: counted, listed, never applied.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let name = "mssbroker_mss_unknown_key_events_total";
    while counter(&client, &broker.base, name).await < 2.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "A's events not counted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let listed: Value =
        serde_json::from_str(&run_ok(&["unknown-keys", "--db", db, "--format", "json"]))
            .expect("json");
    assert_eq!(listed["total"], 1, "{listed}");
    assert_eq!(listed["keys"][0]["key"], a_key.as_str(), "{listed}");
    assert_eq!(listed["keys"][0]["events"], 2, "{listed}");
    assert_eq!(
        listed["keys"][0]["last_event"], "done (attempt 1)",
        "{listed}"
    );
    let table = run_ok(&["unknown-keys", "--db", db]);
    assert!(table.contains(&a_key), "{table}");
    // B was charged once, at its own size.
    let b_again = final_state(&client, &broker.base, b).await;
    assert_eq!(b_again["charged"], 2_000_000, "{b_again}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_refuses_while_the_broker_runs() {
    let sim = SimProcess::start();
    let files = BrokerFiles::for_sim(&sim);
    let backup = files.config.with_file_name("backup.db");
    let (db, to) = (files.db.to_str().unwrap(), backup.to_str().unwrap());
    let _broker = ServeProcess::start(&files.config, &files.db);
    run_ok(&["backup", "--db", db, "--to", to]);
    let out = std::process::Command::new(crate::helpers::BIN)
        .args(["restore", "--from", to, "--db", db])
        .output()
        .expect("run restore");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("lock"), "{err}");
    assert!(!files.db.with_extension("db.restoring").exists());
}

/// Given a PostgreSQL database (`--db`, or `--from`), `restore` refuses before touching
/// anything: exit 1, a message naming PostgreSQL's own tools and where the docs say more,
/// never the URL's password, and no file moved, written or created (the URL is not taken for
/// a path).
#[test]
fn a_postgresql_database_is_refused_naming_its_tools_and_nothing_is_touched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let backup = dir.path().join("backup.db");
    std::fs::write(&backup, b"a backup").expect("write");
    let url = "postgres://broker:s3cret-pw@127.0.0.1/mss";
    for (from, db) in [("backup.db", url), (url, "broker.db")] {
        let out = std::process::Command::new(crate::helpers::BIN)
            .current_dir(dir.path())
            .args(["restore", "--from", from, "--db", db])
            .output()
            .expect("run restore");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        for named in ["pg_dump", "pg_basebackup", "PITR", "docs/ha.md"] {
            assert!(err.contains(named), "{named}: {err}");
        }
        let flag = if db == url { "--db" } else { "--from" };
        assert!(err.contains(flag), "{flag}: {err}");
        assert!(!err.contains("s3cret-pw"), "{err}");
        let left: Vec<_> = (std::fs::read_dir(dir.path()).expect("dir"))
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(left, ["backup.db"], "the directory changed");
        assert_eq!(std::fs::read(&backup).expect("read"), b"a backup");
    }
}

//! Nothing lost: the real `mssbroker serve` process is killed with SIGKILL at random moments
//! under concurrent submissions, restarted on the same database, and checked. Rounds:
//! `MSSBROKER_KILL_ROUNDS` (default 3; the README's soak command sets more).

use std::collections::HashMap;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::helpers::{
    assert_each_attempt_once, open_db, request, wait_for_count, BrokerFiles, ServeProcess,
    SimProcess,
};

/// A small deterministic generator, so a failing round can be replayed from its seed.
fn next(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_under_load_loses_duplicates_and_double_charges_nothing() {
    let rounds: usize = std::env::var("MSSBROKER_KILL_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let sim = SimProcess::start();
    let files = BrokerFiles::for_sim(&sim);
    let (config, db) = (files.config.clone(), files.db.clone());
    // crid -> id for every request that got a 202.
    let acknowledged: Arc<Mutex<HashMap<String, i64>>> = Arc::default();
    let modes = [
        ("analysis", "higgs"),
        ("analysis", "top"),
        ("mc", "x"),
        ("datataking", "daq"),
    ];
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut counter = 0u64;

    // One client for all the load: building one loads the system's TLS roots, tens of ms of
    // CPU each in a debug build, which on a busy machine ate the whole round before a request
    // was sent.
    let client = reqwest::Client::new();
    // Answers other than 202 while the broker is up: none are expected.
    let unexpected: Arc<Mutex<Vec<String>>> = Arc::default();

    for round in 0..rounds {
        let broker = ServeProcess::start(&config, &db);
        let before = acknowledged.lock().unwrap().len();
        let mut workers = Vec::new();
        for w in 0..8 {
            let (base, acks, client) = (broker.base.clone(), acknowledged.clone(), client.clone());
            let unexpected = unexpected.clone();
            let start = counter + w * 100_000;
            workers.push(tokio::spawn(async move {
                // Runs until the broker dies; returns whether a request was in flight then.
                let mut n = start;
                loop {
                    n += 1;
                    let (mode, group) = modes[(n % 4) as usize];
                    let crid = format!("k{round}-{n}");
                    let body = request(&crid, mode, group, 1_000_000_000 + n % 977);
                    loop {
                        let Ok(resp) = client
                            .post(format!("{base}/v1/requests"))
                            .json(&body)
                            .send()
                            .await
                        else {
                            return true;
                        };
                        let status = resp.status().as_u16();
                        let Ok(v) = resp.json::<Value>().await else {
                            return true;
                        };
                        match status {
                            202 => {
                                acks.lock().unwrap().insert(crid, v["id"].as_i64().unwrap());
                                break;
                            }
                            // Busy: a client retries the same request, as a station would.
                            503 => tokio::time::sleep(Duration::from_millis(20)).await,
                            _ => {
                                unexpected
                                    .lock()
                                    .unwrap()
                                    .push(format!("{crid}: {status} {v}"));
                                break;
                            }
                        }
                    }
                }
            }));
        }
        counter += 1_000_000;
        // Kill at a seeded point of the load, counted in acknowledgements rather than time so
        // that a slow machine is killed as deep into the load as a fast one, plus a seeded few
        // milliseconds so the kill does not land just after an answer.
        let target = 30 + (next(&mut seed) % 170) as usize;
        let extra = next(&mut seed) % 40;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let got = acknowledged.lock().unwrap().len() - before;
            if got >= target {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "round {round}: only {got} of {target} requests acknowledged in 60 s; unexpected answers: {:?}",
                unexpected.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(Duration::from_millis(extra)).await;
        let at_kill = acknowledged.lock().unwrap().len();
        let mut broker = broker;
        broker.kill(); // SIGKILL
        let mut in_flight = 0;
        for w in workers {
            in_flight += usize::from(w.await.unwrap());
        }
        eprintln!("round {round}: killed {extra} ms after {target} acknowledgements in the round, with {in_flight} requests in flight, {at_kill} acknowledged so far");
    }
    assert_eq!(
        unexpected.lock().unwrap().as_slice(),
        &[] as &[String],
        "every submission to a live broker is acknowledged"
    );

    // Restart, replay a sample of acknowledged requests (clients retrying after the crash), and
    // let the load drain.
    let broker = ServeProcess::start(&config, &db);
    let acks = acknowledged.lock().unwrap().clone();
    assert!(
        acks.len() > 50,
        "the load produced {} acknowledged requests",
        acks.len()
    );
    for (crid, id) in acks.iter().take(50) {
        let n: u64 = crid.split('-').nth(1).unwrap().parse().unwrap();
        let (mode, group) = modes[(n % 4) as usize];
        let v: Value = client
            .post(format!("{}/v1/requests", broker.base))
            .json(&request(crid, mode, group, 1_000_000_000 + n % 977))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            v["id"].as_i64(),
            Some(*id),
            "a replay after the crash returns the first id"
        );
        assert_eq!(v["duplicate"], true);
    }
    wait_for_count(
        &db,
        "SELECT COUNT(*) FROM requests WHERE state NOT IN ('done', 'failed', 'cancelled')",
        0,
        Duration::from_secs(120),
    )
    .await;

    let conn = open_db(&db);
    // Every 202 exists exactly once, under its id, with its client_request_id.
    for (crid, id) in &acks {
        let (count, stored): (i64, Option<i64>) = conn
            .query_row(
                "SELECT COUNT(*), MIN(id) FROM requests WHERE client_request_id = ?1",
                [crid],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!((count, stored), (1, Some(*id)), "request {crid}");
    }
    let total: i64 = conn
        .query_row("SELECT COUNT(*) FROM requests", [], |r| r.get(0))
        .unwrap();
    let distinct: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM (SELECT DISTINCT station, client_request_id FROM requests)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        total, distinct,
        "no (station, client_request_id) stored twice"
    );
    // Everything finished (no simulated failures here), each at the MSS once per attempt.
    let not_done: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM requests WHERE state != 'done'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(not_done, 0);
    let received = sim.received().await;
    assert_each_attempt_once(&received);
    assert_eq!(
        received.received.len() as i64,
        total,
        "every stored request reached the MSS once"
    );
    // Each group's usage equals the sum of its completed requests.
    let mut stmt = conn
        .prepare("SELECT g.path, CAST(g.usage AS INTEGER), g.pending, COALESCE(SUM(r.bytes_done), 0) FROM groups g LEFT JOIN requests r ON r.group_path = g.path GROUP BY g.path")
        .unwrap();
    let rows: Vec<(String, i64, i64, i64)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for (path, usage, pending, done) in rows {
        assert_eq!((usage, pending), (done, 0), "group {path}");
    }
    eprintln!("{rounds} kill rounds: {} acknowledged, {total} stored, {} submissions answered as duplicates by the MSS", acks.len(), received.duplicates);
    drop(broker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_exits_zero_and_a_restart_picks_up_where_it_stopped() {
    // A slow library so that work is still queued when the broker stops.
    let sim = SimProcess::start_with(1, 50.0);
    let files = BrokerFiles::for_sim(&sim);
    let (config, db) = (files.config.clone(), files.db.clone());
    let broker = ServeProcess::start(&config, &db);
    let client = reqwest::Client::new();
    let mut ids = Vec::new();
    for i in 0..30u64 {
        let v: Value = client
            .post(format!("{}/v1/requests", broker.base))
            .json(&request(&format!("t{i}"), "mc", "x", 200_000_000))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        ids.push(v["id"].as_i64().unwrap());
    }
    let mut broker = broker;
    let pid = broker.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let status = broker.child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "SIGTERM is a clean stop");
    let unfinished: i64 = open_db(&db)
        .query_row(
            "SELECT COUNT(*) FROM requests WHERE state NOT IN ('done', 'failed', 'cancelled')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(unfinished > 0, "work was still queued when it stopped");
    // The restart finishes everything, each once.
    let broker = ServeProcess::start(&config, &db);
    wait_for_count(
        &db,
        "SELECT COUNT(*) FROM requests WHERE state = 'done'",
        30,
        Duration::from_secs(60),
    )
    .await;
    let received = sim.received().await;
    assert_each_attempt_once(&received);
    assert_eq!(received.received.len(), 30);
    drop(broker);
}

//! Duplicate reads coalesce, through the real `serve` process and the real simulator: two
//! stations reading one file cost the MSS one transfer, both requests finish with it, each
//! charged to its own group; a SIGKILL while one rides on the other loses neither.

use std::time::Duration;

use serde_json::Value;

use crate::helpers::{
    assert_each_attempt_once, key_id, open_db, request, test_config, wait_final, BrokerFiles,
    ServeProcess, SimProcess,
};

/// 100 GB: 5 s of mount and 200 s of streaming at the simulator's 500 MB/s, about 2 s at a
/// time scale of 100, so the duplicate arrives while the first is in flight.
const SIZE: u64 = 100_000_000_000;

/// A read of the shared file by `station` for `mode`/`group`.
fn read_of(crid: &str, station: &str, mode: &str, group: &str) -> Value {
    let mut body = request(crid, mode, group, SIZE);
    body["station"] = station.into();
    body["file"] = "/pnfs/test/shared.dat".into();
    body
}

async fn post(client: &reqwest::Client, base: &str, body: &Value) -> Value {
    let resp = client
        .post(format!("{base}/v1/requests"))
        .json(body)
        .send()
        .await
        .expect("answer");
    assert_eq!(resp.status().as_u16(), 202);
    resp.json().await.expect("json")
}

/// Both requests, once final, with the simulator's record of what it was sent.
async fn settle(client: &reqwest::Client, base: &str, ids: &[i64]) -> Vec<Value> {
    wait_final(client, base, ids, Duration::from_secs(60)).await
}

fn charged(db: &std::path::Path, id: i64) -> (String, i64, String) {
    open_db(db)
        .query_row(
            "SELECT group_path, charged_bytes, state FROM requests WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap()
}

#[tokio::test]
async fn a_coalesced_pair_finishes_with_one_mss_transfer_and_two_charges() {
    let sim = SimProcess::start_with(2, 100.0);
    let files = BrokerFiles::for_sim(&sim);
    let (config, db) = (files.config.clone(), files.db.clone());
    let broker = ServeProcess::start(&config, &db);
    let client = reqwest::Client::new();
    let a = post(
        &client,
        &broker.base,
        &read_of("a", "st-a", "analysis", "higgs"),
    )
    .await;
    let b = post(&client, &broker.base, &read_of("b", "st-b", "mc", "x")).await;
    let (ia, ib) = (a["id"].as_i64().unwrap(), b["id"].as_i64().unwrap());
    assert_eq!(b["state"], "riding", "{b}");
    let (_, rb) = {
        let resp = client
            .get(format!("{}/v1/requests/{ib}", broker.base))
            .send()
            .await
            .unwrap();
        (resp.status(), resp.json::<Value>().await.unwrap())
    };
    assert_eq!(rb["rides_on"], ia, "{rb}");

    let done = settle(&client, &broker.base, &[ia, ib]).await;
    for r in &done {
        assert_eq!(r["state"], "done", "{r}");
        assert_eq!(r["bytes_done"], SIZE, "{r}");
    }
    let received = sim.received().await;
    let ids: Vec<i64> = received.received.iter().map(|t| key_id(&t.key)).collect();
    assert_eq!(ids, [ia], "one transfer, the carrier's");
    assert_each_attempt_once(&received);
    assert_eq!(
        charged(&db, ia),
        ("analysis/higgs".into(), SIZE as i64, "done".into())
    );
    assert_eq!(charged(&db, ib), ("mc".into(), SIZE as i64, "done".into()));
    // /metrics counts the rider as coalesced, in its own group.
    let text = (client.get(format!("{}/metrics", broker.base)).send().await)
        .unwrap()
        .text()
        .await
        .unwrap();
    let line = |group: &str| {
        let want = format!("mssbroker_group_requests_total{{group=\"{group}\",kind=\"fair_share\",state=\"coalesced\"}}");
        text.lines()
            .find(|l| l.starts_with(&want))
            .map(|l| l[want.len()..].trim().to_string())
    };
    assert_eq!(line("mc").as_deref(), Some("1"), "{text}");
    assert_eq!(line("analysis/higgs").as_deref(), Some("0"), "{text}");
}

#[tokio::test]
async fn a_sigkill_while_a_request_rides_loses_neither() {
    let sim = SimProcess::start_with(2, 100.0);
    let files = BrokerFiles::for_sim(&sim);
    let (config, db) = (files.config.clone(), files.db.clone());
    let client = reqwest::Client::new();
    let mut broker = ServeProcess::start(&config, &db);
    let a = post(
        &client,
        &broker.base,
        &read_of("a", "st-a", "analysis", "top"),
    )
    .await;
    let b = post(&client, &broker.base, &read_of("b", "st-b", "mc", "x")).await;
    let (ia, ib) = (a["id"].as_i64().unwrap(), b["id"].as_i64().unwrap());
    assert_eq!(b["state"], "riding", "{b}");
    broker.kill();
    assert_eq!(charged(&db, ib).2, "riding", "committed before the kill");

    let broker = ServeProcess::start(&config, &db);
    // The replay of b after the restart is the same request, still riding or done.
    let again = post(&client, &broker.base, &read_of("b", "st-b", "mc", "x")).await;
    assert_eq!(again["id"], ib, "{again}");
    let done = settle(&client, &broker.base, &[ia, ib]).await;
    assert!(done.iter().all(|r| r["state"] == "done"), "{done:?}");
    let received = sim.received().await;
    assert_each_attempt_once(&received);
    let transfers = received
        .received
        .iter()
        .filter(|t| key_id(&t.key) == ia)
        .count();
    assert_eq!(transfers, 1, "{received:?}");
    assert!(received.received.iter().all(|t| key_id(&t.key) != ib));
    assert_eq!(charged(&db, ia).1, SIZE as i64);
    assert_eq!(charged(&db, ib).1, SIZE as i64);
}

/// Station tokens of `st-a` and `st-b` and an operator's, in a token file under `dir`.
fn two_stations(dir: &std::path::Path) -> std::path::PathBuf {
    let mut text = String::new();
    for (name, token, role, station) in [
        ("a", "tok-a", "station", "station = \"st-a\"\n"),
        ("b", "tok-b", "station", "station = \"st-b\"\n"),
        ("op", "tok-op", "operator", ""),
    ] {
        text.push_str(&format!(
            "[[tokens]]\nname = \"{name}\"\nsha256 = \"{}\"\nrole = \"{role}\"\n{station}",
            mssbroker::auth::sha256_hex(token)
        ));
    }
    let path = dir.join("tokens.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `method` on `path` of the broker at `base` with `token`: the status and JSON body.
async fn call(
    client: &reqwest::Client,
    (base, token): (&str, &str),
    path: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let url = format!("{base}{path}");
    let req = match body {
        Some(b) => client.post(url).json(b),
        None => client.get(url),
    };
    let resp = req.bearer_auth(token).send().await.expect("answer");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// A rider's `rides_on` names its carrier only to a caller that may read the carrier, the rule
/// of `GET` on the carrier itself: station b's read rides on station a's, and b's token (to
/// which a's request is a 404) sees `null`; an operator sees the id, and so does station a for
/// a read of its own riding on its own.
#[tokio::test]
async fn rides_on_is_shown_only_to_a_caller_that_may_read_the_carrier() {
    let sim = SimProcess::start_with(2, 100.0);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("broker.toml");
    let auth = format!("\n[auth]\ntoken_file = {:?}\n", two_stations(dir.path()));
    std::fs::write(&config, test_config(Some(&sim.url)) + &auth).unwrap();
    let broker = ServeProcess::start(&config, &dir.path().join("broker.db"));
    let client = reqwest::Client::new();
    let (a, b, op) = (
        (broker.base.as_str(), "tok-a"),
        (broker.base.as_str(), "tok-b"),
        (broker.base.as_str(), "tok-op"),
    );
    let post = "/v1/requests";
    let (status, carrier) = call(
        &client,
        a,
        post,
        Some(&read_of("a1", "st-a", "analysis", "higgs")),
    )
    .await;
    assert_eq!(status, 202, "{carrier}");
    let (status, rider_b) = call(&client, b, post, Some(&read_of("b1", "st-b", "mc", "x"))).await;
    assert_eq!(
        (status, &rider_b["state"]),
        (202, &"riding".into()),
        "{rider_b}"
    );
    let (status, rider_a) = call(
        &client,
        a,
        post,
        Some(&read_of("a2", "st-a", "analysis", "top")),
    )
    .await;
    assert_eq!(
        (status, &rider_a["state"]),
        (202, &"riding".into()),
        "{rider_a}"
    );
    let id = |v: &Value| v["id"].as_i64().unwrap();
    let (carrier, rider_b, rider_a) = (id(&carrier), id(&rider_b), id(&rider_a));

    // Station b may not read the carrier, so its rider does not name it.
    let (status, seen) = call(&client, b, &format!("/v1/requests/{carrier}"), None).await;
    assert_eq!(status, 404, "{seen}");
    let (status, seen) = call(&client, b, &format!("/v1/requests/{rider_b}"), None).await;
    assert_eq!(status, 200, "{seen}");
    assert_eq!(seen["state"], "riding", "{seen}");
    assert!(
        seen["rides_on"].is_null(),
        "another station's id shown: {seen}"
    );
    // An operator may read both; station a reads its own rider's carrier, its own request.
    let (_, seen) = call(&client, op, &format!("/v1/requests/{rider_b}"), None).await;
    assert_eq!(seen["rides_on"], carrier, "{seen}");
    let (_, seen) = call(&client, a, &format!("/v1/requests/{rider_a}"), None).await;
    assert_eq!(seen["rides_on"], carrier, "{seen}");
    let (status, _) = call(&client, a, &format!("/v1/requests/{rider_b}"), None).await;
    assert_eq!(status, 404);
}

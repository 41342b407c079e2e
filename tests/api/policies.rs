//! Release modes and ordering policies through the real service and the real simulator
//! process: the held queue survives a restart in its order, data taking never waits behind the
//! hold, a queued request explains its place, and pass-through requests waiting at the MSS are
//! re-prioritised through the adapter once they reach the starvation bound.

use std::time::Duration;

use serde_json::Value;

use crate::helpers::{key_id, open_db, request, test_config, wait_for_count, SimProcess, TestApp};

fn count(db: &std::path::Path, sql: &str) -> i64 {
    open_db(db).query_row(sql, [], |r| r.get(0)).unwrap()
}

/// Every queued request's position in the release order, by id: from a ranking of the queue
/// (an answer right after a change may estimate it or have none yet: wait until it is ranked).
async fn positions(app: &TestApp, ids: &[i64]) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    for &id in ids {
        let body = ranked(app, id).await;
        if body["state"] == "queued" {
            let e = &body["explain"];
            assert_eq!(e["release_mode"], "held", "{body}");
            assert_eq!(e["policy"], "sam");
            assert!(e["detail"]["sam"]["target"].as_f64().is_some(), "{e}");
            out.push((id, e["position"].as_i64().unwrap()));
        }
    }
    out.sort_by_key(|&(_, p)| p);
    out
}

/// Request `id` once its answer is not a queued request without a ranked position (it is
/// ranked, or not queued).
async fn ranked(app: &TestApp, id: i64) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = app.get(&format!("/v1/requests/{id}")).await;
        assert_eq!(status, 200, "{body}");
        if body["state"] != "queued" || body["position_basis"] == "ranking" {
            return body;
        }
        assert!(std::time::Instant::now() < deadline, "never ranked: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn held_queue_survives_a_restart_in_order_and_data_taking_never_waits() {
    // One slow drive: 10 GB at 500 MB/s is 20 s, so nothing finishes during the test.
    let sim = SimProcess::start_with(1, 1.0);
    let config = format!(
        "{}\n[release]\nmode = \"held\"\nlimit = 2\n",
        test_config(Some(&sim.url))
    );
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("broker.db");
    let app = TestApp::spawn_on(&config, db.clone()).await;
    let groups = [
        "reprocessing",
        "analysis",
        "mc",
        "analysis",
        "reprocessing",
        "mc",
    ];
    let mut ids = Vec::new();
    for (i, g) in groups.iter().cycle().take(12).enumerate() {
        let body = request(&format!("q{i}"), g, "higgs", 10_000_000_000);
        let (status, r) = app.post("/v1/requests", &body).await;
        assert_eq!(status, 202, "{r}");
        ids.push(r["id"].as_i64().unwrap());
    }
    // Two released (the limit), ten kept by the broker, uncharged.
    wait_for_count(
        &db,
        "SELECT COUNT(*) FROM requests WHERE state = 'queued'",
        10,
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) FROM requests WHERE state = 'queued' AND charged != 0"
        ),
        0
    );
    wait_for_count(
        &db,
        "SELECT COUNT(*) FROM requests WHERE state IN ('submitted', 'running')",
        2,
        Duration::from_secs(10),
    )
    .await;
    // Data taking goes straight through, past the limit, and is at the MSS at once.
    let (status, daq) = app
        .post(
            "/v1/requests",
            &request("daq-1", "datataking", "higgs", 1_000_000),
        )
        .await;
    assert_eq!(status, 202);
    assert_eq!(daq["state"], "accepted", "{daq}");
    let daq_id = daq["id"].as_i64().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let received = sim.received().await;
        if let Some(t) = received.received.iter().find(|t| key_id(&t.key) == daq_id) {
            assert_eq!(t.priority, 100);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "data taking never reached the mss"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        count(&db, "SELECT COUNT(*) FROM requests WHERE state = 'queued'"),
        10,
        "nothing fair-share was released past the limit"
    );

    let before = positions(&app, &ids).await;
    assert_eq!(before.len(), 10);
    assert_eq!(
        before.iter().map(|&(_, p)| p).collect::<Vec<_>>(),
        (1..=10).collect::<Vec<i64>>()
    );
    app.stop().await;

    let app = TestApp::spawn_on(&config, db.clone()).await;
    let after = positions(&app, &ids).await;
    assert_eq!(after, before, "the queue and its order survive the restart");
    assert_eq!(
        count(&db, "SELECT COUNT(*) FROM requests WHERE state = 'queued'"),
        10
    );
    // Cancelling a queued request takes it out of the line; the rest keep their order.
    let last = before[9].0;
    let (status, _) = app.delete(&format!("/v1/requests/{last}")).await;
    assert_eq!(status, 200);
    let after = positions(&app, &ids).await;
    assert_eq!(after, before[..9].to_vec());
    app.stop().await;
}

/// Where a queued request stands (`None` once it is not queued).
#[derive(Debug, Clone, PartialEq)]
struct Stands {
    position: Option<i64>,
    waiting: i64,
    ranked_at_ms: Option<i64>,
    basis: String,
}

async fn place_of(app: &TestApp, id: i64) -> Option<Stands> {
    let (status, body) = app.get(&format!("/v1/requests/{id}")).await;
    assert_eq!(status, 200, "{body}");
    if body["state"] != "queued" {
        return None;
    }
    let e = &body["explain"];
    let basis = body["position_basis"]
        .as_str()
        .unwrap_or_else(|| panic!("{body}"));
    let stands = Stands {
        position: e["position"].as_i64(),
        waiting: e["waiting"]
            .as_i64()
            .unwrap_or_else(|| panic!("no waiting in {e}")),
        ranked_at_ms: e["ranked_at_ms"].as_i64(),
        basis: basis.to_string(),
    };
    // A position comes with the ranking it is from, ranked or estimated against; none before
    // the first ranking.
    let ranked = stands.basis == "ranking" || stands.basis == "estimate";
    assert_eq!(stands.position.is_some(), ranked, "{body}");
    assert_eq!(stands.ranked_at_ms.is_some(), ranked, "{body}");
    assert!(ranked || stands.basis == "not_ranked", "{body}");
    Some(stands)
}

#[tokio::test]
async fn queued_requests_explain_their_place_while_another_station_submits() {
    // One slow drive and a limit of one: everything after the first request stays queued.
    let sim = SimProcess::start_with(1, 1.0);
    let config = format!(
        "{}\n[release]\nmode = \"held\"\nlimit = 1\n",
        test_config(Some(&sim.url))
    );
    let app = TestApp::spawn(&config).await;
    let groups = ["reprocessing", "mc", "analysis"];
    let batch: Vec<Value> = (0..400)
        .map(|i| request(&format!("q{i}"), groups[i % 3], "higgs", 10_000_000_000))
        .collect();
    let (status, r) = app
        .post(
            "/v1/requests/batch",
            &serde_json::json!({ "requests": batch }),
        )
        .await;
    assert_eq!(status, 202, "{r}");
    let queued: Vec<i64> = r["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["state"] == "queued")
        .map(|x| x["id"].as_i64().unwrap())
        .collect();
    assert!(queued.len() >= 398, "{r}");
    // A ranking that knows the batch first (the one made at start knew an empty queue): the
    // pollers then see ranked positions whatever the machine's speed, not only estimates.
    ranked(&app, queued[queued.len() - 1]).await;

    // 20 clients poll queued requests while another station submits, one request at a time;
    // every submission is acknowledged and asked about at once (queued after any ranking).
    let app = std::sync::Arc::new(app);
    let mut pollers = Vec::new();
    for p in 0..20 {
        let (app, ids) = (app.clone(), queued.clone());
        pollers.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            for k in 0..20 {
                let id = ids[(p * 37 + k * 11) % ids.len()];
                seen.extend(place_of(&app, id).await.map(|x| (id, x)));
            }
            seen
        }));
    }
    let mut fresh = Vec::new();
    for i in 0..30 {
        let mut body = request(&format!("b{i}"), "mc", "top", 10_000_000_000);
        body["station"] = "station-b".into();
        let (status, r) = app.post("/v1/requests", &body).await;
        assert_eq!(status, 202, "{r}");
        assert_eq!(r["state"], "queued", "{r}");
        let id = r["id"].as_i64().unwrap();
        // Answered at once: ranked, estimated or not yet ranked; counted now in any case.
        let stands = place_of(&app, id).await.expect("still queued");
        let waiting = stands.waiting;
        if let Some(position) = stands.position {
            assert!((1..=waiting).contains(&position), "{stands:?}");
        }
        assert!(waiting as usize > queued.len() - 2, "{stands:?}");
        fresh.push(id);
    }
    // Within one ranking, ranked positions are distinct and within the queue.
    let mut by_ranking: std::collections::BTreeMap<i64, std::collections::BTreeMap<i64, i64>> =
        Default::default();
    for p in pollers {
        for (id, stands) in p.await.unwrap() {
            if let Some(position) = stands.position {
                assert!((1..=stands.waiting).contains(&position), "{stands:?}");
            }
            let (Some(position), Some(at), "ranking") =
                (stands.position, stands.ranked_at_ms, stands.basis.as_str())
            else {
                continue;
            };
            let ranked = by_ranking.entry(at).or_default();
            if let Some(&other) = ranked.get(&id) {
                assert_eq!(other, position, "one ranking, one position for {id}");
            }
            ranked.insert(id, position);
        }
    }
    assert!(!by_ranking.is_empty());
    for ranked in by_ranking.values() {
        let distinct: std::collections::BTreeSet<i64> = ranked.values().copied().collect();
        assert_eq!(distinct.len(), ranked.len(), "{ranked:?}");
    }
    // A later ranking knows the fresh requests and the old ones alike.
    let last = *fresh.last().unwrap();
    let at = ranked(&app, last).await["explain"]["ranked_at_ms"].as_i64();
    let first = place_of(&app, queued[queued.len() - 1]).await.unwrap();
    assert_eq!(first.basis, "ranking", "{first:?}");
    assert!(first.ranked_at_ms >= at, "{first:?}, {at:?}");
}

/// The number after `name ` in a metrics text (0 when absent).
fn metric(text: &str, name: &str) -> f64 {
    (text.lines())
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Rankings of the held queue made so far (`mssbroker_queue_ranking_seconds`).
async fn rankings(app: &TestApp) -> f64 {
    let text = (app.client.get(format!("{}/metrics", app.base)).send().await)
        .unwrap()
        .text()
        .await
        .unwrap();
    metric(&text, "mssbroker_queue_ranking_seconds_count")
}

/// A station reads its held-mode request back right after the 202 (docs/api.md tells it to):
/// the answer never waits for a ranking of the queue. The only ranking is the one made at start,
/// before the request: the answer comes from it, says its position is an estimate and counts
/// the request waiting; a later ranking, made in the background, gives its ranked position.
#[tokio::test]
async fn a_request_read_back_after_its_202_is_answered_before_a_ranking_knows_it() {
    // One slow drive and a limit of one: the second request stays queued.
    let sim = SimProcess::start_with(1, 1.0);
    let config = format!(
        "{}\n[release]\nmode = \"held\"\nlimit = 1\n",
        test_config(Some(&sim.url))
    );
    let app = TestApp::spawn(&config).await;
    // The ranking made at start is done, and none is being made (nothing asked for one).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while rankings(&app).await < 1.0 {
        assert!(std::time::Instant::now() < deadline, "no ranking at start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut ids = Vec::new();
    for i in 0..2 {
        let body = request(&format!("r{i}"), "mc", "higgs", 10_000_000_000);
        let (status, r) = app.post("/v1/requests", &body).await;
        assert_eq!(status, 202, "{r}");
        ids.push(r["id"].as_i64().unwrap());
    }
    let queued = ids[1];
    let stands = place_of(&app, queued)
        .await
        .expect("queued behind the first");
    assert_eq!(stands.basis, "estimate", "{stands:?}");
    assert_eq!(
        (stands.position, stands.waiting),
        (Some(1), 1),
        "{stands:?}"
    );
    let (_, body) = app.get(&format!("/v1/requests/{queued}")).await;
    let created = body["created_ms"].as_i64().unwrap();
    assert!(
        stands.ranked_at_ms <= Some(created),
        "{stands:?} for {body}"
    );
    // The ranking it started knows it.
    let body = ranked(&app, queued).await;
    assert_eq!(body["explain"]["position"], 1, "{body}");
    assert_eq!(body["explain"]["waiting"], 1, "{body}");
    assert!(rankings(&app).await >= 2.0);
    app.stop().await;
}

#[tokio::test]
async fn pass_through_requests_at_the_mss_are_re_prioritised_at_the_starvation_bound() {
    let sim = SimProcess::start_with(1, 1.0);
    let config = test_config(Some(&sim.url)).replace(
        "p_back = 10\n",
        "p_back = 10\nmax_wait_secs = 2\nreprioritise_secs = 1\n",
    );
    let app = TestApp::spawn(&config).await;
    let mut ids = Vec::new();
    for i in 0..4 {
        let body = request(&format!("s{i}"), "mc", "higgs", 10_000_000_000);
        let (status, r) = app.post("/v1/requests", &body).await;
        assert_eq!(status, 202, "{r}");
        ids.push(r["id"].as_i64().unwrap());
    }
    // The last one waits at the MSS behind the running one; after 2 s it is starved and the
    // next re-prioritisation pass lifts it to the starved priority, at the MSS first.
    let last = *ids.last().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let body: Value = loop {
        let (_, body) = app.get(&format!("/v1/requests/{last}")).await;
        if body["mss_priority"] == 99 {
            break body;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never re-prioritised: {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(body["state"], "submitted", "{body}");
    let e = &body["explain"];
    assert_eq!(e["starved"]["max_wait_ms"], 2000, "{e}");
    assert_eq!(e["mss_priority"], 99);
    assert!(e["waited_ms"].as_i64().unwrap() >= 2000);
    assert_eq!(e["policy"], "sam");
    app.stop().await;
}

/// `mssbroker bench --explain-queued` (the figures of issue 13's item 5) keeps working on the
/// shipped configuration: it queues, polls and posts, and every queued request it asked about
/// had a position (the benchmark fails otherwise).
#[test]
fn the_explain_benchmark_runs_on_the_shipped_configuration() {
    let out = crate::helpers::run_ok(&[
        "bench",
        "--explain-queued",
        "300",
        "--pollers",
        "4",
        "--seconds",
        "0.5",
    ]);
    assert!(out.contains("300 queued"), "{out}");
    let calls = |prefix: &str| -> u64 {
        let line = out
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} line in {out}"));
        line.split(": ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{line}"))
    };
    assert!(calls("GET ") > 0, "{out}");
    assert!(calls("POST ") > 0, "{out}");
}

/// Held mode keeps at most `limit` slots per library at the MSS and releases the request the
/// policy ranks first whenever one frees. `library` is the station's own free text, and any
/// name the configuration does not list gets a full `limit` of its own: a station that names a
/// fresh library per request has every request released at once, ahead of the queue, with
/// `limit = 1` and no library configured at all.
#[tokio::test]
async fn a_station_cannot_jump_the_held_queue_by_naming_libraries_nobody_configured() {
    let sim = SimProcess::start_with(1, 1.0);
    let config = format!(
        "{}\n[release]\nmode = \"held\"\nlimit = 1\n",
        test_config(Some(&sim.url))
    );
    let app = TestApp::spawn(&config).await;
    // An honest backlog in the default library: one at the MSS, the rest queued.
    for i in 0..5 {
        let body = request(&format!("honest{i}"), "reprocessing", "x", 10_000_000_000);
        let (status, r) = app.post("/v1/requests", &body).await;
        assert_eq!(status, 202, "{r}");
    }
    // Another group's requests, each naming a library of its own.
    for i in 0..10 {
        let mut body = request(&format!("jump{i}"), "mc", "x", 10_000_000_000);
        body["library"] = format!("made-up-{i}").into();
        let (status, r) = app.post("/v1/requests", &body).await;
        assert!(status == 202 || status == 422, "{status}: {r}");
    }
    // A 202 in held mode may say `queued` for a request its commit released: read back.
    let released = |prefix: &str| {
        count(
            &app.db,
            &format!(
                "SELECT COUNT(*) FROM requests WHERE client_request_id LIKE '{prefix}%' \
                 AND state NOT IN ('queued', 'held')"
            ),
        )
    };
    assert_eq!(
        released("honest"),
        1,
        "the honest backlog waits behind limit = 1"
    );
    let jumped = released("jump");
    assert_eq!(
        jumped, 0,
        "{jumped} requests naming unconfigured libraries were released past limit = 1 \
         while 4 requests of the default library still wait"
    );
    app.stop().await;
}

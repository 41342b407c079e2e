//! Reloading the configuration of a running `serve` (SIGHUP and `POST /v1/admin/reload`), the
//! refusals that change nothing, and `mssbroker cancel --group` before a group is removed: all
//! through the real binary, its SQLite file and a real simulator process.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sha2::Digest as _;

use crate::helpers::{
    assert_each_attempt_once, key_id, open_db, request, run_ok, set_faults, test_config,
    wait_final, wait_for_text, ServeProcess, SimProcess, BIN,
};
use mss_adapters::protocol::Faults;

/// The shares of the base configuration the tests change.
const SHARES: &str = "reprocessing = 30\nmc = 30\n";

/// A directory with a configuration, a database and a log.
struct Setup {
    _dir: tempfile::TempDir,
    config: PathBuf,
    db: PathBuf,
    log: PathBuf,
    mss_url: String,
}

impl Setup {
    fn new(mss_url: &str) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let setup = Setup {
            config: dir.path().join("broker.toml"),
            db: dir.path().join("broker.db"),
            log: dir.path().join("serve.log"),
            mss_url: mss_url.to_string(),
            _dir: dir,
        };
        setup.write(SHARES);
        setup
    }

    /// The test configuration with `shares` in place of `SHARES`.
    fn text(&self, shares: &str) -> String {
        let base = test_config(Some(&self.mss_url));
        assert!(base.contains(SHARES), "the base configuration changed");
        base.replacen(SHARES, shares, 1)
    }

    fn write(&self, shares: &str) {
        std::fs::write(&self.config, self.text(shares)).unwrap();
    }

    fn start(&self) -> ServeProcess {
        ServeProcess::start_logged(&self.config, &self.db, &self.log)
    }

    fn sha256(&self) -> String {
        sha2::Sha256::digest(std::fs::read(&self.config).unwrap())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

async fn get(base: &str, path: &str) -> Value {
    let resp = reqwest::get(format!("{base}{path}")).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200, "GET {path}");
    resp.json().await.unwrap()
}

async fn post(base: &str, path: &str, body: &Value) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .json(body)
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// One node of `GET /v1/groups` by path.
fn node<'a>(groups: &'a Value, path: &str) -> Option<&'a Value> {
    groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["path"] == path)
}

fn target(groups: &Value, path: &str) -> f64 {
    node(groups, path).unwrap_or_else(|| panic!("no {path} in {groups}"))["target_share"]
        .as_f64()
        .unwrap()
}

/// Submit `n` requests of `mode`; returns their ids (each must be 202).
async fn submit_n(base: &str, prefix: &str, mode: &str, n: usize) -> Vec<i64> {
    submit_sized(base, prefix, mode, n, 1_000).await
}

async fn submit_sized(base: &str, prefix: &str, mode: &str, n: usize, size: u64) -> Vec<i64> {
    let mut ids = Vec::new();
    for i in 0..n {
        let (status, body) = post(
            base,
            "/v1/requests",
            &request(&format!("{prefix}-{i}"), mode, "x", size),
        )
        .await;
        assert_eq!(status, 202, "{body}");
        ids.push(body["id"].as_i64().unwrap());
    }
    ids
}

/// How many of `group`'s requests are marked as being sent (`sent_attempt`).
fn marked_in(db: &Path, group: &str) -> i64 {
    let sql = "SELECT COUNT(*) FROM requests WHERE group_path = ?1 AND sent_attempt IS NOT NULL";
    (open_db(db).query_row(sql, [group], |r| r.get(0))).expect("count")
}

/// Unfinished and cancelled requests of `group` in the database.
fn states_of(db: &Path, group: &str) -> Vec<String> {
    let conn = open_db(db);
    let mut stmt = conn
        .prepare("SELECT state FROM requests WHERE group_path = ?1 ORDER BY id")
        .unwrap();
    let rows = stmt.query_map([group], |r| r.get(0)).unwrap();
    rows.map(Result::unwrap).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sighup_puts_new_shares_in_force_and_a_running_load_loses_nothing() {
    let sim = SimProcess::start();
    let setup = Setup::new(&sim.url);
    let broker = setup.start();
    let base = broker.base.clone();
    let before = get(&base, "/v1/groups").await;
    assert_eq!(before["config"]["sha256"], setup.sha256());
    assert!((target(&before, "mc") - 0.3).abs() < 1e-12, "{before}");

    // Four clients submit until told to stop; every 202 is kept.
    let accepted = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let ids = Arc::new(Mutex::new(Vec::new()));
    let mut clients = Vec::new();
    for c in 0..4 {
        let (base, accepted, stop, ids) =
            (base.clone(), accepted.clone(), stop.clone(), ids.clone());
        clients.push(tokio::spawn(async move {
            let modes = ["mc", "reprocessing", "analysis", "datataking"];
            for i in 0..2_000 {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let mode = modes[i % modes.len()];
                let group = if mode == "analysis" { "higgs" } else { "x" };
                let crid = format!("load-{c}-{i}");
                let (status, body) = post(
                    &base,
                    "/v1/requests",
                    &request(&crid, mode, group, 1_000_000),
                )
                .await;
                assert_eq!(status, 202, "{crid}: {body}");
                ids.lock().unwrap().push(body["id"].as_i64().unwrap());
                accepted.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    wait_until(
        || accepted.load(Ordering::SeqCst) >= 100,
        "100 accepted before the reload",
    )
    .await;
    // mc doubles its shares, and the tree is written in another order.
    setup.write("mc = 60\nreprocessing = 30\n");
    broker.signal("HUP");
    wait_for_text(
        &setup.log,
        "configuration reloaded",
        Duration::from_secs(30),
    )
    .await;
    let at_reload = accepted.load(Ordering::SeqCst);
    wait_until(
        || accepted.load(Ordering::SeqCst) >= at_reload + 100,
        "100 more accepted after the reload",
    )
    .await;
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.await.unwrap();
    }

    let after = get(&base, "/v1/groups").await;
    assert_eq!(after["config"]["sha256"], setup.sha256());
    assert_ne!(after["config"]["sha256"], before["config"]["sha256"]);
    assert!(after["config"]["loaded_at_ms"].as_i64() > before["config"]["loaded_at_ms"].as_i64());
    assert!(
        (target(&after, "mc") - 60.0 / 130.0).abs() < 1e-12,
        "{after}"
    );
    assert!(
        (target(&after, "analysis") - 40.0 / 130.0).abs() < 1e-12,
        "{after}"
    );

    // Nothing lost: every 202 is in the ledger, done, and was queued at the MSS once.
    let ids = ids.lock().unwrap().clone();
    let client = reqwest::Client::new();
    let finals = wait_final(&client, &base, &ids, Duration::from_secs(180)).await;
    for r in &finals {
        assert_eq!(r["state"], "done", "{r}");
    }
    let rows: i64 = open_db(&setup.db)
        .query_row("SELECT COUNT(*) FROM requests", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows as usize, ids.len());
    let received = sim.received().await;
    assert_each_attempt_once(&received);
    let keys: std::collections::HashSet<i64> =
        received.received.iter().map(|r| key_id(&r.key)).collect();
    for id in &ids {
        assert!(keys.contains(id), "request {id} never reached the mss");
    }
    assert_eq!(keys.len(), ids.len());

    // Reordered again, same shares: every figure stays with its path.
    let settled = get(&base, "/v1/groups").await;
    setup.write("reprocessing = 30\nmc = 60\n");
    let (status, body) = post(&base, "/v1/admin/reload", &json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["changed"], true);
    let reordered = get(&base, "/v1/groups").await;
    for g in settled["groups"].as_array().unwrap() {
        let path = g["path"].as_str().unwrap();
        let now = node(&reordered, path).unwrap();
        for field in ["usage", "usage_bytes", "target_share", "pending", "held"] {
            assert_eq!(now[field], g[field], "{path}.{field}");
        }
    }
    assert_eq!(reordered["config"]["sha256"], setup.sha256());
}

/// Poll `done` until it holds; panics after a minute.
async fn wait_until(done: impl Fn() -> bool, what: &str) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{what}: not after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_file_is_refused_naming_the_key_and_changes_nothing() {
    let sim = SimProcess::start();
    let setup = Setup::new(&sim.url);
    let broker = setup.start();
    let before = get(&broker.base, "/v1/groups").await;
    let bad = setup.text("reprocessing = 30\nmc = 90\n").replacen(
        "max_batch = 500\n",
        "max_batch = 500\nstation_rate_per_sec = 0\n",
        1,
    );
    std::fs::write(&setup.config, bad).unwrap();
    let (status, body) = post(&broker.base, "/v1/admin/reload", &json!({})).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["field"], "limits.station_rate_per_sec", "{body}");
    let after = get(&broker.base, "/v1/groups").await;
    assert_eq!(after["config"], before["config"]);
    assert_eq!(target(&after, "mc"), target(&before, "mc"));
    let log = wait_for_text(&setup.log, "reload refused", Duration::from_secs(10)).await;
    assert!(log.contains("limits.station_rate_per_sec"), "{log}");
    // Not TOML at all: refused too.
    std::fs::write(&setup.config, "[shares\n").unwrap();
    let (status, body) = post(&broker.base, "/v1/admin/reload", &json!({})).await;
    assert_eq!(status, 422, "{body}");
    assert!(body["field"].is_string(), "{body}");
    assert_eq!(
        get(&broker.base, "/v1/groups").await["config"],
        before["config"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_of_listen_address_is_refused() {
    let sim = SimProcess::start();
    let setup = Setup::new(&sim.url);
    // Without --listen, so the file's address is the one in force.
    let mut child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&setup.config)
        .arg("--db")
        .arg(&setup.db)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&setup.log).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let broker = ServeProcess {
        base: line.trim().rsplit(' ').next().unwrap().to_string(),
        child,
    };
    let before = get(&broker.base, "/v1/groups").await;
    let moved = setup.text("reprocessing = 30\nmc = 90\n").replacen(
        "listen = \"127.0.0.1:0\"",
        "listen = \"127.0.0.1:1\"",
        1,
    );
    std::fs::write(&setup.config, moved).unwrap();
    let (status, body) = post(&broker.base, "/v1/admin/reload", &json!({})).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["field"], "server.listen", "{body}");
    broker.signal("HUP");
    let log = wait_for_text(&setup.log, "trigger=\"SIGHUP\"", Duration::from_secs(10)).await;
    assert!(log.contains("server.listen"), "{log}");
    let after = get(&broker.base, "/v1/groups").await;
    assert_eq!(after["config"], before["config"]);
    assert_eq!(target(&after, "mc"), target(&before, "mc"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_group_with_unfinished_requests_is_refused_until_cancel_group() {
    // Nothing listens at the MSS address: requests stay accepted.
    let setup = Setup::new("http://127.0.0.1:9");
    let broker = setup.start();
    let ids = submit_n(&broker.base, "mc", "mc", 3).await;
    submit_n(&broker.base, "re", "reprocessing", 2).await;
    let before = get(&broker.base, "/v1/groups").await;
    setup.write("reprocessing = 30\n");
    let (status, body) = post(&broker.base, "/v1/admin/reload", &json!({})).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["field"], "shares", "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(
        error.contains("`mc`") && error.contains("accepted 3"),
        "{error}"
    );
    let after = get(&broker.base, "/v1/groups").await;
    assert_eq!(after["config"], before["config"]);
    assert!(node(&after, "mc").is_some());
    // `mssbroker reload` says the same and exits 1.
    let out = Command::new(BIN)
        .args(["reload", "--url", &broker.base])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let refused: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(refused["field"], "shares", "{refused}");

    // The dispatcher keeps trying the MSS, marking each request before each send (the mark
    // goes when the connection is refused). A cancel that lands between the two cannot know
    // nothing was sent: the request waits as `submitted` with its cancel asked, and the
    // refused connection ends it cancelled moments later (`Ledger::mark_unsent`).
    let cancel = ["cancel", "--group", "mc", "--url", &broker.base];
    let answer: Value = serde_json::from_str(&run_ok(&cancel)).unwrap();
    let (now, asked) = (&answer["cancelled"], &answer["cancel_requested"]);
    assert_eq!(
        now.as_i64().unwrap() + asked.as_i64().unwrap(),
        3,
        "{answer}"
    );
    let reported: Vec<i64> = (answer["requests"].as_array().unwrap().iter())
        .map(|r| {
            assert_eq!(r["previous_state"], "accepted", "{r}");
            let sending = r["state"] == "submitted" && r["at_mss"] == true;
            assert!(r["state"] == "cancelled" || sending, "{r}");
            r["id"].as_i64().unwrap()
        })
        .collect();
    assert_eq!(reported, ids);
    let db = setup.db.clone();
    let all_cancelled = move || states_of(&db, "mc") == ["cancelled"; 3];
    wait_until(all_cancelled, "the mc requests cancelled").await;
    assert_eq!(
        node(&get(&broker.base, "/v1/groups").await, "mc").unwrap()["pending"],
        0
    );

    // The operator's command this time (the endpoint above): the new file is in force.
    let answer: Value = serde_json::from_str(&run_ok(&["reload", "--url", &broker.base])).unwrap();
    assert_eq!(answer["changed"], true, "{answer}");
    assert_eq!(answer["config_sha256"], setup.sha256(), "{answer}");
    let after = get(&broker.base, "/v1/groups").await;
    assert!(node(&after, "mc").is_none(), "{after}");
    assert_eq!(after["config"]["sha256"], setup.sha256());
    assert_eq!(states_of(&setup.db, "reprocessing"), ["accepted"; 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_with_a_removed_groups_unfinished_requests_refuses_naming_them() {
    // An MSS that refuses every call, slowly, keeps the requests accepted, and the kill lands
    // between a send's mark and its refusal: the restarted broker cannot know the MSS did not
    // take them, and must ask it (an absent MSS never answers, so its cancel never ends).
    let sim = SimProcess::start_with(1, 50.0);
    let down = Faults {
        down_for_ms: 600_000,
        delay_ms: 3_000,
        ..Faults::default()
    };
    set_faults(&sim, &down).await;
    let setup = Setup::new(&sim.url);
    let mut broker = setup.start();
    submit_n(&broker.base, "mc", "mc", 2).await;
    let db = setup.db.clone();
    wait_until(move || marked_in(&db, "mc") == 2, "both sends marked").await;
    broker.kill();
    setup.write("reprocessing = 30\n");
    let mut child = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&setup.config)
        .arg("--db")
        .arg(&setup.db)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("serve started with a removed group's unfinished requests");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success());
    assert!(
        stderr.contains("`mc`") && stderr.contains("accepted 2"),
        "{stderr}"
    );
    assert!(stderr.contains("mssbroker cancel --group mc"), "{stderr}");
    assert_eq!(states_of(&setup.db, "mc"), ["accepted"; 2]);

    // With the old configuration, cancel them; then the new one starts. The MSS is back, its
    // one drive busy with another client's file, so what reaches it waits there pending and
    // the cancel drops it.
    set_faults(&sim, &Faults::default()).await;
    occupy_the_drive(&sim).await;
    setup.write(SHARES);
    let mut old = setup.start();
    let (status, body) = post(&old.base, "/v1/admin/cancel-group", &json!({"group": "mc"})).await;
    assert_eq!(status, 200, "{body}");
    let db = setup.db.clone();
    let all_cancelled = move || states_of(&db, "mc") == ["cancelled"; 2];
    wait_until(all_cancelled, "the mc requests cancelled").await;
    old.kill();
    setup.write("reprocessing = 30\n");
    let new = setup.start();
    assert!(node(&get(&new.base, "/v1/groups").await, "mc").is_none());
}

/// Submit, straight to `sim`, a 10 TB read that holds its one drive for the rest of a test, and
/// wait until it runs.
async fn occupy_the_drive(sim: &SimProcess) {
    let client = reqwest::Client::new();
    let blocker = json!({"key": "another-client-1", "attempt": 1, "file": "/pnfs/other/big",
        "size_bytes": 10_000_000_000_000_u64, "priority": 0, "group": "other"});
    let resp = (client.post(format!("{}/v1/transfers", sim.url)))
        .json(&blocker)
        .send()
        .await
        .expect("the simulator answers");
    assert!(resp.status().is_success(), "{}", resp.text().await.unwrap());
    let url = format!("{}/v1/transfers/another-client-1", sim.url);
    let start = Instant::now();
    loop {
        let status: Value = (client.get(&url).send().await.expect("answers"))
            .json()
            .await
            .expect("JSON");
        if status["state"] == "running" {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{status}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_group_cancels_requests_at_the_mss_through_the_adapter() {
    // One drive, 200 virtual seconds a file at 50x: the requests wait at the MSS.
    let sim = SimProcess::start_with(1, 50.0);
    let setup = Setup::new(&sim.url);
    let broker = setup.start();
    let ids = submit_sized(&broker.base, "big", "mc", 4, 100_000_000_000).await;
    let start = Instant::now();
    while states_of(&setup.db, "mc").iter().any(|s| s == "accepted") {
        assert!(start.elapsed() < Duration::from_secs(30), "not submitted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, body) = post(
        &broker.base,
        "/v1/admin/cancel-group",
        &json!({"group": "mc"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let reported = body["requests"].as_array().unwrap();
    assert_eq!(reported.len(), ids.len(), "{body}");
    let waiting: Vec<i64> = (reported.iter())
        .filter(|r| r["at_mss"] == true && r["previous_state"] == "submitted")
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert!(!waiting.is_empty(), "{body}");
    // Those waiting at the MSS are dropped there and settle cancelled; none is left unfinished.
    let client = reqwest::Client::new();
    let finals = wait_final(&client, &broker.base, &ids, Duration::from_secs(60)).await;
    for r in &finals {
        let id = r["id"].as_i64().unwrap();
        if waiting.contains(&id) {
            assert_eq!(r["state"], "cancelled", "{r}");
        }
    }
    setup.write("reprocessing = 30\n");
    let (status, body) = post(&broker.base, "/v1/admin/reload", &json!({})).await;
    assert_eq!(status, 200, "{body}");
}

/// A token file with one operator token and one station token for station `st`.
fn tokens_text(operator: &str, station: &str) -> String {
    let entry = |name: &str, token: &str, role: &str, extra: &str| {
        format!(
            "[[tokens]]\nname = \"{name}\"\nsha256 = \"{}\"\nrole = \"{role}\"\n{extra}",
            mssbroker::auth::sha256_hex(token)
        )
    };
    entry("ops", operator, "operator", "") + &entry("st", station, "station", "station = \"st\"\n")
}

async fn submit_as(base: &str, token: &str, id: &str) -> u16 {
    let mut body = request(id, "reprocessing", "x", 1_000);
    body["station"] = json!("st");
    reqwest::Client::new()
        .post(format!("{base}/v1/requests"))
        .bearer_auth(token)
        .json(&body)
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Token rotation without a restart: the token file's contents are read again at a reload
/// (its path is fixed), so after SIGHUP the new station token is taken and the old one is
/// refused; a token file that no longer reads is refused by the reload, naming
/// `auth.token_file`, and the tokens in force stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_rotates_the_tokens() {
    let sim = SimProcess::start();
    let setup = Setup::new(&sim.url);
    let tokens = setup.config.with_file_name("tokens.toml");
    std::fs::write(&tokens, tokens_text("ops-1", "st-old")).unwrap();
    let text = setup.text(SHARES) + &format!("\n[auth]\ntoken_file = {tokens:?}\n");
    std::fs::write(&setup.config, text).unwrap();
    let broker = setup.start();
    assert_eq!(submit_as(&broker.base, "st-old", "r1").await, 202);
    assert_eq!(submit_as(&broker.base, "st-new", "r2").await, 401);

    std::fs::write(&tokens, tokens_text("ops-1", "st-new")).unwrap();
    broker.signal("HUP");
    let log = wait_for_text(
        &setup.log,
        "configuration reloaded",
        Duration::from_secs(10),
    )
    .await;
    assert!(log.contains("trigger=\"SIGHUP\""), "{log}");
    assert_eq!(submit_as(&broker.base, "st-new", "r3").await, 202);
    assert_eq!(submit_as(&broker.base, "st-old", "r4").await, 401);

    // A token file that does not read: the reload is refused and the tokens stay.
    std::fs::write(&tokens, "[[tokens]]\nname = \n").unwrap();
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/admin/reload", broker.base))
        .bearer_auth("ops-1")
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 422);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["field"], "auth.token_file", "{body}");
    assert_eq!(submit_as(&broker.base, "st-new", "r5").await, 202);
}

/// `POST /v1/admin/cancel-group` with a bad body: every refusal is a 400 naming `group`,
/// whatever the fault: an unknown key is not named (`extra`), a mistyped or missing `group` is
/// not the 422 the API gives a mistyped or missing field, and a body that is not declared JSON
/// (text/plain) is not refused with 415 but acted on: the group's requests are cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_group_refuses_a_bad_body_naming_the_field_and_cancels_nothing() {
    let sim = SimProcess::start_with(1, 1.0);
    let app = crate::helpers::TestApp::spawn(&test_config(Some(&sim.url))).await;
    let (status, r) = app
        .post(
            "/v1/requests",
            &request("keep", "mc", "top", 10_000_000_000),
        )
        .await;
    assert_eq!(status, 202, "{r}");
    let id = r["id"].as_i64().unwrap();
    let mut wrong = Vec::new();
    for (content_type, body, want_status, want_field) in [
        (
            "application/json",
            r#"{"group":"mc","extra":1}"#,
            422,
            "extra",
        ),
        ("application/json", r#"{"group":5}"#, 422, "group"),
        ("application/json", r#"{}"#, 422, "group"),
        ("text/plain", r#"{"group":"mc"}"#, 415, "content-type"),
    ] {
        let (status, answer) = app
            .post_raw("/v1/admin/cancel-group", content_type, body.into())
            .await;
        if (status, answer["field"].as_str()) != (want_status, Some(want_field)) {
            wrong.push(format!(
                "{content_type} {body}: got {status} {answer}, want {want_status} naming {want_field}"
            ));
        }
    }
    let (state, cancel_requested): (String, i64) = open_db(&app.db)
        .query_row(
            "SELECT state, cancel_requested FROM requests WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert!(
        wrong.is_empty() && state != "cancelled" && cancel_requested == 0,
        "request {id} is {state} (cancel_requested {cancel_requested}); refusals:\n{}",
        wrong.join("\n")
    );
    app.stop().await;
}

//! What a broker does with the sends an earlier one marked (issue 42, docs/ha.md, "How a new
//! leader settles what the old one sent"): the real `serve` process is killed (SIGKILL) between
//! marking a send and recording its answer, and started again on the same ledger, as a
//! takeover is for the MSS side. With the simulator, which deduplicates by key, the request is
//! sent again with the same key and attempt and transferred once; with the Tape REST adapter,
//! whose MSS can neither be asked about a key nor deduplicate, it is held for an operator and
//! not sent again until the operator resends it.

use std::time::{Duration, Instant};

use mss_adapters::protocol::{BadAnswer, Faults};
use mss_adapters::standin::encp as encp_standin;
use mss_adapters::standin::{Plan, TapeRestStandin};
use serde_json::{json, Value};

use crate::adapters::config_with;
use crate::helpers::{
    assert_each_attempt_once, key_id, open_db, received_all, request, set_faults, test_config,
    wait_final, wait_for_count, BrokerFiles, ServeProcess, SimProcess, BIN,
};

/// Requests still `accepted` whose attempt a send marked (`sent_attempt`).
const MARKED: &str =
    "SELECT COUNT(*) FROM requests WHERE state = 'accepted' AND sent_attempt = attempt";

async fn post(client: &reqwest::Client, url: String, body: &Value) -> (u16, Value) {
    let resp = client.post(url).json(body).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn get(client: &reqwest::Client, url: String) -> (u16, Value) {
    let resp = client.get(url).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// Submit `body` to the broker at `base`; its id.
async fn submit(client: &reqwest::Client, base: &str, body: &Value) -> i64 {
    let (status, r) = post(client, format!("{base}/v1/requests"), body).await;
    assert_eq!(status, 202, "{r}");
    r["id"].as_i64().unwrap()
}

/// Poll request `id` until `done(request)`; panics after `limit` with the last answer.
async fn wait_request(
    client: &reqwest::Client,
    base: &str,
    id: i64,
    limit: Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let start = Instant::now();
    loop {
        let (status, r) = get(client, format!("{base}/v1/requests/{id}")).await;
        assert_eq!(status, 200, "{r}");
        if done(&r) {
            return r;
        }
        assert!(start.elapsed() < limit, "request {id} after {limit:?}: {r}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Pins the behaviour before step 6, for an MSS that deduplicates by key: the simulator has
/// queued the transfer and its answer never comes (the broker is killed while it waits), and
/// the restarted broker's resend of the same key and attempt is answered as a duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_the_mss_took_before_a_kill_is_transferred_and_charged_once() {
    let sim = SimProcess::start();
    let files = BrokerFiles::for_sim(&sim);
    // The simulator queues each submission, then stalls its answer: the broker has marked the
    // send and never records what the MSS took. Its events are dropped too, so the broker
    // does not learn of the transfer from them either.
    set_faults(
        &sim,
        &Faults {
            submit_answer: Some(BadAnswer::Stalled),
            queue_before_bad_answer: true,
            drop_event_rate: 1.0,
            ..Faults::default()
        },
    )
    .await;
    let client = reqwest::Client::new();
    let mut broker = ServeProcess::start(&files.config, &files.db);
    let size = 2_000_000_000;
    let id = submit(
        &client,
        &broker.base,
        &request("k1", "analysis", "top", size),
    )
    .await;
    received_all(&sim, &[id]).await;
    wait_for_count(&files.db, MARKED, 1, Duration::from_secs(20)).await;
    broker.kill();

    set_faults(&sim, &Faults::default()).await;
    let broker = ServeProcess::start(&files.config, &files.db);
    let done = wait_final(&client, &broker.base, &[id], Duration::from_secs(60)).await;
    assert_done_at_the_first_attempt(&done[0]);
    assert_eq!(done[0]["unsettled"], false, "{}", done[0]);
    let received = sim.received().await;
    assert_each_attempt_once(&received);
    let of_it = (received.received.iter())
        .filter(|t| key_id(&t.key) == id)
        .count();
    assert_eq!(of_it, 1, "the MSS received the transfer once: {received:?}");
    assert!(
        received.duplicates >= 1,
        "the resend was answered as a duplicate: {received:?}"
    );
    // Charged once: the group's usage is the bytes the one transfer moved.
    let conn = open_db(&files.db);
    let (usage, bytes): (i64, i64) = conn
        .query_row(
            "SELECT CAST(g.usage AS INTEGER), r.bytes_done FROM groups g JOIN requests r \
             ON r.group_path = g.path WHERE r.id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((usage, bytes), (size as i64, size as i64), "{}", done[0]);
}

/// A `serve` configuration in front of the Tape REST stand-in at `url` (held mode, as the
/// adapter requires).
fn tape_rest_config(url: &str) -> String {
    let mss = format!(
        "adapter = \"tape_rest\"\n[mss.tape_rest]\nurl = \"{url}\"\npoll_ms = 50\n\
         auth = {{ method = \"none\" }}\n"
    );
    config_with(&mss).replace("[mss]", "[release]\nmode = \"held\"\nlimit = 4\n\n[mss]")
}

/// Stage requests the stand-in holds for `path`.
fn staged(standin: &TapeRestStandin, path: &str) -> usize {
    (standin.requests().iter())
        .flat_map(|r| r.files.iter())
        .filter(|f| f["path"] == path)
        .count()
}

/// `mssbroker_unsettled_requests` in the broker's `/metrics`.
async fn unsettled_metric(client: &reqwest::Client, base: &str) -> i64 {
    let text = (client.get(format!("{base}/metrics")).send().await)
        .unwrap()
        .text()
        .await
        .unwrap();
    let line = (text.lines())
        .find(|l| l.starts_with("mssbroker_unsettled_requests "))
        .unwrap_or_else(|| panic!("no mssbroker_unsettled_requests in {text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// New in step 6: the Tape REST API has no client-chosen id and no listing of stage requests,
/// so a send the killed broker marked cannot be settled. The restarted broker holds it for an
/// operator instead of staging it again, shows it, counts it, and sends it again when the
/// operator says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marked_send_the_mss_cannot_settle_is_held_for_an_operator_not_resent() {
    let plan = Plan {
        queued: Duration::from_millis(100),
        active: Duration::from_millis(100),
    };
    let standin = TapeRestStandin::start(None, plan).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("broker.toml");
    std::fs::write(&config, tape_rest_config(&standin.url)).unwrap();
    let db = dir.path().join("broker.db");
    let client = reqwest::Client::new();

    // The endpoint answers 503 to everything: each send is marked and its outcome unknown
    // to the broker, which is killed while it waits to send again.
    standin.set_down(true);
    let mut broker = ServeProcess::start(&config, &db);
    let file = "/pnfs/test/u1";
    let body = json!({
        "client_request_id": "u1", "station": "station-a", "user": "alice", "file": file,
        "size_bytes": 1_500, "access_mode": "analysis", "physics_group": "top",
    });
    let id = submit(&client, &broker.base, &body).await;
    let dropped_file = "/pnfs/test/u3";
    let mut dropped_body = body.clone();
    dropped_body["client_request_id"] = json!("u3");
    dropped_body["file"] = json!(dropped_file);
    let dropped = submit(&client, &broker.base, &dropped_body).await;
    wait_for_count(&db, MARKED, 2, Duration::from_secs(20)).await;
    let calls_before = standin.calls().len();
    assert!(calls_before > 0, "the broker tried to send");
    broker.kill();
    standin.set_down(false);

    let broker = ServeProcess::start(&config, &db);
    let held = wait_request(&client, &broker.base, id, Duration::from_secs(20), |r| {
        r["unsettled"] == true
    })
    .await;
    assert_eq!(held["state"], "accepted", "{held}");
    let why = held["last_error"].as_str().unwrap_or_default();
    assert!(
        why.contains("unsettled") && why.contains("tape_rest"),
        "{held}"
    );
    assert_eq!(held["explain"]["unsettled"], why, "{held}");
    wait_request(
        &client,
        &broker.base,
        dropped,
        Duration::from_secs(20),
        |r| r["unsettled"] == true,
    )
    .await;
    assert_eq!(unsettled_metric(&client, &broker.base).await, 2);
    // The dispatcher runs: a request made after the restart is staged and done, and the held
    // one was not staged meanwhile.
    let other = submit(
        &client,
        &broker.base,
        &json!({
            "client_request_id": "u2", "station": "station-a", "user": "alice",
            "file": "/pnfs/test/u2", "size_bytes": 1_500, "access_mode": "analysis",
            "physics_group": "top",
        }),
    )
    .await;
    let done = wait_final(&client, &broker.base, &[other], Duration::from_secs(30)).await;
    assert_eq!(done[0]["state"], "done", "{}", done[0]);
    assert_eq!(staged(&standin, file), 0, "{:?}", standin.requests());
    let (_, still) = get(&client, format!("{}/v1/requests/{id}", broker.base)).await;
    assert_eq!(
        (still["state"].as_str(), &still["unsettled"]),
        (Some("accepted"), &json!(true))
    );

    // Only an unsettled request is resent; a bad id names the field.
    let resend = |id: &str| format!("{}/v1/requests/{id}/resend", broker.base);
    let (status, r) = post(&client, resend(&other.to_string()), &json!({})).await;
    assert_eq!((status, r["field"].as_str()), (409, Some("id")), "{r}");
    let (status, r) = post(&client, resend("01"), &json!({})).await;
    assert_eq!((status, r["field"].as_str()), (400, Some("id")), "{r}");
    let (status, r) = post(&client, resend("999999"), &json!({})).await;
    assert_eq!(status, 404, "{r}");
    assert_eq!(staged(&standin, file), 0);

    // The other one is not wanted: cancelled, it is never staged, ends cancelled and refunded.
    let resp = (client
        .delete(format!("{}/v1/requests/{dropped}", broker.base))
        .send()
        .await)
        .unwrap();
    assert_eq!(resp.status().as_u16(), 202);
    let ended = wait_final(&client, &broker.base, &[dropped], Duration::from_secs(30)).await;
    assert_eq!(
        (ended[0]["state"].as_str(), ended[0]["charged"].as_i64()),
        (Some("cancelled"), Some(0)),
        "{}",
        ended[0]
    );
    assert_eq!(staged(&standin, dropped_file), 0);
    assert_eq!(unsettled_metric(&client, &broker.base).await, 1);

    // The operator found the MSS does not hold it: resend, once.
    let (status, r) = post(&client, resend(&id.to_string()), &json!({})).await;
    assert_eq!((status, &r), (200, &json!({"id": id, "resent": true})));
    let done = wait_final(&client, &broker.base, &[id], Duration::from_secs(30)).await;
    assert_done_at_the_first_attempt(&done[0]);
    assert_eq!(done[0]["unsettled"], false);
    assert_eq!(staged(&standin, file), 1);
    assert_eq!(unsettled_metric(&client, &broker.base).await, 0);
    let (status, _) = post(&client, resend(&id.to_string()), &json!({})).await;
    assert_eq!(status, 409);
}

/// `check-config` says per adapter whether its MSS can be asked about a key and deduplicate,
/// and what a crash or a takeover then means for an unanswered send.
#[test]
fn check_config_says_how_the_adapter_settles_an_unanswered_send() {
    let dir = tempfile::tempdir().unwrap();
    let check = |name: &str, text: String| -> String {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let out = std::process::Command::new(BIN)
            .arg("check-config")
            .arg(&path)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{said}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        said.lines()
            .find(|l| l.starts_with("mss settling:"))
            .unwrap_or_else(|| panic!("no settling line in {said}"))
            .to_string()
    };
    let http = check("http.toml", test_config(Some("http://127.0.0.1:9")));
    assert!(
        http.contains("status by key yes, deduplicates by key yes")
            && http.contains("sent again with the same key and attempt"),
        "{http}"
    );
    let tape = check(
        "tape.toml",
        tape_rest_config("https://dcache.example.org:3880/api/v1/tape"),
    );
    assert!(
        tape.contains("status by key no, deduplicates by key no")
            && tape.contains("NOT sent again")
            && tape.contains("unsettled"),
        "{tape}"
    );
}

/// New in step 6, encp: what runs and ran is in the adapter's memory alone, so a send the
/// killed broker marked is held for an operator too. The send could not start encp (its
/// command is missing: the adapter answers "unavailable", and the mark stays); after the
/// restart encp is there, and the request is not run until the operator resends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encp_send_marked_before_a_kill_is_held_for_an_operator_not_run_again() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("stage")).unwrap();
    // The command is a link to the stand-in encp that does not exist yet.
    let command = dir.path().join("encp");
    let mss = crate::adapters::encp_mss(dir.path(), 3).replace(
        &encp_standin::script().display().to_string(),
        &command.display().to_string(),
    );
    let config = dir.path().join("broker.toml");
    std::fs::write(&config, config_with(&mss)).unwrap();
    let db = dir.path().join("broker.db");
    let client = reqwest::Client::new();

    let mut broker = ServeProcess::start(&config, &db);
    let id = submit(
        &client,
        &broker.base,
        &request("e1", "analysis", "higgs", 1_000),
    )
    .await;
    wait_for_count(&db, MARKED, 1, Duration::from_secs(20)).await;
    broker.kill();
    std::os::unix::fs::symlink(encp_standin::script(), &command).unwrap();
    encp_standin::control(dir.path(), "e1", "bytes 1000\n").unwrap();

    let broker = ServeProcess::start(&config, &db);
    let held = wait_request(&client, &broker.base, id, Duration::from_secs(20), |r| {
        r["unsettled"] == true
    })
    .await;
    let why = held["last_error"].as_str().unwrap_or_default();
    assert!(why.contains("encp"), "{held}");
    // The dispatcher runs: a request made after the restart runs and is done; the held one
    // did not run meanwhile.
    let other = submit(
        &client,
        &broker.base,
        &request("e2", "analysis", "higgs", 1_000),
    )
    .await;
    encp_standin::control(dir.path(), "e2", "bytes 1000\n").unwrap();
    let done = wait_final(&client, &broker.base, &[other], Duration::from_secs(30)).await;
    assert_eq!(done[0]["state"], "done", "{}", done[0]);
    let runs_of = |name: &str| {
        let source = format!("/pnfs/test/{name}");
        (encp_standin::runs(dir.path()).iter())
            .filter(|r| r.source() == Some(source.as_str()))
            .count()
    };
    assert_eq!(runs_of("e1"), 0);

    let (status, r) = post(
        &client,
        format!("{}/v1/requests/{id}/resend", broker.base),
        &json!({}),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    let done = wait_final(&client, &broker.base, &[id], Duration::from_secs(30)).await;
    assert_done_at_the_first_attempt(&done[0]);
    assert_eq!(runs_of("e1"), 1);
}

/// The request ended `done` at attempt 1: its send, however settled, was one transfer.
fn assert_done_at_the_first_attempt(request: &Value) {
    assert_eq!(
        (request["state"].as_str(), request["attempt"].as_i64()),
        (Some("done"), Some(1)),
        "{request}"
    );
}

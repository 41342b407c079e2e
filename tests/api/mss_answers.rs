//! MSS answers the broker cannot read (garbled, stalled, a proxy's 404, over-size), whether or
//! not the MSS queued the transfers: no request fails, and once the MSS answers properly each is
//! transferred exactly once and charged once. An MSS error body of 200 KB full of newlines is
//! stored clipped in `last_error` and never forges a line of the real `serve` process's log.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mss_adapters::protocol::{BadAnswer, Faults};
use serde_json::{json, Value};

use crate::helpers::{
    assert_each_attempt_once, open_db, request, set_faults, test_config, wait_final, SimProcess,
    TestApp, BIN,
};

fn bad(answer: BadAnswer, queue: bool) -> Faults {
    Faults {
        submit_answer: Some(answer),
        queue_before_bad_answer: queue,
        ..Faults::default()
    }
}

/// The test configuration against `sim`, with calls to the MSS timing out after half a second.
fn config(sim: &SimProcess) -> String {
    test_config(Some(&sim.url)).replace(
        "adapter = \"http\"",
        "adapter = \"http\"\ntimeout_ms = 500\nsubmit_batch = 8",
    )
}

async fn submit(base: &str, prefix: &str, n: u64) -> Vec<i64> {
    let items: Vec<Value> = (0..n)
        .map(|i| request(&format!("{prefix}{i}"), "mc", "top", 1_000_000 + i))
        .collect();
    let resp = reqwest::Client::new()
        .post(format!("{base}/v1/requests/batch"))
        .json(&json!({ "requests": items }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    let body: Value = resp.json().await.unwrap();
    body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect()
}

/// Poll the simulator until it has answered `n` submission calls badly.
async fn wait_bad_answers(sim: &SimProcess, n: u64) {
    let start = Instant::now();
    while sim.received().await.refused < n {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "fewer than {n} bad answers: {:?}",
            sim.received().await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn count(app: &TestApp, sql: &str) -> i64 {
    open_db(&app.db).query_row(sql, [], |r| r.get(0)).unwrap()
}

/// Twenty requests meet `answer` (after the MSS queued them or not): resent, never failed; then
/// the MSS answers properly and each is done, queued at the MSS once and charged once.
async fn run_case(answer: BadAnswer, queue: bool) {
    let case = format!("{answer:?} queue={queue}");
    // Queued transfers take a while (1.25 s mounts), so the MSS still has them when the bad
    // answer arrives and when the requests are resent.
    let sim = if queue {
        SimProcess::start_with(4, 4.0)
    } else {
        SimProcess::start()
    };
    set_faults(&sim, &bad(answer, queue)).await;
    let app = TestApp::spawn(&config(&sim)).await;
    let ids = submit(&app.base, "u", 20).await;
    // Three calls of 8, 8 and 4 transfers were answered badly, then resent (the same keys) and
    // answered badly again.
    wait_bad_answers(&sim, 6).await;
    let queued = sim.received().await;
    if queue {
        assert!(queued.duplicates > 0, "{case}: resent with the same keys");
    } else {
        assert!(queued.received.is_empty(), "{case}");
    }
    let failed = count(&app, "SELECT count(*) FROM requests WHERE state = 'failed'").await;
    assert_eq!(failed, 0, "{case}: an unreadable answer failed requests");
    set_faults(&sim, &Faults::default()).await;
    let finals = app.wait_final(&ids, Duration::from_secs(60)).await;
    assert!(
        finals.iter().all(|r| r["state"] == "done"),
        "{case}: {finals:?}"
    );
    let received = sim.received().await;
    assert_each_attempt_once(&received);
    assert_eq!(received.received.len(), 20, "{case}: each queued once");
    assert!(received.received.iter().all(|r| r.attempt == 1), "{case}");
    let done_bytes: u64 = finals
        .iter()
        .map(|r| r["bytes_done"].as_u64().unwrap())
        .sum();
    assert_eq!(done_bytes, (0..20).map(|i| 1_000_000 + i).sum::<u64>());
    let mc = app.group("mc").await;
    assert_eq!(mc["usage_bytes"].as_u64().unwrap(), done_bytes, "{case}");
    let charged = count(&app, "SELECT sum(charged_bytes) FROM requests").await;
    assert_eq!(charged as u64, done_bytes, "{case}: charged once");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbled_answer_fails_nothing_and_each_transfer_happens_once() {
    run_case(BadAnswer::Garbled, false).await;
    run_case(BadAnswer::Garbled, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_answer_fails_nothing_and_each_transfer_happens_once() {
    run_case(BadAnswer::Stalled, false).await;
    run_case(BadAnswer::Stalled, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxys_404_fails_nothing_and_each_transfer_happens_once() {
    run_case(BadAnswer::ProxyNotFound, false).await;
    run_case(BadAnswer::ProxyNotFound, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_over_size_answer_is_unknown_not_a_refusal() {
    run_case(BadAnswer::Oversized { bytes: 1 << 30 }, true).await;
}

/// The real `serve` binary, killed and reaped when dropped.
struct Serve {
    child: Child,
    base: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The real `serve` binary against `sim`, its log (stderr, text, no colours) in `log`.
fn serve_logging_to(dir: &Path, sim: &SimProcess, log: &Path) -> Serve {
    let config_file = dir.join("broker.toml");
    std::fs::write(&config_file, config(sim)).unwrap();
    let mut child = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config_file)
        .arg("--db")
        .arg(dir.join("broker.db"))
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .expect("start serve");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let base = line.trim().rsplit(' ').next().unwrap().to_string();
    assert!(base.starts_with("http://"), "banner {line:?}");
    Serve { child, base }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_mss_error_body_is_stored_clipped_and_forges_no_log_line() {
    let sim = SimProcess::start();
    let refusal = BadAnswer::ErrorBody {
        status: 422,
        bytes: 200_000,
    };
    set_faults(&sim, &bad(refusal, false)).await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("serve.log");
    let serve = serve_logging_to(dir.path(), &sim, &log);
    let ids = submit(&serve.base, "e", 5).await;
    // The MSS itself refused them (its JSON error on a 422): failed, with its reason clipped.
    let client = reqwest::Client::new();
    let finals = wait_final(&client, &serve.base, &ids, Duration::from_secs(30)).await;
    for r in &finals {
        assert_eq!(r["state"], "failed", "{r}");
        let last_error = r["last_error"].as_str().unwrap();
        assert!(last_error.contains("422"), "{last_error}");
        assert!(last_error.contains("refused\n2026"), "{last_error}");
        assert!(
            last_error.chars().count() <= 600,
            "{} chars",
            last_error.len()
        );
        assert!(last_error.contains("bytes cut]"), "{last_error}");
    }
    drop(serve);
    let text = std::fs::read_to_string(&log).unwrap();
    let refusals: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("mss refused the transfer"))
        .collect();
    assert_eq!(refusals.len(), 5, "one warning per request:\n{text}");
    for line in text.lines() {
        assert!(
            !line.starts_with("2026-01-01T00:00:00"),
            "a forged log line: {line:?}"
        );
        assert!(line.len() < 2000, "a log line of {} bytes", line.len());
    }
    assert!(!text.contains(['\r', '\u{1b}']), "raw control characters");
    assert!(
        refusals[0].contains(r"refused\n2026-01-01T00:00:00.000000Z  INFO mssbroker: FORGED"),
        "the newline is escaped in place: {}",
        refusals[0]
    );
}

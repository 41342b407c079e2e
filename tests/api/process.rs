//! The `serve` process itself: signals, the database lock, a database deleted under it, and the
//! HTTP server's connection limit and timeouts, all through the real binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::helpers::{request, run_ok, test_config, wait_for_text, ServeProcess, BIN};

/// A directory with a configuration (embedded simulator) and the paths of a database and a log.
struct Setup {
    dir: tempfile::TempDir,
    config: PathBuf,
    db: PathBuf,
}

impl Setup {
    fn new(server_extra: &str) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("broker.toml");
        let text = test_config(None).replacen(
            "listen = \"127.0.0.1:0\"\n",
            &format!("listen = \"127.0.0.1:0\"\n{server_extra}"),
            1,
        );
        std::fs::write(&config, text).unwrap();
        let db = dir.path().join("broker.db");
        Setup { dir, config, db }
    }

    fn log(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn start(&self, log: &Path) -> ServeProcess {
        ServeProcess::start_logged(&self.config, &self.db, log)
    }
}

async fn healthz(base: &str) -> u16 {
    reqwest::Client::new()
        .get(format!("{base}/healthz"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_is_logged_and_the_broker_keeps_serving() {
    let setup = Setup::new("");
    let log = setup.log("serve.log");
    let mut broker = setup.start(&log);
    assert_eq!(healthz(&broker.base).await, 200);
    broker.signal("HUP");
    wait_for_text(&log, "SIGHUP received", Duration::from_secs(10)).await;
    assert!(
        broker.child.try_wait().unwrap().is_none(),
        "the broker exited on SIGHUP"
    );
    assert_eq!(
        healthz(&broker.base).await,
        200,
        "still serving after SIGHUP"
    );
    let (status, _) = submit(&broker.base, "after-hup").await;
    assert_eq!(status, 202);
}

async fn submit(base: &str, crid: &str) -> (u16, serde_json::Value) {
    let resp = reqwest::Client::new()
        .post(format!("{base}/v1/requests"))
        .json(&request(crid, "analysis", "higgs", 1_000_000))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or_default())
}

/// Wait for `child` to exit; kill it and panic if it is still running after `limit`.
fn wait_exit(child: &mut std::process::Child, limit: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_serve_on_the_same_database_is_refused_naming_the_holder() {
    let setup = Setup::new("");
    let first = setup.start(&setup.log("first.log"));
    let (status, _) = submit(&first.base, "one").await;
    assert_eq!(status, 202);
    let mut second = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&setup.config)
        .arg("--db")
        .arg(&setup.db)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(setup.log("second.log")).unwrap())
        .spawn()
        .unwrap();
    let status = wait_exit(&mut second, Duration::from_secs(20));
    assert!(!status.success(), "the second serve must fail");
    let err = std::fs::read_to_string(setup.log("second.log")).unwrap();
    assert!(
        err.contains(&format!("pid {}", first.child.id())),
        "names the holder's pid: {err}"
    );
    assert!(
        err.contains(&setup.db.display().to_string()),
        "names the database: {err}"
    );
    // The first one still serves, and read-only commands work beside it.
    let (status, _) = submit(&first.base, "two").await;
    assert_eq!(status, 202);
    let config = setup.config.to_str().unwrap();
    let db = setup.db.to_str().unwrap();
    let shares = run_ok(&["shares", "--config", config, "--db", db]);
    assert!(shares.contains("higgs"), "{shares}");
    run_ok(&["report", "--config", config, "--db", db]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_database_makes_submissions_answer_503_and_is_logged() {
    let setup = Setup::new("");
    let log = setup.log("serve.log");
    let broker = setup.start(&log);
    let (status, _) = submit(&broker.base, "before").await;
    assert_eq!(status, 202);
    std::fs::remove_file(&setup.db).unwrap();
    for i in 0..50 {
        let (status, body) = submit(&broker.base, &format!("after-{i}")).await;
        assert_eq!(status, 503, "request {i} after the deletion: {body}");
    }
    let text = wait_for_text(&log, "no longer the file at", Duration::from_secs(10)).await;
    assert!(text.contains(&setup.db.display().to_string()), "{text}");
}

//! `GET /readyz` through the real `serve` process: 503 naming the database while its file
//! cannot be written, 503 naming the MSS while the MSS does not answer, 200 otherwise.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::helpers::{test_config, ServeProcess, SimProcess, BIN};

/// `mssbroker serve ARGS` with `env` set and its log written to `log`; returns once it has
/// printed the address it listens on.
pub fn serve_with(args: &[&str], env: &[(&str, &str)], log: &Path) -> ServeProcess {
    let mut command = Command::new(BIN);
    command
        .arg("serve")
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).expect("create the log file"));
    let mut child = command.spawn().expect("start serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("banner");
    let base = line.trim().rsplit(' ').next().unwrap_or("").to_string();
    assert!(
        base.starts_with("http://"),
        "banner {line:?}; log: {}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    ServeProcess { child, base }
}

/// `serve` in `dir` on port 0 with `config_text` as its configuration file, its database
/// `dir/broker.db` and its log `dir/serve.log` (returned), with `env` set.
pub fn serve_in(
    dir: &Path,
    config_text: &str,
    env: &[(&str, &str)],
) -> (ServeProcess, std::path::PathBuf) {
    let config = dir.join("broker.toml");
    std::fs::write(&config, config_text).unwrap();
    let db = dir.join("broker.db");
    let log = dir.join("serve.log");
    let args = [
        "--listen",
        "127.0.0.1:0",
        "--config",
        config.to_str().unwrap(),
        "--db",
        db.to_str().unwrap(),
    ];
    (serve_with(&args, env, &log), log)
}

async fn readyz(base: &str) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .get(format!("{base}/readyz"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

/// Poll `/readyz` until `want(status, body)`; panics after 20 s with the last answer.
async fn wait_ready(base: &str, what: &str, want: impl Fn(u16, &Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let (status, body) = readyz(base).await;
        if want(status, &body) {
            return body;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{what}: last answer {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn names(body: &Value, check: &str) -> bool {
    body["ready"] == false
        && body["problems"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["check"] == check))
}

/// Makes a file unwritable for the broker and back. Not root: its mode (0444). Root ignores
/// the mode, so there the file is made immutable (`chattr +i`, which refuses writes to root
/// too); the test fails, rather than passes unchecked, where that is not possible.
struct ReadOnly<'a>(&'a Path);

impl<'a> ReadOnly<'a> {
    fn set(path: &'a Path) -> ReadOnly<'a> {
        if unsafe { libc::geteuid() } == 0 {
            chattr(path, "+i");
        } else {
            set_mode(path, 0o444);
        }
        ReadOnly(path)
    }
}

impl Drop for ReadOnly<'_> {
    fn drop(&mut self) {
        if unsafe { libc::geteuid() } == 0 {
            chattr(self.0, "-i");
        } else {
            set_mode(self.0, 0o644);
        }
    }
}

fn chattr(path: &Path, flag: &str) {
    let out = Command::new("chattr").arg(flag).arg(path).output();
    let ok = out.as_ref().is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "running as root, the test needs `chattr {flag}` on {} to make the database unwritable: {out:?}",
        path.display()
    );
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_while_the_database_file_cannot_be_written() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, _) = serve_in(dir.path(), &test_config(None), &[]);
    let db: PathBuf = dir.path().join("broker.db");
    let db_arg = db.to_str().unwrap();
    let body = wait_ready(&broker.base, "ready at start", |s, _| s == 200).await;
    assert_eq!(body, json!({"ready": true, "problems": []}));
    {
        let _read_only = ReadOnly::set(&db);
        let body = wait_ready(&broker.base, "database unwritable", |s, b| {
            s == 503 && names(b, "database")
        })
        .await;
        let problems = body["problems"].to_string();
        assert!(problems.contains(db_arg), "names the file: {problems}");
        assert!(!names(&body, "mss"), "only the database is wrong: {body}");
        // Liveness is not readiness.
        let health = reqwest::get(format!("{}/healthz", broker.base))
            .await
            .unwrap();
        assert_eq!(health.status().as_u16(), 200);
    }
    wait_ready(&broker.base, "writable again", |s, _| s == 200).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_naming_the_mss_while_it_does_not_answer() {
    let sim = SimProcess::start();
    let dir = tempfile::tempdir().unwrap();
    let (broker, log) = serve_in(dir.path(), &test_config(Some(&sim.url)), &[]);
    wait_ready(&broker.base, "ready at start", |s, _| s == 200).await;
    let down = json!({"down_for_ms": 4000});
    let put = reqwest::Client::new()
        .put(format!("{}/v1/faults", sim.url))
        .json(&down)
        .send()
        .await
        .unwrap();
    assert!(put.status().is_success());
    let body = wait_ready(&broker.base, "mss down", |s, b| s == 503 && names(b, "mss")).await;
    assert!(
        body["problems"].to_string().contains("unavailable"),
        "says why: {body}"
    );
    // The outage ends by itself: the next answered call makes the broker ready again.
    wait_ready(&broker.base, "mss back", |s, _| s == 200).await;
    // A 503 of a probe is an answer, not an error: none was logged at ERROR.
    let text = std::fs::read_to_string(&log).unwrap();
    let errors: Vec<&str> = text.lines().filter(|l| l.contains("ERROR")).collect();
    assert!(errors.is_empty(), "{errors:#?}");
}

/// Lines of the log written after `from` bytes that contain `needle`.
fn lines_after(log: &Path, from: usize, needle: &str) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap();
    (text[from..].lines())
        .filter(|l| l.contains(needle))
        .map(str::to_string)
        .collect()
}

/// A load balancer probes `/readyz` every few seconds: while the broker stays not ready, every
/// probe is answered 503, and the log says so once, at WARN with the reason, then once more
/// (INFO) when it is ready again; not a line per probe. Before, a 503 was logged per probe (at
/// ERROR, then at DEBUG, so not at all by default): neither the change nor its reason was in
/// the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_of_readiness_is_logged_once_not_every_probe() {
    let sim = SimProcess::start();
    let dir = tempfile::tempdir().unwrap();
    let (broker, log) = serve_in(dir.path(), &test_config(Some(&sim.url)), &[]);
    wait_ready(&broker.base, "ready at start", |s, _| s == 200).await;
    let from = std::fs::read_to_string(&log).unwrap().len();
    let faults = |down_for_ms: u64| {
        let sim = sim.url.clone();
        async move {
            let put = reqwest::Client::new()
                .put(format!("{sim}/v1/faults"))
                .json(&json!({ "down_for_ms": down_for_ms }))
                .send()
                .await
                .unwrap();
            assert!(put.status().is_success());
        }
    };
    faults(60_000).await;
    wait_ready(&broker.base, "mss down", |s, b| s == 503 && names(b, "mss")).await;
    for _ in 0..5 {
        let (status, body) = readyz(&broker.base).await;
        assert!(status == 503 && names(&body, "mss"), "{status} {body}");
    }
    faults(0).await;
    wait_ready(&broker.base, "mss back", |s, _| s == 200).await;
    let down = lines_after(&log, from, "not ready");
    assert_eq!(
        down.len(),
        1,
        "one line for the change, not one per probe: {down:#?}"
    );
    assert!(
        down[0].contains("WARN") && down[0].contains("mss") && down[0].contains("unavailable"),
        "at WARN, with the reason: {}",
        down[0]
    );
    let back = lines_after(&log, from, "ready again");
    assert_eq!(back.len(), 1, "{back:#?}");
    assert!(back[0].contains("INFO"), "{}", back[0]);
}

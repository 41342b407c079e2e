//! Test helpers: a real broker on port 0 with its own SQLite file, talking over HTTP to a real
//! simulator process (`mssbroker mss-sim`) or to the broker's embedded simulator.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mss_adapters::protocol::ReceivedResponse;
use mssbroker::clock::{Clock, SystemClock};
use mssbroker::config::Settings;
use mssbroker::startup::Application;
use serde_json::{json, Value};
use tokio::sync::oneshot;

pub const BIN: &str = env!("CARGO_BIN_EXE_mssbroker");

/// The base configuration every test shares (the library's unit tests start from it too).
pub const BASE_CONFIG: &str = include_str!("../fixtures/base.toml");

/// A configuration for tests: the shared base, fast retries, and the MSS at `mss_url` or,
/// when `None`, the embedded simulator at a high time scale.
pub fn test_config(mss_url: Option<&str>) -> String {
    let mss = match mss_url {
        Some(url) => format!("url = \"{url}\"\n"),
        None => "[mss.simulator]\nlisten = \"127.0.0.1:0\"\ndrives = 4\nmount_seconds = 5.0\nrate_mb_per_sec = 500.0\ntime_scale = 1000.0\n".to_string(),
    };
    format!(
        r#"
[server]
listen = "127.0.0.1:0"

{BASE_CONFIG}
[limits]
max_batch = 500
max_size_bytes = 1000000000000

[mss]
adapter = "http"
retry_base_ms = 50
retry_max_ms = 500
event_wait_ms = 200
stale_after_ms = 400
{mss}
"#
    )
}

/// A simulator running as its own process.
pub struct SimProcess {
    child: Child,
    pub url: String,
}

impl SimProcess {
    /// Start `mssbroker mss-sim` on a free port and wait for its address: 4 drives, 5 s mounts,
    /// 500 MB/s, 1000 virtual seconds per second.
    pub fn start() -> SimProcess {
        SimProcess::start_with(4, 1000.0)
    }

    pub fn start_with(drives: usize, time_scale: f64) -> SimProcess {
        SimProcess::spawn("127.0.0.1:0", drives, time_scale, &[])
    }

    /// A simulator on a given address (to replace one that was stopped).
    pub fn start_on(listen: &str, drives: usize, time_scale: f64) -> SimProcess {
        SimProcess::spawn(listen, drives, time_scale, &[])
    }

    /// A simulator of `drives` drives at `time_scale` with extra flags.
    pub fn start_with_drives(drives: usize, time_scale: f64, extra: &[&str]) -> SimProcess {
        SimProcess::spawn("127.0.0.1:0", drives, time_scale, extra)
    }

    /// The default simulator with extra flags (ones the defaults do not set).
    pub fn start_with_args(extra: &[&str]) -> SimProcess {
        SimProcess::spawn("127.0.0.1:0", 4, 1000.0, extra)
    }

    fn spawn(listen: &str, drives: usize, time_scale: f64, extra: &[&str]) -> SimProcess {
        let drives = drives.to_string();
        let time_scale = time_scale.to_string();
        let mut args = vec!["--listen", listen];
        args.extend(["--mount-seconds", "5", "--rate-mb-per-sec", "500"]);
        args.extend(["--drives", &drives, "--time-scale", &time_scale]);
        args.extend(extra);
        SimProcess::spawn_args(&args)
    }

    /// `mss-sim --config config` and `extra` flags: the simulator `[mss.simulator]` of a
    /// broker configuration describes (its listen address included).
    pub fn start_with_config(config: &std::path::Path, extra: &[&str]) -> SimProcess {
        let config = config.to_str().expect("a UTF-8 path");
        let mut args = vec!["--config", config];
        args.extend(extra);
        SimProcess::spawn_args(&args)
    }

    fn spawn_args(args: &[&str]) -> SimProcess {
        let mut child = Command::new(BIN)
            .arg("mss-sim")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mss-sim");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read address");
        let url = line
            .trim()
            .rsplit(' ')
            .next()
            .expect("address in the first line")
            .to_string();
        assert!(url.starts_with("http://"), "unexpected first line {line:?}");
        SimProcess { child, url }
    }

    pub async fn received(&self) -> ReceivedResponse {
        reqwest::get(format!("{}/v1/received", self.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

/// The simulator's record once it holds every key of `ids` (panics after 20 s).
pub async fn received_all(sim: &SimProcess, ids: &[i64]) -> ReceivedResponse {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = sim.received().await;
        if (ids.iter()).all(|&id| r.received.iter().any(|t| key_id(&t.key) == id)) {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "not all of {ids:?} reached the mss: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

impl Drop for SimProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The real `mssbroker serve` binary on a free loopback port, with `config` and `db`. It is
/// killed and reaped when dropped.
pub struct ServeProcess {
    pub child: Child,
    pub base: String,
}

impl ServeProcess {
    pub fn start(config: &std::path::Path, db: &std::path::Path) -> ServeProcess {
        ServeProcess::spawn(config, db, Stdio::null())
    }

    /// `serve` on port 0 with `config` and `db`, its log to `stderr`; returns once it has
    /// printed the address it listens on.
    fn spawn(config: &std::path::Path, db: &std::path::Path, stderr: Stdio) -> ServeProcess {
        let mut child = Command::new(BIN)
            .args(["serve", "--listen", "127.0.0.1:0", "--config"])
            .arg(config)
            .arg("--db")
            .arg(db)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("banner");
        let base = line.trim().rsplit(' ').next().expect("address").to_string();
        assert!(base.starts_with("http://"), "banner {line:?}");
        ServeProcess { child, base }
    }

    /// SIGKILL, and wait for it to be gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A broker running in this test's runtime.
pub struct TestApp {
    pub base: String,
    pub db: PathBuf,
    pub client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    handle: Option<tokio::task::JoinHandle<()>>,
    _dir: Option<tempfile::TempDir>,
}

impl TestApp {
    /// Start a broker on `config` with a fresh database.
    pub async fn spawn(config: &str) -> TestApp {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("broker.db");
        let mut app = TestApp::spawn_on(config, db).await;
        app._dir = Some(dir);
        app
    }

    /// Start a broker on `config` with the database at `db` (kept by the caller).
    pub async fn spawn_on(config: &str, db: PathBuf) -> TestApp {
        TestApp::spawn_with_clock(config, db, Arc::new(SystemClock)).await
    }

    /// Start a broker whose ledger and dispatcher read `clock`.
    pub async fn spawn_with_clock(config: &str, db: PathBuf, clock: Arc<dyn Clock>) -> TestApp {
        let mut settings = Settings::parse(config, "test").expect("test config");
        settings.database.path = db.clone();
        let app = Application::build_with_clock(&settings, clock)
            .await
            .expect("build broker");
        TestApp::run(app, db)
    }

    /// Start a broker that holds office as `role` says (the test holds the sender).
    pub async fn spawn_with_role(
        config: &str,
        db: PathBuf,
        role: tokio::sync::watch::Receiver<mssbroker::leadership::Role>,
    ) -> TestApp {
        let mut settings = Settings::parse(config, "test").expect("test config");
        settings.database.path = db.clone();
        let app = Application::build_with_role(&settings, Arc::new(SystemClock), role)
            .await
            .expect("build broker");
        TestApp::run(app, db)
    }

    /// Serve `app` (built on `db`) in this test's runtime.
    fn run(app: Application, db: PathBuf) -> TestApp {
        let addr: SocketAddr = app.local_addr();
        let (stop, stopped) = oneshot::channel::<()>();
        let handle = tokio::spawn(async move {
            app.run_until_stopped(async {
                let _ = stopped.await;
            })
            .await
            .expect("broker run");
        });
        TestApp {
            base: format!("http://{addr}"),
            db,
            client: reqwest::Client::new(),
            stop: Some(stop),
            handle: Some(handle),
            _dir: None,
        }
    }

    /// Stop serving and wait until the ledger is closed.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(h) = self.handle.take() {
            h.await.unwrap();
        }
    }

    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let resp = self
            .client
            .post(format!("{}{path}", self.base))
            .json(body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    pub async fn post_raw(&self, path: &str, content_type: &str, body: Vec<u8>) -> (u16, Value) {
        let resp = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let resp = self
            .client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        let resp = self
            .client
            .delete(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// One group's figures from `GET /v1/groups`.
    pub async fn group(&self, path: &str) -> Value {
        let (status, groups) = self.get("/v1/groups").await;
        assert_eq!(status, 200, "{groups}");
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["path"] == path)
            .unwrap_or_else(|| panic!("no group {path} in {groups}"))
            .clone()
    }

    /// Poll until every id is in a terminal state; panics after `limit`.
    pub async fn wait_final(&self, ids: &[i64], limit: Duration) -> Vec<Value> {
        wait_final(&self.client, &self.base, ids, limit).await
    }
}

/// Poll the broker at `base` until every id is in a terminal state (done, failed or
/// cancelled), and return the requests; panics after `limit`.
pub async fn wait_final(
    client: &reqwest::Client,
    base: &str,
    ids: &[i64],
    limit: Duration,
) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let mut all = Vec::with_capacity(ids.len());
        for id in ids {
            let resp = client
                .get(format!("{base}/v1/requests/{id}"))
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            let body = resp.json().await.unwrap_or(Value::Null);
            assert_eq!(status, 200, "request {id}: {body}");
            all.push(body);
        }
        let pending = all
            .iter()
            .filter(|r| !matches!(r["state"].as_str(), Some("done" | "failed" | "cancelled")))
            .count();
        if pending == 0 {
            return all;
        }
        assert!(
            start.elapsed() < limit,
            "{pending} of {} requests not final after {limit:?}",
            ids.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// A request body.
pub fn request(crid: &str, mode: &str, group: &str, size: u64) -> Value {
    json!({
        "client_request_id": crid,
        "station": "station-a",
        "user": "alice",
        "file": format!("/pnfs/test/{crid}"),
        "size_bytes": size,
        "access_mode": mode,
        "physics_group": group,
    })
}

/// The request id an MSS key names (`"{id}.{nonce}"`, `ledger::mss_key`).
pub fn key_id(key: &str) -> i64 {
    let id = key.split_once('.').map_or(key, |(id, _)| id);
    id.parse()
        .unwrap_or_else(|_| panic!("not a broker's MSS key: {key:?}"))
}

/// The MSS key of request `id`, as the broker shows it.
pub async fn mss_key(app: &TestApp, id: i64) -> String {
    let (status, r) = app.get(&format!("/v1/requests/{id}")).await;
    assert_eq!(status, 200, "{r}");
    r["mss_key"]
        .as_str()
        .unwrap_or_else(|| panic!("no mss_key: {r}"))
        .to_string()
}

/// The MSS never queued the same key and attempt twice.
pub fn assert_each_attempt_once(received: &ReceivedResponse) {
    let keys: std::collections::HashSet<(&str, u32)> = received
        .received
        .iter()
        .map(|r| (r.key.as_str(), r.attempt))
        .collect();
    assert_eq!(
        keys.len(),
        received.received.len(),
        "the MSS queued a key and attempt twice"
    );
}

/// Poll the database file until `sql` (a single count) returns `want`; panics after `limit`.
pub async fn wait_for_count(db: &std::path::Path, sql: &str, want: i64, limit: Duration) {
    let start = Instant::now();
    loop {
        let got: i64 = open_db(db).query_row(sql, [], |r| r.get(0)).unwrap();
        if got == want {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "{sql}: {got}, want {want} after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Open the broker's SQLite file directly, read-only, to check what is on disk.
pub fn open_db(path: &std::path::Path) -> rusqlite::Connection {
    rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap()
}

/// Run `mssbroker ARGS`, insist it succeeds, and return what it printed.
pub fn run_ok(args: &[&str]) -> String {
    output_ok(Command::new(BIN).args(args))
}

/// Run `cmd`, insist it succeeds, and return what it printed.
pub fn output_ok(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run the command");
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// Run `mssbroker check-config FILE`, insist it refuses the file (exit 1), and return what it
/// said on stderr.
pub fn check_config_refusal(file: &std::path::Path) -> String {
    let out = Command::new(BIN)
        .arg("check-config")
        .arg(file)
        .output()
        .expect("run mssbroker check-config");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "check-config {file:?}: {err}");
    err
}

impl ServeProcess {
    /// Like `start`, with the process's stderr (its log) written to `log`.
    pub fn start_logged(
        config: &std::path::Path,
        db: &std::path::Path,
        log: &std::path::Path,
    ) -> ServeProcess {
        let stderr = std::fs::File::create(log).expect("create the log file");
        ServeProcess::spawn(config, db, Stdio::from(stderr))
    }

    /// Send the process a signal (`kill -SIG pid`).
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([format!("-{sig}"), self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{sig} failed");
    }
}

/// Poll `file` until it contains `needle`; panics after `limit` with what it holds.
pub async fn wait_for_text(file: &std::path::Path, needle: &str, limit: Duration) -> String {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        if text.contains(needle) {
            return text;
        }
        assert!(
            start.elapsed() < limit,
            "{needle:?} not in {} after {limit:?}: {text}",
            file.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A temporary directory holding a `serve` configuration for the simulator `sim`
/// (`broker.toml`) and the path of its database (`broker.db`, not yet created).
pub struct BrokerFiles {
    pub _dir: tempfile::TempDir,
    pub config: PathBuf,
    pub db: PathBuf,
}

impl BrokerFiles {
    pub fn for_sim(sim: &SimProcess) -> BrokerFiles {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("broker.toml");
        std::fs::write(&config, test_config(Some(&sim.url))).unwrap();
        let db = dir.path().join("broker.db");
        BrokerFiles {
            _dir: dir,
            config,
            db,
        }
    }
}

/// Send `head` (a request's head and the first bytes of its body) on a fresh connection to
/// `app` and read the answer that comes while the rest of the body is never sent: its head and
/// its JSON body, and the connection (still open on the client's side). Panics if none comes
/// within 10 s (a read that waits for the body).
pub async fn answer_before_the_body(
    app: &TestApp,
    head: &str,
) -> (String, Value, tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = app.base.trim_start_matches("http://").to_string();
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    let complete = |a: &[u8]| -> Option<(String, Value)> {
        let text = std::str::from_utf8(a).ok()?;
        let (head, body) = text.split_once("\r\n\r\n")?;
        let length: usize = head.lines().find_map(|l| {
            let l = l.to_ascii_lowercase();
            l.strip_prefix("content-length:")?.trim().parse().ok()
        })?;
        let body = body.get(..length)?;
        Some((head.to_string(), serde_json::from_str(body).unwrap()))
    };
    let mut answer = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        loop {
            if let Some(done) = complete(&answer) {
                break done;
            }
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed: {:?}", String::from_utf8_lossy(&answer));
            answer.extend_from_slice(&buf[..n]);
        }
    };
    let (head, body) = tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("answered before the body is read");
    (head, body, stream)
}

/// Set the simulator's faults (`PUT /v1/faults`).
pub async fn set_faults(sim: &SimProcess, faults: &mss_adapters::protocol::Faults) {
    let resp = reqwest::Client::new()
        .put(format!("{}/v1/faults", sim.url))
        .json(faults)
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.text().await.unwrap());
}

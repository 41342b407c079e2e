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

const LIMITS: &str = "max_connections = 4\nheader_read_timeout_ms = 1500\nidle_timeout_ms = 2000\nbody_timeout_ms = 1000\n";
const HEADER: Duration = Duration::from_millis(1500);
/// For the connection limit: idle sockets must still hold their slots when the extra
/// connections arrive, however slow the machine, so the header timeout is long here.
const SLOTS: &str = "max_connections = 4\nheader_read_timeout_ms = 4000\nidle_timeout_ms = 5000\nbody_timeout_ms = 1000\n";
const SLOTS_HEADER: Duration = Duration::from_millis(4000);
/// For the body deadline: the idle timer far beyond it, so a 408 written late on a loaded
/// machine is still written, not cut off by the idle close.
const BODY: &str = "max_connections = 4\nheader_read_timeout_ms = 1500\nidle_timeout_ms = 10000\nbody_timeout_ms = 1000\n";
/// What the tests allow beyond a configured timeout (a loaded machine).
const SLACK: Duration = Duration::from_secs(3);

/// The address of `base` ("http://127.0.0.1:port").
fn addr(base: &str) -> String {
    base.trim_start_matches("http://").to_string()
}

/// A client that closes its connection after each answer, so it holds no slot afterwards.
fn one_shot_client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

/// Read from `stream` until the server closes it (EOF or reset); what was read. Panics if it is
/// still open after `limit`.
async fn read_until_closed(stream: &mut tokio::net::TcpStream, limit: Duration) -> String {
    use tokio::io::AsyncReadExt;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let read_all = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    assert!(
        tokio::time::timeout(limit, read_all).await.is_ok(),
        "the server kept the connection open longer than {limit:?}"
    );
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_excess_connections_are_bounded_and_a_normal_client_is_served() {
    use tokio::net::TcpStream;
    let setup = Setup::new(SLOTS);
    let broker = setup.start(&setup.log("serve.log"));
    let addr = addr(&broker.base);
    let client = one_shot_client();

    // Three idle connections leave a slot: a normal client is served beside them.
    let opened = Instant::now();
    let mut idle = Vec::new();
    for _ in 0..3 {
        idle.push(TcpStream::connect(&addr).await.unwrap());
    }
    let resp = client
        .get(format!("{}/healthz", broker.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    // Every slot taken (by the idle ones, and perhaps the first extra while the client's
    // connection is being released): the excess is answered 503 and closed at once.
    let mut extras = Vec::new();
    for _ in 0..3 {
        extras.push(TcpStream::connect(&addr).await.unwrap());
    }
    let mut refused = 0;
    for extra in &mut extras {
        let answer = read_until_closed(extra, SLOTS_HEADER + SLACK).await;
        if answer.starts_with("HTTP/1.1 503") {
            assert!(answer.contains("max_connections"), "{answer}");
            refused += 1;
        } else {
            assert_eq!(answer, "", "an idle connection is closed without an answer");
        }
    }
    assert!(
        refused >= 2,
        "{refused} of 3 connections beyond the limit refused"
    );
    // The idle ones are closed by the server within the header-read timeout.
    for stream in &mut idle {
        let left = (opened + SLOTS_HEADER + SLACK).saturating_duration_since(Instant::now());
        read_until_closed(stream, left).await;
    }
    // And the slots are free again.
    let deadline = Instant::now() + SLACK;
    loop {
        let status = client
            .get(format!("{}/healthz", broker.base))
            .send()
            .await
            .map(|r| r.status().as_u16());
        if let Ok(200) = status {
            break;
        }
        assert!(Instant::now() < deadline, "slots not freed: {status:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_header_is_closed_within_the_header_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let setup = Setup::new(LIMITS);
    let broker = setup.start(&setup.log("serve.log"));
    let mut stream = tokio::net::TcpStream::connect(addr(&broker.base))
        .await
        .unwrap();
    let started = Instant::now();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\n")
        .await
        .unwrap();
    // One header byte every 100 ms: the head is never complete, but bytes keep coming.
    let mut buf = [0u8; 256];
    let closed = loop {
        assert!(
            started.elapsed() < HEADER + SLACK,
            "a trickled header kept the connection open"
        );
        if stream.write_all(b"X").await.is_err() {
            break started.elapsed();
        }
        // A read that ends (end of stream, reset) within 100 ms: the server closed it.
        let read = tokio::time::timeout(Duration::from_millis(100), stream.read(&mut buf));
        if read.await.is_ok() {
            break started.elapsed();
        }
    };
    assert!(
        closed >= Duration::from_millis(900),
        "closed early: {closed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_body_gets_408_and_the_connection_closed() {
    use tokio::io::AsyncWriteExt;
    let setup = Setup::new(BODY);
    let broker = setup.start(&setup.log("serve.log"));
    let mut stream = tokio::net::TcpStream::connect(addr(&broker.base))
        .await
        .unwrap();
    // A 100 KB body announced, 10 bytes sent, then nothing.
    let head = "POST /v1/requests HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
                content-length: 100000\r\n\r\n{\"client_";
    stream.write_all(head.as_bytes()).await.unwrap();
    let answer = read_until_closed(&mut stream, Duration::from_millis(1000) + SLACK).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"field\":\"body\""), "{answer}");
    // Nothing was stored, and the broker still serves.
    let (status, _) = submit(&broker.base, "after-stall").await;
    assert_eq!(status, 202);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_closed_after_the_idle_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let setup = Setup::new(LIMITS);
    let broker = setup.start(&setup.log("serve.log"));
    let one = one_shot_client()
        .get(format!("{}/v1/openapi.json", broker.base))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap()
        .len();
    // Far more answers than the socket buffers hold, asked for at once and never read: the
    // server's writes stall, and after idle_timeout_ms (2 s) it closes the connection.
    let asked = (64 << 20) / one + 1;
    let mut stream = tokio::net::TcpStream::connect(addr(&broker.base))
        .await
        .unwrap();
    let one_request = "GET /v1/openapi.json HTTP/1.1\r\nhost: x\r\n\r\n";
    stream
        .write_all(one_request.repeat(asked).as_bytes())
        .await
        .unwrap();
    // Poll the kernel's view of this connection until it is no longer established (the server
    // closed it: FIN or reset), without reading, which would let the server's writes go on.
    let (local, server) = (
        stream.local_addr().unwrap().port(),
        stream.peer_addr().unwrap().port(),
    );
    let deadline = Instant::now() + Duration::from_secs(2) + SLACK;
    while tcp_state(local, server) == Some(ESTABLISHED) {
        assert!(
            Instant::now() < deadline,
            "a connection whose client stopped reading is still open after the idle timeout"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // What the buffers held is drained, and the stream ends well short of every answer.
    let mut buf = vec![0u8; 1 << 16];
    let mut read = 0usize;
    let drained = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => read += n,
            }
        }
    };
    assert!(
        tokio::time::timeout(SLACK, drained).await.is_ok(),
        "the stream did not end"
    );
    assert!(
        read < asked * one,
        "read {read} bytes of {} before the close",
        asked * one
    );
}

const ESTABLISHED: u8 = 0x01;

/// The TCP state of the loopback connection from `local` to `remote` (ports), from
/// `/proc/net/tcp`; `None` once the kernel has dropped it.
fn tcp_state(local: u16, remote: u16) -> Option<u8> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let port = |field: &str| {
        field
            .rsplit(':')
            .next()
            .and_then(|p| u16::from_str_radix(p, 16).ok())
    };
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.len() > 3 && port(f[1]) == Some(local) && port(f[2]) == Some(remote))
            .then(|| u8::from_str_radix(f[3], 16).ok())
            .flatten()
    })
}

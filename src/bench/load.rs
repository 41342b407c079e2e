//! Load against a running broker: `connections` keep-alive clients, each doing one kind of call
//! in a loop for a while; and the broker started and stopped around it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::{summarise, Round};
use crate::config::Settings;
use crate::startup::Application;

/// The shipped config's demo operator token (may act for any station, not rate limited).
pub(crate) const TOKEN: &str = "demo-operator";

/// What each client does.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Call {
    /// `GET /healthz`: the HTTP round trip without the ledger (the baseline).
    Healthz,
    /// `POST /v1/requests` (1) or `/v1/requests/batch` (more) with this many requests.
    Submit(usize),
}

/// A broker serving on a local port until `stop`.
pub(crate) struct Broker {
    pub base: String,
    stop: oneshot::Sender<()>,
    server: JoinHandle<Result<(), crate::startup::StartupError>>,
}

impl Broker {
    pub async fn start(settings: &Settings) -> anyhow::Result<Broker> {
        let app = Application::build(settings).await?;
        let base = format!("{}://{}", app.scheme(), app.local_addr());
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(app.run_until_stopped(async {
            let _ = stopped.await;
        }));
        Ok(Broker { base, stop, server })
    }

    pub async fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop.send(());
        self.server.await??;
        Ok(())
    }
}

/// A load client for `base`: keep-alive (one idle connection kept), or a new connection for
/// every call when `fresh` (over TLS: a handshake per call). Over `https` the broker's
/// certificate is not verified: the benchmark started that broker itself with the certificate
/// it was given, and measures the cost of TLS, not a trust decision.
pub(crate) fn http_client(base: &str, fresh: bool) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .pool_max_idle_per_host(if fresh { 0 } else { 1 })
        .tls_danger_accept_invalid_certs(base.starts_with("https://"))
        .build()
}

/// Run `connections` clients doing `call` for `seconds`; requests counted (a batch counts its
/// requests) and each call's latency. `tag` keeps client request ids apart between runs;
/// `fresh`: a new connection for every call.
pub(crate) async fn drive(
    base: &str,
    call: Call,
    connections: usize,
    seconds: f64,
    tag: &str,
    fresh: bool,
) -> anyhow::Result<Round> {
    let running = Arc::new(AtomicBool::new(true));
    let clients: Vec<_> = (0..connections)
        .map(|c| {
            let (base, tag, running) = (base.to_string(), format!("{tag}-{c}"), running.clone());
            tokio::spawn(async move { client(&base, call, &tag, c, &running, fresh).await })
        })
        .collect();
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    running.store(false, Ordering::Relaxed);
    let (mut requests, mut latencies) = (0, Vec::new());
    for c in clients {
        let (n, lat) = c.await??;
        requests += n;
        latencies.extend(lat);
    }
    Ok(summarise(
        requests,
        start.elapsed().as_secs_f64(),
        latencies,
    ))
}

async fn client(
    base: &str,
    call: Call,
    tag: &str,
    c: usize,
    running: &AtomicBool,
    fresh: bool,
) -> anyhow::Result<(u64, Vec<u64>)> {
    let http = http_client(base, fresh)?;
    let (mut n, mut done, mut latencies) = (0usize, 0u64, Vec::new());
    while running.load(Ordering::Relaxed) {
        let request = match call {
            Call::Healthz => http.get(format!("{base}/healthz")),
            Call::Submit(1) => {
                n += 1;
                http.post(format!("{base}/v1/requests"))
                    .json(&item(tag, c, n))
            }
            Call::Submit(batch) => {
                let items: Vec<Value> = (0..batch)
                    .map(|_| {
                        n += 1;
                        item(tag, c, n)
                    })
                    .collect();
                http.post(format!("{base}/v1/requests/batch"))
                    .json(&json!({ "requests": items }))
            }
        };
        let t = Instant::now();
        let resp = request.bearer_auth(TOKEN).send().await?;
        let status = resp.status();
        let _ = resp.bytes().await?;
        latencies.push(t.elapsed().as_micros() as u64);
        let (want, count) = match call {
            Call::Healthz => (200, 1),
            Call::Submit(batch) => (202, batch as u64),
        };
        anyhow::ensure!(status.as_u16() == want, "broker answered {status}");
        done += count;
    }
    Ok((done, latencies))
}

pub(super) fn item(tag: &str, c: usize, n: usize) -> Value {
    let groups = [
        ("analysis", "higgs"),
        ("analysis", "top"),
        ("reprocessing", "x"),
        ("mc", "top"),
        ("datataking", "daq"),
    ];
    let (mode, group) = groups[n % groups.len()];
    json!({
        "client_request_id": format!("{tag}-{n}"),
        "station": format!("station-{}", c % 8),
        "user": "bench",
        "file": format!("/pnfs/bench/{tag}/{n}"),
        "size_bytes": 1_000_000_000u64 + (n as u64 % 1000) * 1_000_000,
        "access_mode": mode,
        "physics_group": group,
    })
}

/// The ledger's commit histogram so far, from `GET /metrics`: (commits, commands).
pub(crate) async fn commits(base: &str) -> anyhow::Result<(f64, f64)> {
    let text = http_client(base, false)?
        .get(format!("{base}/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    let value = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Ok((
        value("mssbroker_ledger_commit_commands_count"),
        value("mssbroker_ledger_commit_commands_sum"),
    ))
}

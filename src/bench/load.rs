//! Load against a running broker: `connections` keep-alive clients, each doing one kind of call
//! in a loop for a while; and the broker started and stopped around it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use super::{summarise, Round};
use crate::config::Settings;
use crate::leadership::{Contender, Identity, Role, Timing};
use crate::startup::{Application, Leadership};

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
    /// On PostgreSQL (`[database] url`): the leadership it holds, as `serve` holds it.
    contender: Option<Contender>,
}

impl Broker {
    /// Start the broker of `settings`; on PostgreSQL it contends for the leadership as `serve`
    /// does, and this returns once it leads (`/readyz` answers 200).
    pub async fn start(settings: &Settings) -> anyhow::Result<Broker> {
        let contender = match &settings.database.url {
            Some(url) => Some(contend(url)?),
            None => None,
        };
        let app = match &contender {
            Some(c) => {
                // Built as a standby, then following the contender's role: a role that already
                // leads would have the build open the first term's ledger itself, with the
                // blocking PostgreSQL client on this async thread (a later term opens off it).
                let (role, follows) = watch::channel(Role::Standby);
                let leadership = Leadership {
                    role: follows,
                    resigner: Some(c.resigner()),
                };
                let clock = Arc::new(crate::clock::SystemClock);
                let app = Application::build_with_role(settings, clock, leadership).await?;
                tokio::spawn(follow(c.role(), role));
                app
            }
            None => Application::build(settings).await?,
        };
        let base = format!("{}://{}", app.scheme(), app.local_addr());
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(app.run_until_stopped(async {
            let _ = stopped.await;
        }));
        let broker = Broker {
            base,
            stop,
            server,
            contender,
        };
        if broker.contender.is_some() {
            broker.wait_until_ready().await?;
        }
        Ok(broker)
    }

    /// Wait for `/readyz` to answer 200 (a broker on PostgreSQL leads), at most 30 s.
    async fn wait_until_ready(&self) -> anyhow::Result<()> {
        let http = http_client(&self.base, false)?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = http.get(format!("{}/readyz", self.base)).send().await;
            if ready.is_ok_and(|r| r.status().is_success()) {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the broker did not take office on PostgreSQL within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop.send(());
        self.server.await??;
        drop(self.contender);
        Ok(())
    }
}

/// Pass every role `source` takes on to `to`, until either end is gone.
async fn follow(mut source: watch::Receiver<Role>, to: watch::Sender<Role>) {
    loop {
        let role = *source.borrow_and_update();
        if to.send(role).is_err() || source.changed().await.is_err() {
            return;
        }
    }
}

/// A leadership contender on `url`, as `serve` starts one.
fn contend(url: &crate::database_url::DatabaseUrl) -> anyhow::Result<Contender> {
    let identity = Identity {
        holder: format!("bench pid {}", std::process::id()),
        advertised_url: "http://127.0.0.1:0".to_string(),
    };
    Ok(Contender::start(url.clone(), identity, Timing::default())?)
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
    histogram(base, "mssbroker_ledger_commit_commands").await
}

/// A histogram of `GET /metrics` so far: (count, sum); (0, 0) where it has none.
pub(crate) async fn histogram(base: &str, name: &str) -> anyhow::Result<(f64, f64)> {
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
        value(&format!("{name}_count")),
        value(&format!("{name}_sum")),
    ))
}

//! `mssbroker bench`: the acceptance path under load, measured end to end over HTTP.
//!
//! Starts a real broker (shipped config, embedded simulator, dispatcher running) on a fresh
//! SQLite file in a temporary directory, drives it with `connections` concurrent keep-alive
//! clients posting single requests (or batches) for `seconds`, and prints throughput and latency
//! percentiles per round and the median over rounds. The load generator shares the machine's
//! cores with the broker, so the figures are a floor, not a ceiling.
//!
//! `mssbroker bench` (`bench.rs`: the in-repo load benchmark and `--direct`), `ingest.rs` (`bench
//! ingest`: healthz baseline, single requests, batches, mean commit size, ratio), `backlog.rs`
//! (`bench backlog --queued N`: memory, restart to first 202, release decision and explain cost,
//! ingest with the backlog), `load.rs` (a broker started on a temporary database, concurrent
//! clients, the commit histogram from `/metrics`), `child.rs` (the broker as a `serve` child
//! process: its own `VmRSS`/`VmHWM` and CPU time; the binary named by `MSSBROKER_BENCH_SERVE` for
//! A/B runs and `perf -p`), `machine.rs` (command line, cores, CPU model, kernel,
//! `/proc/PID/status` figures); `bench_report.rs`: `bench --report-requests N`, reports on a long
//! history; `bench_explain.rs`: `bench --explain-queued N`, explains of queued requests polled
//! while another station posts. `benches/` (criterion, `harness = false`): `placement.rs` (one
//! `policy::order::place` per policy at 10, 100, 1,000 generated groups), `report.rs` (reports over
//! 1M requests of history from `bench_report::fill_file`; 10M with `MSSBROKER_BENCH_10M=1`).
//! Figures: `docs/benchmarks.md`. `scripts/batch-rss`: the real `serve`'s peak RSS under concurrent
//! 16 MB batch bodies.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;
use tokio::sync::oneshot;

use crate::config::Settings;
use crate::startup::Application;

pub mod backlog;
mod child;
pub mod history;
pub mod ingest;
mod instant_mss;
mod load;
mod machine;
mod pg;
mod read_back;

pub use machine::{command_line, machine};

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub connections: usize,
    pub seconds: f64,
    pub rounds: usize,
    /// Requests per POST: 1 posts to /v1/requests, more to /v1/requests/batch.
    pub batch: usize,
    /// Skip HTTP: `connections` tasks call the ledger directly (the writer's ceiling).
    pub direct: bool,
}

/// One round's figures.
#[derive(Debug, Clone, Copy)]
pub struct Round {
    pub requests: u64,
    pub per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// Run the benchmark and print its figures.
pub async fn run(options: &BenchOptions) -> anyhow::Result<Vec<Round>> {
    let mut rounds = Vec::new();
    println!("{}\n{}", command_line(), machine());
    println!(
        "bench: {} connections, {} request(s) per POST, {} s x {} rounds, {} cores",
        options.connections,
        options.batch,
        options.seconds,
        options.rounds,
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    );
    for round in 0..options.rounds {
        let r = if options.direct {
            direct_round(options, round).await?
        } else {
            one_round(options, round).await?
        };
        println!(
            "round {}: {} requests, {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms",
            round + 1,
            r.requests,
            r.per_sec,
            r.p50_ms,
            r.p99_ms
        );
        rounds.push(r);
    }
    let median = |f: fn(&Round) -> f64| {
        let mut v: Vec<f64> = rounds.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "median: {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms",
        median(|r| r.per_sec),
        median(|r| r.p50_ms),
        median(|r| r.p99_ms)
    );
    Ok(rounds)
}

async fn one_round(options: &BenchOptions, round: usize) -> anyhow::Result<Round> {
    let dir = scratch_dir(round)?;
    let mut settings = Settings::parse(crate::config::EMBEDDED, "embedded config/broker.toml")
        .context("the embedded config must validate")?;
    settings.database.path = dir.join("bench.db");
    settings.server.listen = "127.0.0.1:0".parse()?;
    settings.limits.max_batch = settings.limits.max_batch.max(options.batch);
    let app = Application::build(&settings).await?;
    let base = format!("http://{}", app.local_addr());
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until_stopped(async {
        let _ = stopped.await;
    }));

    let running = Arc::new(AtomicBool::new(true));
    let mut clients = Vec::new();
    for c in 0..options.connections {
        clients.push(tokio::spawn(client(
            base.clone(),
            c,
            options.batch,
            running.clone(),
        )));
    }
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(options.seconds)).await;
    running.store(false, Ordering::Relaxed);
    let mut latencies = Vec::new();
    let mut requests = 0u64;
    for c in clients {
        let (n, lat) = c.await??;
        requests += n;
        latencies.extend(lat);
    }
    let elapsed = start.elapsed().as_secs_f64();
    let _ = stop.send(());
    server.await??;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(summarise(requests, elapsed, latencies))
}

pub(crate) fn summarise(requests: u64, elapsed: f64, mut latencies: Vec<u64>) -> Round {
    latencies.sort_unstable();
    let pct = |p: f64| -> f64 {
        if latencies.is_empty() {
            return 0.0;
        }
        let i = ((latencies.len() as f64 * p) as usize).min(latencies.len() - 1);
        latencies[i] as f64 / 1000.0
    };
    Round {
        requests,
        per_sec: requests as f64 / elapsed,
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
    }
}

/// The ledger alone: tasks call `Ledger::accept` with one request each, as handlers do.
async fn direct_round(options: &BenchOptions, round: usize) -> anyhow::Result<Round> {
    use crate::ledger::{Ledger, LedgerOptions, NewRequest, RequestInput};
    let dir = scratch_dir(round)?;
    let settings = Settings::parse(crate::config::EMBEDDED, "embedded")?;
    let ledger_options = LedgerOptions {
        path: dir.join("bench.db"),
        commit_batch_max: settings.database.commit_batch_max,
        url: None,
        epoch: 1,
        retry: settings.mss.retry,
        metrics: Arc::new(crate::metrics::Metrics::default()),
        read_outputs: settings.mss.read_outputs(),
    };
    let clock = Arc::new(crate::clock::SystemClock);
    let (ledger, writer) = Ledger::open(&ledger_options, settings.policy.clone(), clock)?;
    let policy = settings.policy.clone();
    let running = Arc::new(AtomicBool::new(true));
    let mut tasks = Vec::new();
    for c in 0..options.connections {
        let (ledger, policy, running) = (ledger.clone(), policy.clone(), running.clone());
        let batch = options.batch;
        tasks.push(tokio::spawn(async move {
            let modes = [("analysis", "higgs"), ("mc", "top"), ("datataking", "daq")];
            let mut lat = Vec::new();
            let mut n = 0u64;
            while running.load(Ordering::Relaxed) {
                let items: Vec<NewRequest> = (0..batch)
                    .map(|_| {
                        n += 1;
                        let (mode, group) = modes[(n % 3) as usize];
                        let fields = crate::policy::RequestFields {
                            access_mode: mode,
                            physics_group: group,
                            station: "s",
                            user: "u",
                            file: "/f",
                        };
                        NewRequest {
                            input: RequestInput {
                                station: format!("station-{c}"),
                                client_request_id: format!("d-{n}"),
                                user: "bench".into(),
                                file: format!("/pnfs/bench/{c}/{n}"),
                                size_bytes: 1_000_000_000 + n,
                                access_mode: mode.into(),
                                physics_group: group.into(),
                                volume: None,
                                direction: mss_adapters::Direction::Read,
                                extras: Default::default(),
                            },
                            group: crate::policy::classify(&policy, &fields)
                                .unwrap_or(crate::domain::GroupId(0)),
                            benefit: 1_000_000_000 + n,
                        }
                    })
                    .collect();
                let t = Instant::now();
                ledger.accept(items).await?;
                lat.push(t.elapsed().as_micros() as u64);
            }
            anyhow::Ok((n, lat))
        }));
    }
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(options.seconds)).await;
    running.store(false, Ordering::Relaxed);
    let (mut requests, mut latencies) = (0, Vec::new());
    for t in tasks {
        let (n, lat) = t.await??;
        requests += n;
        latencies.extend(lat);
    }
    let elapsed = start.elapsed().as_secs_f64();
    drop(ledger);
    let _ = tokio::task::spawn_blocking(move || writer.join()).await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(summarise(requests, elapsed, latencies))
}

/// One keep-alive client posting until told to stop; returns requests accepted and each POST's
/// latency in microseconds.
async fn client(
    base: String,
    id: usize,
    batch: usize,
    running: Arc<AtomicBool>,
) -> anyhow::Result<(u64, Vec<u64>)> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .build()?;
    let mut latencies = Vec::new();
    let mut accepted = 0u64;
    let mut n = 0usize;
    let tag = format!("bench-{id}");
    let item = |n: usize| load::item(&tag, id, n);
    while running.load(Ordering::Relaxed) {
        let (url, body) = if batch <= 1 {
            n += 1;
            (format!("{base}/v1/requests"), item(n))
        } else {
            let items: Vec<_> = (0..batch)
                .map(|_| {
                    n += 1;
                    item(n)
                })
                .collect();
            (
                format!("{base}/v1/requests/batch"),
                json!({ "requests": items }),
            )
        };
        let t = Instant::now();
        // The shipped config's demo operator token (not rate limited like a station's).
        let resp = http
            .post(&url)
            .bearer_auth("demo-operator")
            .json(&body)
            .send()
            .await?;
        let status = resp.status();
        let _ = resp.bytes().await?;
        latencies.push(t.elapsed().as_micros() as u64);
        anyhow::ensure!(status.as_u16() == 202, "broker answered {status}");
        accepted += batch.max(1) as u64;
    }
    Ok((accepted, latencies))
}

pub(crate) fn scratch_dir(round: usize) -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("mssbroker-bench-{}-{round}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}

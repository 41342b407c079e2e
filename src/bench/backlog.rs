//! `mssbroker bench backlog --queued N`: a held-mode broker (the shipped config, release limit
//! one slot, embedded simulator) with N requests queued, run as its own process (`mssbroker serve`,
//! see `child`). Prints the broker process's resident memory (its `VmRSS`/`VmHWM`, without the
//! load client), the time from starting the process to the first 202 after a restart on the
//! filled database, the first explain of a queued request over HTTP after the restart (an explain
//! never waits for a ranking: it says where its position came from) and the memory after it, a
//! read-back phase (`--readers` clients each post a request and `GET` it at once: the GET's p50
//! and p99, `read_back`), ingest of single requests while the backlog is there, and, on the
//! ledger opened directly on the same database, the cost of one release decision
//! (`Ledger::release_held`), a ranking of the queue (`Ledger::rank_queue`) and a queued
//! request's explain (`Ledger::explain_queued`), p50 and p99.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;

use super::child::ChildBroker;
use super::load::{drive, Call, TOKEN};
use super::{command_line, machine, summarise};
use crate::config::Settings;
use crate::ledger::{Ledger, LedgerOptions};

/// What to run.
#[derive(Debug, Clone)]
pub struct BacklogOptions {
    pub queued: usize,
    /// Clients of the ingest phase.
    pub connections: usize,
    /// Seconds of the ingest phase, and of the read-back phase.
    pub seconds: f64,
    /// Clients of the read-back phase.
    pub readers: usize,
    /// Timed calls of each kind (release decisions, explains).
    pub samples: usize,
    /// `[policy] algorithm`, when not the shipped one.
    pub policy: Option<String>,
}

/// Fill, restart, load, time; prints its figures.
pub async fn run(o: &BacklogOptions) -> anyhow::Result<()> {
    println!("{}\n{}", command_line(), machine());
    let dir = std::env::temp_dir().join(format!("mssbroker-bench-backlog-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let config = backlog_config(o.policy.as_deref())?;
    let mut settings = Settings::parse(&config, "embedded config/broker.toml, held")?;
    settings.database.path = dir.join("bench.db");
    let db = settings.database.path.clone();

    let broker = ChildBroker::start(&dir, &config, &db).await?;
    let idle_mb = broker.status_mb("VmRSS");
    let t = Instant::now();
    let http = reqwest::Client::new();
    let ids = crate::bench_explain::fill(&http, &broker.base, o.queued).await?;
    println!(
        "bench backlog: {} queued (held, limit 1) in {:.1} s; broker process VmRSS {:.0} MB before, {:.0} MB filled (VmHWM {:.0} MB)",
        ids.len(),
        t.elapsed().as_secs_f64(),
        idle_mb,
        broker.status_mb("VmRSS"),
        broker.status_mb("VmHWM")
    );
    broker.stop().await?;

    let t = Instant::now();
    let broker = ChildBroker::start(&dir, &config, &db).await?;
    let first = first_202(&http, &broker.base).await?;
    println!(
        "restart: first 202 {:.3} s after start (the probe call itself {:.3} s); broker process (`serve`) VmRSS {:.0} MB, VmHWM {:.0} MB",
        t.elapsed().as_secs_f64(),
        first,
        broker.status_mb("VmRSS"),
        broker.status_mb("VmHWM")
    );
    let probe = ids.get(ids.len() / 2).copied().unwrap_or_default();
    let (micros, basis) = first_explain(&http, &broker.base, probe).await?;
    println!(
        "first explain over HTTP after the restart: {:.2} ms (position_basis {basis}); broker VmRSS {:.0} MB after, VmHWM {:.0} MB",
        micros as f64 / 1e3,
        broker.status_mb("VmRSS"),
        broker.status_mb("VmHWM")
    );
    let r = super::read_back::read_back(&broker.base, o.readers, o.seconds).await?;
    let bases: Vec<String> = r.bases.iter().map(|(b, n)| format!("{b} {n}")).collect();
    println!(
        "just-submitted GET: {} clients each POST a request and GET it at once, p50 {:.2} ms, p99 {:.2} ms ({} GETs; position_basis: {})",
        o.readers,
        r.gets.p50_ms,
        r.gets.p99_ms,
        r.gets.requests,
        bases.join(", ")
    );
    let r = drive(
        &broker.base,
        Call::Submit(1),
        o.connections,
        o.seconds,
        "bl",
        false,
    )
    .await?;
    println!(
        "ingest with the backlog: {} connections, {:.0} requests/s, p50 {:.2} ms, p99 {:.2} ms ({} requests); broker VmRSS {:.0} MB after",
        o.connections, r.per_sec, r.p50_ms, r.p99_ms, r.requests, broker.status_mb("VmRSS")
    );
    broker.stop().await?;

    decisions(&settings, &ids, o.samples.max(1)).await?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// The shipped configuration in the held mode, with `[policy] algorithm = policy` when given.
fn backlog_config(policy: Option<&str>) -> anyhow::Result<String> {
    let config = crate::bench_explain::held_config()?;
    let Some(policy) = policy else {
        return Ok(config);
    };
    let shipped = "\nalgorithm = \"sam\"\n";
    anyhow::ensure!(
        config.contains(shipped),
        "the shipped config no longer has [policy] algorithm = \"sam\" as --policy expects"
    );
    Ok(config.replacen(shipped, &format!("\nalgorithm = \"{policy}\"\n"), 1))
}

/// The first explain of queued request `id`: its latency (µs) and where its position came from.
async fn first_explain(
    http: &reqwest::Client,
    base: &str,
    id: i64,
) -> anyhow::Result<(u64, String)> {
    let t = Instant::now();
    let resp = http
        .get(format!("{base}/v1/requests/{id}"))
        .bearer_auth(TOKEN)
        .send()
        .await?;
    let status = resp.status();
    let body: serde_json::Value = resp.json().await?;
    let micros = t.elapsed().as_micros() as u64;
    anyhow::ensure!(status.as_u16() == 200, "GET {id}: {status}");
    let basis = body["position_basis"].as_str().unwrap_or("-").to_string();
    Ok((micros, basis))
}

/// Post single requests until one is answered 202; the seconds from the call to the answer of
/// the first one (the broker is already built).
pub(super) async fn first_202(http: &reqwest::Client, base: &str) -> anyhow::Result<f64> {
    let t = Instant::now();
    let resp = http
        .post(format!("{base}/v1/requests"))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({
            "client_request_id": "restart-probe",
            "station": "station-probe",
            "user": "bench",
            "file": "/pnfs/bench/restart-probe",
            "size_bytes": 1_000_000_000u64,
            "access_mode": "analysis",
            "physics_group": "higgs",
        }))
        .send()
        .await?;
    let status = resp.status();
    anyhow::ensure!(status.as_u16() == 202, "restart probe: {status}");
    Ok(t.elapsed().as_secs_f64())
}

/// Time release decisions and explains on the ledger itself (no HTTP).
async fn decisions(settings: &Settings, ids: &[i64], samples: usize) -> anyhow::Result<()> {
    let options = LedgerOptions {
        path: settings.database.path.clone(),
        commit_batch_max: settings.database.commit_batch_max,
        url: None,
        epoch: 1,
        retry: settings.mss.retry,
        metrics: Arc::new(crate::metrics::Metrics::default()),
        read_outputs: settings.mss.read_outputs(),
    };
    let t = Instant::now();
    let (ledger, writer) = Ledger::open(
        &options,
        settings.policy.clone(),
        Arc::new(crate::clock::SystemClock),
    )?;
    println!(
        "ledger opened on the backlog in {:.3} s",
        t.elapsed().as_secs_f64()
    );
    let mut release = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        ledger.release_held().await?;
        release.push(t.elapsed().as_micros() as u64);
    }
    print_cost("release decision (Ledger::release_held)", release);
    let t = Instant::now();
    let first = ledger.explain_queued(ids[ids.len() / 2]).await?;
    let first = first.context("the probe is not queued")?;
    println!(
        "first explain on the ledger, before any ranking: {:.2} ms ({:?})",
        t.elapsed().as_secs_f64() * 1000.0,
        first.basis
    );
    let t = Instant::now();
    let ranked = ledger.rank_queue().await?;
    println!(
        "ranking of the queue (Ledger::rank_queue): {ranked} requests in {:.2} ms",
        t.elapsed().as_secs_f64() * 1000.0
    );
    let mut explain = Vec::with_capacity(samples);
    let mut k: u64 = 1;
    for _ in 0..samples {
        k = k.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let id = ids[((k >> 33) as usize) % ids.len()];
        let t = Instant::now();
        ledger.explain_queued(id).await?;
        explain.push(t.elapsed().as_micros() as u64);
    }
    print_cost("explain of a queued request", explain);
    drop(ledger);
    let _ = tokio::task::spawn_blocking(move || writer.join()).await;
    Ok(())
}

fn print_cost(what: &str, micros: Vec<u64>) {
    let n = micros.len() as u64;
    let r = summarise(n, 1.0, micros);
    println!(
        "{what}: {n} calls, p50 {:.3} ms, p99 {:.3} ms",
        r.p50_ms, r.p99_ms
    );
}

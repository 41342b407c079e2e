//! `mssbroker bench ingest`: the real broker (shipped config, embedded simulator, a fresh SQLite
//! file) under HTTP load from its own client. Each round runs, on one broker and at the same
//! concurrency: `GET /healthz` (the baseline: HTTP without the ledger), single requests
//! (`POST /v1/requests`), then batches (`POST /v1/requests/batch`); it prints requests per
//! second, p50 and p99 latency per call, the mean ledger commit size in commands (from the
//! commit histogram of `/metrics`), and the single-request/healthz ratio.

use std::path::PathBuf;

use anyhow::Context;

use super::child::RoundBroker;
use super::load::{commits, drive, Call};
use super::{command_line, machine, scratch_dir, Round};
use crate::config::Settings;

/// What to run.
#[derive(Debug, Clone)]
pub struct IngestOptions {
    pub connections: usize,
    pub seconds: f64,
    pub rounds: usize,
    /// Requests per batch in the batch phase.
    pub batch: usize,
    /// Serve over TLS with this certificate chain and key (PEM).
    pub tls: Option<(PathBuf, PathBuf)>,
    /// A new connection for every call (over TLS: a full handshake per call).
    pub fresh_connections: bool,
}

/// One round's three phases.
#[derive(Debug, Clone, Copy)]
struct Phases {
    healthz: Round,
    single: Round,
    single_commit: f64,
    batch: Round,
    batch_commit: f64,
}

/// Run and print.
pub async fn run(o: &IngestOptions) -> anyhow::Result<()> {
    println!("{}\n{}", command_line(), machine());
    println!(
        "bench ingest: {} connections, {} s per phase, {} round(s), batches of {}, {}, {}",
        o.connections,
        o.seconds,
        o.rounds,
        o.batch,
        if o.tls.is_some() {
            "https (TLS)"
        } else {
            "plain http"
        },
        if o.fresh_connections {
            "a new connection per call"
        } else {
            "keep-alive connections"
        }
    );
    let mut all = Vec::new();
    for round in 0..o.rounds {
        let p = one_round(o, round).await?;
        println!("round {}:", round + 1);
        print_phases(&p, o.batch);
        all.push(p);
    }
    let median = |f: &dyn Fn(&Phases) -> f64| {
        let mut v: Vec<f64> = all.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let pick = |f: &dyn Fn(&Phases) -> Round| Round {
        requests: median(&|p| f(p).requests as f64) as u64,
        per_sec: median(&|p| f(p).per_sec),
        p50_ms: median(&|p| f(p).p50_ms),
        p99_ms: median(&|p| f(p).p99_ms),
    };
    let m = Phases {
        healthz: pick(&|p| p.healthz),
        single: pick(&|p| p.single),
        single_commit: median(&|p| p.single_commit),
        batch: pick(&|p| p.batch),
        batch_commit: median(&|p| p.batch_commit),
    };
    println!("median over {} round(s):", all.len());
    print_phases(&m, o.batch);
    Ok(())
}

fn print_phases(p: &Phases, batch: usize) {
    let line = |what: &str, r: &Round, unit: &str| {
        println!(
            "  {what:<22} {:>10.0} {unit}/s  p50 {:>7.2} ms  p99 {:>7.2} ms  ({} {unit})",
            r.per_sec, r.p50_ms, r.p99_ms, r.requests
        );
    };
    line("GET /healthz", &p.healthz, "calls");
    line("single requests", &p.single, "requests");
    println!("  {:<22} mean commit {:.1} commands", "", p.single_commit);
    line(&format!("batches of {batch}"), &p.batch, "requests");
    println!("  {:<22} mean commit {:.1} commands", "", p.batch_commit);
    let ratio = if p.healthz.per_sec > 0.0 {
        p.single.per_sec / p.healthz.per_sec
    } else {
        0.0
    };
    println!("  single/healthz ratio {ratio:.2}");
}

async fn one_round(o: &IngestOptions, round: usize) -> anyhow::Result<Phases> {
    let dir = scratch_dir(round)?;
    let mut settings = Settings::parse(crate::config::EMBEDDED, "embedded config/broker.toml")
        .context("the embedded config must validate")?;
    settings.database.path = dir.join("bench.db");
    settings.server.listen = "127.0.0.1:0".parse()?;
    anyhow::ensure!(
        std::env::var_os(super::child::SERVE_BINARY).is_none()
            || o.batch <= settings.limits.max_batch,
        "a `serve` child takes the shipped limits.max_batch ({})",
        settings.limits.max_batch
    );
    settings.limits.max_batch = settings.limits.max_batch.max(o.batch);
    if let Some((cert, key)) = &o.tls {
        anyhow::ensure!(
            std::env::var_os(super::child::SERVE_BINARY).is_none(),
            "--tls-cert runs the broker in this process only (unset {})",
            super::child::SERVE_BINARY
        );
        settings.server.tls = Some(crate::server::TlsSettings {
            cert: Some((cert.clone(), key.clone())),
            client_ca: None,
            crl: Vec::new(),
        });
    }
    let broker = RoundBroker::start(&settings, crate::config::EMBEDDED, &dir).await?;
    let base = broker.base().to_string();
    let (c, s) = (o.connections, o.seconds);
    let cpu = || broker.cpu_seconds();
    let cpu0 = cpu();
    let healthz = drive(&base, Call::Healthz, c, s, "h", o.fresh_connections).await?;
    let (cpu1, before) = (cpu(), commits(&base).await?);
    let single = drive(&base, Call::Submit(1), c, s, "s", o.fresh_connections).await?;
    let (cpu2, middle) = (cpu(), commits(&base).await?);
    let batch = drive(
        &base,
        Call::Submit(o.batch.max(2)),
        c,
        s,
        "b",
        o.fresh_connections,
    )
    .await?;
    let (cpu3, after) = (cpu(), commits(&base).await?);
    if let (Some(a), Some(b), Some(c), Some(d)) = (cpu0, cpu1, cpu2, cpu3) {
        let per = |from: f64, to: f64, r: &Round| (to - from) * 1e6 / r.requests.max(1) as f64;
        println!(
            "broker CPU: healthz {:.1} us/call, single {:.1} us/request, batch {:.2} us/request",
            per(a, b, &healthz),
            per(b, c, &single),
            per(c, d, &batch)
        );
    }
    broker.stop().await?;
    let _ = std::fs::remove_dir_all(&dir);
    let mean = |a: (f64, f64), b: (f64, f64)| {
        let n = b.0 - a.0;
        if n > 0.0 {
            (b.1 - a.1) / n
        } else {
            0.0
        }
    };
    Ok(Phases {
        healthz,
        single,
        single_commit: mean(before, middle),
        batch,
        batch_commit: mean(middle, after),
    })
}

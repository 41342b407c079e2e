//! `mssbroker bench ingest`: the real broker (shipped config, embedded simulator, a fresh SQLite
//! file) under HTTP load from its own client. Each round runs, on one broker and at the same
//! concurrency: `GET /healthz` (the baseline: HTTP without the ledger), single requests
//! (`POST /v1/requests`), then batches (`POST /v1/requests/batch`); it prints requests per
//! second, p50 and p99 latency per call, the mean ledger commit size in commands (from the
//! commit histogram of `/metrics`), and the single-request/healthz ratio.
//!
//! `--db postgresql://...` runs the same on PostgreSQL (a new database per round on that server,
//! `pg.rs`; the broker contends for the leadership as `serve` does), and `--backends
//! sqlite,postgres` both, interleaved round by round in one sitting, with the median of each
//! and the ratio PostgreSQL/SQLite for single requests and batches.

use std::path::PathBuf;

use anyhow::Context;

use super::child::RoundBroker;
use super::load::{commits, drive, histogram, Call};
use super::pg::{server_settings, RoundDatabase};
use super::{command_line, machine, scratch_dir, Round};
use crate::config::Settings;
use crate::database_url::DatabaseUrl;

/// Where a round's ledger is.
#[derive(Debug, Clone)]
pub enum Backend {
    /// A new SQLite file in the round's directory.
    Sqlite,
    /// A new database on this PostgreSQL server.
    Postgres(Box<DatabaseUrl>),
}

impl Backend {
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }
}

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
    /// The backends measured, each round in this order.
    pub backends: Vec<Backend>,
}

/// One round's three phases.
#[derive(Debug, Clone, Copy)]
struct Phases {
    healthz: Round,
    single: Round,
    single_commit: f64,
    batch: Round,
    batch_commit: f64,
    /// Mean round trips to PostgreSQL per commit (0 on SQLite).
    single_trips: f64,
    batch_trips: f64,
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
    for backend in &o.backends {
        match backend {
            Backend::Sqlite => println!("sqlite: a new file per round, WAL, synchronous=FULL"),
            Backend::Postgres(url) => println!("{}", server_settings(url).await?),
        }
    }
    let mut all: Vec<Vec<Phases>> = vec![Vec::new(); o.backends.len()];
    for round in 0..o.rounds {
        for (backend, rounds) in o.backends.iter().zip(&mut all) {
            let p = one_round(o, round, backend).await?;
            println!("round {} ({}):", round + 1, backend.name());
            print_phases(&p, o.batch);
            rounds.push(p);
        }
    }
    let medians: Vec<Phases> = all.iter().map(|rounds| median_of(rounds)).collect();
    for (backend, m) in o.backends.iter().zip(&medians) {
        println!("median over {} round(s) ({}):", o.rounds, backend.name());
        print_phases(m, o.batch);
    }
    print_ratio(o, &medians);
    Ok(())
}

/// Each figure's median over `all` rounds.
fn median_of(all: &[Phases]) -> Phases {
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
    Phases {
        healthz: pick(&|p| p.healthz),
        single: pick(&|p| p.single),
        single_commit: median(&|p| p.single_commit),
        batch: pick(&|p| p.batch),
        batch_commit: median(&|p| p.batch_commit),
        single_trips: median(&|p| p.single_trips),
        batch_trips: median(&|p| p.batch_trips),
    }
}

/// PostgreSQL's medians over SQLite's, when both were measured.
fn print_ratio(o: &IngestOptions, medians: &[Phases]) {
    let of = |name: &str| {
        (o.backends.iter().zip(medians))
            .find(|(b, _)| b.name() == name)
            .map(|(_, m)| m)
    };
    let (Some(sqlite), Some(postgres)) = (of("sqlite"), of("postgres")) else {
        return;
    };
    let ratio = |p: f64, s: f64| if s > 0.0 { p / s } else { 0.0 };
    println!(
        "postgres/sqlite: single requests {:.2}  batches of {} {:.2}",
        ratio(postgres.single.per_sec, sqlite.single.per_sec),
        o.batch,
        ratio(postgres.batch.per_sec, sqlite.batch.per_sec)
    );
}

fn print_phases(p: &Phases, batch: usize) {
    let line = |what: &str, r: &Round, unit: &str| {
        println!(
            "  {what:<22} {:>10.0} {unit}/s  p50 {:>7.2} ms  p99 {:>7.2} ms  ({} {unit})",
            r.per_sec, r.p50_ms, r.p99_ms, r.requests
        );
    };
    line("GET /healthz", &p.healthz, "calls");
    let commit = |commands: f64, trips: f64| {
        let trips = if trips > 0.0 {
            format!(", {trips:.1} round trips")
        } else {
            String::new()
        };
        println!("  {:<22} mean commit {commands:.1} commands{trips}", "");
    };
    line("single requests", &p.single, "requests");
    commit(p.single_commit, p.single_trips);
    line(&format!("batches of {batch}"), &p.batch, "requests");
    commit(p.batch_commit, p.batch_trips);
    let ratio = if p.healthz.per_sec > 0.0 {
        p.single.per_sec / p.healthz.per_sec
    } else {
        0.0
    };
    println!("  single/healthz ratio {ratio:.2}");
}

/// One round on `backend`: a new ledger, a broker on it, the three phases.
async fn one_round(o: &IngestOptions, round: usize, backend: &Backend) -> anyhow::Result<Phases> {
    let dir = scratch_dir(round)?;
    let mut settings = round_settings(o, &dir)?;
    let database = match backend {
        Backend::Sqlite => None,
        Backend::Postgres(server) => {
            anyhow::ensure!(
                std::env::var_os(super::child::SERVE_BINARY).is_none(),
                "--db runs the broker in this process only (unset {})",
                super::child::SERVE_BINARY
            );
            let db = RoundDatabase::create(server, round).await?;
            settings.database.url = Some(db.url.clone());
            Some(db)
        }
    };
    let broker = RoundBroker::start(&settings, crate::config::EMBEDDED, &dir).await?;
    let phases = phases(o, &broker).await;
    broker.stop().await?;
    if let Some(db) = database {
        db.drop_it().await?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    phases
}

/// The shipped config with the round's database file, a free port, the batch limit and TLS.
fn round_settings(o: &IngestOptions, dir: &std::path::Path) -> anyhow::Result<Settings> {
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
    Ok(settings)
}

/// The commit histograms so far: (commits, commands), (commits, round trips).
async fn commit_figures(base: &str) -> anyhow::Result<[(f64, f64); 2]> {
    let trips = histogram(base, "mssbroker_ledger_commit_round_trips").await?;
    Ok([commits(base).await?, trips])
}

/// The three phases against `broker`.
async fn phases(o: &IngestOptions, broker: &RoundBroker) -> anyhow::Result<Phases> {
    let base = broker.base().to_string();
    let (c, s) = (o.connections, o.seconds);
    let cpu = || broker.cpu_seconds();
    let cpu0 = cpu();
    let healthz = drive(&base, Call::Healthz, c, s, "h", o.fresh_connections).await?;
    let (cpu1, before) = (cpu(), commit_figures(&base).await?);
    let single = drive(&base, Call::Submit(1), c, s, "s", o.fresh_connections).await?;
    let (cpu2, middle) = (cpu(), commit_figures(&base).await?);
    let batch = Call::Submit(o.batch.max(2));
    let batch = drive(&base, batch, c, s, "b", o.fresh_connections).await?;
    let (cpu3, after) = (cpu(), commit_figures(&base).await?);
    if let (Some(a), Some(b), Some(c), Some(d)) = (cpu0, cpu1, cpu2, cpu3) {
        let per = |from: f64, to: f64, r: &Round| (to - from) * 1e6 / r.requests.max(1) as f64;
        println!(
            "broker CPU: healthz {:.1} us/call, single {:.1} us/request, batch {:.2} us/request",
            per(a, b, &healthz),
            per(b, c, &single),
            per(c, d, &batch)
        );
    }
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
        single_commit: mean(before[0], middle[0]),
        batch,
        batch_commit: mean(middle[0], after[0]),
        single_trips: mean(before[1], middle[1]),
        batch_trips: mean(middle[1], after[1]),
    })
}

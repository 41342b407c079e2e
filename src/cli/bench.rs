//! `mssbroker bench`: today's flags (HTTP load, `--direct`, `--report-requests`,
//! `--explain-queued`) without a subcommand, and the `ingest`, `backlog` and `history`
//! benchmarks.

use std::process::ExitCode;

use clap::{Args, Subcommand};

/// Measure the acceptance path: a broker on a temporary database under concurrent HTTP load.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    mode: Option<BenchMode>,
    #[command(flatten)]
    flags: BenchFlags,
}

#[derive(Debug, Subcommand)]
enum BenchMode {
    /// Single requests and batches over HTTP against a `GET /healthz` baseline at the same
    /// concurrency: requests/s, p50 and p99, mean commit size, and the ratio.
    Ingest {
        /// Concurrent keep-alive clients.
        #[arg(long, default_value_t = 64)]
        connections: usize,
        /// Seconds per phase (healthz, single, batch).
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Requests per POST in the batch phase.
        #[arg(long, default_value_t = 1000)]
        batch: usize,
        /// Serve over TLS with this certificate chain (PEM; with --tls-key). The load client
        /// does not verify it: the handshake and encryption are what is measured.
        #[arg(long, requires = "tls_key")]
        tls_cert: Option<std::path::PathBuf>,
        /// The private key of --tls-cert (PEM).
        #[arg(long, requires = "tls_cert")]
        tls_key: Option<std::path::PathBuf>,
        /// A new connection for every call instead of keep-alive (with --tls-cert: a handshake
        /// per call).
        #[arg(long)]
        fresh_connections: bool,
        /// A PostgreSQL server to measure the ledger on (`postgresql://user@host:port/db`;
        /// loopback or a unix socket): each round makes a new database there (the user needs
        /// CREATEDB) and drops it after. Alone, it measures PostgreSQL only.
        #[arg(long, value_name = "URL")]
        db: Option<String>,
        /// The backends to measure, interleaved round by round in one sitting (`sqlite`,
        /// `postgres`, or both: `sqlite,postgres`), with the ratio PostgreSQL/SQLite [default:
        /// postgres with --db, else sqlite].
        #[arg(long, value_enum, value_delimiter = ',')]
        backends: Vec<BackendName>,
    },
    /// A held-mode broker with `--queued` requests queued: memory, time to the first 202 and
    /// the first explain after a restart, a request read back right after its 202, ingest with
    /// the backlog, cost of a release decision, a ranking and an explain.
    Backlog {
        /// Requests queued before measuring.
        #[arg(long, default_value_t = 1_000_000)]
        queued: usize,
        /// Concurrent clients of the ingest phase.
        #[arg(long, default_value_t = 64)]
        connections: usize,
        /// Seconds of the ingest phase, and of the read-back phase.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Clients of the read-back phase: each posts a request and reads it back at once.
        #[arg(long, default_value_t = 8)]
        readers: usize,
        /// Timed release decisions and explains (each).
        #[arg(long, default_value_t = 1000)]
        samples: usize,
        /// The ordering policy (sam, fair_tree, multifactor, fbsng) [default: the shipped one].
        #[arg(long)]
        policy: Option<String>,
    },
    /// Memory against history: `--requests` requests accepted and finished (the MSS finishes
    /// each at once), with the broker process's resident memory every `--every` requests.
    History {
        /// Requests accepted and finished in all.
        #[arg(long, default_value_t = 10_000_000)]
        requests: usize,
        /// A line every this many requests (each after every request so far is final).
        #[arg(long, default_value_t = 1_000_000)]
        every: usize,
        /// Requests per POST /v1/requests/batch.
        #[arg(long, default_value_t = 1000)]
        batch: usize,
        /// The load waits while more than this many requests are unfinished.
        #[arg(long, default_value_t = 100_000)]
        unfinished: usize,
        /// Seconds of batches posted at the end while the MSS takes nothing: ingest alone on
        /// the history (each new request looked up among the finished ones' keys).
        #[arg(long, default_value_t = 3.0)]
        ingest_seconds: f64,
    },
}

/// Today's flags, without a subcommand.
#[derive(Debug, Args)]
struct BenchFlags {
    /// Concurrent keep-alive clients.
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Seconds per round.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Requests per POST (1: single requests; more: /v1/requests/batch).
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Skip HTTP and drive the ledger directly (the writer's ceiling).
    #[arg(long)]
    direct: bool,
    /// Instead: fill a ledger with this many requests over 90 days and time reports on it.
    #[arg(long)]
    report_requests: Option<usize>,
    /// Instead: queue this many requests (held mode), then time explains of queued
    /// requests by `--pollers` clients while another station posts (for `--seconds`).
    #[arg(long)]
    explain_queued: Option<usize>,
    /// Clients polling queued requests (with --explain-queued).
    #[arg(long, default_value_t = 200)]
    pollers: usize,
}

/// A backend `bench ingest --backends` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum BackendName {
    Sqlite,
    Postgres,
}

/// The backends of `bench ingest`: those named, in order (postgres with the server of `--db`),
/// or by default postgres when `--db` is given, else sqlite.
fn ingest_backends(
    names: &[BackendName],
    db: Option<String>,
) -> anyhow::Result<Vec<crate::bench::ingest::Backend>> {
    use crate::bench::ingest::Backend;
    // The error names what is wrong, never a value of the string (it may hold a password).
    let db = (db.as_deref())
        .map(crate::database_url::DatabaseUrl::parse)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--db: {e}"))?;
    let names = match (names, &db) {
        ([], Some(_)) => &[BackendName::Postgres][..],
        ([], None) => &[BackendName::Sqlite][..],
        (names, _) => names,
    };
    names
        .iter()
        .map(|name| match (name, &db) {
            (BackendName::Sqlite, _) => Ok(Backend::Sqlite),
            (BackendName::Postgres, Some(url)) => Ok(Backend::Postgres(Box::new(url.clone()))),
            (BackendName::Postgres, None) => Err(anyhow::anyhow!(
                "--backends postgres: give the server with --db postgresql://user@host:port/db"
            )),
        })
        .collect()
}

/// Run the chosen benchmark.
pub(super) async fn bench(args: BenchArgs) -> anyhow::Result<ExitCode> {
    match args.mode {
        Some(BenchMode::Ingest {
            connections,
            seconds,
            rounds,
            batch,
            tls_cert,
            tls_key,
            fresh_connections,
            db,
            backends,
        }) => {
            let options = crate::bench::ingest::IngestOptions {
                connections: connections.max(1),
                seconds,
                rounds: rounds.max(1),
                batch: batch.max(2),
                tls: tls_cert.zip(tls_key),
                fresh_connections,
                backends: ingest_backends(&backends, db)?,
            };
            crate::bench::ingest::run(&options).await?;
        }
        Some(BenchMode::Backlog {
            queued,
            connections,
            seconds,
            readers,
            samples,
            policy,
        }) => {
            let options = crate::bench::backlog::BacklogOptions {
                queued: queued.max(1),
                connections: connections.max(1),
                seconds,
                readers: readers.max(1),
                samples: samples.max(1),
                policy,
            };
            crate::bench::backlog::run(&options).await?;
        }
        Some(BenchMode::History {
            requests,
            every,
            batch,
            unfinished,
            ingest_seconds,
        }) => {
            let options = crate::bench::history::HistoryOptions {
                requests: requests.max(1),
                every: every.max(1),
                batch: batch.clamp(1, 10_000),
                unfinished: unfinished.max(1),
                ingest_seconds,
            };
            crate::bench::history::run(&options).await?;
        }
        None => flags(args.flags).await?,
    }
    Ok(ExitCode::SUCCESS)
}

async fn flags(f: BenchFlags) -> anyhow::Result<()> {
    if let Some(n) = f.report_requests {
        return crate::bench_report::run(n, f.rounds).await;
    }
    if let Some(queued) = f.explain_queued {
        let options = crate::bench_explain::ExplainOptions {
            queued: queued.max(1),
            pollers: f.pollers.max(1),
            seconds: f.seconds,
        };
        return crate::bench_explain::run(&options).await;
    }
    let options = crate::bench::BenchOptions {
        connections: f.connections.max(1),
        seconds: f.seconds,
        rounds: f.rounds.max(1),
        batch: f.batch.max(1),
        direct: f.direct,
    };
    crate::bench::run(&options).await?;
    Ok(())
}

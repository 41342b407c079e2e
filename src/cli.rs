//! The `mssbroker` command line: raw flags (clap) turned into settings and actions. This is the
//! binary's edge, so errors are `anyhow` with context, printed once by `main`.
//!
//! The clap commands (`cli.rs`: `Cli`, `Command`, `run`, `check-config`, `status`), one file per
//! larger command: `bench.rs` (`bench`: today's flags without a subcommand, and `bench ingest` /
//! `bench backlog`), `serve.rs` (`serve`: the one `LoadSettings` function (file, then the
//! `--listen`/`--db` flags) used at start and at every reload, SIGHUP calling the reloader, the
//! descriptor limit raised before building), `cancel.rs` (`cancel --group`: `POST
//! /v1/admin/cancel-group`), `reload.rs` (`reload`: `POST /v1/admin/reload`), `client.rs` (`submit`
//! and the shared HTTP answer printing), `reports.rs` (`shares`, `report`), `backup.rs` (`backup`:
//! flags into `ledger::backup`), `mss_sim.rs` (`mss-sim`), `library_flags.rs` (the library flags
//! `simulate` and `mss-sim` both put over `[mss.simulator]`), `trace.rs` (`trace gen`: parameters from
//! TOML into `trace::synth::generate`, the trace to a file or stdout, the summary on stderr; `trace
//! export`: `LedgerReader::for_each_request` streamed row by row into trace records), `simulate.rs`
//! (`simulate`: `[policy] algorithm` and `[release] mode` put into the configuration's TOML and
//! validated as `serve` would, one run per policy/mode pair). The only place that uses `anyhow`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

use crate::config;
use crate::telemetry;

mod backup;
mod bench;
mod cancel;
mod client;
mod library_flags;
mod mss_sim;
mod reload;
mod reports;
mod restore;
mod serve;
mod simulate;
mod trace;

use bench::{bench, BenchArgs};
use client::{print_response, submit, with_token, SubmitArgs};
use mss_sim::{mss_sim, SimArgs};
use reports::{report, shares, ReportArgs, SharesArgs};
use serve::serve;
pub use serve::StopSignals;
use trace::TraceCommand;

#[derive(Debug, Parser)]
#[command(
    name = "mssbroker",
    version,
    about = "Fair-share broker for file-transfer requests in front of a tape mass storage system"
)]
pub struct Cli {
    /// Log as JSON lines instead of text (filter with RUST_LOG).
    #[arg(long, global = true)]
    log_json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the broker: API, ledger, dispatcher and (if configured) the embedded MSS simulator.
    ///
    /// Configuration: the file, then MSSBROKER__SECTION__KEY environment variables (e.g.
    /// MSSBROKER__SERVER__LISTEN), then --listen and --db (docs/operations.md, "Configuration
    /// layers").
    Serve {
        /// Configuration file [default: config/broker.toml, else the embedded copy].
        #[arg(long)]
        config: Option<PathBuf>,
        /// Address to listen on, overriding server.listen (port 0: any free port).
        #[arg(long)]
        listen: Option<SocketAddr>,
        /// SQLite database file, overriding database.path; or a PostgreSQL URL
        /// (postgresql://user@host/dbname), overriding database.url.
        #[arg(long)]
        db: Option<PathBuf>,
    },
    /// Cancel every unfinished request of a group at a running broker (operator token).
    Cancel(cancel::CancelArgs),
    /// Make a running broker re-read its configuration file, as SIGHUP does, and print what is
    /// in force or which key refused it (operator token).
    Reload(reload::ReloadArgs),
    /// Submit a request (from flags, or a JSON file) to a running broker.
    Submit(SubmitArgs),
    /// Show a request of a running broker.
    Status {
        /// Request id.
        id: i64,
        #[arg(long, env = "MSSBROKER_URL", default_value = "http://127.0.0.1:8080")]
        url: String,
        /// Bearer token.
        #[arg(long, env = "MSSBROKER_TOKEN", hide_env_values = true)]
        token: Option<String>,
    },
    /// Run the Enstore-like MSS simulator as its own HTTP server.
    MssSim(SimArgs),
    /// Measure the acceptance path: a broker on a temporary database under concurrent HTTP load.
    Bench(BenchArgs),
    /// Show every group's target, usage under the configured model, Fair Tree rank, SAM class
    /// and cap state: from a ledger database, or from usage given in a JSON file.
    Shares(SharesArgs),
    /// The share report over a time range: from a running broker (--url) or a database (--db).
    Report(ReportArgs),
    /// Request traces for the what-if simulator (docs/traces.md).
    #[command(subcommand)]
    Trace(TraceCommand),
    /// A consistent copy of a database, taken while the broker runs (docs/operations.md).
    Backup(backup::BackupArgs),
    /// Put a backup in the place of a stopped broker's database, keeping the one it replaces
    /// (docs/operations.md, "Backup and restore").
    Restore(restore::RestoreArgs),
    /// List what the MSS reported of transfers this ledger did not make (requests lost with a
    /// restored backup); read only, beside a running broker.
    UnknownKeys(restore::UnknownKeysArgs),
    /// Replay a trace in virtual time through the broker's policy and a tape library model
    /// (docs/simulation.md).
    Simulate(simulate::SimulateArgs),
    /// Validate a configuration file and print its share tree, or every problem (exit 1).
    ///
    /// MSSBROKER__SECTION__KEY environment variables and the flags below apply over the file, as
    /// for `serve`; the list at the end says where each value set came from.
    CheckConfig {
        /// Configuration file [default: config/broker.toml, else the embedded copy].
        path: Option<PathBuf>,
        /// As `serve --listen`.
        #[arg(long)]
        listen: Option<SocketAddr>,
        /// As `serve --db`.
        #[arg(long)]
        db: Option<PathBuf>,
    },
}

/// Parse the command line and run it.
pub fn run() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    match cli.command {
        Command::CheckConfig { path, listen, db } => check_config(path, listen, db),
        Command::Shares(args) => shares(args),
        Command::Backup(args) => backup::run(args),
        Command::Restore(args) => restore::run_restore(args),
        Command::UnknownKeys(args) => restore::run_unknown_keys(args),
        Command::Trace(command) => trace::run(command),
        Command::Simulate(args) => simulate::run(args),
        command => {
            telemetry::init(cli.log_json);
            let runtime =
                tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
            runtime.block_on(run_async(command))
        }
    }
}

async fn run_async(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Serve { config, listen, db } => serve(config, listen, db).await,
        Command::Submit(args) => submit(args).await,
        Command::Cancel(args) => cancel::run(args).await,
        Command::Reload(args) => reload::run(args).await,
        Command::Status { id, url, token } => {
            let resp = with_token(
                reqwest::Client::new()
                    .get(format!("{}/v1/requests/{id}", url.trim_end_matches('/'))),
                token.as_deref(),
            )
            .send()
            .await
            .with_context(|| format!("cannot reach the broker at {url}"))?;
            print_response(resp).await
        }
        Command::MssSim(args) => mss_sim(args).await,
        Command::Report(args) => report(args).await,
        Command::Bench(args) => bench(args).await,
        Command::CheckConfig { .. }
        | Command::Shares(_)
        | Command::Trace(_)
        | Command::Backup(_)
        | Command::Restore(_)
        | Command::UnknownKeys(_)
        | Command::Simulate(_) => {
            unreachable!("handled without a runtime")
        }
    }
}

fn check_config(
    path: Option<PathBuf>,
    listen: Option<SocketAddr>,
    db: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    match layers(listen, db).and_then(|l| config::layers::load(path.as_deref(), &l)) {
        Ok(loaded) => {
            print!("{}", config::describe(&loaded.settings));
            print!("{}", config::describe_sources(&loaded.sources));
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("{e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// The configuration layers over the file: `MSSBROKER__*` variables, then the flags.
/// `--db`'s value is a PostgreSQL connection string, not a file: one of libpq's two URL
/// schemes, or its key=value form (a word that begins with one of libpq's keys and `=`, as
/// `host=/run/postgresql user=broker dbname=mss`).
fn is_postgres_url(db: &str) -> bool {
    const KEYS: [&str; 6] = ["host", "hostaddr", "port", "user", "password", "dbname"];
    db.starts_with("postgresql://")
        || db.starts_with("postgres://")
        || db.split_whitespace().any(|word| {
            word.split_once('=')
                .is_some_and(|(key, _)| KEYS.contains(&key.trim()))
        })
}

/// The paths of a command that reads or writes SQLite ledger files (`report`, `shares`,
/// `backup`, `restore`, `unknown-keys`, `trace export`), each with its flag: a PostgreSQL
/// connection string among them is refused before anything is opened or written, naming the
/// flag and saying what to do instead, and never shown (it may hold a password, which the
/// file's "no database at ..." would have printed).
fn sqlite_files(
    command: &str,
    paths: &[(&str, &std::path::Path)],
    instead: &str,
) -> anyhow::Result<()> {
    let given = paths
        .iter()
        .find(|(_, p)| p.to_str().is_some_and(is_postgres_url));
    match given {
        Some((flag, _)) => anyhow::bail!(
            "{flag}: `mssbroker {command}` reads a SQLite ledger file, and this is a PostgreSQL \
             URL (not shown: it may hold a password); {instead}"
        ),
        None => Ok(()),
    }
}

/// [`sqlite_files`] for a command whose one file is `--db`.
fn sqlite_file(db: &std::path::Path, command: &str, instead: &str) -> anyhow::Result<()> {
    sqlite_files(command, &[("--db", db)], instead)
}

/// What `backup` and `restore` say to do with a PostgreSQL ledger instead.
const POSTGRES_BACKUP: &str = "a PostgreSQL ledger is backed up and restored with PostgreSQL's \
    own tools: pg_dump / pg_restore for a copy, pg_basebackup with WAL archiving for \
    point-in-time recovery (PITR; pgBackRest or Patroni do both). See docs/ha.md, \"Backup and \
    restore on PostgreSQL\". Nothing was written.";

fn layers(
    listen: Option<SocketAddr>,
    db: Option<PathBuf>,
) -> Result<config::layers::Layers, config::ConfigError> {
    let mut layers = config::layers::Layers::from_env(std::env::vars_os())?;
    if let Some(l) = listen {
        layers.flag("--listen", "server.listen", l.to_string());
    }
    if let Some(d) = db {
        // The file's key is a string too: a path that is not UTF-8 is refused as it would be there.
        let Some(d) = d.to_str() else {
            return Err(config::ConfigError::Invalid {
                origin: "--db".into(),
                issues: vec![config::ConfigIssue {
                    key: "database.path".into(),
                    message: format!("{} is not UTF-8", d.display()),
                }],
            });
        };
        let key = if is_postgres_url(d) {
            "database.url"
        } else {
            "database.path"
        };
        layers.flag("--db", key, d);
    }
    Ok(layers)
}

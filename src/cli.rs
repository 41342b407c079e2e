//! The `mssbroker` command line: raw flags (clap) turned into settings and actions. This is the
//! binary's edge, so errors are `anyhow` with context, printed once by `main`.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};
use mss_adapters::sim::{self, LibraryConfig, SimConfig};
use serde_json::{json, Value};

use crate::config::{self, ConfigError, Settings};
use crate::startup::Application;
use crate::telemetry;

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
    Serve {
        /// Configuration file [default: config/broker.toml, else the embedded copy].
        #[arg(long)]
        config: Option<PathBuf>,
        /// Address to listen on, overriding server.listen (port 0: any free port).
        #[arg(long)]
        listen: Option<SocketAddr>,
        /// SQLite database file, overriding database.path.
        #[arg(long)]
        db: Option<PathBuf>,
    },
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
    Bench {
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
    },
    /// Show every group's target, usage under the configured model, Fair Tree rank, SAM class
    /// and cap state: from a ledger database, or from usage given in a JSON file.
    Shares(SharesArgs),
    /// The share report over a time range: from a running broker (--url) or a database (--db).
    Report(ReportArgs),
    /// Validate a configuration file and print its share tree, or every problem (exit 1).
    CheckConfig {
        /// Configuration file [default: config/broker.toml, else the embedded copy].
        path: Option<PathBuf>,
    },
}

#[derive(Debug, Args)]
struct SubmitArgs {
    /// Broker base URL.
    #[arg(long, env = "MSSBROKER_URL", default_value = "http://127.0.0.1:8080")]
    url: String,
    /// Bearer token.
    #[arg(long, env = "MSSBROKER_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Read the request from this JSON file ("-" for stdin); `{"requests": [...]}` is sent as a batch.
    #[arg(long, conflicts_with_all = ["client_request_id", "station", "user", "file", "size_bytes", "access_mode", "physics_group"])]
    json: Option<PathBuf>,
    #[arg(long)]
    client_request_id: Option<String>,
    #[arg(long)]
    station: Option<String>,
    #[arg(long)]
    user: Option<String>,
    /// Path of the file to stage or store.
    #[arg(long)]
    file: Option<String>,
    #[arg(long)]
    size_bytes: Option<u64>,
    #[arg(long)]
    access_mode: Option<String>,
    #[arg(long)]
    physics_group: Option<String>,
    /// Tape label, if known.
    #[arg(long)]
    volume: Option<String>,
    /// read (stage from tape) or write (store to tape).
    #[arg(long)]
    direction: Option<String>,
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("source").required(true).args(["db", "usage"]))]
struct SharesArgs {
    /// Configuration file [default: config/broker.toml, else the embedded copy].
    #[arg(long)]
    config: Option<PathBuf>,
    /// A broker's SQLite database (read only; the broker may be running).
    #[arg(long)]
    db: Option<PathBuf>,
    /// JSON usage: {"usage": {"<group path>": <amount> | [<window 0>, <window 1>, ...]}}.
    #[arg(long)]
    usage: Option<PathBuf>,
    /// The instant to compute for: RFC 3339 (2026-11-22T08:00:00Z) or epoch milliseconds
    /// [default: now].
    #[arg(long)]
    at: Option<String>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    Table,
    Json,
}

#[derive(Debug, Args)]
struct ReportArgs {
    /// Read this database directly (read only) instead of asking a broker.
    #[arg(long)]
    db: Option<PathBuf>,
    /// Configuration file, with --db [default: config/broker.toml, else the embedded copy].
    #[arg(long, requires = "db")]
    config: Option<PathBuf>,
    /// Broker base URL (without --db).
    #[arg(long, env = "MSSBROKER_URL", default_value = "http://127.0.0.1:8080")]
    url: String,
    /// Bearer token (a reader or operator).
    #[arg(long, env = "MSSBROKER_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Start: RFC 3339 or epoch ms [default: 7 days before --until].
    #[arg(long)]
    since: Option<String>,
    /// End (exclusive) [default: now].
    #[arg(long)]
    until: Option<String>,
    /// hour, day or week [default: by the range's length].
    #[arg(long)]
    bucket: Option<String>,
    #[arg(long, value_enum, default_value_t = ReportFormat::Table)]
    format: ReportFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ReportFormat {
    Table,
    Json,
    Csv,
}

#[derive(Debug, Args)]
struct SimArgs {
    #[arg(long, default_value = "127.0.0.1:7070")]
    listen: SocketAddr,
    #[arg(long, default_value_t = 4)]
    drives: usize,
    #[arg(long, default_value_t = 60.0)]
    mount_seconds: f64,
    #[arg(long, default_value_t = 300.0)]
    rate_mb_per_sec: f64,
    /// Virtual seconds per real second.
    #[arg(long, default_value_t = 1.0)]
    time_scale: f64,
    /// Fraction of transfers that fail (retryably), 0..1.
    #[arg(long, default_value_t = 0.0)]
    failure_rate: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Fraction of submission calls answered 503, 0..1.
    #[arg(long, default_value_t = 0.0)]
    submit_failure_rate: f64,
    /// Milliseconds every call waits before answering.
    #[arg(long, default_value_t = 0)]
    delay_ms: u64,
    /// Fraction of events never written to the event log, 0..1.
    #[arg(long, default_value_t = 0.0)]
    drop_event_rate: f64,
    /// Fraction of events written to the event log twice, 0..1.
    #[arg(long, default_value_t = 0.0)]
    duplicate_event_rate: f64,
}

async fn report(args: ReportArgs) -> anyhow::Result<ExitCode> {
    use crate::clock::Clock;
    let now = crate::clock::SystemClock.now_ms();
    let report: crate::report::Report = match &args.db {
        Some(db) => {
            let settings = Settings::load_default(args.config.as_deref())?;
            let range = crate::report::parse_range(
                args.since.as_deref(),
                args.until.as_deref(),
                args.bucket.as_deref(),
                now,
                settings.limits.max_report_buckets,
            )
            .map_err(|e| anyhow::anyhow!("--{e}"))?;
            if !db.exists() {
                bail!("--db: no database at {}", db.display());
            }
            let conn = crate::ledger::open_read_only(db)?;
            crate::ledger::read_report(&conn, &settings.policy, range, now)
                .with_context(|| format!("cannot read the report from {}", db.display()))?
        }
        None => {
            let mut query = Vec::new();
            for (k, v) in [
                ("since", &args.since),
                ("until", &args.until),
                ("bucket", &args.bucket),
            ] {
                if let Some(v) = v {
                    query.push((k, v.clone()));
                }
            }
            let url = format!("{}/v1/report", args.url.trim_end_matches('/'));
            let resp = with_token(
                reqwest::Client::new().get(&url).query(&query),
                args.token.as_deref(),
            )
            .send()
            .await
            .with_context(|| format!("cannot reach the broker at {}", args.url))?;
            if !resp.status().is_success() {
                return print_response(resp).await;
            }
            resp.json()
                .await
                .context("the broker's report is not what this version reads")?
        }
    };
    let out = match args.format {
        ReportFormat::Json => serde_json::to_string_pretty(&report)? + "\n",
        ReportFormat::Table => crate::report::render::table(&report),
        ReportFormat::Csv => crate::report::render::csv(&report),
    };
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(out.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        other => other?,
    }
    Ok(ExitCode::SUCCESS)
}

fn shares(args: SharesArgs) -> anyhow::Result<ExitCode> {
    use crate::clock::Clock;
    use crate::shares::{input, view};
    let settings = Settings::load_default(args.config.as_deref())?;
    let policy = &settings.policy;
    let now = crate::clock::SystemClock.now_ms();
    let at_ms = match args.at.as_deref() {
        Some(s) => crate::clock::parse_instant(s).map_err(|e| anyhow::anyhow!("--at: {e}"))?,
        None => now,
    };
    let shown = match (&args.db, &args.usage) {
        (Some(db), _) => {
            if !db.exists() {
                bail!("--db: no database at {}", db.display());
            }
            let conn = crate::ledger::open_read_only(db)?;
            crate::ledger::read_shares(&conn, policy, at_ms, now)
                .with_context(|| format!("cannot read usage from {}", db.display()))?
        }
        (None, Some(file)) => {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            let doc: Value = serde_json::from_str(&text)
                .with_context(|| format!("{} is not JSON", file.display()))?;
            let usage = input::effective_from_json(policy, &doc)
                .with_context(|| format!("{}", file.display()))?;
            view::build(policy, &usage, at_ms, None)
        }
        (None, None) => bail!("give --db or --usage"),
    };
    let out = match args.format {
        Format::Json => serde_json::to_string_pretty(&shown)? + "\n",
        Format::Table => view::render_table(&shown),
    };
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(out.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        other => other?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Parse the command line and run it.
pub fn run() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    match cli.command {
        Command::CheckConfig { path } => check_config(path),
        Command::Shares(args) => shares(args),
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
        Command::Bench {
            connections,
            seconds,
            rounds,
            batch,
            direct,
            report_requests: Some(n),
            ..
        } => {
            let _ = (connections, seconds, batch, direct);
            crate::bench_report::run(n, rounds).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench {
            connections,
            seconds,
            rounds,
            batch,
            direct,
            report_requests: None,
            explain_queued: Some(queued),
            pollers,
        } => {
            let _ = (connections, rounds, batch, direct);
            let options = crate::bench_explain::ExplainOptions {
                queued: queued.max(1),
                pollers: pollers.max(1),
                seconds,
            };
            crate::bench_explain::run(&options).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench {
            connections,
            seconds,
            rounds,
            batch,
            direct,
            report_requests: None,
            explain_queued: None,
            ..
        } => {
            let options = crate::bench::BenchOptions {
                connections: connections.max(1),
                seconds,
                rounds: rounds.max(1),
                batch: batch.max(1),
                direct,
            };
            crate::bench::run(&options).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::CheckConfig { .. } | Command::Shares(_) => {
            unreachable!("handled without a runtime")
        }
    }
}

fn check_config(path: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    match Settings::load_default(path.as_deref()) {
        Ok(settings) => {
            print!("{}", config::describe(&settings));
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("{e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

async fn serve(
    config: Option<PathBuf>,
    listen: Option<SocketAddr>,
    db: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    let mut settings = match Settings::load_default(config.as_deref()) {
        Ok(s) => s,
        Err(
            e @ (ConfigError::Invalid { .. }
            | ConfigError::Syntax { .. }
            | ConfigError::Read { .. }),
        ) => {
            eprintln!("{e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    if let Some(l) = listen {
        settings.server.listen = l;
    }
    if let Some(d) = db {
        settings.database.path = d;
    }
    // Before anything can take long: from here on SIGHUP no longer kills the process.
    carry_on_after_sighup()?;
    match crate::server::fds::raise_nofile() {
        Ok((before, after)) => {
            tracing::info!(before, after, "file-descriptor limit (soft RLIMIT_NOFILE)")
        }
        Err(e) => tracing::warn!(error = %e, "cannot raise the file-descriptor limit"),
    }
    let app = Application::build(&settings)
        .await
        .with_context(|| format!("cannot start with {}", settings.origin))?;
    banner(&format!(
        "mssbroker listening on http://{}\nmss at {} (config {}, database {})\n",
        app.local_addr(),
        app.mss_url(),
        settings.origin,
        settings.database.path.display()
    ));
    app.run_until_stopped(shutdown_signal()).await?;
    Ok(ExitCode::SUCCESS)
}

/// Print a start-up banner. It is for whoever reads stdout; a closed stdout (a supervisor that
/// read the address and went away) must not stop the server, so write errors are ignored.
fn banner(text: &str) {
    let mut out = std::io::stdout();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// Install the SIGHUP handler: it will trigger a configuration reload; until then it logs and
/// the broker carries on (without one, SIGHUP's default action ends the process).
fn carry_on_after_sighup() -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hup = signal(SignalKind::hangup()).context("cannot install the SIGHUP handler")?;
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                tracing::warn!(
                    "SIGHUP received; configuration reload is not implemented yet, carrying on"
                );
            }
        });
    }
    Ok(())
}

/// Completes on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

async fn submit(args: SubmitArgs) -> anyhow::Result<ExitCode> {
    let body: Value = match &args.json {
        Some(path) => {
            let text = if path.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin()).context("cannot read stdin")?
            } else {
                std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read {}", path.display()))?
            };
            serde_json::from_str(&text)
                .with_context(|| format!("{} is not JSON", path.display()))?
        }
        None => {
            let need = |v: &Option<String>, flag: &str| -> anyhow::Result<String> {
                v.clone()
                    .with_context(|| format!("--{flag} is required (or give --json FILE)"))
            };
            let mut body = json!({
                "client_request_id": need(&args.client_request_id, "client-request-id")?,
                "station": need(&args.station, "station")?,
                "user": need(&args.user, "user")?,
                "file": need(&args.file, "file")?,
                "size_bytes": args.size_bytes.context("--size-bytes is required (or give --json FILE)")?,
                "access_mode": need(&args.access_mode, "access-mode")?,
                "physics_group": need(&args.physics_group, "physics-group")?,
            });
            if let Some(v) = &args.volume {
                body["volume"] = json!(v);
            }
            if let Some(d) = &args.direction {
                body["direction"] = json!(d);
            }
            body
        }
    };
    let endpoint = if body.get("requests").is_some() {
        "/v1/requests/batch"
    } else {
        "/v1/requests"
    };
    let url = format!("{}{endpoint}", args.url.trim_end_matches('/'));
    let resp = with_token(reqwest::Client::new().post(&url), args.token.as_deref())
        .json(&body)
        .send()
        .await
        .with_context(|| format!("cannot reach the broker at {}", args.url))?;
    print_response(resp).await
}

fn with_token(req: reqwest::RequestBuilder, token: Option<&str>) -> reqwest::RequestBuilder {
    match token {
        Some(t) => req.bearer_auth(t),
        None => req,
    }
}

async fn print_response(resp: reqwest::Response) -> anyhow::Result<ExitCode> {
    let status = resp.status();
    let text = resp
        .text()
        .await
        .context("cannot read the broker's answer")?;
    let shown = match serde_json::from_str::<Value>(&text) {
        Ok(v) => serde_json::to_string_pretty(&v)?,
        Err(_) => text,
    };
    // A reader that went away (`| head`) is not an error worth a panic.
    let mut out = std::io::stdout();
    if let Err(e) = writeln!(out, "{shown}").and_then(|()| out.flush()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            return Err(e.into());
        }
    }
    if status.is_success() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("broker answered {status}");
        Ok(ExitCode::FAILURE)
    }
}

async fn mss_sim(args: SimArgs) -> anyhow::Result<ExitCode> {
    let positive = |v: f64| v.is_finite() && v > 0.0;
    if !positive(args.time_scale)
        || !positive(args.rate_mb_per_sec)
        || ![
            args.failure_rate,
            args.submit_failure_rate,
            args.drop_event_rate,
            args.duplicate_event_rate,
        ]
        .iter()
        .all(|r| (0.0..=1.0).contains(r))
    {
        bail!("--time-scale and --rate-mb-per-sec must be above 0, every --*-rate within 0..1");
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    let cfg = SimConfig {
        library: LibraryConfig {
            drives: args.drives.max(1),
            mount_micros: (args.mount_seconds.max(0.0) * 1e6) as u64,
            bytes_per_sec: (args.rate_mb_per_sec * 1e6) as u64,
            failure_rate: args.failure_rate,
            seed: args.seed,
            aging: None,
            ..Default::default()
        },
        time_scale: args.time_scale,
        faults: mss_adapters::protocol::Faults {
            submit_failure_rate: args.submit_failure_rate,
            down_for_ms: 0,
            delay_ms: args.delay_ms,
            drop_event_rate: args.drop_event_rate,
            duplicate_event_rate: args.duplicate_event_rate,
            ..Default::default()
        },
    };
    banner(&format!("mss simulator listening on http://{addr}\n"));
    sim::run(listener, cfg, shutdown_signal()).await?;
    Ok(ExitCode::SUCCESS)
}

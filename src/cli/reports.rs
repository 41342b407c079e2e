//! `mssbroker shares` and `mssbroker report`: the share standing and the report, from a
//! running broker or read from its database.

use super::client::{print_response, with_token};
use anyhow::{bail, Context};
use clap::Args;
use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("source").required(true).args(["db", "usage"]))]
pub(super) struct SharesArgs {
    /// Configuration file [default: config/broker.toml, else the embedded copy], with the
    /// MSSBROKER__SECTION__KEY variables over it, as `serve` reads it.
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
pub(super) enum Format {
    Table,
    Json,
}

#[derive(Debug, Args)]
pub(super) struct ReportArgs {
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
    /// With the table: after the totals, a table per bucket in which anything happened (same
    /// columns; pending and held at the bucket's end). JSON (`series`) and CSV always carry
    /// every bucket.
    #[arg(long)]
    buckets: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum ReportFormat {
    Table,
    Json,
    Csv,
}

pub(super) async fn report(args: ReportArgs) -> anyhow::Result<ExitCode> {
    use crate::clock::Clock;
    let now = crate::clock::SystemClock.now_ms();
    let report: crate::report::Report = match &args.db {
        Some(db) => {
            let settings = crate::config::layers::load_with_env(args.config.as_deref())?;
            let range = crate::report::parse_range(
                args.since.as_deref(),
                args.until.as_deref(),
                args.bucket.as_deref(),
                now,
                settings.limits.max_report_buckets,
            )
            .map_err(|e| anyhow::anyhow!("--{e}"))?;
            super::sqlite_file(db, "report", "ask the leading broker instead (--url)")?;
            if !db.exists() {
                bail!("--db: no database at {}", db.display());
            }
            let reader = crate::ledger::LedgerReader::open(db)?;
            crate::report::read_file(&reader, &settings.policy, range, now)
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
        ReportFormat::Table if args.buckets => {
            crate::report::render::table(&report) + &crate::report::render::bucket_tables(&report)
        }
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

pub(super) fn shares(args: SharesArgs) -> anyhow::Result<ExitCode> {
    use crate::clock::Clock;
    use crate::shares::{input, view};
    let settings = crate::config::layers::load_with_env(args.config.as_deref())?;
    let policy = &settings.policy;
    let now = crate::clock::SystemClock.now_ms();
    let at_ms = match args.at.as_deref() {
        Some(s) => crate::clock::parse_instant(s).map_err(|e| anyhow::anyhow!("--at: {e}"))?,
        None => now,
    };
    let shown = match (&args.db, &args.usage) {
        (Some(db), _) => {
            let instead = "give the leading broker's usage (GET /v1/groups) as --usage";
            super::sqlite_file(db, "shares", instead)?;
            if !db.exists() {
                bail!("--db: no database at {}", db.display());
            }
            crate::ledger::LedgerReader::open(db)?
                .shares(policy, at_ms, now)
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

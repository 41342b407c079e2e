//! `mssbroker restore` (a backup in the place of a stopped broker's database) and
//! `mssbroker unknown-keys` (what the MSS reported of transfers the ledger did not make:
//! requests lost with a restore). docs/operations.md, "Backup and restore".

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};

use crate::ledger::mss_key::UnknownKey;
use crate::ledger::restore::restore;
use crate::ledger::LedgerReader;

#[derive(Debug, Args)]
pub(super) struct RestoreArgs {
    /// The backup to restore (a file `mssbroker backup` wrote).
    #[arg(long)]
    from: PathBuf,
    /// The broker's database: kept as `<db>.replaced-<UTC time>` and replaced. The broker must
    /// be stopped. A PostgreSQL ledger is refused: use PostgreSQL's tools (docs/ha.md).
    #[arg(long)]
    db: PathBuf,
}

pub(super) fn run_restore(args: RestoreArgs) -> anyhow::Result<ExitCode> {
    super::sqlite_files(
        "restore",
        &[("--from", &args.from), ("--db", &args.db)],
        super::POSTGRES_BACKUP,
    )?;
    let stamp = jiff::Timestamp::now()
        .strftime("%Y%m%dT%H%M%SZ")
        .to_string();
    let s = restore(&args.from, &args.db, &stamp)?;
    println!(
        "restored {} -> {}: {} requests, last id {}",
        args.from.display(),
        args.db.display(),
        s.requests,
        s.last_id
    );
    match &s.replaced {
        Some(kept) => println!("the database it replaced is kept as {}", kept.display()),
        None => println!("there was no database at {}", args.db.display()),
    }
    println!(
        "requests acknowledged after the backup was taken are not in it; the next start gives \
         new requests MSS keys no earlier request had, and what the MSS reports of the lost \
         ones is listed by: mssbroker unknown-keys --db {}",
        args.db.display()
    );
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    Table,
    Json,
}

#[derive(Debug, Args)]
pub(super) struct UnknownKeysArgs {
    /// The broker's database (read only; the broker may be running).
    #[arg(long)]
    db: PathBuf,
    /// At most this many keys, oldest first.
    #[arg(long, default_value_t = 1000)]
    limit: usize,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

pub(super) fn run_unknown_keys(args: UnknownKeysArgs) -> anyhow::Result<ExitCode> {
    let instead = "on PostgreSQL read the table unknown_keys with psql";
    super::sqlite_file(&args.db, "unknown-keys", instead)?;
    let reader = LedgerReader::open(&args.db)?;
    let (keys, total) = reader.unknown_keys(args.limit)?;
    match args.format {
        Format::Json => println!("{}", serde_json::json!({ "total": total, "keys": keys })),
        Format::Table => print_table(&keys, total),
    }
    Ok(ExitCode::SUCCESS)
}

fn print_table(keys: &[UnknownKey], total: i64) {
    println!(
        "{total} MSS keys this ledger did not issue (transfers of requests lost with a restored \
         backup, or another broker's)"
    );
    if keys.is_empty() {
        return;
    }
    println!(
        "{:<40} {:<24} {:<24} {:>6}  last event",
        "key", "first seen (UTC)", "last seen (UTC)", "events"
    );
    let at = |ms: i64| {
        jiff::Timestamp::from_millisecond(ms)
            .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
            .unwrap_or_else(|_| ms.to_string())
    };
    for k in keys {
        println!(
            "{:<40} {:<24} {:<24} {:>6}  {}",
            k.key,
            at(k.first_ms),
            at(k.last_ms),
            k.events,
            k.last_event
        );
    }
    if (keys.len() as i64) < total {
        println!("({} more: --limit)", total - keys.len() as i64);
    }
}

//! `mssbroker backup`: a consistent copy of a database, taken while the broker runs
//! (docs/operations.md, "Backup and restore").

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use crate::ledger::backup::{backup as copy_database, BackupOptions};

#[derive(Debug, Args)]
pub(super) struct BackupArgs {
    /// The broker's SQLite database (read only; the broker may be running). A PostgreSQL
    /// ledger is refused: use PostgreSQL's tools (docs/ha.md).
    #[arg(long)]
    db: PathBuf,
    /// The new file to write (refused if it exists).
    #[arg(long)]
    to: PathBuf,
    /// Pages copied per step.
    #[arg(long, default_value_t = 1024)]
    pages_per_step: u16,
    /// Milliseconds to pause between steps.
    #[arg(long, default_value_t = 5)]
    pause_ms: u64,
}

pub(super) fn run(args: BackupArgs) -> anyhow::Result<ExitCode> {
    super::sqlite_files(
        "backup",
        &[("--db", &args.db), ("--to", &args.to)],
        super::POSTGRES_BACKUP,
    )?;
    let options = BackupOptions {
        pages_per_step: i32::from(args.pages_per_step.max(1)),
        pause: Duration::from_millis(args.pause_ms),
    };
    let summary = copy_database(&args.db, &args.to, options)?;
    println!(
        "backup {} -> {}: {} pages, {} bytes, {:.3} s",
        args.db.display(),
        args.to.display(),
        summary.pages,
        summary.bytes,
        summary.seconds
    );
    Ok(ExitCode::SUCCESS)
}

//! `mssbroker trace gen`: a synthetic request trace from documented parameters (see
//! docs/traces.md), written as JSON lines, with a summary of what it holds on stderr.
//! `mssbroker trace export`: the trace of a real ledger, read-only.

use std::fs::File;
use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::ledger::{ExportedRequest, LedgerReader};
use crate::trace::format::{write_ref, RecordRef, MAX_SIZE_BYTES};
use crate::trace::{generate, Direction, GenParams};

#[derive(Debug, Subcommand)]
pub(super) enum TraceCommand {
    /// Generate a synthetic trace (JSON lines) from parameters (docs/traces.md).
    Gen(GenArgs),
    /// Write the trace of a broker's database (read-only; beside a running broker is fine).
    Export(ExportArgs),
}

#[derive(Debug, Args)]
pub(super) struct GenArgs {
    /// Parameters as TOML (every key optional; the defaults are in docs/traces.md).
    #[arg(long)]
    params: Option<PathBuf>,
    /// Seed, overriding the parameters' `seed`.
    #[arg(long)]
    seed: Option<u64>,
    /// Number of recall requests, overriding the parameters' `requests`.
    #[arg(long)]
    requests: Option<u64>,
    /// Where the trace goes [default: standard output, unless it is a terminal].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the summary as JSON instead of a table (on standard error).
    #[arg(long)]
    summary_json: bool,
}

pub(super) fn run(command: TraceCommand) -> anyhow::Result<ExitCode> {
    match command {
        TraceCommand::Gen(args) => gen_trace(args),
        TraceCommand::Export(args) => export(args),
    }
}

fn gen_trace(args: GenArgs) -> anyhow::Result<ExitCode> {
    let mut params = match &args.params {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            toml::from_str::<GenParams>(&text)
                .with_context(|| format!("{} is not valid trace parameters", path.display()))?
        }
        None => GenParams::default(),
    };
    if let Some(seed) = args.seed {
        params.seed = seed;
    }
    if let Some(n) = args.requests {
        params.requests = n;
    }
    let summary = write_trace(args.out.as_deref(), |mut out| {
        Ok(generate(&params, &mut out)?)
    })?;
    if args.summary_json {
        eprintln!("{}", serde_json::to_string(&summary)?);
    } else {
        eprint!("{summary}");
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub(super) struct ExportArgs {
    /// The broker's SQLite database, opened read-only.
    #[arg(long)]
    db: PathBuf,
    /// Only requests accepted at or after this instant (RFC 3339, or ms since 1970).
    #[arg(long)]
    since: Option<String>,
    /// Only requests accepted before this instant (RFC 3339, or ms since 1970).
    #[arg(long)]
    until: Option<String>,
    /// Where the trace goes [default: standard output, unless it is a terminal].
    #[arg(long)]
    out: Option<PathBuf>,
}

fn export(args: ExportArgs) -> anyhow::Result<ExitCode> {
    let instant = |name: &str, value: &Option<String>| -> anyhow::Result<Option<i64>> {
        value
            .as_deref()
            .map(|s| crate::clock::parse_instant(s).map_err(|e| anyhow::anyhow!("--{name}: {e}")))
            .transpose()
    };
    let since = instant("since", &args.since)?;
    let until = instant("until", &args.until)?;
    let instead = "exporting a PostgreSQL ledger's trace is not built yet";
    super::sqlite_file(&args.db, "trace export", instead)?;
    if !args.db.exists() {
        anyhow::bail!("--db: no database at {}", args.db.display());
    }
    let reader = LedgerReader::open(&args.db)?;
    let n = write_trace(args.out.as_deref(), |out| {
        export_to(&reader, since, until, out)
    })?;
    eprintln!("{} requests exported from {}", n.written, args.db.display());
    if n.too_large > 0 {
        eprintln!(
            "{} requests left out: larger than the trace format's {MAX_SIZE_BYTES} bytes (1 PB), \
             which limits.max_size_bytes allowed",
            n.too_large
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `write` on the file `path` (standard output when `None`). A file is written beside
/// its destination and renamed onto it only once complete: a run that fails leaves no partial
/// trace (and an older file of that name as it was). Standard output is refused when it is a
/// terminal (megabytes of JSON lines are for a file or a pipe, not for a screen).
fn write_trace<T>(
    path: Option<&Path>,
    write: impl FnOnce(&mut dyn Write) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let Some(path) = path else {
        if std::io::stdout().is_terminal() {
            anyhow::bail!(
                "the trace goes to standard output, which is a terminal: give --out FILE \
                 (e.g. --out trace.jsonl), or redirect it (> trace.jsonl) or pipe it"
            );
        }
        let stdout = std::io::stdout();
        let mut out = BufWriter::new(stdout.lock());
        let value = write(&mut out)?;
        out.flush().context("cannot write the trace")?;
        return Ok(value);
    };
    let name = path
        .file_name()
        .map_or_else(|| "trace".into(), |n| n.to_string_lossy().into_owned());
    let partial = path.with_file_name(format!(".{name}.partial-{}", std::process::id()));
    let written = File::create(&partial)
        .with_context(|| format!("cannot create {}", partial.display()))
        .and_then(|file| {
            let mut out = BufWriter::new(file);
            let value = write(&mut out)?;
            let file = out
                .into_inner()
                .map_err(|e| e.into_error())
                .with_context(|| format!("cannot write {}", partial.display()))?;
            file.sync_all()
                .with_context(|| format!("cannot write {}", partial.display()))?;
            Ok(value)
        })
        .and_then(|value| {
            std::fs::rename(&partial, path)
                .with_context(|| format!("cannot write {}", path.display()))?;
            Ok(value)
        });
    if written.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    written
}

/// What an export wrote, and what it left out.
struct Exported {
    written: u64,
    /// Requests over the trace format's size bound (`MAX_SIZE_BYTES`), which a site's
    /// `limits.max_size_bytes` may allow: a trace holding them could not be read back.
    too_large: u64,
}

/// Streams the ledger's requests into `out` as trace records (docs/traces.md, "Exporting"):
/// `t` from the first exported request, never decreasing; `volume`, `position` and `offset_bytes` as the request
/// gave them, left out where it gave none, so a replay reads it as the request it was. A
/// request over the trace format's size bound is left out (and counted).
fn export_to(
    reader: &LedgerReader,
    since: Option<i64>,
    until: Option<i64>,
    mut out: &mut dyn Write,
) -> anyhow::Result<Exported> {
    let mut first_ms: Option<i64> = None;
    let mut last_ms = i64::MIN;
    let mut buf = Vec::with_capacity(512);
    let mut too_large = 0;
    let n = reader.for_each_request(since, until, |r: &ExportedRequest| -> anyhow::Result<()> {
        if r.size_bytes > MAX_SIZE_BYTES {
            too_large += 1;
            return Ok(());
        }
        let origin = *first_ms.get_or_insert(r.created_ms);
        // A wall clock that stepped back keeps the previous `t`: a trace never goes back.
        last_ms = last_ms.max(r.created_ms);
        let t_of = |ms: i64| ms.saturating_sub(origin) as f64 / 1000.0;
        let record = RecordRef {
            t: t_of(last_ms),
            client_request_id: &r.client_request_id,
            station: &r.station,
            user: &r.user,
            file: &r.file,
            volume: r.volume.as_deref().filter(|v| !v.is_empty()),
            position: r.position,
            offset_bytes: r.offset_bytes,
            size_bytes: r.size_bytes,
            access_mode: &r.access_mode,
            physics_group: &r.physics_group,
            direction: match r.direction {
                mss_adapters::Direction::Read => Direction::Read,
                mss_adapters::Direction::Write => Direction::Write,
            },
            // At or after its own `t`, as the format requires.
            cancelled_t: r.cancelled_ms.map(|ms| t_of(ms.max(last_ms))),
        };
        write_ref(&record, &mut buf, &mut out)?;
        Ok(())
    })?;
    Ok(Exported {
        written: n - too_large,
        too_large,
    })
}

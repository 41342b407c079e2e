//! `mssbroker trace gen`: a synthetic request trace from documented parameters (see
//! docs/traces.md), written as JSON lines, with a summary of what it holds on stderr.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::trace::{generate, GenParams};

#[derive(Debug, Subcommand)]
pub(super) enum TraceCommand {
    /// Generate a synthetic trace (JSON lines) from parameters (docs/traces.md).
    Gen(GenArgs),
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
    /// Where the trace goes [default: standard output].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the summary as JSON instead of a table (on standard error).
    #[arg(long)]
    summary_json: bool,
}

pub(super) fn run(command: TraceCommand) -> anyhow::Result<ExitCode> {
    match command {
        TraceCommand::Gen(args) => gen_trace(args),
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
    let summary = match &args.out {
        Some(path) => {
            let file =
                File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
            let mut out = BufWriter::new(file);
            let summary = generate(&params, &mut out)?;
            out.flush()
                .with_context(|| format!("cannot write {}", path.display()))?;
            summary
        }
        None => {
            let stdout = std::io::stdout();
            let mut out = BufWriter::new(stdout.lock());
            let summary = generate(&params, &mut out)?;
            out.flush().context("cannot write the trace")?;
            summary
        }
    };
    if args.summary_json {
        eprintln!("{}", serde_json::to_string(&summary)?);
    } else {
        eprint!("{summary}");
    }
    Ok(ExitCode::SUCCESS)
}

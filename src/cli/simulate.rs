//! `mssbroker simulate`: a trace replayed in virtual time through the broker's own policy code
//! against the library model, one run per policy/mode pair (docs/simulation.md).

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Args;

use super::library_flags::LibraryFlags;
use crate::config::Settings;
use crate::simulate::{self, Baseline, RunSpec, SimulationReport};
use crate::trace::{read_trace, TraceRecord};
use mss_adapters::sim::library::{LibraryConfig, Model};

#[derive(Debug, Args)]
pub(super) struct SimulateArgs {
    /// The broker configuration (shares, classification, policy, release limits).
    #[arg(long)]
    config: PathBuf,
    /// The trace to replay (JSON lines, docs/traces.md).
    #[arg(long)]
    trace: PathBuf,
    /// sam, fair_tree, multifactor, fbsng, or the baselines fifo, weighted_random
    /// [default: the configuration's].
    #[arg(long)]
    policy: Option<String>,
    /// pass_through, held or volumes [default: the configuration's].
    #[arg(long)]
    mode: Option<String>,
    /// Bytes done per share-error window.
    #[arg(long, default_value_t = simulate::DEFAULT_WINDOW_BYTES)]
    window_bytes: u64,
    /// Several runs side by side: POLICY/MODE,POLICY/MODE,... (instead of --policy/--mode);
    /// alone, the three release modes held, volumes and pass_through under --policy (or the
    /// configuration's).
    #[arg(long, num_args = 0..=1, default_missing_value = "")]
    compare: Option<String>,
    /// table or json.
    #[arg(long, default_value = "table")]
    format: String,
    /// Vary a `[release.volumes]` key over values: KEY=V1,V2,... (repeat for more keys; the
    /// runs are their cross product in the volumes mode, with held and pass_through as
    /// baselines; instead of --mode/--compare).
    #[arg(long)]
    sweep: Vec<String>,
    /// With --sweep: write the tradeoff chart (mounts per TB against fair-share p95 wait) here,
    /// as SVG.
    #[arg(long)]
    chart: Option<PathBuf>,
    /// With --chart: the x axis, wait_p95 (the fair-share p95 wait) or share_error (the
    /// largest share error over the windows).
    #[arg(long, default_value = "wait_p95")]
    chart_x: String,
    #[command(flatten)]
    library: LibraryFlags,
}

mod sweep;

const POLICIES: [&str; 6] = [
    "sam",
    "fair_tree",
    "multifactor",
    "fbsng",
    "fifo",
    "weighted_random",
];

/// The release modes, in the order `--compare` alone runs them.
const MODES: [&str; 3] = ["held", "volumes", "pass_through"];

pub(super) fn run(args: SimulateArgs) -> anyhow::Result<ExitCode> {
    let json = match args.format.as_str() {
        "json" => true,
        "table" => false,
        other => bail!("--format {other}: expected table or json"),
    };
    if args.chart.is_some() && args.sweep.is_empty() {
        bail!("--chart draws a sweep: give --sweep KEY=V1,V2,...");
    }
    if !args.sweep.is_empty() && (args.compare.is_some() || args.mode.is_some()) {
        bail!("--sweep runs its own modes: drop --compare and --mode");
    }
    let pairs = runs(&args)?;
    let text = std::fs::read_to_string(&args.config)
        .with_context(|| format!("cannot read {}", args.config.display()))?;
    let file =
        File::open(&args.trace).with_context(|| format!("cannot open {}", args.trace.display()))?;
    let records = read_trace(BufReader::new(file))
        .with_context(|| format!("cannot read the trace {}", args.trace.display()))?;
    let library = library(&args, &text)?;
    if !args.sweep.is_empty() {
        sweep::run(&args, &text, &records, &library)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut report = SimulationReport { runs: Vec::new() };
    for (policy, mode) in &pairs {
        let started = Instant::now();
        let run = run_pair(&args, &text, &records, &library, policy, mode.as_deref())?;
        let secs = started.elapsed().as_secs_f64();
        eprintln!(
            "{}/{}: {} requests simulated in {secs:.3} s ({:.0} requests/s)",
            run.policy,
            run.mode,
            records.len(),
            records.len() as f64 / secs.max(1e-9)
        );
        report.runs.push(run);
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", simulate::report::table(&report));
    }
    Ok(ExitCode::SUCCESS)
}

/// The library `[mss.simulator]` of the configuration describes (enabled or not; the defaults
/// of an empty table without one), under the Enstore model unless the table or `--model` says
/// otherwise, with the flags put over it.
fn library(args: &SimulateArgs, text: &str) -> anyhow::Result<LibraryConfig> {
    let origin = args.config.display().to_string();
    let base = args.config.parent().unwrap_or(Path::new("."));
    let settings = Settings::parse_in(text, &origin, base)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("the configuration {origin}"))?;
    let (mut library, model_set) = match &settings.mss.simulator {
        Some(sim) => (sim.library.clone(), sim.model_set),
        None => (LibraryConfig::default(), false),
    };
    if !model_set {
        library.model = Model::Enstore;
    }
    args.library.apply(&mut library)?;
    Ok(library)
}

/// The policy/mode pairs to run (`None`: the configuration's mode).
fn runs(args: &SimulateArgs) -> anyhow::Result<Vec<(String, Option<String>)>> {
    let policy = args.policy.clone().unwrap_or_default();
    let pairs: Vec<(String, Option<String>)> = match &args.compare {
        Some(list) if list.trim().is_empty() => MODES
            .iter()
            .map(|m| (policy.clone(), Some(m.to_string())))
            .collect(),
        Some(list) => list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|item| match item.split_once('/') {
                Some((p, m)) => Ok((p.to_string(), Some(m.to_string()))),
                None => bail!("--compare {item}: expected POLICY/MODE"),
            })
            .collect::<anyhow::Result<_>>()?,
        None => vec![(policy, args.mode.clone())],
    };
    for (p, m) in &pairs {
        if !p.is_empty() && !POLICIES.contains(&p.as_str()) {
            bail!("policy {p}: expected one of {}", POLICIES.join(", "));
        }
        if let Some(m) = m {
            if !MODES.contains(&m.as_str()) {
                bail!("mode {m}: expected one of {}", MODES.join(", "));
            }
        }
    }
    if pairs.is_empty() {
        bail!("--compare names no run");
    }
    Ok(pairs)
}

/// One run: the configuration with `policy` (empty: the configuration's) and `mode` put in,
/// validated as `serve` would, then simulated.
fn run_pair(
    args: &SimulateArgs,
    text: &str,
    records: &[TraceRecord],
    library: &mss_adapters::sim::library::LibraryConfig,
    policy: &str,
    mode: Option<&str>,
) -> anyhow::Result<simulate::RunReport> {
    let baseline = match policy {
        "fifo" => Some(Baseline::Fifo),
        "weighted_random" => Some(Baseline::WeightedRandom),
        _ => None,
    };
    let algorithm = (baseline.is_none() && !policy.is_empty()).then_some(policy);
    let text = overridden(text, algorithm, mode)
        .with_context(|| format!("{} is not valid TOML", args.config.display()))?;
    let base = args.config.parent().unwrap_or(Path::new("."));
    let origin = format!(
        "{} ({policy}/{})",
        args.config.display(),
        mode.unwrap_or("")
    );
    let settings = Settings::parse_in(&text, &origin, base)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("the configuration for {origin}"))?;
    let load = simulate::arrivals(&settings.policy, records)?;
    let spec = RunSpec {
        baseline,
        window_bytes: args.window_bytes,
        retry: settings.mss.retry,
    };
    Ok(simulate::simulate(&settings.policy, library, &load, spec)?)
}

/// The configuration text with `[policy] algorithm` and `[release] mode` replaced.
fn overridden(text: &str, algorithm: Option<&str>, mode: Option<&str>) -> anyhow::Result<String> {
    let mut doc: toml::Table = toml::from_str(text)?;
    let mut set = |table: &str, key: &str, value: &str| {
        let t = doc
            .entry(table)
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if let toml::Value::Table(t) = t {
            t.insert(key.to_string(), toml::Value::String(value.to_string()));
        }
    };
    if let Some(a) = algorithm {
        set("policy", "algorithm", a);
    }
    if let Some(m) = mode {
        set("release", "mode", m);
    }
    Ok(toml::to_string(&doc)?)
}

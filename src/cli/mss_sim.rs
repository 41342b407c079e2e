//! `mssbroker mss-sim`: the MSS simulator as a process of its own.

use super::library_flags::LibraryFlags;
use super::serve::{banner, StopSignals};
use crate::config::Settings;
use anyhow::{bail, Context};
use clap::Args;
use mss_adapters::sim::{self, LibraryConfig, SimConfig};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, Args)]
pub(super) struct SimArgs {
    /// A broker configuration whose `[mss.simulator]` table (enabled or not) this simulator
    /// runs, as `serve`'s embedded one would: its listen address, time scale and library;
    /// every flag given here overrides its key.
    #[arg(long)]
    config: Option<PathBuf>,
    /// [default: `[mss.simulator] listen` with --config, else 127.0.0.1:7070]
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// "priority" model: seconds to mount a volume [default: `[mss.simulator] mount_seconds`
    /// with --config, else 60].
    #[arg(long)]
    mount_seconds: Option<f64>,
    /// Virtual seconds per real second [default: `[mss.simulator] time_scale` with --config,
    /// else 1].
    #[arg(long)]
    time_scale: Option<f64>,
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
    /// Enstore model: seconds a drive keeps an idle volume mounted (Enstore's dismount_delay)
    /// [default: `[mss.simulator] dismount_delay_seconds` with --config, else 60].
    #[arg(long)]
    dismount_delay_seconds: Option<f64>,
    #[command(flatten)]
    library: LibraryFlags,
}

/// What the simulator runs before the flags: `[mss.simulator]` of `--config`, else the
/// defaults (127.0.0.1:7070, real time, [`LibraryConfig::default`]).
struct Base {
    listen: SocketAddr,
    time_scale: f64,
    library: LibraryConfig,
}

fn base(config: Option<&Path>) -> anyhow::Result<Base> {
    let Some(path) = config else {
        return Ok(Base {
            listen: SocketAddr::from(([127, 0, 0, 1], 7070)),
            time_scale: 1.0,
            library: LibraryConfig::default(),
        });
    };
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let origin = path.display().to_string();
    let dir = path.parent().unwrap_or(Path::new("."));
    let settings = Settings::parse_in(&text, &origin, dir)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("the configuration {origin}"))?;
    let Some(sim) = settings.mss.simulator else {
        bail!("{origin} has no [mss.simulator] table: nothing to simulate");
    };
    Ok(Base {
        listen: sim.listen,
        time_scale: sim.time_scale,
        library: sim.library,
    })
}

/// The flags put over the base's library.
fn library(args: &SimArgs, mut library: LibraryConfig) -> anyhow::Result<LibraryConfig> {
    let seconds = |v: f64, flag: &str| -> anyhow::Result<u64> {
        if v >= 0.0 && v.is_finite() && v < 1e9 {
            Ok((v * 1e6).round() as u64)
        } else {
            bail!("--{flag} must be 0 or more seconds")
        }
    };
    args.library.apply(&mut library)?;
    if let Some(mount) = args.mount_seconds {
        library.mount_micros = seconds(mount, "mount-seconds")?;
    }
    if let Some(delay) = args.dismount_delay_seconds {
        library.dismount_delay_micros = seconds(delay, "dismount-delay-seconds")?;
    }
    Ok(library)
}

pub(super) async fn mss_sim(args: SimArgs) -> anyhow::Result<ExitCode> {
    let base = base(args.config.as_deref())?;
    let library = library(&args, base.library)?;
    let time_scale = args.time_scale.unwrap_or(base.time_scale);
    let positive = |v: f64| v.is_finite() && v > 0.0;
    if !positive(time_scale)
        || ![
            library.failure_rate,
            args.submit_failure_rate,
            args.drop_event_rate,
            args.duplicate_event_rate,
        ]
        .iter()
        .all(|r| (0.0..=1.0).contains(r))
    {
        bail!("--time-scale must be above 0, every --*-rate within 0..1");
    }
    let listen = args.listen.unwrap_or(base.listen);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let addr = listener.local_addr()?;
    let cfg = SimConfig {
        library,
        time_scale,
        faults: mss_adapters::protocol::Faults {
            submit_failure_rate: args.submit_failure_rate,
            down_for_ms: 0,
            delay_ms: args.delay_ms,
            drop_event_rate: args.drop_event_rate,
            duplicate_event_rate: args.duplicate_event_rate,
            ..Default::default()
        },
    };
    let stops = StopSignals::install()?;
    banner(&format!("mss simulator listening on http://{addr}\n"));
    sim::run(listener, cfg, async {
        let signal = stops.recv().await;
        tracing::info!(signal, "mss simulator stopping");
    })
    .await?;
    tracing::info!("mss simulator stopped");
    Ok(ExitCode::SUCCESS)
}

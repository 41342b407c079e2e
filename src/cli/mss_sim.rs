//! `mssbroker mss-sim`: the MSS simulator as a process of its own.

use super::serve::{banner, StopSignals};
use anyhow::{bail, Context};
use clap::Args;
use mss_adapters::sim::{self, LibraryConfig, SimConfig};
use std::net::SocketAddr;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub(super) struct SimArgs {
    #[arg(long, default_value = "127.0.0.1:7070")]
    listen: SocketAddr,
    #[arg(long, default_value_t = 4)]
    drives: usize,
    #[arg(long, default_value_t = 60.0)]
    mount_seconds: f64,
    /// Transfer rate of one drive [default: the drive profile's].
    #[arg(long)]
    rate_mb_per_sec: Option<f64>,
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
    /// The library model: "priority" (strict priority over all pending transfers) or
    /// "enstore" (per-volume queues in tape order, the mounted volume first, a dismount delay).
    #[arg(long, default_value = "priority")]
    model: String,
    /// Enstore model: the drive profile, lto8, lto9, ts1160 or custom (docs/enstore-model.md;
    /// every figure of a profile is a key of `[mss.simulator]` for `serve` and `simulate`).
    #[arg(long, default_value = "lto9")]
    drive: String,
    /// Enstore model: the order of a mounted volume's reads, position (Enstore) or rao (CTA).
    #[arg(long, default_value = "position")]
    order: String,
    /// Enstore model: seconds a drive keeps an idle volume mounted (Enstore's dismount_delay).
    #[arg(long, default_value_t = 60.0)]
    dismount_delay_seconds: f64,
    /// Enstore model: transfers at or above this priority are admin requests (served first by
    /// an idle drive, and taking over a drive done with a regular transfer when none is idle).
    #[arg(long)]
    admin_priority_from: Option<i64>,
}

pub(super) async fn mss_sim(args: SimArgs) -> anyhow::Result<ExitCode> {
    let positive = |v: f64| v.is_finite() && v > 0.0;
    if !positive(args.time_scale)
        || !args.rate_mb_per_sec.is_none_or(positive)
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
    let Some(model) = mss_adapters::sim::Model::parse(&args.model) else {
        bail!(
            "--model must be \"priority\" or \"enstore\", not `{}`",
            args.model
        );
    };
    let Some(kind) = mss_adapters::sim::library::DriveKind::parse(&args.drive) else {
        bail!(
            "--drive must be lto8, lto9, ts1160 or custom, not `{}`",
            args.drive
        );
    };
    let Some(order) = mss_adapters::sim::library::Order::parse(&args.order) else {
        bail!("--order must be position or rao, not `{}`", args.order);
    };
    let (rate, mut tape) = kind.profile();
    tape.order = order;
    let seconds = |v: f64, flag: &str| -> anyhow::Result<u64> {
        if v >= 0.0 && v.is_finite() && v < 1e9 {
            Ok((v * 1e6).round() as u64)
        } else {
            bail!("--{flag} must be 0 or more seconds")
        }
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    let cfg = SimConfig {
        library: LibraryConfig {
            drives: args.drives.max(1),
            mount_micros: (args.mount_seconds.max(0.0) * 1e6) as u64,
            bytes_per_sec: args
                .rate_mb_per_sec
                .map_or(rate, |r| (r * 1e6).round() as u64),
            failure_rate: args.failure_rate,
            seed: args.seed,
            aging: None,
            model,
            tape,
            dismount_delay_micros: seconds(args.dismount_delay_seconds, "dismount-delay-seconds")?,
            admin_from: args.admin_priority_from,
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

//! The what-if simulator (`mssbroker simulate`, docs/simulation.md): a trace replayed in
//! virtual time through the broker's own classification, placement, usage book and held queue
//! against the simulator's library model, with figures on fairness, waits and what it cost the
//! drives. Pure: the caller reads the configuration and the trace.
//!
//! - `engine`: the discrete-event loop (the policy tests run it too);
//! - `baseline`: the comparison-only policies `fifo` and `weighted_random`;
//! - `report`: the JSON report, the share error windows and the table;
//! - `tradeoff`: the volumes mode's tradeoff chart (mounts per TB against p95 wait).
//!
//! The what-if simulator (`mssbroker simulate`, docs/simulation.md), pure (the CLI reads the
//! configuration and the trace). `engine.rs` (the discrete-event loop in virtual microseconds:
//! arrivals classified by `policy::classify`, `place`, `HeldQueue::pick`, `UsageBook` read through
//! `policy::order::ShareSnapshotCache`, FBSNG `Queues` against `mss_adapters::sim::library::Library` with
//! `forget_finished`; `RunRecord`, with each request's `SentDecision` (group, class, MSS priority) for
//! the replay test `tests/api/replay.rs`; also the policy tests' engine; `Run::settle` re-dates a
//! request's charge to its transfer's end, as the writer's `settle::finalize` does),
//! `engine/arrival.rs` (`Arrival`, a request of the load, and the `Transfer` of one of its
//! attempts), `engine/outcome.rs` (`RunRecord`, `SentDecision`, `Finished`: what a run reports),
//! `engine/reprioritise.rs` (the re-prioritisation of what waits at the library, in `pass_through`
//! and `held`, as the dispatcher's), `engine/volumes.rs` (the volumes mode: `VolumeQueue` batches
//! charged at release, submitted at once), `engine/coalesce.rs` (duplicate reads ride on a carrier
//! under `[release] coalesce`, as the writer's `coalesce.rs` decides), `engine/retry.rs` (a failed
//! attempt with attempts left waits out `RetrySettings::backoff` keeping its charge, slots, volume
//! flight and riders, and is sent again at its last priority, as the writer's `settle.rs` `failed`
//! does; `--failure-rate`), `tradeoff.rs` (the `--sweep` chart: mounts per TB against p95 wait,
//! SVG), `tests/volumes_goals.rs` (issue 16's goals on a generated trace, a test), `pending_at_library.rs`
//! (fair-share requests pending at the library per group by priority, so a re-prioritisation
//! touches only what changes; a pass sends at most the dispatcher's `REPRIORITISE_BATCH` changes,
//! lowest ids first, as `serve` does: a k-way merge of the sorted buckets for the group policies;
//! for multifactor, which places each request itself, `pending_at_library/placed.rs` keeps each pending
//! request with the time its priority holds until, from `policy::order::mss_priority_until`, and a
//! pass places only those due, those over the last cap, or all when a group's Fair Tree rank
//! moved), `baseline.rs` (`fifo` and `weighted_random`, comparison only, a pick beside
//! `HeldQueue::pick`), `report.rs` (the JSON report, the share error windows over the saturated
//! part, nearest-rank waits, the table), `simulate.rs` (trace to arrivals, `simulate`, `SimError`).

pub mod baseline;
pub mod engine;
mod pending_at_library;
pub mod report;
pub mod tradeoff;

use mss_adapters::sim::library::{LibraryConfig, Micros, Model};

pub use baseline::Baseline;
pub use engine::{run, run_with, Arrival, Picker, RunRecord, SentDecision};
pub use report::{RunReport, SimulationReport};

use crate::domain::order::ReleaseMode;
use crate::domain::{PolicySettings, RetrySettings};
use crate::policy::{benefit, classify, ClassifyError, RequestFields};
use crate::trace::{Direction, TraceRecord};

/// The default share-error window: 1 TB done.
pub const DEFAULT_WINDOW_BYTES: u64 = 1_000_000_000_000;

/// What a simulation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A trace record no group takes (line from 1, counting records).
    #[error("trace record {record}: {source}")]
    Classify {
        record: usize,
        #[source]
        source: ClassifyError,
    },
    /// A policy/mode pair the simulator cannot run.
    #[error("{0}")]
    Unsupported(String),
}

/// The library `simulate` uses by default: Enstore's model and defaults, `drives` drives.
pub fn library(drives: usize, seed: u64) -> LibraryConfig {
    LibraryConfig {
        model: Model::Enstore,
        drives: drives.max(1),
        seed,
        ..LibraryConfig::default()
    }
}

/// The trace's records as the engine's load: each classified by `policy::classify` into its
/// group, worth `policy::benefit` of its access mode and size, with its volume, position, byte
/// offset (the library places the file by it when given) and direction; `t` in seconds to virtual microseconds (rounded). A record without a volume or a
/// position is a request without it, as `serve` has one: the broker's volume queue puts it on
/// its group's pseudo-volume, after the positioned requests (`VolumeQueue::push`), and the
/// library is given its file's name, from which it derives a volume of the file's own and a
/// position (`mss_adapters::sim::library::name_position`), as for a transfer from `serve`.
pub fn arrivals(
    policy: &PolicySettings,
    records: &[TraceRecord],
) -> Result<Vec<Arrival>, SimError> {
    records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let fields = RequestFields {
                access_mode: &r.access_mode,
                physics_group: &r.physics_group,
                station: &r.station,
                user: &r.user,
                file: &r.file,
            };
            let group = classify(policy, &fields).map_err(|source| SimError::Classify {
                record: i + 1,
                source,
            })?;
            Ok(Arrival {
                at: (r.t * 1e6).round() as Micros,
                group,
                size_bytes: r.size_bytes,
                volume: r.volume.clone(),
                position: r.position,
                offset_bytes: r.offset_bytes,
                name: (r.volume.is_none() || (r.position.is_none() && r.offset_bytes.is_none()))
                    .then(|| r.file.clone()),
                benefit: Some(benefit(policy, &r.access_mode, r.size_bytes)),
                qos: policy.order.qos(None, &r.access_mode),
                queue: policy.order.queue_factor(&r.access_mode),
                write: r.direction == Direction::Write,
                file: (r.direction == Direction::Read).then(|| file_key(&r.file)),
                cancelled_at: r.cancelled_t.map(|c| (c * 1e6).round() as Micros),
            })
        })
        .collect()
}

/// A read's file as the engine matches duplicates: a 64-bit hash (two files colliding, about
/// one chance in 10^7 for a million files, would coalesce wrongly in the simulation only).
fn file_key(file: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    file.hash(&mut h);
    h.finish()
}

/// One run to simulate: `policy` already carries the algorithm and release mode to run (the
/// CLI overrides the configuration's); `baseline` replaces the policy's picks.
#[derive(Debug, Clone, Copy)]
pub struct RunSpec {
    pub baseline: Option<Baseline>,
    pub window_bytes: u64,
    /// How failed attempts are retried (`[mss] retry_*`; the library fails them at
    /// `LibraryConfig::failure_rate`).
    pub retry: RetrySettings,
}

/// Run `load` to the end under `policy` (and `spec`'s baseline) on `library`, and report it.
pub fn simulate(
    policy: &PolicySettings,
    library: &LibraryConfig,
    load: &[Arrival],
    spec: RunSpec,
) -> Result<RunReport, SimError> {
    let mode = policy.order.release.mode;
    if spec.baseline == Some(Baseline::WeightedRandom) && mode == ReleaseMode::PassThrough {
        return Err(SimError::Unsupported(
            "weighted_random picks a group per free slot: it needs --mode held".into(),
        ));
    }
    if spec.baseline.is_some() && mode == ReleaseMode::Volumes {
        return Err(SimError::Unsupported(
            "the baselines pick requests, not volumes: --mode volumes runs the policy".into(),
        ));
    }
    let picker = spec.baseline.map_or(Picker::Policy, Picker::Baseline);
    let o = engine::run_retrying(
        policy,
        library.clone(),
        load,
        Micros::MAX,
        picker,
        spec.retry,
    );
    let name = spec
        .baseline
        .map_or(policy.order.algorithm.name(), Baseline::name);
    Ok(report::run_report(
        policy,
        name,
        mode.name(),
        load.len() as u64,
        &o,
        spec.window_bytes,
    ))
}

#[cfg(test)]
mod tests;

//! The broker's decisions, as pure functions: which group a request belongs to
//! ([`classify`]), what it is worth ([`benefit`]), at what MSS priority it enters the queue
//! ([`sam`]), and the rules it follows when it changes state, which the ledger's writer and the
//! simulator both call ([`transition`]). Nothing here does I/O or reads a clock, so the live
//! broker, replays and tests run the same decisions on the same inputs.
//!
//! Pure decisions. `classify.rs` (priority class, rules, natural leaf, default), `sam.rs`
//! (re-exports `shares::sam::decide` and tests it), `multifactor.rs` (the multifactor design note's
//! weighted factors onto an MSS priority band; `Multifactor::place`, its arm of `place`),
//! `fbsng.rs` (the FBSNG design note's queue priorities: `Queues::started`, `holds`, `order`;
//! `pick_section` for the section gap; `place`, its arm), `order.rs` (`OrderSettings`, `Candidate`,
//! `ShareSnapshot` (usage, lazily the Fair Tree, FBSNG queues), `ShareSnapshotCache` (`U` and the Fair Tree kept
//! between decisions while the book's generation and, for decaying models, the instant are
//! unchanged), `place`: the MSS priority, class, held-mode score and `Explain` of a request under
//! the configured policy, with the starvation bound; each policy's `FairPlacement` comes from its module,
//! SAM's and Fair Tree's from `sam_arm`/`fair_tree_arm` here), `queue.rs` (`HeldQueue`: waiting
//! requests per library and group, `pick` the next to release, `placement` of one for explain;
//! `queue/run.rs`: one group's requests in id order, in chunks of 32 compact `Waiting`s that
//! appends keep full (a `BTreeMap` filled by appends is half empty: `serve` with 1M queued was
//! 406–409 MB filled, 337 MB after a restart, against 251–258 and 169 MB now), loaded by pushing
//! the rows in id order; `queue/by_score.rs`: multifactor's per-request order per group, so its
//! pick scores a few candidates per group instead of the queue; `Ranking`: every waiting request's
//! position from a snapshot, `O(n log n)`, for explain), `reserve.rs` (the drive reservation for
//! the priority classes, `[release.reserve]`: while data taking waits at the MSS or moved within
//! `window_secs`, fair share takes at most `limit - drives` slots (held) or `max_volumes - drives`
//! volumes (volumes), and no sticky extension or rider is made while a priority request waits; one
//! pure rule with an injected clock, called by `ledger/writer/reserve.rs` and
//! `simulate/engine/reserve.rs`), `volumes.rs` + `volumes/` (the `volumes` release mode,
//! docs/volumes.md: `VolumeQueue` of waiting requests per library and volume with incremental
//! eligibility indexes, `next_batch` (group as held picks it, then its volume; riders; sticky),
//! `batch_started`, `request_finished`, `status` for explain; `eligibility.rs` the rules,
//! `state.rs` one library (a volume's requests once each, by tape position, as the held queue's
//! 64-byte `Waiting` plus its group; the position lives in the queue's id index), `label.rs` a
//! volume label kept inline up to 16 bytes and ordered as its text; `VolumeId::Unlocated(group)`:
//! requests waiting for their volume lookup, eligible once the oldest has waited the lookup's
//! `wait_secs`, never taken along by a mount), `policy.rs` (`benefit`). The virtual-time engine that
//! runs them against the simulator's `Library` is `simulate/engine.rs`.

pub mod classify;
pub mod fbsng;
pub mod multifactor;
pub mod order;
pub mod queue;
pub mod reserve;
pub mod sam;
pub mod transition;
pub mod volumes;

pub use classify::{classify, ClassifyError, RequestFields};
pub use sam::{decide, Decision};

use crate::domain::{Benefit, PolicySettings};

/// What a request of `bytes` bytes in `access_mode` is worth to its group.
pub fn benefit(policy: &PolicySettings, access_mode: &str, bytes: u64) -> u64 {
    match &policy.benefit {
        Benefit::Bytes => bytes,
        Benefit::Files => 1,
        Benefit::WeightedBytes(w) => bytes.saturating_mul(w.get(access_mode).copied().unwrap_or(1)),
    }
}

//! The broker's decisions, as pure functions: which group a request belongs to
//! ([`classify`]), what it is worth ([`benefit`]), at what MSS priority it enters the queue
//! ([`sam`]), and the rules it follows when it changes state, which the ledger's writer and the
//! simulator both call ([`transition`]). Nothing here does I/O or reads a clock, so the live
//! broker, replays and tests run the same decisions on the same inputs.

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

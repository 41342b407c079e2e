//! The re-prioritisation pass: which requests waiting at the MSS get a new MSS priority, which
//! one, in what order and how many a pass. One decision, made here for the dispatcher's pass
//! (`ledger/live.rs` reads the rows, `dispatcher.rs` sends the answer) and for the simulator's
//! (`simulate/engine/reprioritise.rs`, whose `PendingAtLibrary` index proposes only the
//! requests whose priority may have changed, which is the engine's speed, not a rule):
//!
//! - who: a fair-share request waiting at the MSS (sent, not started) that was not released in
//!   a `volumes` batch ([`reprioritised`]);
//! - to what: its placement now with no benefit of its own, its charge being in the usage
//!   already ([`replaced`], [`priority_now`]);
//! - which, in what order, how many: those whose priority now differs from the one last sent,
//!   lowest ids first, at most the cap ([`pass_changes`]; the cap is
//!   [`REPRIORITISE_BATCH`](super::REPRIORITISE_BATCH) in both callers).
//!
//! [`reprioritise_pass`] is the whole pass over every waiting request: what the live side runs,
//! and what the simulator's index must give (a test in `simulate/engine/reprioritise.rs` checks
//! it pass by pass).

use crate::policy::order::ShareSnapshot;
use crate::policy::order::{mss_priority_until, place, Candidate, OrderSettings, Placement};
use crate::shares::UsageLookup;

/// Whether a request waiting at the MSS is re-prioritised at all: one of a fair-share group
/// (`fair`; a priority class keeps its class's priority), unless released in a `volumes`
/// batch (`in_batch`), which keeps its batch's one priority so the library reads the volume's
/// batch together.
pub fn reprioritised(fair: bool, in_batch: bool) -> bool {
    fair && !in_batch
}

/// `c`, waiting at the MSS, as a re-prioritisation pass places it again: with no benefit of its
/// own, since its charge is already in the usage.
pub fn replaced(c: Candidate) -> Candidate {
    Candidate { benefit: 0, ..c }
}

/// Waiting request `c`'s MSS priority now ([`replaced`] placed), and the time until which it
/// holds while the Fair Tree ranks do (`order::mss_priority_until`; the same number as
/// [`place`]'s).
pub fn priority_now<U: UsageLookup>(
    order: &OrderSettings,
    standing: &ShareSnapshot<'_, U>,
    c: Candidate,
    now_ms: i64,
) -> (i64, Option<i64>) {
    mss_priority_until(order, standing, &replaced(c), now_ms)
}

/// One waiting request as a pass weighs it: its `id`, the priority it was last `sent`, its
/// priority `now`, and what its caller keeps with it.
#[derive(Debug, Clone, PartialEq)]
pub struct Proposed<T> {
    pub id: i64,
    pub sent: i64,
    pub now: i64,
    pub with: T,
}

/// The changes a pass sends of `proposed` (in ascending id order): those whose priority now
/// differs from the one last sent, the lowest ids first, at most `max`; the rest wait for the
/// next pass. Lazy: past the cap nothing more is asked of `proposed`, so an index that places
/// as it proposes places no more than a pass sends.
pub fn pass_changes<T>(
    proposed: impl IntoIterator<Item = Proposed<T>>,
    max: usize,
) -> impl Iterator<Item = Proposed<T>> {
    proposed.into_iter().filter(|p| p.now != p.sent).take(max)
}

/// A request waiting at the MSS, as the live side reads it: its figures and the priority it was
/// last sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Waiting {
    pub candidate: Candidate,
    pub sent: i64,
}

/// A pass over every request in `waiting` (in any order; those [`reprioritised`] takes) at
/// `now_ms`: the requests that get a new priority, each with its placement, lowest ids first, at
/// most `max`.
pub fn reprioritise_pass<U: UsageLookup>(
    order: &OrderSettings,
    standing: &ShareSnapshot<'_, U>,
    now_ms: i64,
    waiting: impl IntoIterator<Item = Waiting>,
    max: usize,
) -> Vec<Proposed<Placement>> {
    let mut waiting: Vec<Waiting> = waiting.into_iter().collect();
    waiting.sort_unstable_by_key(|w| w.candidate.id);
    let proposed = waiting.into_iter().map(|w| {
        let p = place(order, standing, &replaced(w.candidate.clone()), now_ms);
        Proposed {
            id: w.candidate.id,
            sent: w.sent,
            now: p.mss_priority,
            with: p,
        }
    });
    pass_changes(proposed, max).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proposed(id: i64, sent: i64, now: i64) -> Proposed<()> {
        Proposed {
            id,
            sent,
            now,
            with: (),
        }
    }

    #[test]
    fn a_pass_sends_the_changed_lowest_ids_first_up_to_the_cap() {
        let all = [
            proposed(1, 5, 5),
            proposed(2, 5, 7),
            proposed(3, 5, 5),
            proposed(4, 1, 9),
            proposed(5, 2, 3),
        ];
        let ids = |max| -> Vec<i64> { pass_changes(all.clone(), max).map(|p| p.id).collect() };
        assert_eq!(ids(10), [2, 4, 5]);
        assert_eq!(ids(2), [2, 4]);
        assert!(ids(0).is_empty());
    }

    #[test]
    fn only_a_fair_share_request_outside_a_volumes_batch_is_re_prioritised() {
        assert!(reprioritised(true, false));
        assert!(!reprioritised(false, false));
        assert!(!reprioritised(true, true));
        assert!(!reprioritised(false, true));
    }
}

//! The rules a request follows when it changes state, each one function of the request's
//! figures and the settings, called by the ledger's writer (`ledger/writer/`) and by the
//! simulator's engine (`simulate/engine/`) alike, so the two cannot drift apart:
//!
//! - **who may ride** on another read's transfer, and who may carry one ([`may_ride`],
//!   [`may_carry`]; docs/coalescing.md);
//! - **what a failure costs**: another attempt after the backoff while one is left, else a
//!   final failure ([`after_failure`], [`final_failure`]);
//! - **when and what is charged or refunded**: a request at its decision, a rider when its
//!   carrier is decided ([`rider_charged_on_joining`]), and at the transfer's end the estimate
//!   taken back at its own date and the actual charged then ([`settle`]);
//! - **a rider takes its carrier's outcome**: what its riders become when a carrier is done,
//!   fails for good, is retried or is cancelled ([`riders_follow`]), and which of them carries
//!   the file on after a cancel ([`take_over_order`]);
//! - **the re-prioritisation pass**: which requests waiting at the MSS get which new priority,
//!   in what order and how many a pass ([`reprioritise_pass`], made of [`reprioritised`],
//!   [`priority_now`] and [`pass_changes`]; `transition/reprioritise.rs`), at most
//!   [`REPRIORITISE_BATCH`] changes a pass, lowest ids first.
//!
//! The simulator models no reload of the policy, so what a reload changes stays the writer's
//! (`ledger/writer/reload.rs`).

mod reprioritise;

pub use reprioritise::{
    pass_changes, priority_now, replaced, reprioritise_pass, reprioritised, Proposed, Waiting,
};

use std::time::Duration;

use crate::domain::order::Coalesce;
use crate::domain::{RequestState, RetrySettings};

/// Most priority changes one re-prioritisation pass sends, lowest ids first (the dispatcher's
/// pass and the simulator's alike).
pub const REPRIORITISE_BATCH: usize = 10_000;

/// Whether a read decided, or queued in the broker (`queued`), may carry its file under
/// `coalesce`: a queued one only under `coalesce = "queued"` (else it would stand in the way of
/// a later read of the file that is released first). Under `coalesce = "off"` nothing rides
/// ([`may_ride`]), whoever carries.
pub fn may_carry(coalesce: Coalesce, queued: bool) -> bool {
    !queued || coalesce == Coalesce::Queued
}

/// What a rider needs to know of a carrier of its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CarrierView {
    /// Its group is a fair-share one (not a priority class).
    pub fair: bool,
    /// It was decided (released to the MSS side), rather than queued in the broker.
    pub decided: bool,
}

/// Whether a read (of a fair-share group: `rider_fair`) may ride on `carrier` under `coalesce`:
/// on a decided carrier, or under `coalesce = "queued"` a queued one too; and a priority-class
/// read never on a fair-share carrier (it would wait behind a lower class).
pub fn may_ride(coalesce: Coalesce, rider_fair: bool, carrier: CarrierView) -> bool {
    coalesce.allows(carrier.decided) && (rider_fair || !carrier.fair)
}

/// Whether a rider is charged when it joins: when its carrier is decided (a request is charged
/// at its decision); else when its carrier is.
pub fn rider_charged_on_joining(carrier: CarrierView) -> bool {
    carrier.decided
}

/// What follows a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// Sent again as `attempt` after `after`, keeping its charge and its place.
    Retry { attempt: u32, after: Duration },
    /// Failed for good: its charge is refunded ([`settle`]).
    Final,
}

/// What follows the failure of `attempt` (from 1): another attempt, after
/// [`RetrySettings::backoff`], if the failure is `retryable` and attempts are left.
pub fn after_failure(retry: &RetrySettings, attempt: u32, retryable: bool) -> AfterFailure {
    if retryable && attempt < retry.max_attempts {
        AfterFailure::Retry {
            attempt: attempt + 1,
            after: retry.backoff(attempt),
        }
    } else {
        AfterFailure::Final
    }
}

/// The error a request failed for good with: the MSS's reason and the attempts spent.
pub fn final_failure(retry: &RetrySettings, attempt: u32, reason: &str) -> String {
    format!("{reason} (attempt {attempt} of {})", retry.max_attempts)
}

/// A charge to a group: a benefit, dated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dated {
    pub benefit: u64,
    pub at_ms: i64,
}

/// What a transfer's end does to its request's charge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settlement {
    /// Taken back (subtracted) at its own date.
    pub refund: Dated,
    /// Charged, dated at the end (`None`: nothing was transferred, a failure or a cancel).
    pub actual: Option<Dated>,
}

/// A request charged `charged` ended at `now_ms`, done with a transfer worth `actual` (`None`:
/// failed or cancelled): its estimate is taken back at its own date, and what the transfer was
/// worth is charged now, when it was received.
pub fn settle(charged: Dated, actual: Option<u64>, now_ms: i64) -> Settlement {
    Settlement {
        refund: charged,
        actual: actual.map(|benefit| Dated {
            benefit,
            at_ms: now_ms,
        }),
    }
}

/// How a carrier's attempt ended, as its riders see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CarrierEnd<'e> {
    /// Done, with the bytes it transferred.
    Done(u64),
    /// Failed for good (or the MSS refused it), with its error.
    Failed(&'e str),
    /// Failed an attempt, or the MSS lost one, and it is sent again.
    Retried,
    /// Cancelled without a result; `decided`: it had been released to the MSS side (else it
    /// was queued in the broker, or held).
    Cancelled { decided: bool },
}

/// What a carrier's riders become when its attempt ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RidersFollow {
    /// Each ends in `state` with the carrier's `bytes` (`None`: nothing transferred) and
    /// `error`, its charge settled as any request's ([`settle`]: its estimate taken back at
    /// its own date, what the bytes are worth to its own group charged at the end).
    Settle {
        state: RequestState,
        bytes: Option<u64>,
        error: Option<String>,
    },
    /// They ride on, their charges and attempts as they are, and wait for its next start.
    WaitOn,
    /// The first (the oldest priority-class rider, else the oldest) takes the carrier's place
    /// as a request of its own, in `state`: `accepted` (a transfer of its own, ready at once,
    /// keeping its charge) for a decided carrier, else `queued` (its place in the broker's
    /// queue, uncharged like any queued request); the others ride on it.
    FirstTakesOver { state: RequestState },
}

/// What the riders of request `carrier` become when its attempt ends as `end`: they take its
/// outcome (done or failed for good), wait on while it is retried, and one of them carries the
/// file on when it is cancelled.
pub fn riders_follow(carrier: i64, end: CarrierEnd) -> RidersFollow {
    match end {
        CarrierEnd::Done(bytes) => RidersFollow::Settle {
            state: RequestState::Done,
            bytes: Some(bytes),
            error: None,
        },
        CarrierEnd::Failed(why) => RidersFollow::Settle {
            state: RequestState::Failed,
            bytes: None,
            error: Some(format!("its carrier, request {carrier}, failed: {why}")),
        },
        CarrierEnd::Retried => RidersFollow::WaitOn,
        CarrierEnd::Cancelled { decided } => RidersFollow::FirstTakesOver {
            state: if decided {
                RequestState::Accepted
            } else {
                RequestState::Queued
            },
        },
    }
}

/// The order in which a carrier's riders, (id, of a priority class), stand to carry its file on:
/// the priority-class ones first, each part oldest (lowest id) first; the first is the one that
/// takes over when the carrier is cancelled ([`RidersFollow::FirstTakesOver`]).
pub fn take_over_order(riders: impl IntoIterator<Item = (i64, bool)>) -> Vec<i64> {
    let mut riders: Vec<(i64, bool)> = riders.into_iter().collect();
    riders.sort_unstable_by_key(|&(id, priority_class)| (!priority_class, id));
    riders.into_iter().map(|(id, _)| id).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retry() -> RetrySettings {
        RetrySettings {
            max_attempts: 3,
            base: Duration::from_millis(100),
            max: Duration::from_millis(150),
        }
    }

    #[test]
    fn a_retryable_failure_is_retried_until_the_attempts_run_out() {
        let r = retry();
        let again = |attempt, after| AfterFailure::Retry {
            attempt,
            after: Duration::from_millis(after),
        };
        assert_eq!(after_failure(&r, 1, true), again(2, 100));
        assert_eq!(after_failure(&r, 2, true), again(3, 150));
        assert_eq!(after_failure(&r, 3, true), AfterFailure::Final);
        assert_eq!(after_failure(&r, 1, false), AfterFailure::Final);
        assert_eq!(final_failure(&r, 3, "tape"), "tape (attempt 3 of 3)");
    }

    #[test]
    fn a_priority_class_read_never_rides_on_a_fair_share_carrier() {
        let carrier = |fair, decided| CarrierView { fair, decided };
        for coalesce in [Coalesce::InFlight, Coalesce::Queued] {
            assert!(may_ride(coalesce, true, carrier(true, true)));
            assert!(may_ride(coalesce, false, carrier(false, true)));
            assert!(may_ride(coalesce, true, carrier(false, true)));
            assert!(!may_ride(coalesce, false, carrier(true, true)));
        }
        assert!(!may_ride(Coalesce::InFlight, true, carrier(true, false)));
        assert!(may_ride(Coalesce::Queued, true, carrier(true, false)));
        assert!(!may_ride(Coalesce::Off, true, carrier(true, true)));
        assert!(may_carry(Coalesce::InFlight, false) && !may_carry(Coalesce::InFlight, true));
        assert!(may_carry(Coalesce::Queued, true) && !may_carry(Coalesce::Off, true));
    }

    #[test]
    fn a_settled_charge_is_taken_back_at_its_date_and_the_actual_charged_at_the_end() {
        let charged = Dated {
            benefit: 7,
            at_ms: 10,
        };
        let s = settle(charged, Some(5), 99);
        assert_eq!(s.refund, charged);
        assert_eq!(
            s.actual,
            Some(Dated {
                benefit: 5,
                at_ms: 99
            })
        );
        assert_eq!(settle(charged, None, 99).actual, None);
    }

    #[test]
    fn riders_take_their_carriers_outcome_and_one_carries_on_after_a_cancel() {
        let done = riders_follow(4, CarrierEnd::Done(9));
        let RidersFollow::Settle { state, bytes, .. } = done else {
            panic!("a done carrier's riders settle: {done:?}");
        };
        assert_eq!((state, bytes), (RequestState::Done, Some(9)));
        let failed = riders_follow(4, CarrierEnd::Failed("tape"));
        let RidersFollow::Settle {
            state,
            bytes,
            error,
        } = failed
        else {
            panic!("a failed carrier's riders settle: {failed:?}");
        };
        assert_eq!((state, bytes), (RequestState::Failed, None));
        assert!(error.is_some_and(|e| e.contains("request 4") && e.contains("tape")));
        assert_eq!(riders_follow(4, CarrierEnd::Retried), RidersFollow::WaitOn);
        let takes_over = |decided| riders_follow(4, CarrierEnd::Cancelled { decided });
        let state = |state| RidersFollow::FirstTakesOver { state };
        assert_eq!(takes_over(true), state(RequestState::Accepted));
        assert_eq!(takes_over(false), state(RequestState::Queued));
        let order = take_over_order([(7, false), (9, true), (3, false), (8, true)]);
        assert_eq!(
            order,
            [8, 9, 3, 7],
            "priority class first, each oldest first"
        );
    }
}

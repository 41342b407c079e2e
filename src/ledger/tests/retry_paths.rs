//! Attempts that fail at the MSS, with riders and the stale sweep.

use super::*;

async fn rec(l: &Ledger, id: i64) -> RequestRecord {
    l.request(id).await.expect("read").expect("stored")
}

async fn ev(l: &Ledger, id: i64, attempt: u32, kind: EventKind) -> usize {
    l.apply_status_events(vec![event(l, id, attempt, 0, kind)])
        .await
        .unwrap()
}

fn retryable() -> EventKind {
    EventKind::Failed {
        reason: "drive".into(),
        retryable: true,
    }
}

fn fatal() -> EventKind {
    EventKind::Failed {
        reason: "no such file".into(),
        retryable: false,
    }
}

/// docs/coalescing.md: a carrier whose caller cancelled while riders wait is not cancelled at
/// the MSS, and "when the transfer ends, the riders take its result". It fails for good: the
/// rider fails with it, each is refunded once, and nothing is sent again.
async fn a_cancelled_carrier_that_fails_for_good_fails_its_riders(backend: Backend) {
    let f = Fixture::on(backend);
    let opened = f.open();
    let l = opened.0.clone();
    let read = |crid: &str, mode: &str, group: &str| {
        let mut r = f.request(crid, mode, group, 500);
        r.input.station = format!("st-{crid}");
        r.input.file = "/pnfs/gone".into();
        r
    };
    let a = accept(&l, read("a", "mc", "x")).await;
    submit(&l, a.id, 1).await;
    let b = accept(&l, read("b", "analysis", "top")).await;
    assert_eq!(b.state, RequestState::Riding);
    assert!(matches!(
        l.cancel(a.id).await.unwrap(),
        CancelOutcome::Requested(_)
    ));
    assert!(
        l.cancelling().await.unwrap().is_empty(),
        "not sent: b rides"
    );
    ev(&l, a.id, 1, fatal()).await;
    assert_eq!(rec(&l, a.id).await.state, RequestState::Cancelled);
    let rb = rec(&l, b.id).await;
    assert_eq!(
        (rb.state, rb.rides_on),
        (RequestState::Failed, Some(a.id)),
        "the rider takes the transfer's result"
    );
    assert!(rb.last_error.unwrap_or_default().contains("no such file"));
    let groups = l.groups().await.unwrap();
    assert_eq!(usage_of(&groups, "mc"), (0, 0), "the carrier refunded once");
    assert_eq!(
        usage_of(&groups, "analysis/top"),
        (0, 0),
        "the rider refunded once"
    );
    let ready = l.to_submit(0, f.clock.now_ms(), 10).await.unwrap();
    assert!(ready.is_empty(), "nothing resent: {ready:?}");
    drop(l);
    close(opened);
}

/// A retried attempt is not stale the moment it is submitted again: the sweep counts its
/// silence from its own submission, not from the first attempt's start an hour before.
async fn a_resubmitted_attempt_is_not_stale_at_once(backend: Backend) {
    let f = Fixture::on(backend);
    let opened = f.open();
    let l = opened.0.clone();
    let a = accept(&l, f.request("a", "mc", "x", 100)).await;
    submit(&l, a.id, 1).await;
    ev(&l, a.id, 1, EventKind::Started).await;
    f.clock.advance_ms(3_600_000); // an hour-long first attempt
    ev(&l, a.id, 1, retryable()).await;
    f.clock.advance_ms(1000);
    submit(&l, a.id, 2).await;
    let stale = l.stale(f.clock.now_ms() - 600_000, 10).await.unwrap();
    assert!(
        stale.is_empty(),
        "attempt 2 was submitted just now: {stale:?}"
    );
    // Ten minutes of silence later, it is.
    f.clock.advance_ms(600_000);
    let stale = l.stale(f.clock.now_ms() - 600_000, 10).await.unwrap();
    assert_eq!(stale.len(), 1, "{stale:?}");
    drop(l);
    close(opened);
}

/// A retried attempt sent with an unreadable answer, then cancelled: not judged lost by the
/// next sweep (its clock starts at the cancel, as the first attempt's does).
async fn a_retried_attempt_cancelled_while_maybe_at_the_mss_is_not_stale_at_once(backend: Backend) {
    let f = Fixture::on(backend);
    let opened = f.open();
    let l = opened.0.clone();
    let a = accept(&l, f.request("a", "mc", "x", 100)).await;
    submit(&l, a.id, 1).await;
    f.clock.advance_ms(3_600_000);
    ev(&l, a.id, 1, retryable()).await;
    f.clock.advance_ms(1000);
    assert_eq!(
        l.mark_sending(vec![(a.id, 2)]).await.unwrap(),
        [(a.id, true)]
    );
    assert_eq!(
        l.cancel(a.id).await.unwrap(),
        CancelOutcome::Requested(RequestState::Submitted)
    );
    let stale = l.stale(f.clock.now_ms() - 600_000, 10).await.unwrap();
    assert!(stale.is_empty(), "cancelled just now: {stale:?}");
    drop(l);
    close(opened);
}

on_both_async!(
    a_cancelled_carrier_that_fails_for_good_fails_its_riders,
    a_resubmitted_attempt_is_not_stale_at_once,
    a_retried_attempt_cancelled_while_maybe_at_the_mss_is_not_stale_at_once,
);

//! Unsettled sends (`ledger::unsettled`): a marked send held for an operator is never offered
//! to the dispatcher, is shown and counted, and goes again with the same attempt when resent;
//! a cancel takes it as at the MSS, as any marked send.

use super::*;

/// The ids `to_submit` offers now.
async fn offered(f: &Fixture, l: &Ledger) -> Vec<(i64, u32)> {
    (l.to_submit(0, f.clock.now_ms(), 100).await.unwrap().iter())
        .map(|t| (t.id, t.attempt))
        .collect()
}

async fn a_flagged_send_waits_for_the_operators_resend_with_its_attempt(backend: Backend) {
    let f = Fixture::on(backend);
    let opened = f.open();
    let l = opened.0.clone();
    let a = accept(&l, f.request("a", "mc", "x", 500)).await;
    let b = accept(&l, f.request("b", "mc", "x", 500)).await;
    let c = accept(&l, f.request("c", "mc", "x", 500)).await;
    assert!(l.marked_sends().await.unwrap().is_empty());
    let marked = l.mark_sending(vec![(a.id, 1), (b.id, 1)]).await.unwrap();
    assert_eq!(marked, [(a.id, true), (b.id, true)]);
    assert_eq!(l.marked_sends().await.unwrap(), [(a.id, 1), (b.id, 1)]);

    let flagged = l.marked_sends().await.unwrap();
    l.flag_unsettled(flagged, "unsettled: test".into())
        .await
        .unwrap();
    assert_eq!(offered(&f, &l).await, [(c.id, 1)]);
    assert!(l.marked_sends().await.unwrap().is_empty(), "flagged once");
    assert_eq!(l.unsettled_count().await.unwrap(), 2);
    let ra = l.request(a.id).await.unwrap().unwrap();
    assert_eq!(
        (ra.state, ra.unsettled, ra.last_error.as_deref()),
        (RequestState::Accepted, true, Some("unsettled: test"))
    );
    // Time does not resolve it.
    f.clock.advance_ms(86_400_000);
    assert_eq!(offered(&f, &l).await, [(c.id, 1)]);

    assert!(l.resend_unsettled(a.id).await.unwrap());
    assert!(!l.resend_unsettled(a.id).await.unwrap(), "once");
    assert!(!l.resend_unsettled(c.id).await.unwrap(), "never flagged");
    assert_eq!(offered(&f, &l).await, [(a.id, 1), (c.id, 1)]);
    assert!(!l.request(a.id).await.unwrap().unwrap().unsettled);
    // Still marked: a cancel now goes to the MSS, and the resend is not a first send.
    assert_eq!(
        l.mark_sending(vec![(a.id, 1)]).await.unwrap(),
        [(a.id, false)]
    );

    // A cancel of the other takes it as at the MSS: no longer unsettled, never offered.
    assert_eq!(
        l.cancel(b.id).await.unwrap(),
        CancelOutcome::Requested(RequestState::Submitted)
    );
    assert_eq!(l.unsettled_count().await.unwrap(), 0);
    assert!(!l.request(b.id).await.unwrap().unwrap().unsettled);
}

on_both_async!(a_flagged_send_waits_for_the_operators_resend_with_its_attempt,);

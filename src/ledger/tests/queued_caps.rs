//! Queued-bytes caps through the writer and a real SQLite file: the tallies follow every move
//! into and out of the states before the MSS, a replay is never refused, and a restart
//! rebuilds them.

use super::*;

fn config() -> String {
    format!(
        "{CONFIG}\n[targets.\"analysis\"]\nmax_queued_bytes = 1000\n\
         [limits]\nmax_queued_bytes_per_user = 1500\n"
    )
}

fn over(r: Result<Vec<Accepted>, LedgerError>) -> QueuedCapRefused {
    match r {
        Err(LedgerError::OverQueuedCap(q)) => q,
        other => panic!("expected a queued-bytes refusal, got {other:?}"),
    }
}

/// The node cap: reaching it is accepted, one byte past it refused (nothing recorded); a
/// replay is answered; a submission frees room and a lost attempt takes it again; a restart
/// rebuilds the tally from the rows.
#[tokio::test]
async fn the_node_cap_follows_the_requests_before_the_mss_and_survives_a_restart() {
    let f = Fixture::with_config(&config());
    let opened = f.open();
    let l = opened.0.clone();
    let first = accept(&l, f.request("a", "analysis", "higgs", 600)).await;
    accept(&l, f.request("b", "analysis", "top", 400)).await;
    let refused = over(l.accept(vec![f.request("c", "analysis", "top", 1)]).await);
    assert_eq!(refused.field, "targets.\"analysis\".max_queued_bytes");
    assert_eq!((refused.queued, refused.cap), (1000, 1000));
    assert!(
        l.request(first.id + 2).await.expect("read").is_none(),
        "nothing recorded"
    );
    // Another node is not under the cap; a replay of an accepted request is not refused.
    accept(&l, f.request("m", "mc", "x", 300)).await;
    let replay = accept(&l, f.request("a", "analysis", "higgs", 600)).await;
    assert!(replay.duplicate && replay.id == first.id);
    // At the MSS it no longer counts.
    submit(&l, first.id, 1).await;
    accept(&l, f.request("c", "analysis", "top", 600)).await;
    over(l.accept(vec![f.request("d", "analysis", "top", 1)]).await);
    drop(l);
    close(opened);

    let opened = f.open();
    let l = opened.0.clone();
    let refused = over(l.accept(vec![f.request("d", "analysis", "top", 1)]).await);
    assert_eq!(
        refused.queued, 1000,
        "rebuilt at load: b and c, not the submitted a"
    );
    // The MSS lost a's attempt: back before the MSS, counted again (never refused).
    assert!(l.lost(first.id, 1, "lost".into()).await.expect("lost"));
    let refused = over(l.accept(vec![f.request("d", "analysis", "top", 1)]).await);
    assert_eq!(refused.queued, 1600);
    // Done and cancelled requests leave the tally.
    submit(&l, first.id, 2).await;
    let done = event(&l, first.id, 2, 1, EventKind::Done { bytes: 600 });
    l.apply_status_events(vec![done]).await.expect("applied");
    l.cancel(first.id + 1).await.expect("cancelled");
    let left = over(l.accept(vec![f.request("d", "analysis", "top", 401)]).await);
    assert_eq!(left.queued, 600, "only c is left");
    accept(&l, f.request("d", "analysis", "top", 400)).await;
    drop(l);
    close(opened);
}

/// The user cap counts the user's requests in every group; priority classes are neither
/// counted nor refused; a batch is answered item by item, the earlier items counting.
#[tokio::test]
async fn the_user_cap_spans_groups_and_a_batch_is_checked_item_by_item() {
    let f = Fixture::with_config(&config());
    let opened = f.open();
    let l = opened.0.clone();
    accept(&l, f.request("a", "mc", "x", 1000)).await;
    accept(&l, f.request("dt", "datataking", "x", 5000)).await;
    let answers = (l.accept_each(vec![
        f.request("b", "analysis", "higgs", 500),
        f.request("c", "mc", "x", 1),
        f.request("d", "datataking", "x", 1),
    ]))
    .await
    .expect("answered");
    assert!(
        answers[0].is_ok(),
        "exactly at the user cap: {:?}",
        answers[0]
    );
    let Err(crate::ledger::Refused::QueuedCap(refused)) = answers[1].clone() else {
        panic!("one byte past the user cap: {:?}", answers[1]);
    };
    assert_eq!(refused.field, "limits.max_queued_bytes_per_user");
    assert_eq!((refused.queued, refused.cap), (1500, 1500));
    assert!(answers[2].is_ok(), "a priority class is never refused");
    drop(l);
    close(opened);
}

/// The tallies are exact past u64: sizes go up to `limits.max_size_bytes` (at most i64::MAX),
/// and retries bring back before the MSS requests accepted while others were at the MSS, so a
/// user's bytes before the MSS can pass u64::MAX although each acceptance kept under the cap.
/// A tally saturated at u64::MAX then loses what went past it: once the others reach the MSS
/// it is below the bytes really waiting, and a request past the cap is accepted. (A rollback
/// replays its journal through the same arithmetic: `WriterState::rollback`.)
#[tokio::test]
async fn a_user_tally_past_u64_is_exact_and_still_refuses_past_the_cap() {
    let most = i64::MAX as u64;
    let f = Fixture::with_config(&format!(
        "{CONFIG}\n[limits]\nmax_size_bytes = {most}\nmax_queued_bytes_per_user = {most}\n"
    ));
    let opened = f.open();
    let l = opened.0.clone();
    // Three of the largest, each accepted (exactly at the cap) while the others are at the MSS.
    let mut ids = Vec::new();
    for crid in ["a", "b", "c"] {
        let id = accept(&l, f.request(crid, "mc", "x", most)).await.id;
        submit(&l, id, 1).await;
        ids.push(id);
    }
    // The MSS fails all three, to be tried again: 3 * (2^63 - 1) bytes before the MSS.
    let failed = |(seq, &id): (usize, &i64)| {
        let kind = EventKind::Failed {
            reason: "drive".into(),
            retryable: true,
        };
        event(&l, id, 1, seq as u64, kind)
    };
    let events = ids.iter().enumerate().map(failed).collect();
    l.apply_status_events(events).await.expect("applied");
    // Two are sent again: the third's bytes still wait, the cap is reached.
    submit(&l, ids[0], 2).await;
    submit(&l, ids[1], 2).await;
    let refused = over(l.accept(vec![f.request("d", "mc", "x", 1)]).await);
    assert_eq!(refused.field, "limits.max_queued_bytes_per_user");
    assert_eq!((refused.queued, refused.cap), (most, most));
    drop(l);
    close(opened);
}

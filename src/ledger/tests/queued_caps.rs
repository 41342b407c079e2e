//! Queued-bytes caps through the writer and a real SQLite file: the tallies count every
//! unfinished request (riders too) from its acceptance to its end, a replay is never refused,
//! and a restart or a reload rebuilds them.

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
/// replay is answered; every unfinished request counts, at the MSS, running and lost back to
/// `accepted` alike (a move between unfinished states changes no total); a restart rebuilds
/// the tally from the rows; only an end frees room.
async fn the_node_cap_counts_every_unfinished_request_and_survives_a_restart(backend: Backend) {
    let f = Fixture::with_config_on(backend, &config());
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
    // At the MSS, and running there, it still counts.
    submit(&l, first.id, 1).await;
    assert_eq!(
        over(l.accept(vec![f.request("c", "analysis", "top", 1)]).await).queued,
        1000
    );
    let started = event(&l, first.id, 1, 1, EventKind::Started);
    l.apply_status_events(vec![started]).await.expect("applied");
    assert_eq!(
        over(l.accept(vec![f.request("c", "analysis", "top", 1)]).await).queued,
        1000
    );
    drop(l);
    close(opened);

    let opened = f.open();
    let l = opened.0.clone();
    let refused = over(l.accept(vec![f.request("c", "analysis", "top", 1)]).await);
    assert_eq!(refused.queued, 1000, "rebuilt at load: a (running) and b");
    // The MSS lost a's attempt: back before the MSS, counted once, not twice.
    assert!(l
        .resubmit_lost(first.id, 1, "lost".into())
        .await
        .expect("lost"));
    let refused = over(l.accept(vec![f.request("c", "analysis", "top", 1)]).await);
    assert_eq!(refused.queued, 1000);
    // Done and cancelled requests leave the tally.
    submit(&l, first.id, 2).await;
    let done = event(&l, first.id, 2, 2, EventKind::Done { bytes: 600 });
    l.apply_status_events(vec![done]).await.expect("applied");
    let left = over(l.accept(vec![f.request("c", "analysis", "top", 601)]).await);
    assert_eq!(left.queued, 400, "only b is left");
    l.cancel(first.id + 1).await.expect("cancelled");
    accept(&l, f.request("c", "analysis", "top", 1000)).await;
    assert!(l.audit().await.expect("audited").is_empty());
    drop(l);
    close(opened);
}

/// Riders count from their acceptance (issue 37): a duplicate read that rides on another takes
/// its own bytes from the cap, so riders cannot pile up past it, and a carrier's cancel that
/// promotes a rider changes no total. The writer's memory agrees with the rows throughout.
async fn a_rider_counts_against_the_caps_and_its_promotion_changes_no_total(backend: Backend) {
    let f = Fixture::with_config_on(backend, &config());
    let opened = f.open();
    let l = opened.0.clone();
    let read = |crid: &str, size: u64| {
        let mut r = f.request(crid, "mc", "x", size);
        r.input.file = "/pnfs/shared".into();
        r
    };
    let carrier = accept(&l, read("a", 600)).await;
    let rider = accept(&l, read("b", 600)).await;
    assert_eq!(rider.state, RequestState::Riding);
    let refused = over(l.accept(vec![read("c", 301)]).await);
    assert_eq!(refused.field, "limits.max_queued_bytes_per_user");
    assert_eq!(refused.queued, 1200, "the rider counts");
    accept(&l, read("c", 300)).await;
    // The carrier is cancelled before the MSS had it: the oldest rider takes its place.
    l.cancel(carrier.id).await.expect("cancelled");
    let promoted = l.request(rider.id).await.expect("read").expect("row");
    assert_eq!(promoted.state, RequestState::Accepted);
    let refused = over(l.accept(vec![read("d", 601)]).await);
    assert_eq!(refused.queued, 900, "b and c, as before the cancel less a");
    assert!(l.audit().await.expect("audited").is_empty());
    drop(l);
    close(opened);
}

/// The user cap counts the user's requests in every group; priority classes are neither
/// counted nor refused; a batch is answered item by item, the earlier items counting.
async fn the_user_cap_spans_groups_and_a_batch_is_checked_item_by_item(backend: Backend) {
    let f = Fixture::with_config_on(backend, &config());
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
/// and without a user cap (or after a reload lowers it) a user's unfinished bytes can pass
/// u64::MAX. A tally saturated at u64::MAX would lose what went past it: once some of them end
/// it would be below the bytes really unfinished, and a request past the cap would be
/// accepted. (A rollback replays its journal through the same arithmetic:
/// `WriterState::rollback`.)
async fn a_user_tally_past_u64_is_exact_and_still_refuses_past_the_cap(backend: Backend) {
    let most = i64::MAX as u64;
    let sizes = format!("{CONFIG}\n[limits]\nmax_size_bytes = {most}\n");
    let f = Fixture::with_config_on(backend, &sizes);
    let opened = f.open();
    let l = opened.0.clone();
    // Three of the largest, with no cap: 3 * (2^63 - 1) bytes unfinished.
    let mut ids = Vec::new();
    for crid in ["a", "b", "c"] {
        ids.push(accept(&l, f.request(crid, "mc", "x", most)).await.id);
    }
    // The cap comes with a reload: the tally is rebuilt from the rows, exactly.
    let capped = format!("{sizes}max_queued_bytes_per_user = {most}\n");
    let policy = Settings::parse(&capped, "test").expect("valid").policy;
    l.reload(policy).await.expect("reloaded");
    let refused = over(l.accept(vec![f.request("d", "mc", "x", 1)]).await);
    let exact = 3 * u128::from(most);
    assert!(
        refused.message.contains(&exact.to_string()),
        "{}",
        refused.message
    );
    assert_eq!(
        refused.queued,
        u64::MAX,
        "reported saturated, the message exact"
    );
    // Two end: the third's bytes still count, the cap is reached exactly.
    l.cancel(ids[0]).await.expect("cancelled");
    l.cancel(ids[1]).await.expect("cancelled");
    let refused = over(l.accept(vec![f.request("d", "mc", "x", 1)]).await);
    assert_eq!(refused.field, "limits.max_queued_bytes_per_user");
    assert_eq!((refused.queued, refused.cap), (most, most));
    l.cancel(ids[2]).await.expect("cancelled");
    accept(&l, f.request("d", "mc", "x", most)).await;
    drop(l);
    close(opened);
}

on_both_async!(
    the_node_cap_counts_every_unfinished_request_and_survives_a_restart,
    a_rider_counts_against_the_caps_and_its_promotion_changes_no_total,
    the_user_cap_spans_groups_and_a_batch_is_checked_item_by_item,
    a_user_tally_past_u64_is_exact_and_still_refuses_past_the_cap,
);

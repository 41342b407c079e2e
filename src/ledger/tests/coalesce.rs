//! Duplicate reads coalesce (`writer::coalesce`), through the writer and a real SQLite file:
//! one transfer, every request settling with it, each charged to its own group.

use super::*;

/// A read of `file` by station `station` (request `crid`) for `group` of `mode`.
fn read_of(f: &Fixture, crid: &str, mode: &str, group: &str, file: &str) -> NewRequest {
    let mut r = f.request(crid, mode, group, 500);
    r.input.station = format!("st-{crid}");
    r.input.file = file.into();
    r
}

async fn record(l: &Ledger, id: i64) -> RequestRecord {
    l.request(id).await.expect("read").expect("stored")
}

async fn apply(l: &Ledger, id: i64, attempt: u32, seq: u64, kind: EventKind) {
    let n = l
        .apply_status_events(vec![event(l, id, attempt, seq, kind)])
        .await
        .expect("applied");
    assert_eq!(n, 1, "the event changed request {id}");
}

/// Two stations read one file: the second rides on the first, is never submitted, and both
/// are done with one transfer's bytes, each charged to its own group.
async fn a_duplicate_read_rides_and_completes_with_its_carrier(backend: Backend) {
    let f = Fixture::on(backend);
    let opened = f.open();
    let l = opened.0.clone();
    let a = accept(&l, read_of(&f, "a", "analysis", "higgs", "/pnfs/same")).await;
    let b = accept(&l, read_of(&f, "b", "mc", "x", "/pnfs/same")).await;
    assert_eq!(a.state, RequestState::Accepted);
    assert_eq!(b.state, RequestState::Riding);
    assert_eq!(record(&l, b.id).await.rides_on, Some(a.id));
    // Another file, or the same file to another local copy, does not ride.
    let other = accept(&l, read_of(&f, "c", "mc", "x", "/pnfs/other")).await;
    assert_eq!(other.state, RequestState::Accepted);
    let mut elsewhere = read_of(&f, "d", "mc", "x", "/pnfs/same");
    elsewhere.input.extras.local_file = Some("/data/d".into());
    assert_eq!(accept(&l, elsewhere).await.state, RequestState::Accepted);
    let groups = l.groups().await.unwrap();
    assert_eq!(usage_of(&groups, "mc").1, 3, "b counts as pending");

    submit(&l, a.id, 1).await;
    let in_flight: Vec<i64> = l.in_flight().await.unwrap().iter().map(|i| i.id).collect();
    assert_eq!(in_flight, [a.id], "only the carrier is at the MSS");
    apply(&l, a.id, 1, 1, EventKind::Done { bytes: 700 }).await;
    for id in [a.id, b.id] {
        let r = record(&l, id).await;
        assert_eq!((r.state, r.bytes_done), (RequestState::Done, 700), "{id}");
    }
    let groups = l.groups().await.unwrap();
    assert_eq!(usage_of(&groups, "analysis/higgs"), (700, 0));
    assert_eq!(usage_of(&groups, "mc"), (700 + 500 + 500, 2));
    // The report counts the rider as coalesced, in its own group; the carrier is not.
    let coalesced = |path: &str| -> i64 {
        f.with_db(|db| {
            db.query_one(
                "SELECT COALESCE(SUM(coalesced), 0) FROM report_hours WHERE path = ?1",
                crate::ledger::db::params![path],
                |r| r.get(0),
            )
        })
        .expect("the report's coalesced count")
    };
    assert_eq!((coalesced("mc"), coalesced("analysis/higgs")), (1, 0));
    drop(l);
    close(opened);
}

/// The carrier fails for good: its riders fail with its error and are refunded; a retryable
/// failure keeps them riding until the next attempt ends.
async fn riders_fail_with_their_carrier_and_wait_through_its_retries(backend: Backend) {
    let f = Fixture::on(backend);
    let opened = f.open();
    let l = opened.0.clone();
    let a = accept(&l, read_of(&f, "a", "mc", "x", "/pnfs/one")).await;
    let b = accept(&l, read_of(&f, "b", "analysis", "top", "/pnfs/one")).await;
    submit(&l, a.id, 1).await;
    let drive = EventKind::Failed {
        reason: "drive".into(),
        retryable: true,
    };
    apply(&l, a.id, 1, 1, drive).await;
    assert_eq!(record(&l, a.id).await.state, RequestState::Accepted);
    assert_eq!(record(&l, b.id).await.state, RequestState::Riding);
    submit(&l, a.id, 2).await;
    let gone = EventKind::Failed {
        reason: "no such file".into(),
        retryable: false,
    };
    apply(&l, a.id, 2, 2, gone).await;
    let rb = record(&l, b.id).await;
    assert_eq!(rb.state, RequestState::Failed);
    let error = rb.last_error.expect("an error");
    assert!(error.contains("no such file") && error.contains(&a.id.to_string()));
    let groups = l.groups().await.unwrap();
    assert_eq!(usage_of(&groups, "analysis/top"), (0, 0), "refunded");
    assert_eq!(usage_of(&groups, "mc"), (0, 0));
    drop(l);
    close(opened);
}

/// Cancelling a rider leaves its carrier; cancelling a carrier not yet at the MSS hands the
/// transfer to its oldest rider, on which the others then ride.
async fn cancelling_one_of_two_leaves_the_other(backend: Backend) {
    let f = Fixture::on(backend);
    let opened = f.open();
    let l = opened.0.clone();
    let a = accept(&l, read_of(&f, "a", "mc", "x", "/pnfs/two")).await;
    let b = accept(&l, read_of(&f, "b", "mc", "x", "/pnfs/two")).await;
    let c = accept(&l, read_of(&f, "c", "analysis", "top", "/pnfs/two")).await;
    let d = accept(&l, read_of(&f, "d", "analysis", "top", "/pnfs/two")).await;
    assert_eq!(l.cancel(d.id).await.unwrap(), CancelOutcome::Cancelled);
    assert_eq!(record(&l, a.id).await.state, RequestState::Accepted);
    assert_eq!(l.cancel(a.id).await.unwrap(), CancelOutcome::Cancelled);
    let (rb, rc) = (record(&l, b.id).await, record(&l, c.id).await);
    assert_eq!((rb.state, rb.rides_on), (RequestState::Accepted, None));
    assert_eq!((rc.state, rc.rides_on), (RequestState::Riding, Some(b.id)));
    assert_eq!(record(&l, d.id).await.state, RequestState::Cancelled);
    submit(&l, b.id, 1).await;
    apply(&l, b.id, 1, 1, EventKind::Done { bytes: 500 }).await;
    assert_eq!(record(&l, c.id).await.state, RequestState::Done);
    let groups = l.groups().await.unwrap();
    assert_eq!(usage_of(&groups, "mc"), (500, 0), "a refunded, b charged");
    assert_eq!(usage_of(&groups, "analysis/top"), (500, 0), "d refunded");
    drop(l);
    close(opened);
}

/// The carrier's caller cancels while the MSS has it and a rider waits: the MSS is not asked
/// to cancel; when the transfer ends the rider is done and the carrier cancelled and refunded.
/// The rider survives a restart in between.
async fn a_carrier_cancelled_at_the_mss_keeps_the_transfer_for_its_rider_across_a_restart(
    backend: Backend,
) {
    let f = Fixture::on(backend);
    let opened = f.open();
    let l = opened.0.clone();
    let a = accept(&l, read_of(&f, "a", "mc", "x", "/pnfs/three")).await;
    submit(&l, a.id, 1).await;
    let b = accept(&l, read_of(&f, "b", "analysis", "top", "/pnfs/three")).await;
    assert_eq!(
        b.state,
        RequestState::Riding,
        "rides on a submitted carrier"
    );
    assert!(matches!(
        l.cancel(a.id).await.unwrap(),
        CancelOutcome::Requested(_)
    ));
    assert!(
        l.cancelling().await.unwrap().is_empty(),
        "not while b rides"
    );
    drop(l);
    close(opened);

    let opened = f.open();
    let l = opened.0.clone();
    assert_eq!(record(&l, b.id).await.state, RequestState::Riding);
    assert!(l.cancelling().await.unwrap().is_empty());
    apply(&l, a.id, 1, 1, EventKind::Done { bytes: 500 }).await;
    assert_eq!(record(&l, a.id).await.state, RequestState::Cancelled);
    let rb = record(&l, b.id).await;
    assert_eq!((rb.state, rb.bytes_done), (RequestState::Done, 500));
    let groups = l.groups().await.unwrap();
    assert_eq!(usage_of(&groups, "mc"), (0, 0));
    assert_eq!(usage_of(&groups, "analysis/top"), (500, 0));
    // Without a rider, a cancel at the MSS goes to the MSS as before.
    let e = accept(&l, read_of(&f, "e", "mc", "x", "/pnfs/four")).await;
    submit(&l, e.id, 1).await;
    let g = accept(&l, read_of(&f, "g", "mc", "x", "/pnfs/four")).await;
    l.cancel(e.id).await.unwrap();
    assert!(l.cancelling().await.unwrap().is_empty());
    assert_eq!(l.cancel(g.id).await.unwrap(), CancelOutcome::Cancelled);
    let ids: Vec<i64> = l.cancelling().await.unwrap().iter().map(|i| i.id).collect();
    assert_eq!(
        ids,
        [e.id],
        "its last rider gone, the carrier's cancel goes out"
    );
    drop(l);
    close(opened);
}

/// A priority-class read does not ride on a fair-share carrier (it would wait at a lower
/// class); a held request is not a carrier.
async fn a_priority_read_does_not_ride_on_a_fair_share_carrier(backend: Backend) {
    let f = Fixture::on(backend);
    let opened = f.open();
    let l = opened.0.clone();
    accept(&l, read_of(&f, "a", "mc", "x", "/pnfs/five")).await;
    let p = accept(&l, read_of(&f, "p", "datataking", "raw", "/pnfs/five")).await;
    assert_eq!(p.state, RequestState::Accepted);
    let q = accept(&l, read_of(&f, "q", "mc", "x", "/pnfs/five")).await;
    assert_eq!(q.state, RequestState::Riding);
    drop(l);
    close(opened);
}

/// A priority-class read that found only a fair-share carrier carries the file for the
/// priority-class reads after it, and for every read once the fair-share carrier is gone; so
/// after a restart too. (Found by `tests/api/crash_volumes.rs`: the carrier map kept one read
/// per file, the fair-share one, so a second data-taking read of the file got a transfer of
/// its own beside the first.)
async fn a_priority_read_beside_a_fair_share_carrier_carries_for_later_ones(backend: Backend) {
    let f = Fixture::on(backend);
    let opened = f.open();
    let l = opened.0.clone();
    let a = accept(&l, read_of(&f, "a", "mc", "x", "/pnfs/both")).await;
    let p = accept(&l, read_of(&f, "p", "datataking", "raw", "/pnfs/both")).await;
    assert_eq!(p.state, RequestState::Accepted, "not on the fair-share a");
    let p2 = accept(&l, read_of(&f, "p2", "datataking", "raw", "/pnfs/both")).await;
    let r = record(&l, p2.id).await;
    assert_eq!((r.state, r.rides_on), (RequestState::Riding, Some(p.id)));
    // A fair-share read still rides on the oldest carrier, a.
    let q = accept(&l, read_of(&f, "q", "mc", "x", "/pnfs/both")).await;
    assert_eq!(record(&l, q.id).await.rides_on, Some(a.id));
    // a is done (q with it): a later fair-share read rides on p, still in flight.
    submit(&l, a.id, 1).await;
    apply(&l, a.id, 1, 1, EventKind::Done { bytes: 500 }).await;
    assert_eq!(record(&l, q.id).await.state, RequestState::Done);
    let s = accept(&l, read_of(&f, "s", "analysis", "top", "/pnfs/both")).await;
    let r = record(&l, s.id).await;
    assert_eq!((r.state, r.rides_on), (RequestState::Riding, Some(p.id)));
    drop(l);
    close(opened);

    // After a restart: a fair-share carrier b and the priority-class p3 beside it, both in
    // flight; a priority-class read rides on p3.
    let opened = f.open();
    let l = opened.0.clone();
    let b = accept(&l, read_of(&f, "b", "mc", "x", "/pnfs/again")).await;
    let p3 = accept(&l, read_of(&f, "p3", "datataking", "raw", "/pnfs/again")).await;
    assert_eq!(
        (b.state, p3.state),
        (RequestState::Accepted, RequestState::Accepted)
    );
    drop(l);
    close(opened);
    let opened = f.open();
    let l = opened.0.clone();
    let p4 = accept(&l, read_of(&f, "p4", "datataking", "raw", "/pnfs/again")).await;
    let r = record(&l, p4.id).await;
    assert_eq!((r.state, r.rides_on), (RequestState::Riding, Some(p3.id)));
    drop(l);
    close(opened);
}

/// A priority-class carrier is cancelled while a fair-share read and a later priority-class
/// read ride on it: the priority-class one takes the transfer over, and the fair-share one
/// rides on it (never the other way round, which would leave data taking behind a
/// fair-share transfer).
async fn a_priority_rider_takes_over_before_an_older_fair_share_one(backend: Backend) {
    let f = Fixture::on(backend);
    let opened = f.open();
    let l = opened.0.clone();
    let x = accept(&l, read_of(&f, "x", "datataking", "raw", "/pnfs/raw")).await;
    let fair = accept(&l, read_of(&f, "f", "mc", "x", "/pnfs/raw")).await;
    let p = accept(&l, read_of(&f, "p", "datataking", "raw", "/pnfs/raw")).await;
    assert_eq!(x.state, RequestState::Accepted);
    assert_eq!(
        (fair.state, p.state),
        (RequestState::Riding, RequestState::Riding)
    );
    assert_eq!(l.cancel(x.id).await.unwrap(), CancelOutcome::Cancelled);
    let (rf, rp) = (record(&l, fair.id).await, record(&l, p.id).await);
    assert_eq!(
        (rp.state, rp.rides_on, rp.class),
        (RequestState::Accepted, None, Class::Priority)
    );
    assert_eq!((rf.state, rf.rides_on), (RequestState::Riding, Some(p.id)));
    // The transfer P carries ends: both are done with its bytes.
    submit(&l, p.id, 1).await;
    apply(&l, p.id, 1, 1, EventKind::Done { bytes: 500 }).await;
    for id in [p.id, fair.id] {
        assert_eq!(record(&l, id).await.state, RequestState::Done, "{id}");
    }
    drop(l);
    close(opened);
}

/// Held release mode, one slot: a duplicate of a request still queued in the broker rides on
/// it uncharged; cancelling the queued carrier puts the rider in its place in the queue; when
/// that one is released, its own rider is charged with it, and both finish with one transfer.
async fn a_duplicate_of_a_queued_request_rides_and_is_charged_at_its_release(backend: Backend) {
    let held = "[release]\nmode = \"held\"\nlimit = 1\ncoalesce = \"queued\"\n";
    let f = Fixture::with_config_on(backend, &format!("{CONFIG}{held}"));
    let opened = f.open();
    let l = opened.0.clone();
    let a = accept(&l, read_of(&f, "a", "mc", "x", "/pnfs/first")).await;
    assert_eq!(
        record(&l, a.id).await.state,
        RequestState::Accepted,
        "released"
    );
    let q = accept(&l, read_of(&f, "q", "mc", "x", "/pnfs/six")).await;
    assert_eq!(q.state, RequestState::Queued);
    let r = accept(&l, read_of(&f, "r", "analysis", "top", "/pnfs/six")).await;
    assert_eq!(r.state, RequestState::Riding);
    assert_eq!(
        record(&l, r.id).await.charged,
        0,
        "charged when its carrier is"
    );
    assert_eq!(l.cancel(q.id).await.unwrap(), CancelOutcome::Cancelled);
    let rr = record(&l, r.id).await;
    assert_eq!((rr.state, rr.rides_on), (RequestState::Queued, None));
    let s = accept(&l, read_of(&f, "s", "mc", "x", "/pnfs/six")).await;
    assert_eq!(s.state, RequestState::Riding);
    assert_eq!(record(&l, s.id).await.rides_on, Some(r.id));

    // a finishes: its slot goes to r, which is decided and charged, and s with it.
    submit(&l, a.id, 1).await;
    apply(&l, a.id, 1, 1, EventKind::Done { bytes: 500 }).await;
    assert_eq!(record(&l, r.id).await.state, RequestState::Accepted);
    assert_eq!(record(&l, s.id).await.charged, 500);
    let groups = l.groups().await.unwrap();
    assert_eq!(usage_of(&groups, "analysis/top"), (500, 1));
    assert_eq!(
        usage_of(&groups, "mc"),
        (500 + 500, 1),
        "a done, s charged, q refunded"
    );
    submit(&l, r.id, 1).await;
    apply(&l, r.id, 1, 2, EventKind::Done { bytes: 500 }).await;
    assert_eq!(record(&l, s.id).await.state, RequestState::Done);
    let groups = l.groups().await.unwrap();
    assert_eq!(usage_of(&groups, "analysis/top"), (500, 0));
    assert_eq!(usage_of(&groups, "mc"), (1_000, 0));
    drop(l);
    close(opened);
}

/// `coalesce = "in_flight"` (the default) leaves a duplicate of a queued request on its own;
/// `"off"` leaves every duplicate on its own.
async fn the_coalesce_setting_chooses_what_a_duplicate_rides_on(backend: Backend) {
    let held = "[release]\nmode = \"held\"\nlimit = 1\n";
    let f = Fixture::with_config_on(backend, &format!("{CONFIG}{held}"));
    let opened = f.open();
    let l = opened.0.clone();
    let a = accept(&l, read_of(&f, "a", "mc", "x", "/pnfs/seven")).await;
    assert_eq!(record(&l, a.id).await.state, RequestState::Accepted);
    let q = accept(&l, read_of(&f, "q", "mc", "x", "/pnfs/eight")).await;
    let b = accept(&l, read_of(&f, "b", "mc", "x", "/pnfs/seven")).await;
    let r = accept(&l, read_of(&f, "r", "mc", "x", "/pnfs/eight")).await;
    assert_eq!(b.state, RequestState::Riding, "on the released a");
    assert_eq!(
        (q.state, r.state),
        (RequestState::Queued, RequestState::Queued)
    );
    drop(l);
    close(opened);

    let off = "[release]\ncoalesce = \"off\"\n";
    let f = Fixture::with_config_on(backend, &format!("{CONFIG}{off}"));
    let opened = f.open();
    let l = opened.0.clone();
    accept(&l, read_of(&f, "a", "mc", "x", "/pnfs/nine")).await;
    let b = accept(&l, read_of(&f, "b", "mc", "x", "/pnfs/nine")).await;
    assert_eq!(b.state, RequestState::Accepted);
    drop(l);
    close(opened);
}

/// A queued read still carries its file after a restart: the carriers are rebuilt from the
/// rows, `queued` ones included, so a new duplicate rides on it rather than costing a second
/// transfer.
async fn a_queued_carrier_still_carries_after_a_restart(backend: Backend) {
    let held = "[release]\nmode = \"held\"\nlimit = 1\ncoalesce = \"queued\"\n";
    let f = Fixture::with_config_on(backend, &format!("{CONFIG}{held}"));
    let opened = f.open();
    let l = opened.0.clone();
    let a = accept(&l, read_of(&f, "a", "mc", "x", "/pnfs/first")).await;
    assert_eq!(record(&l, a.id).await.state, RequestState::Accepted);
    let q = accept(&l, read_of(&f, "q", "mc", "x", "/pnfs/six")).await;
    assert_eq!(q.state, RequestState::Queued);
    let r = accept(&l, read_of(&f, "r", "analysis", "top", "/pnfs/six")).await;
    assert_eq!(r.state, RequestState::Riding);
    drop(l);
    close(opened);

    let opened = f.open();
    let l = opened.0.clone();
    let s = accept(&l, read_of(&f, "s", "mc", "x", "/pnfs/six")).await;
    let rs = record(&l, s.id).await;
    assert_eq!((rs.state, rs.rides_on), (RequestState::Riding, Some(q.id)));
    drop(l);
    close(opened);
}

/// A read released from a feasibility hold into the broker's queue carries its file from
/// then on, as one queued at its arrival does, a restart during the hold notwithstanding.
async fn a_read_released_from_a_hold_into_the_queue_carries_its_file(backend: Backend) {
    let extra = "[targets.\"mc\"]\nfeasibility_cap = 1000\n\
                 [release]\nmode = \"held\"\nlimit = 1\ncoalesce = \"queued\"\n";
    let f = Fixture::with_config_on(backend, &format!("{CONFIG}{extra}"));
    let opened = f.open();
    let l = opened.0.clone();
    let sized = |crid: &str, mode: &str, group: &str, file: &str, size: u64| {
        let mut r = read_of(&f, crid, mode, group, file);
        r.input.size_bytes = size;
        r
    };
    let a0 = accept(&l, sized("a0", "mc", "x", "/pnfs/a0", 100)).await;
    let q = accept(&l, sized("q", "mc", "x", "/pnfs/q", 100)).await;
    assert_eq!(q.state, RequestState::Queued);
    // mc goes over its cap with a request of another library (which has its own slot).
    let mut w = sized("w", "mc", "x", "/pnfs/w", 850);
    w.input.extras.library = "L2".into();
    let w = accept(&l, w).await;
    assert_eq!(record(&l, w.id).await.state, RequestState::Accepted);
    submit(&l, a0.id, 1).await;
    apply(&l, a0.id, 1, 1, EventKind::Done { bytes: 100 }).await;
    assert_eq!(record(&l, q.id).await.state, RequestState::Held);
    // A restart while q is held: the rebuilt carriers do not have it.
    drop(l);
    close(opened);
    let opened = f.open();
    let l = opened.0.clone();
    // b takes the slot; w fails for good and is refunded, so mc is under its cap again and
    // q goes back to the queue.
    let b = accept(&l, sized("b", "analysis", "top", "/pnfs/b", 100)).await;
    assert_eq!(record(&l, b.id).await.state, RequestState::Accepted);
    submit(&l, w.id, 1).await;
    let gone = EventKind::Failed {
        reason: "no such file".into(),
        retryable: false,
    };
    apply(&l, w.id, 1, 2, gone).await;
    assert_eq!(l.release_held().await.unwrap(), 1);
    assert_eq!(record(&l, q.id).await.state, RequestState::Queued);
    let t = accept(&l, sized("t", "analysis", "top", "/pnfs/q", 100)).await;
    let rt = record(&l, t.id).await;
    assert_eq!((rt.state, rt.rides_on), (RequestState::Riding, Some(q.id)));
    drop(l);
    close(opened);
}

/// `coalesce = "in_flight"` (the default): a read queued in the broker carries nothing, so it
/// does not stand in the way of a later read of the same file released first (here a data
/// taking read): a third read rides on that one.
async fn a_queued_read_does_not_keep_a_released_one_from_carrying_its_file(backend: Backend) {
    let held = "[release]\nmode = \"held\"\nlimit = 1\n";
    let f = Fixture::with_config_on(backend, &format!("{CONFIG}{held}"));
    let opened = f.open();
    let l = opened.0.clone();
    let a = accept(&l, read_of(&f, "a", "mc", "x", "/pnfs/first")).await;
    assert_eq!(record(&l, a.id).await.state, RequestState::Accepted);
    let q = accept(&l, read_of(&f, "q", "mc", "x", "/pnfs/ten")).await;
    assert_eq!(q.state, RequestState::Queued);
    let p = accept(&l, read_of(&f, "p", "datataking", "x", "/pnfs/ten")).await;
    assert_eq!(p.state, RequestState::Accepted, "data taking is never held");
    let r = accept(&l, read_of(&f, "r", "analysis", "top", "/pnfs/ten")).await;
    let rr = record(&l, r.id).await;
    assert_eq!((rr.state, rr.rides_on), (RequestState::Riding, Some(p.id)));
    drop(l);
    close(opened);
}

on_both_async!(
    a_duplicate_read_rides_and_completes_with_its_carrier,
    riders_fail_with_their_carrier_and_wait_through_its_retries,
    cancelling_one_of_two_leaves_the_other,
    a_carrier_cancelled_at_the_mss_keeps_the_transfer_for_its_rider_across_a_restart,
    a_priority_read_does_not_ride_on_a_fair_share_carrier,
    a_priority_read_beside_a_fair_share_carrier_carries_for_later_ones,
    a_priority_rider_takes_over_before_an_older_fair_share_one,
    a_duplicate_of_a_queued_request_rides_and_is_charged_at_its_release,
    the_coalesce_setting_chooses_what_a_duplicate_rides_on,
    a_queued_carrier_still_carries_after_a_restart,
    a_read_released_from_a_hold_into_the_queue_carries_its_file,
    a_queued_read_does_not_keep_a_released_one_from_carrying_its_file,
);

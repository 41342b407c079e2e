//! The `volumes` release mode's flights through the writer and a real SQLite file, where they
//! meet coalescing and restarts: who a volume in flight counts against, a rider that takes
//! over its carrier's read, and a carrier that goes back to `held` at its release.

use super::*;

/// Groups a and b (equal shares) under Fair Tree, in the volumes mode: a volume is eligible at
/// 100 bytes, and `{targets}` / `{max_volumes}` set the caps.
const VOLUMES: &str = r#"
[policy]
p_front = 20
p_back = 10
algorithm = "fair_tree"
[usage]
model = "none"
[[priority_classes]]
access_mode = "datataking"
mss_priority = 100
[shares]
a = 1
b = 1
{targets}
[mss]
adapter = "http"
url = "http://127.0.0.1:1"
[release]
mode = "volumes"
[release.volumes]
min_volume_bytes = 100
min_volume_files = 1000
quiet_secs = 600
max_age_secs = 14400
batch_max_bytes = 100000
batch_max_files = 100
sticky_secs = 0
max_volumes = {max_volumes}
"#;

fn volumes_config(targets: &str, max_volumes: u32) -> String {
    VOLUMES
        .replace("{targets}", targets)
        .replace("{max_volumes}", &max_volumes.to_string())
}

/// A read of `file` on `volume` at `position` by group `mode` (request `crid`, its own station).
fn on_volume(f: &Fixture, crid: &str, mode: &str, file: &str, at: (&str, u64)) -> NewRequest {
    let mut r = f.request(crid, mode, "x", 100);
    r.input.station = format!("st-{crid}");
    r.input.file = file.into();
    r.input.volume = Some(at.0.into());
    r.input.extras.position = Some(at.1);
    r
}

async fn state_of(l: &Ledger, id: i64) -> RequestState {
    l.request(id).await.expect("read").expect("stored").state
}

/// a may lead one volume. a's batch on V1 carries b's request on V1 with it (a rider of the
/// mount); a's own request ends while b's still reads V1: V1 is in flight, led by a, so a's
/// request on V2 waits, before a restart and after it (the rows name the leader).
async fn a_restart_counts_a_volume_in_flight_against_the_group_that_led_it(backend: Backend) {
    let f = Fixture::with_config_on(
        backend,
        &volumes_config("[targets.\"a\"]\nmax_volumes = 1", 8),
    );
    let opened = f.open();
    let l = opened.0.clone();
    let both = l
        .accept(vec![
            on_volume(&f, "a1", "a", "/pnfs/a1", ("V1", 1)),
            on_volume(&f, "b1", "b", "/pnfs/b1", ("V1", 2)),
        ])
        .await
        .unwrap();
    let (a1, b1) = (both[0].id, both[1].id);
    assert_eq!(state_of(&l, a1).await, RequestState::Accepted);
    assert_eq!(
        state_of(&l, b1).await,
        RequestState::Accepted,
        "b1 rode on a's mount"
    );
    submit(&l, a1, 1).await;
    submit(&l, b1, 1).await;
    let done = event(&l, a1, 1, 1, EventKind::Done { bytes: 100 });
    assert_eq!(l.apply_status_events(vec![done]).await.unwrap(), 1);
    let a2 = accept(&l, on_volume(&f, "a2", "a", "/pnfs/a2", ("V2", 1))).await;
    assert_eq!(
        state_of(&l, a2.id).await,
        RequestState::Queued,
        "a leads V1"
    );
    drop(l);
    close(opened);

    let opened = f.open();
    let l = opened.0.clone();
    l.release_held().await.unwrap();
    assert_eq!(
        state_of(&l, a2.id).await,
        RequestState::Queued,
        "a still leads V1"
    );
    // b1 ends: V1 leaves flight, and a may lead V2.
    let done = event(&l, b1, 1, 2, EventKind::Done { bytes: 100 });
    assert_eq!(l.apply_status_events(vec![done]).await.unwrap(), 1);
    assert_eq!(state_of(&l, a2.id).await, RequestState::Accepted);
    drop(l);
    close(opened);
}

/// One volume at a time. b's read of a1's file rides on it; a1 is cancelled before the MSS has
/// it and b's read carries the transfer on: it still reads V1, so V2's request waits until it
/// ends, and a restart in between counts it too.
async fn a_rider_that_takes_over_its_carriers_read_keeps_the_volume_in_flight(backend: Backend) {
    let f = Fixture::with_config_on(backend, &volumes_config("", 1));
    let opened = f.open();
    let l = opened.0.clone();
    let a1 = accept(&l, on_volume(&f, "a1", "a", "/pnfs/same", ("V1", 1))).await;
    assert_eq!(state_of(&l, a1.id).await, RequestState::Accepted);
    let b2 = accept(&l, on_volume(&f, "b2", "b", "/pnfs/same", ("V1", 1))).await;
    assert_eq!(b2.state, RequestState::Riding);
    assert_eq!(l.cancel(a1.id).await.unwrap(), CancelOutcome::Cancelled);
    assert_eq!(
        state_of(&l, b2.id).await,
        RequestState::Accepted,
        "b2 carries it on"
    );
    let c3 = accept(&l, on_volume(&f, "c3", "a", "/pnfs/other", ("V2", 1))).await;
    assert_eq!(
        state_of(&l, c3.id).await,
        RequestState::Queued,
        "V1 is still read"
    );
    drop(l);
    close(opened);

    let opened = f.open();
    let l = opened.0.clone();
    l.release_held().await.unwrap();
    assert_eq!(
        state_of(&l, c3.id).await,
        RequestState::Queued,
        "after a restart too"
    );
    submit(&l, b2.id, 1).await;
    let done = event(&l, b2.id, 1, 1, EventKind::Done { bytes: 100 });
    assert_eq!(l.apply_status_events(vec![done]).await.unwrap(), 1);
    assert_eq!(
        state_of(&l, c3.id).await,
        RequestState::Accepted,
        "V1 is done"
    );
    drop(l);
    close(opened);
}

/// Held mode, one slot, duplicates ride on queued requests. mc's q waits in the queue with
/// analysis/top's r riding on it; when q's turn comes mc is over its feasibility cap and q goes
/// to `held`: r, whose group has no cap, takes q's place in the queue instead of waiting on a
/// request that may never be released, and is then released and charged to its own group.
async fn a_rider_does_not_wait_on_a_carrier_held_at_its_release(backend: Backend) {
    let extra = "[targets.\"mc\"]\nfeasibility_cap = 1000\n\
                 [release]\nmode = \"held\"\nlimit = 1\ncoalesce = \"queued\"\n";
    let f = Fixture::with_config_on(backend, &format!("{CONFIG}{extra}"));
    let opened = f.open();
    let l = opened.0.clone();
    let read = |crid: &str, mode: &str, group: &str, file: &str, size: u64| {
        let mut r = f.request(crid, mode, group, size);
        r.input.station = format!("st-{crid}");
        r.input.file = file.into();
        r
    };
    let a0 = accept(&l, read("a0", "mc", "x", "/pnfs/a0", 100)).await;
    assert_eq!(
        state_of(&l, a0.id).await,
        RequestState::Accepted,
        "the slot"
    );
    let q = accept(&l, read("q", "mc", "x", "/pnfs/six", 100)).await;
    assert_eq!(q.state, RequestState::Queued);
    let r = accept(&l, read("r", "analysis", "top", "/pnfs/six", 100)).await;
    assert_eq!(r.state, RequestState::Riding);
    // mc goes over its cap with a request of another library (which has its own slot).
    let mut w = read("w", "mc", "x", "/pnfs/w", 850);
    w.input.extras.library = "L2".into();
    let w = accept(&l, w).await;
    assert_eq!(state_of(&l, w.id).await, RequestState::Accepted);
    submit(&l, a0.id, 1).await;
    let done = event(&l, a0.id, 1, 1, EventKind::Done { bytes: 100 });
    assert_eq!(l.apply_status_events(vec![done]).await.unwrap(), 1);
    assert_eq!(state_of(&l, q.id).await, RequestState::Held);
    let rr = l.request(r.id).await.unwrap().unwrap();
    assert_eq!(
        (rr.state, rr.rides_on),
        (RequestState::Accepted, None),
        "r took the slot"
    );
    let groups = l.groups().await.unwrap();
    assert_eq!(
        usage_of(&groups, "analysis/top").0,
        100,
        "charged to its own group"
    );
    // A new duplicate rides on r now, not on the held q.
    let s = accept(&l, read("s", "analysis", "top", "/pnfs/six", 100)).await;
    let rs = l.request(s.id).await.unwrap().unwrap();
    assert_eq!((rs.state, rs.rides_on), (RequestState::Riding, Some(r.id)));
    drop(l);
    close(opened);
}

/// After a restart, a new batch is numbered after the released requests already at the MSS,
/// so a retried one of them is not submitted in the middle of the new batch.
async fn a_restart_numbers_new_batches_after_those_at_the_mss(backend: Backend) {
    let f = Fixture::with_config_on(backend, &volumes_config("", 8));
    let seq = |id: i64| -> i64 {
        f.with_db(|db| {
            db.query_one(
                "SELECT release_seq FROM requests WHERE id = ?1",
                crate::ledger::db::params![id],
                |r| r.get(0),
            )
        })
        .expect("the release sequence")
    };
    let opened = f.open();
    let l = opened.0.clone();
    let a1 = accept(&l, on_volume(&f, "a1", "a", "/pnfs/a1", ("V1", 1))).await;
    assert_eq!(state_of(&l, a1.id).await, RequestState::Accepted);
    submit(&l, a1.id, 1).await;
    drop(l);
    close(opened);

    let opened = f.open();
    let l = opened.0.clone();
    let b2 = accept(&l, on_volume(&f, "b2", "b", "/pnfs/b2", ("V2", 1))).await;
    assert_eq!(state_of(&l, b2.id).await, RequestState::Accepted);
    assert!(
        seq(b2.id) > seq(a1.id),
        "{} after {}",
        seq(b2.id),
        seq(a1.id)
    );
    drop(l);
    close(opened);
}

/// A reload that changes nothing about the volumes (a token rotation's SIGHUP) keeps what the
/// rows do not hold, as a rolled-back transaction does: V1's batch ended a moment ago, so with
/// `sticky_secs` V1 stays mounted for b2 (too small a volume to be chosen on its own) before
/// b3's fuller V2 takes the one drive.
async fn a_reload_keeps_a_volume_that_just_ended_sticky(backend: Backend) {
    let text = volumes_config("", 1)
        .replace("min_volume_bytes = 100\n", "min_volume_bytes = 1000\n")
        .replace("sticky_secs = 0\n", "sticky_secs = 3600\n");
    let f = Fixture::with_config_on(backend, &text);
    let opened = f.open();
    let l = opened.0.clone();
    let mut big = on_volume(&f, "a1", "a", "/pnfs/a1", ("V1", 1));
    big.input.size_bytes = 1000;
    let a1 = accept(&l, big).await.id;
    assert_eq!(state_of(&l, a1).await, RequestState::Accepted);
    submit(&l, a1, 1).await;
    let done = event(&l, a1, 1, 1, EventKind::Done { bytes: 1000 });
    l.apply_status_events(vec![done]).await.unwrap();

    // The same configuration again.
    l.reload(f.settings.policy.clone()).await.unwrap();
    let mut fuller = on_volume(&f, "b3", "b", "/pnfs/b3", ("V2", 1));
    fuller.input.size_bytes = 1000;
    let both = l
        .accept(vec![
            on_volume(&f, "b2", "b", "/pnfs/b2", ("V1", 2)),
            fuller,
        ])
        .await
        .unwrap();
    assert_eq!(
        (
            state_of(&l, both[0].id).await,
            state_of(&l, both[1].id).await
        ),
        (RequestState::Accepted, RequestState::Queued),
        "V1, which just ended, goes on (sticky); V2 waits for the drive"
    );
    drop(l);
    close(opened);
}

/// A reload from `pass_through` into the volumes mode (one volume at a time): a's request on V1
/// and b's on V2 went to the MSS under `pass_through`; they are in flight as much as a batch is,
/// so a's request on V3, eligible, waits until both have ended, before a restart and after it.
/// Before, they were not counted: V3 went at once, a third volume at the MSS.
async fn a_reload_into_volumes_counts_what_pass_through_sent(backend: Backend) {
    let volumes = volumes_config("", 1);
    let passing = volumes.replace("mode = \"volumes\"", "mode = \"pass_through\"");
    let mut f = Fixture::with_config_on(backend, &passing);
    let opened = f.open();
    let l = opened.0.clone();
    let a1 = accept(&l, on_volume(&f, "a1", "a", "/pnfs/a1", ("V1", 1))).await;
    let b1 = accept(&l, on_volume(&f, "b1", "b", "/pnfs/b1", ("V2", 1))).await;
    submit(&l, a1.id, 1).await;
    submit(&l, b1.id, 1).await;
    let into = Settings::parse(&volumes, "test").unwrap();
    l.reload(into.policy.clone()).await.unwrap();
    assert_eq!(l.audit().await.unwrap(), Vec::<String>::new());
    let a3 = accept(&l, on_volume(&f, "a3", "a", "/pnfs/a3", ("V3", 1))).await;
    assert_eq!(
        state_of(&l, a3.id).await,
        RequestState::Queued,
        "V1 and V2 are at the MSS"
    );
    let done = event(&l, a1.id, 1, 1, EventKind::Done { bytes: 100 });
    assert_eq!(l.apply_status_events(vec![done]).await.unwrap(), 1);
    assert_eq!(state_of(&l, a3.id).await, RequestState::Queued, "V2 is");
    drop(l);
    close(opened);

    // A restart (in the volumes mode now) counts V2 too; its end lets V3 go.
    f.settings = into;
    let opened = f.open();
    let l = opened.0.clone();
    l.release_held().await.unwrap();
    assert_eq!(
        state_of(&l, a3.id).await,
        RequestState::Queued,
        "V2 still is"
    );
    let done = event(&l, b1.id, 1, 2, EventKind::Done { bytes: 100 });
    assert_eq!(l.apply_status_events(vec![done]).await.unwrap(), 1);
    assert_eq!(state_of(&l, a3.id).await, RequestState::Accepted);
    drop(l);
    close(opened);
}

on_both_async!(
    a_restart_counts_a_volume_in_flight_against_the_group_that_led_it,
    a_rider_that_takes_over_its_carriers_read_keeps_the_volume_in_flight,
    a_rider_does_not_wait_on_a_carrier_held_at_its_release,
    a_restart_numbers_new_batches_after_those_at_the_mss,
    a_reload_keeps_a_volume_that_just_ended_sticky,
    a_reload_into_volumes_counts_what_pass_through_sent,
);

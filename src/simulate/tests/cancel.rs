//! A trace's cancels replayed (`engine/cancel.rs`): a cancelled carrier's riders follow by the
//! writer's rule (`policy::transition::riders_follow`, `FirstTakesOver`), the first of
//! `take_over_order` carrying the file on, as `ledger/writer/coalesce.rs` does.

use super::*;

/// A read of file `file` (`gb` GB) by `group` at `at`, cancelled at `cancel` if given.
fn read(at: u64, group: GroupId, gb: u64, file: u64, cancel: Option<u64>) -> Arrival {
    Arrival {
        file: Some(file),
        cancelled_at: cancel,
        ..sized(at, group, &format!("V{file}"), gb)
    }
}

/// Pass-through, one drive at 1 GB/s busy with a1 (10 GB) until 10 s. d1 (daq, file F) is sent
/// at 1 s and waits at the library; a2 (F) at 2 s and d2 (daq, F) at 3 s ride on it. d1 is
/// cancelled at 4 s while its riders wait: as `serve`, the library is not asked; d1 is read
/// from 10 s to 11 s, a2 and d2 are done with it, and d1 ends cancelled (not a file done).
/// a1's cancel at 5 s comes while it is being read: too late, it is done.
#[test]
fn a_carrier_cancelled_while_riders_wait_carries_on_for_them() {
    let p = sam_pass_through();
    let (a, daq) = (g(&p, "a"), g(&p, "daq"));
    let load = vec![
        read(0, a, 10, 1, Some(5 * SEC)),
        read(SEC, daq, 1, 7, Some(4 * SEC)),
        read(2 * SEC, a, 1, 7, None),
        read(3 * SEC, daq, 1, 7, None),
    ];
    let o = run(&p, one_drive(Model::Priority), &load, u64::MAX);
    assert_eq!(o.cancelled, 1, "d1 only: a1 had started");
    assert_eq!(o.start_times, vec![(0, a), (10 * SEC, daq)], "d1 carries F");
    assert_eq!((o.files[a.0], o.files[daq.0]), (2, 1), "a1, a2; d2");
    assert_eq!((o.failed, o.unfinished, o.makespan), (0, 0, 11 * SEC));
}

/// The same cancel on a library failing every attempt, two attempts each: d1 (daq, F) reads
/// from 0 s; a2 (F) at 0.25 s and d2 (daq, F) at 0.5 s ride on it; d1 is cancelled at 0.75 s.
/// Its attempt fails at 1 s with one left: d1 ends cancelled and passes the transfer on
/// (`FirstTakesOver`): d2, a priority-class rider though a2 is older, is sent at once (1 s to
/// 2 s), retried after 1 s (3 s to 4 s) and fails for good, a2 with it. Counted as failed and
/// not carried on (the simulator's former treatment), d2 would never have been read.
#[test]
fn a_cancelled_carriers_first_rider_takes_the_transfer_over() {
    let p = sam_pass_through();
    let (a, daq) = (g(&p, "a"), g(&p, "daq"));
    let load = vec![
        read(0, daq, 1, 7, Some(3 * SEC / 4)),
        read(SEC / 4, a, 1, 7, None),
        read(SEC / 2, daq, 1, 7, None),
    ];
    let o = run_failing(&p, Model::Priority, &load, 2);
    assert_eq!(
        (o.cancelled, o.failed),
        (1, 2),
        "d1 cancelled; d2 and a2 failed"
    );
    assert_eq!(o.retried, 1, "d2's own transfer was sent, and sent again");
    assert_eq!(
        o.start_times,
        vec![(0, daq)],
        "d2's first start was on d1's transfer"
    );
    assert_eq!(
        o.waits[daq.0],
        vec![0, 0],
        "d2's wait ended when it joined the running d1"
    );
    assert_eq!(o.unfinished, 0);
}

/// Held, one slot, `coalesce = "queued"`; one drive at 1 GB/s busy with a1 (10 GB) until 10 s.
/// a2 (file F) queues at 1 s behind a1's slot; b1 (F) at 2 s rides on the queued a2. a2 is
/// cancelled at 3 s: b1 takes its place in the queue (uncharged, as any queued request), is
/// released when a1 ends and read from 10 s to 11 s.
#[test]
fn a_queued_carriers_first_rider_takes_its_place_in_the_queue() {
    let p = settings(
        "algorithm = \"sam\"",
        "a = 1\nb = 1",
        "mode = \"held\"\nlimit = 1\ncoalesce = \"queued\"",
    );
    let (a, b) = (g(&p, "a"), g(&p, "b"));
    let load = vec![
        read(0, a, 10, 1, None),
        read(SEC, a, 1, 7, Some(3 * SEC)),
        read(2 * SEC, b, 1, 7, None),
    ];
    let o = run(&p, one_drive(Model::Priority), &load, u64::MAX);
    assert_eq!(o.cancelled, 1);
    assert_eq!(o.start_times, vec![(0, a), (10 * SEC, b)], "b1 carries F");
    assert_eq!((o.files[a.0], o.files[b.0]), (1, 1));
    assert_eq!((o.failed, o.unfinished, o.makespan), (0, 0, 11 * SEC));
}

/// A cancelled rider leaves its carrier, which goes on: a1 (F, 2 GB) reads from 0 s; b1 (F)
/// rides on it at 1 s and is cancelled at 1.5 s. One file done, one cancelled.
#[test]
fn a_cancelled_rider_leaves_its_carrier() {
    let p = sam_pass_through();
    let (a, b) = (g(&p, "a"), g(&p, "b"));
    let load = vec![
        read(0, a, 2, 7, None),
        read(SEC, b, 2, 7, Some(3 * SEC / 2)),
    ];
    let o = run(&p, one_drive(Model::Priority), &load, u64::MAX);
    assert_eq!((o.coalesced, o.cancelled), (1, 1));
    assert_eq!((o.files[a.0], o.files[b.0]), (1, 0));
    assert_eq!((o.failed, o.unfinished, o.makespan), (0, 0, 2 * SEC));
}

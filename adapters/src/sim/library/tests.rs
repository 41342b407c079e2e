use super::*;
use crate::protocol::Direction;

fn transfer(key: &str, priority: i64, size: u64, volume: Option<&str>) -> Transfer {
    Transfer {
        key: key.to_string(),
        attempt: 1,
        file: format!("/pnfs/{key}"),
        size_bytes: size,
        priority,
        volume: volume.map(str::to_string),
        group: "g".to_string(),
        direction: Direction::Read,
        local_file: None,
        bfid: None,
        position: None,
        offset_bytes: None,
    }
}

fn one_drive() -> LibraryConfig {
    LibraryConfig {
        drives: 1,
        mount_micros: 10,
        bytes_per_sec: 1_000_000,
        failure_rate: 0.0,
        seed: 1,
        aging: None,
        ..Default::default()
    }
}

fn done_order(events: &[LibraryEvent]) -> Vec<String> {
    events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Done { .. }))
        .map(|e| e.key.clone())
        .collect()
}

#[test]
fn higher_priority_then_arrival_order() {
    let mut lib = Library::new(one_drive());
    let mut ev = Vec::new();
    // "a" starts at once on the free drive; the rest queue behind it.
    lib.submit(transfer("a", 1, 100, None), 0, &mut ev);
    lib.submit(transfer("b", 1, 100, None), 0, &mut ev);
    lib.submit(transfer("c", 5, 100, None), 1, &mut ev);
    lib.submit(transfer("d", 5, 100, None), 1, &mut ev);
    lib.submit(transfer("e", 3, 100, None), 2, &mut ev);
    lib.advance(u64::MAX / 2, &mut ev);
    assert_eq!(done_order(&ev), ["a", "c", "d", "e", "b"]);
}

/// Issue 18, item 6: Enstore's library manager ages waiting requests by 1 every 30 minutes
/// whatever the ticket says, so one waiting two hours (+4) passes a fresher one 2 higher.
#[test]
fn with_enstore_aging_a_long_wait_passes_a_slightly_higher_priority() {
    const HOUR: Micros = 3_600 * 1_000_000;
    let run = |aging| {
        let mut lib = Library::new(LibraryConfig {
            aging,
            ..one_drive()
        });
        let mut ev = Vec::new();
        // "a" holds the drive for two hours (1 MB/s).
        lib.submit(transfer("a", 1, 7_200_000_000, None), 0, &mut ev);
        lib.submit(transfer("old", 5, 100, None), 0, &mut ev);
        lib.submit(transfer("new", 7, 100, None), HOUR + HOUR * 5 / 6, &mut ev);
        lib.advance(3 * HOUR, &mut ev);
        done_order(&ev)
    };
    assert_eq!(run(None), ["a", "new", "old"]);
    assert_eq!(run(Some(Aging::ENSTORE)), ["a", "old", "new"]);
    assert_eq!(Aging::ENSTORE.gain(HOUR * 2), 4);
    assert_eq!(Aging::ENSTORE.gain(HOUR / 6), 0);
}

#[test]
fn mount_only_when_volume_changes() {
    let mut lib = Library::new(one_drive());
    let mut ev = Vec::new();
    lib.submit(transfer("a", 1, 1_000_000, Some("V1")), 0, &mut ev);
    lib.submit(transfer("b", 1, 1_000_000, Some("V1")), 0, &mut ev);
    lib.submit(transfer("c", 1, 1_000_000, Some("V2")), 0, &mut ev);
    lib.advance(10_000_000, &mut ev);
    assert_eq!(lib.mounts(), 2);
    let done: Vec<Micros> = ev
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Done { .. }))
        .map(|e| e.at)
        .collect();
    // mount 10 + 1 s, then 1 s on the same volume, then mount 10 + 1 s.
    assert_eq!(done, [1_000_010, 2_000_010, 3_000_020]);
}

#[test]
fn a_transfer_never_starts_before_it_arrives() {
    let mut lib = Library::new(one_drive());
    let mut ev = Vec::new();
    lib.submit(transfer("late", 1, 1_000_000, None), 5_000_000, &mut ev);
    lib.advance(20_000_000, &mut ev);
    let times: Vec<(Micros, bool)> = ev
        .iter()
        .map(|e| (e.at, matches!(e.kind, EventKind::Done { .. })))
        .collect();
    assert_eq!(times, [(5_000_000, false), (6_000_010, true)]);
}

#[test]
fn duplicate_submission_creates_nothing() {
    let mut lib = Library::new(one_drive());
    let mut ev = Vec::new();
    let first = lib.submit(transfer("a", 1, 10, None), 0, &mut ev);
    let again = lib.submit(transfer("a", 1, 10, None), 0, &mut ev);
    assert!(!first.duplicate);
    assert!(again.duplicate);
    assert_eq!(first.mss_id, again.mss_id);
    assert_eq!(lib.received().len(), 1);
    assert_eq!(lib.duplicates(), 1);
}

#[test]
fn failed_attempt_may_be_retried_with_a_higher_attempt() {
    let mut cfg = one_drive();
    cfg.failure_rate = 1.0;
    let mut lib = Library::new(cfg);
    let mut ev = Vec::new();
    lib.submit(transfer("a", 1, 10, None), 0, &mut ev);
    lib.advance(1_000_000, &mut ev);
    assert!(matches!(
        ev.last().map(|e| &e.kind),
        Some(EventKind::Failed { .. })
    ));
    let mut retry = transfer("a", 1, 10, None);
    assert!(
        lib.submit(retry.clone(), 1_000_000, &mut ev).duplicate,
        "same attempt is a duplicate"
    );
    retry.attempt = 2;
    assert!(!lib.submit(retry, 1_000_000, &mut ev).duplicate);
    assert_eq!(lib.received().len(), 2);
}

#[test]
fn a_new_priority_reorders_a_pending_transfer() {
    let mut lib = Library::new(one_drive());
    let mut ev = Vec::new();
    lib.submit(transfer("a", 1, 100, None), 0, &mut ev);
    lib.submit(transfer("b", 1, 100, None), 0, &mut ev);
    lib.submit(transfer("c", 1, 100, None), 0, &mut ev);
    assert_eq!(
        lib.set_priority("c", 1, 9, 0, &mut ev),
        CancelOutcome::Cancelled
    );
    assert_eq!(
        lib.set_priority("a", 1, 9, 0, &mut ev),
        CancelOutcome::TooLate(Phase::Running)
    );
    assert_eq!(
        lib.set_priority("b", 2, 9, 0, &mut ev),
        CancelOutcome::Unknown
    );
    lib.advance(u64::MAX / 2, &mut ev);
    assert_eq!(done_order(&ev), ["a", "c", "b"]);
    assert_eq!(lib.reprioritised(), 1);
}

#[test]
fn cancel_only_pending() {
    let mut lib = Library::new(one_drive());
    let mut ev = Vec::new();
    lib.submit(transfer("a", 1, 1_000_000, None), 0, &mut ev);
    lib.submit(transfer("b", 1, 1_000_000, None), 0, &mut ev);
    assert_eq!(
        lib.cancel("a", 0, &mut ev),
        CancelOutcome::TooLate(Phase::Running)
    );
    assert_eq!(lib.cancel("b", 0, &mut ev), CancelOutcome::Cancelled);
    assert_eq!(lib.cancel("zz", 0, &mut ev), CancelOutcome::Unknown);
    assert_eq!(lib.pending(), 0);
    assert_eq!(
        ev.last().map(|e| e.kind.clone()),
        Some(EventKind::Cancelled)
    );
}

#[test]
fn failure_coin_is_reproducible_and_near_its_rate() {
    let n = 20_000;
    let hits = (0..n).filter(|i| fails(7, &i.to_string(), 1, 0.1)).count();
    assert!((1_600..2_400).contains(&hits), "{hits} of {n}");
    assert_eq!(fails(7, "x", 1, 0.5), fails(7, "x", 1, 0.5));
}

/// A broker's key is `{id}.{nonce}`, `simulate`'s the id alone: the coin is drawn on the id,
/// so a live run and its replay fail the same attempts.
#[test]
fn the_failure_coin_ignores_the_brokers_incarnation_nonce() {
    let failed = |nonce: &str| {
        let mut cfg = one_drive();
        cfg.failure_rate = 0.5;
        let mut lib = Library::new(cfg);
        let mut ev = Vec::new();
        for i in 1..=40 {
            lib.submit(transfer(&format!("{i}{nonce}"), 1, 10, None), 0, &mut ev);
        }
        lib.advance(u64::MAX / 2, &mut ev);
        let ids = ev
            .iter()
            .filter(|e| matches!(e.kind, EventKind::Failed { .. }));
        ids.map(|e| coin_key(&e.key).to_string())
            .collect::<Vec<_>>()
    };
    let bare = failed("");
    assert!((5..35).contains(&bare.len()), "{bare:?}");
    assert_eq!(failed(".9f3a61c2"), bare);
    assert_eq!(failed(".0000beef"), bare);
}

/// `forget_finished`: the same transfers end in the same order at the same times under both
/// models, but a done transfer is no longer kept (nor logged in `received`), while one still
/// pending is.
#[test]
fn a_library_that_forgets_finishes_the_same_and_keeps_only_what_is_in_flight() {
    for model in [Model::Priority, Model::Enstore] {
        let cfg = LibraryConfig {
            model,
            ..one_drive()
        };
        let run = |forget: bool| {
            let mut lib = Library::new(cfg.clone());
            if forget {
                lib.forget_finished();
            }
            let mut ev = Vec::new();
            for (i, key) in ["a", "b", "c", "d"].into_iter().enumerate() {
                let volume = ["V1", "V2"][i % 2];
                lib.submit(
                    transfer(key, i as i64, 100, Some(volume)),
                    i as u64,
                    &mut ev,
                );
            }
            // Up to the end of the first: "a" done, the others not.
            let first_end = loop {
                let t = lib.next_wakeup().unwrap();
                lib.advance(t, &mut ev);
                if let Some(e) = ev.iter().find(|e| matches!(e.kind, EventKind::Done { .. })) {
                    break e.at;
                }
            };
            let kept = (
                lib.job("a").is_some(),
                lib.job("d").is_some(),
                lib.received().len(),
            );
            lib.advance(u64::MAX / 2, &mut ev);
            let ends: Vec<(String, Micros)> = ev
                .iter()
                .filter(|e| matches!(e.kind, EventKind::Done { .. }))
                .map(|e| (e.key.clone(), e.at))
                .collect();
            (ends, first_end, kept, lib.job("d").is_some())
        };
        let (ends, first, kept, d_after) = run(false);
        let (lean_ends, lean_first, lean_kept, lean_d_after) = run(true);
        assert_eq!(lean_ends, ends, "{model:?}: same ends");
        assert_eq!(ends.len(), 4, "{model:?}");
        assert_eq!(lean_first, first);
        assert_eq!(
            kept,
            (true, true, 4),
            "{model:?}: the default keeps everything"
        );
        assert_eq!(
            lean_kept,
            (false, true, 0),
            "{model:?}: only what is in flight"
        );
        assert!(d_after && !lean_d_after, "{model:?}");
    }
}

mod enstore;
mod tape;

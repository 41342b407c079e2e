//! [`Model::Enstore`] by hand: every expected time below is computed from the test config
//! ([`enstore`]: mount 100 µs, unmount 50, dismount delay 1,000, 1 MB/s so a 1,000-byte file
//! streams in 1,000 µs; one wrap of 100 files of 1,000 bytes, file `n` starting at byte
//! `(n - 1) * 1,000`; a locate from the head, at the end of the file last read (the start of
//! tape after a mount), to a file's start costs 10 + 1 per 1,000 bytes of distance, and
//! nothing when the file starts where the head is). Recomputed by hand for issue 38's drive
//! model: the locate is now counted from the end of the file last read, not its position, and
//! file 1 starts at the beginning of tape.

use super::super::*;
use crate::protocol::Direction;

const FILE: u64 = 1_000;

fn read(key: &str, priority: i64, volume: &str, position: u64) -> Transfer {
    Transfer {
        key: key.to_string(),
        attempt: 1,
        file: format!("/pnfs/{key}"),
        size_bytes: FILE,
        priority,
        volume: Some(volume.to_string()),
        group: "g".to_string(),
        direction: Direction::Read,
        local_file: None,
        bfid: None,
        position: Some(position),
        offset_bytes: None,
    }
}

/// The test drive: one wrap of 100 files of 1,000 bytes; a locate of 10 + 100 per tape length
/// (1 per file); load 100, unload 50; no robot, rewind, per-file time or mover poll.
fn test_drive() -> TapeDrive {
    TapeDrive {
        capacity_bytes: 100 * FILE,
        wraps: 1,
        bands: 1,
        mean_file_bytes: FILE,
        load: 100,
        unload: 50,
        locate: LocateCost {
            base: 10,
            per_length: 100,
            ..LocateCost::ZERO
        },
        ..TapeDrive::instant()
    }
}

fn enstore(drives: usize) -> LibraryConfig {
    LibraryConfig {
        model: Model::Enstore,
        drives,
        mount_micros: 100,
        tape: test_drive(),
        dismount_delay_micros: 1_000,
        bytes_per_sec: 1_000_000,
        failure_rate: 0.0,
        seed: 1,
        aging: None,
        admin_from: None,
    }
}

/// (key, time) of the events of one kind, in order.
fn times(events: &[LibraryEvent], started: bool) -> Vec<(String, Micros)> {
    events
        .iter()
        .filter(|e| match e.kind {
            EventKind::Started => started,
            EventKind::Done { .. } => !started,
            _ => false,
        })
        .map(|e| (e.key.clone(), e.at))
        .collect()
}

fn done(events: &[LibraryEvent]) -> Vec<(String, Micros)> {
    times(events, false)
}

fn pairs(expected: &[(&str, Micros)]) -> Vec<(String, Micros)> {
    expected.iter().map(|(k, t)| (k.to_string(), *t)).collect()
}

#[test]
fn two_transfers_on_one_volume_one_mount_then_the_dismount_delay() {
    let mut lib = Library::new(enstore(1));
    let mut ev = Vec::new();
    lib.submit(read("a", 1, "V1", 5), 0, &mut ev);
    lib.submit(read("b", 1, "V1", 7), 0, &mut ev);
    lib.advance(4_000, &mut ev);
    // a (bytes 4,000-5,000): mount 100 + locate 10+4 from the start of tape + 1,000; b (from
    // byte 6,000): locate 10+1 from the end of a + 1,000.
    assert_eq!(done(&ev), pairs(&[("a", 1_114), ("b", 2_125)]));
    // Bound until 3,125, unmounted at 3,175, idle the rest of the 4,000.
    let s = lib.stats();
    assert_eq!((s.mounts, s.unmounts), (1, 1));
    let expected = DriveTimes {
        streaming: 2_000,
        mounting: 100,
        locating: 25,
        unmounting: 50,
        per_file: 0,
        idle_with_work: 0,
        idle_without_work: 1_000 + 825,
    };
    assert_eq!(s.drives, [expected]);
    assert_eq!(s.total().total(), 4_000);
    assert_eq!(s.locates, 2);
    assert_eq!(s.drive_efficiency(), Some(2_000.0 / 2_175.0));
}

/// The issue's case: a mounted volume's next request goes before a higher-priority request
/// for another volume under Enstore (library_manager.py `next_work_this_volume` looks only
/// at the bound volume), and after it under the priority model.
#[test]
fn a_mounted_volume_is_served_before_a_higher_priority_elsewhere_only_under_enstore() {
    let submit_all = |lib: &mut Library, ev: &mut Vec<LibraryEvent>| {
        lib.submit(read("a", 1, "V1", 1), 0, ev);
        lib.submit(read("b", 9, "V2", 1), 1, ev);
        lib.submit(read("c", 1, "V1", 2), 2, ev);
        lib.advance(10_000, ev);
    };
    let mut lib = Library::new(enstore(1));
    let mut ev = Vec::new();
    submit_all(&mut lib, &mut ev);
    // a 100+0+1,000 (file 1 is at the start of tape); c is the next file on tape: no
    // locate, 1,000; the drive then waits out its delay (1,000) with b waiting, unmounts (50),
    // mounts V2 (100), locates nothing, streams (1,000).
    assert_eq!(
        done(&ev),
        pairs(&[("a", 1_100), ("c", 2_100), ("b", 4_250)])
    );
    assert_eq!(lib.stats().drives[0].idle_with_work, 1_000);

    let mut lib = Library::new(LibraryConfig {
        model: Model::Priority,
        ..enstore(1)
    });
    let mut ev = Vec::new();
    submit_all(&mut lib, &mut ev);
    // Each mount 100 (dismount included) + 1,000; b's priority wins, V1 is mounted again.
    assert_eq!(
        done(&ev),
        pairs(&[("a", 1_100), ("b", 2_200), ("c", 3_300)])
    );
    assert_eq!(lib.mounts(), 3);
}

/// mover.py: `transfer_completed` arms `dismount_time = now + delay`; work arriving before it
/// is served with a locate only; after it the volume is unmounted and mounted again.
#[test]
fn the_dismount_delay_is_honoured() {
    let mut lib = Library::new(enstore(1));
    let mut ev = Vec::new();
    lib.submit(read("a", 1, "V1", 1), 0, &mut ev);
    // a ends at 100 + 0 + 1,000 = 1,100; the drive holds V1 until 2,100.
    lib.submit(read("b", 1, "V1", 1), 2_000, &mut ev);
    assert_eq!(lib.mounts(), 1, "b is served without a mount");
    // b, the same file again, locates back from its end: 10 + 1; it ends at 2,000 + 11 +
    // 1,000 = 3,011; the delay runs out at 4,011.
    lib.submit(read("c", 1, "V1", 1), 4_011, &mut ev);
    lib.advance(10_000, &mut ev);
    assert_eq!(
        times(&ev, true),
        pairs(&[("a", 0), ("b", 2_000), ("c", 4_061)])
    );
    // c: the rest of the unmount (50), a mount (100), no locate (file 1, at the start of
    // tape), 1,000.
    assert_eq!(
        done(&ev),
        pairs(&[("a", 1_100), ("b", 3_011), ("c", 5_161)])
    );
    let s = lib.stats();
    assert_eq!((s.mounts, s.unmounts), (2, 2));
}

/// manage_queue.py `SortedList.get(current_location)`: the first position after the head,
/// wrapping to the lowest (the order the research notes verified on the real code: 10, 20, 30,
/// then 15 and 60 queued, 50, 60, 70, 15).
#[test]
fn a_bound_drive_sweeps_positions_upwards_and_wraps() {
    let mut lib = Library::new(enstore(1));
    let mut ev = Vec::new();
    for (key, pos) in [
        ("p10", 10),
        ("p50", 50),
        ("p20", 20),
        ("p70", 70),
        ("p30", 30),
    ] {
        lib.submit(read(key, 1, "V1", pos), 0, &mut ev);
    }
    lib.submit(read("p15", 1, "V1", 15), 2_500, &mut ev);
    lib.submit(read("p60", 1, "V1", 60), 2_500, &mut ev);
    lib.advance(10_000, &mut ev);
    // Locates: 10+9 from the start of tape to file 10's start (byte 9,000), then 10 + the
    // files between the end of the last file and the start of the next: 9, 9, 19, 9, 9, and
    // 56 back from the end of file 70 to the start of file 15.
    assert_eq!(
        done(&ev),
        pairs(&[
            ("p10", 1_119),
            ("p20", 2_138),
            ("p30", 3_157),
            ("p50", 4_186),
            ("p60", 5_205),
            ("p70", 6_224),
            ("p15", 7_290),
        ])
    );
    assert_eq!(lib.mounts(), 1);
}

/// library_manager.py `next_work_any_volume` skips `active_volumes` (every non-idle mover's
/// volume, until it reports idle after the dismount).
#[test]
fn an_idle_drive_does_not_mount_a_volume_another_drive_holds() {
    let mut lib = Library::new(enstore(2));
    let mut ev = Vec::new();
    lib.submit(read("a", 1, "V1", 1), 0, &mut ev);
    // Position 3, not 2 (the next file needs no locate): b locates 10 + 1 from a's end.
    lib.submit(read("b", 1, "V1", 3), 0, &mut ev);
    lib.advance(2_111, &mut ev);
    assert_eq!(times(&ev, true), pairs(&[("a", 0), ("b", 1_100)]));
    assert_eq!(done(&ev), pairs(&[("a", 1_100), ("b", 2_111)]));
    let s = lib.stats();
    assert_eq!(s.mounts, 1);
    assert_eq!(s.drives[1].idle_with_work, 1_100);
    assert_eq!(s.drives[1].idle_without_work, 1_011);
    // Drive 0 dismounts at 3,111 and unmounts until 3,161: c, arriving meanwhile, waits.
    lib.submit(read("c", 1, "V1", 1), 3_130, &mut ev);
    assert_eq!(lib.running(), 0);
    lib.advance(10_000, &mut ev);
    assert_eq!(times(&ev, true).last(), Some(&("c".to_string(), 3_161)));
    assert_eq!(lib.mounts(), 2);
}

/// manage_queue.py `SortedList.update` / `Queue.update_priority`: a volume's best request
/// gains 1 per 30 minutes of the volume queue's age, from the queue's creation, so a request
/// that just joined an old queue is lifted at once.
#[test]
fn aging_counts_from_the_volume_queue_creation() {
    const HOUR: Micros = 3_600 * 1_000_000;
    let run = |aging| {
        let mut lib = Library::new(LibraryConfig {
            aging,
            ..enstore(1)
        });
        let mut ev = Vec::new();
        // "a" holds the drive for two hours (1 MB/s).
        let mut long = read("a", 1, "V0", 0);
        long.size_bytes = 7_200_000_000;
        lib.submit(long, 0, &mut ev);
        lib.submit(read("x", 1, "V1", 2), 0, &mut ev);
        let late = HOUR + HOUR * 5 / 6;
        lib.submit(read("y", 5, "V1", 1), late, &mut ev);
        lib.submit(read("new", 7, "V2", 1), late, &mut ev);
        lib.advance(3 * HOUR, &mut ev);
        done(&ev).into_iter().map(|(k, _)| k).collect::<Vec<_>>()
    };
    // Without aging V2 (7) beats V1 (its best, y, is 5); with it V1's queue, two hours old,
    // ranks y at 5 + 4 = 9. On V1, the lowest position (y) first, then x.
    assert_eq!(run(None), ["a", "new", "y", "x"]);
    assert_eq!(run(Some(Aging::ENSTORE)), ["a", "y", "x", "new"]);
}

#[test]
fn a_position_from_the_file_name_is_stable() {
    // FNV-1a 64 of "/pnfs/f" modulo 10,000: fixed forever, so replays are reproducible.
    let p = enstore::name_position("/pnfs/f");
    assert_eq!(p, enstore::name_position("/pnfs/f"));
    assert!(p < enstore::POSITION_SPAN);
    let mut t = read("f", 1, "V", 0);
    t.position = None;
    assert_eq!(enstore::position(&t), Position::Hashed(p));
}

/// Cancelling or re-prioritising a queued read keeps the per-volume queues consistent.
#[test]
fn cancel_and_priority_changes_reach_the_volume_queues() {
    let mut lib = Library::new(enstore(1));
    let mut ev = Vec::new();
    lib.submit(read("a", 1, "V1", 0), 0, &mut ev);
    lib.submit(read("b", 1, "V2", 0), 0, &mut ev);
    lib.submit(read("c", 1, "V3", 0), 0, &mut ev);
    lib.submit(read("d", 1, "V4", 0), 0, &mut ev);
    assert_eq!(lib.cancel("b", 1, &mut ev), CancelOutcome::Cancelled);
    assert_eq!(
        lib.set_priority("d", 1, 9, 1, &mut ev),
        CancelOutcome::Cancelled
    );
    assert_eq!(lib.pending(), 2);
    lib.advance(100_000, &mut ev);
    let order: Vec<String> = done(&ev).into_iter().map(|(k, _)| k).collect();
    assert_eq!(order, ["a", "d", "c"]);
    assert_eq!(lib.pending(), 0);
}

/// Issue 15's speed goal: 200k requests through the model in virtual time, every operation
/// O(log n). No timing assertion; run with `--release -- --nocapture` to see the time.
#[test]
fn two_hundred_thousand_requests_go_through_and_the_counts_add_up() {
    const N: u64 = 200_000;
    let cfg = LibraryConfig {
        model: Model::Enstore,
        drives: 8,
        aging: Some(Aging::ENSTORE),
        ..LibraryConfig::default()
    };
    let started = std::time::Instant::now();
    let cpu_before = thread_cpu_ns();
    let mut lib = Library::new(cfg);
    let mut ev = Vec::new();
    let mut rng: u64 = 42;
    let mut step = || {
        rng = rng
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        rng >> 33
    };
    let (mut bytes, mut streamed, mut done_files, mut done_bytes) = (0, 0, 0u64, 0u64);
    let mut count = |ev: &mut Vec<LibraryEvent>| {
        for e in ev.drain(..) {
            if let EventKind::Done { bytes } = e.kind {
                done_files += 1;
                done_bytes += bytes;
            }
        }
    };
    for i in 0..N {
        let mut t = read(&format!("r{i}"), 1 + (step() % 3) as i64, "", 0);
        t.volume = Some(format!("V{}", step() % 1_000));
        t.position = Some(step() % 10_000);
        t.size_bytes = 1_000_000 + step() % 4_000_000_000;
        bytes += t.size_bytes;
        streamed += t.size_bytes.div_ceil(400);
        // One arrival every 2 s of virtual time: queues build up, then drain.
        lib.submit(t, i * 2_000_000, &mut ev);
        count(&mut ev);
    }
    let mut end = (N - 1) * 2_000_000;
    while let Some(t) = lib.next_wakeup() {
        end = end.max(t);
        lib.advance(t, &mut ev);
        count(&mut ev);
    }
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "enstore model: {N} requests, {} mounts, in {elapsed:.3} s wall ({:.0} requests/s)",
        lib.mounts(),
        N as f64 / elapsed
    );
    // On a shared machine the wall clock counts time the thread waited for a core.
    if let (Some(a), Some(b)) = (cpu_before, thread_cpu_ns()) {
        let cpu = (b - a) as f64 / 1e9;
        println!(
            "enstore model: {cpu:.3} s on the CPU ({:.0} requests per CPU second)",
            N as f64 / cpu
        );
    }
    assert_eq!((done_files, done_bytes), (N, bytes));
    assert_eq!((lib.pending(), lib.running()), (0, 0));
    let s = lib.stats();
    assert_eq!(s.mounts, s.unmounts);
    let total = s.total();
    assert_eq!(
        total.total(),
        end * 8,
        "every drive's time is accounted for"
    );
    assert_eq!(
        total.streaming, streamed,
        "400 MB/s: a file streams in size/400 µs"
    );
}

/// This thread's time on the CPU so far, in ns (Linux's `/proc/thread-self/schedstat`).
fn thread_cpu_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// `position` is optional on the wire: older clients' transfers parse, and a transfer
/// without one is sent exactly as before.
#[test]
fn a_transfer_position_is_optional_on_the_wire() -> Result<(), serde_json::Error> {
    let old = r#"{"key":"k","attempt":1,"file":"/f","size_bytes":1,"priority":1,"group":"g"}"#;
    let t: Transfer = serde_json::from_str(old)?;
    assert_eq!(t.position, None);
    assert!(!serde_json::to_string(&t)?.contains("position"));
    let with = read("k", 1, "V", 42);
    let back: Transfer = serde_json::from_str(&serde_json::to_string(&with)?)?;
    assert_eq!(back.position, Some(42));
    Ok(())
}

/// ftt_driver.py `FTTDriver.seek`: reading a file leaves the tape at the next one, so a run of
/// consecutive files streams without a locate; a gap costs the fixed part plus the distance,
/// and so does the wrap back to a lower position.
#[test]
fn consecutive_files_need_no_locate_and_a_gap_or_a_wrap_does() {
    let mut lib = Library::new(enstore(1));
    let mut ev = Vec::new();
    for (key, pos) in [("f3", 3), ("f4", 4), ("f5", 5), ("f9", 9)] {
        lib.submit(read(key, 1, "V1", pos), 0, &mut ev);
    }
    lib.submit(read("f1", 1, "V1", 1), 1_500, &mut ev);
    lib.advance(20_000, &mut ev);
    // f3: mount 100 + locate 10+2 (to byte 2,000) + 1,000; f4, f5: 1,000 each; f9: 10+3
    // (from byte 5,000 to 8,000) + 1,000; f1 (wraps back from byte 9,000 to 0): 10+9 + 1,000.
    assert_eq!(
        done(&ev),
        pairs(&[
            ("f3", 1_112),
            ("f4", 2_112),
            ("f5", 3_112),
            ("f9", 4_125),
            ("f1", 5_144),
        ])
    );
    assert_eq!(lib.stats().drives[0].locating, 12 + 13 + 19);
    assert_eq!(lib.stats().locates, 3);
}

/// Admin requests (priority 100 and up here): the drive that finishes a regular request on V1
/// leaves V1 at once (no dismount delay) for the admin request on V2 when no drive is idle,
/// and V1's next file waits for V2 to be done with; without admin requests V1 goes first.
#[test]
fn an_admin_request_takes_over_a_drive_done_with_a_regular_one_when_none_is_idle() {
    let submit_all = |lib: &mut Library, ev: &mut Vec<LibraryEvent>| {
        lib.submit(read("a", 1, "V1", 1), 0, ev);
        lib.submit(read("daq", 100, "V2", 1), 1, ev);
        lib.submit(read("c", 1, "V1", 2), 2, ev);
        lib.advance(20_000, ev);
    };
    let mut lib = Library::new(LibraryConfig {
        admin_from: Some(100),
        ..enstore(1)
    });
    let mut ev = Vec::new();
    submit_all(&mut lib, &mut ev);
    // a 100+0+1,000 = 1,100; daq: unmount V1 50, mount V2 100, no locate (file 1), 1,000 =
    // 2,250; c: only an admin request takes a bound drive away, so the drive keeps V2 for its
    // delay (1,000), unmounts (50), mounts V1 (100), locates from the start to file 2 (10+1),
    // 1,000: 4,411.
    assert_eq!(
        done(&ev),
        pairs(&[("a", 1_100), ("daq", 2_250), ("c", 4_411)])
    );
    let s = lib.stats();
    // V1, V2, V1 mounted; V1 left for daq, V2 and V1 each after their delay.
    assert_eq!((s.mounts, s.unmounts), (3, 3));
    // Without admin requests, the mounted volume first (the test above).
    let mut lib = Library::new(enstore(1));
    let mut ev = Vec::new();
    submit_all(&mut lib, &mut ev);
    assert_eq!(done(&ev)[1].0, "c");
}

/// A drive that leaves its volume for an admin request unloads it first: the volume is free
/// for the other drives only when that unmount ends (Enstore sees it at the mover until then).
/// Two drives, no dismount delay. a (V1, position 30, byte 29,000) on drive 0 ends at
/// 100+39+1,000 = 1,139; b (V2, position 1) on drive 1 at 1,100, which then unmounts V2 until
/// 1,150. daq (admin, V3) arrives at 1,120; at 1,139 no drive is empty, so drive 0 takes daq:
/// it unmounts V1 until 1,189, then mounts V3. Drive 1, empty at 1,150, mounts V1 for c only at
/// 1,189: done at 1,189+100+40+1,000 = 2,329 (recomputed for issue 38's locate).
#[test]
fn a_volume_left_for_an_admin_request_is_busy_until_unmounted() {
    let mut lib = Library::new(LibraryConfig {
        admin_from: Some(100),
        dismount_delay_micros: 0,
        ..enstore(2)
    });
    let mut ev = Vec::new();
    lib.submit(read("a", 1, "V1", 30), 0, &mut ev);
    lib.submit(read("b", 1, "V2", 1), 0, &mut ev);
    lib.submit(read("c", 1, "V1", 31), 1, &mut ev);
    lib.submit(read("daq", 100, "V3", 1), 1_120, &mut ev);
    lib.advance(10_000, &mut ev);
    let started = times(&ev, true);
    assert!(started.contains(&("c".to_string(), 1_189)), "{started:?}");
    assert!(
        done(&ev).contains(&("c".to_string(), 2_329)),
        "{:?}",
        done(&ev)
    );
}

/// An idle drive takes the admin request; the busy one keeps its volume.
#[test]
fn an_idle_drive_takes_an_admin_request_and_a_busy_one_keeps_its_volume() {
    let mut lib = Library::new(LibraryConfig {
        admin_from: Some(100),
        ..enstore(2)
    });
    let mut ev = Vec::new();
    lib.submit(read("a", 1, "V1", 1), 0, &mut ev);
    lib.submit(read("c", 1, "V1", 2), 0, &mut ev);
    lib.submit(read("daq", 100, "V2", 1), 1, &mut ev);
    lib.advance(2_500, &mut ev);
    // a 1,100 then c, the next file, 2,100 on drive 0; daq on drive 1 from 1: 1+100+0+1,000.
    assert_eq!(
        done(&ev),
        pairs(&[("a", 1_100), ("daq", 1_101), ("c", 2_100)])
    );
    // Two mounts; the one unmount is V2's, after its delay (2,101).
    let s = lib.stats();
    assert_eq!((s.mounts, s.unmounts), (2, 1), "drive 0 never left V1");
}

/// Priority changes made together through `priority_changes` give the same answers and the same
/// schedule as one `set_priority` call each: 2 drives, 60 reads on 6 volumes, aging on, and at
/// one instant 40 changes (running, unknown and repeated keys among them).
#[test]
fn priority_changes_together_schedule_as_one_call_each() {
    let mut cfg = enstore(2);
    cfg.aging = Some(Aging {
        every_micros: 3_000,
        delta_pri: 1,
    });
    let build = || {
        let mut lib = Library::new(cfg.clone());
        let mut ev = Vec::new();
        for i in 0..60u64 {
            let t = read(
                &format!("r{i}"),
                (i * 7 % 5) as i64,
                &format!("V{}", i % 6),
                i * 13 % 50,
            );
            lib.submit(t, i * 10, &mut ev);
        }
        (lib, ev)
    };
    let changes: Vec<(String, i64)> = (0..40u64)
        .map(|i| (format!("r{}", (i * 17) % 64), (i * 11 % 9) as i64 - 4))
        .collect();
    let at = 1_500;
    let (mut one, mut one_ev) = build();
    let answers_one: Vec<CancelOutcome> = changes
        .iter()
        .map(|(k, p)| one.set_priority(k, 1, *p, at, &mut one_ev))
        .collect();
    let (mut batch, mut batch_ev) = build();
    let mut changing = batch.priority_changes(at, &mut batch_ev);
    let answers_batch: Vec<CancelOutcome> = changes
        .iter()
        .map(|(k, p)| changing.set(k, 1, *p))
        .collect();
    drop(changing);
    assert_eq!(answers_one, answers_batch);
    assert!(
        answers_one.contains(&CancelOutcome::Unknown),
        "no unknown key"
    );
    assert!(
        answers_one
            .iter()
            .any(|a| matches!(a, CancelOutcome::TooLate(_))),
        "no running transfer"
    );
    one.advance(1_000_000, &mut one_ev);
    batch.advance(1_000_000, &mut batch_ev);
    assert_eq!(one_ev, batch_ev);
    assert_eq!(done(&one_ev).len(), 60);
}

/// A priority raised through `priority_changes` re-ranks its volume once the batch ends: with
/// the one drive busy on V0, V1's request raised above V2's is mounted next.
#[test]
fn a_priority_raised_in_a_batch_reorders_the_volumes() {
    let mut lib = Library::new(enstore(1));
    let mut ev = Vec::new();
    lib.submit(read("a", 0, "V0", 0), 0, &mut ev);
    lib.submit(read("b", 1, "V1", 0), 1, &mut ev);
    lib.submit(read("c", 5, "V2", 0), 2, &mut ev);
    let mut changing = lib.priority_changes(500, &mut ev);
    assert_eq!(changing.set("b", 1, 9), CancelOutcome::Cancelled);
    assert!(matches!(changing.set("a", 1, 9), CancelOutcome::TooLate(_)));
    drop(changing);
    lib.advance(1_000_000, &mut ev);
    let started: Vec<String> = times(&ev, true).into_iter().map(|(k, _)| k).collect();
    assert_eq!(started, ["a", "b", "c"]);
}

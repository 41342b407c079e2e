//! The simulator against cases worked by hand, its determinism, the share error windows and the
//! baselines.

use std::sync::Arc;

use mss_adapters::sim::library::{LibraryConfig, LocateCost, Model, TapeDrive};

use super::baseline::{Baseline, BaselineQueue};
use super::engine::{run, run_retrying, run_with, Arrival, Finished, Picker};
use super::report::{percentile, share_error};
use super::*;
use crate::domain::{Class, GroupId, PolicySettings, RetrySettings};
use crate::policy::order::Candidate;
use crate::tests::TestConfig;

const SEC: u64 = 1_000_000;
const GB: u64 = 1_000_000_000;

fn settings(policy_keys: &str, shares: &str, release: &str) -> Arc<PolicySettings> {
    TestConfig::new()
        .with(&format!(
            "[policy]\n{policy_keys}\nmax_wait_secs = 0\nreprioritise_secs = 0\n\
             [usage]\nmodel = \"none\"\n\
             [[priority_classes]]\naccess_mode = \"daq\"\nmss_priority = 100\n\
             [shares]\n{shares}\n[release]\n{release}\n"
        ))
        .settings()
        .policy
}

/// SAM pass-through over groups `a` and `b` of equal shares (and data taking, `daq`).
fn sam_pass_through() -> Arc<PolicySettings> {
    settings(
        "algorithm = \"sam\"",
        "a = 1\nb = 1",
        "mode = \"pass_through\"",
    )
}

/// The policy of a whole configuration text.
fn configured(toml: &str) -> Arc<PolicySettings> {
    TestConfig::new().with(toml).settings().policy
}

fn g(p: &PolicySettings, path: &str) -> GroupId {
    p.group_by_path(path).unwrap()
}

/// One drive, no mount, 1 GB/s: a 1 GB file takes exactly one second (a drive that costs
/// nothing but streaming, [`TapeDrive::instant`]).
fn one_drive(model: Model) -> LibraryConfig {
    LibraryConfig {
        model,
        drives: 1,
        mount_micros: 0,
        tape: TapeDrive::instant(),
        dismount_delay_micros: 0,
        bytes_per_sec: GB,
        ..LibraryConfig::default()
    }
}

fn arrival(at: u64, group: GroupId, volume: &str, position: u64) -> Arrival {
    Arrival {
        at,
        group,
        size_bytes: GB,
        volume: Some(volume.to_string()),
        position: Some(position),
        ..Arrival::default()
    }
}

/// A file of `gb` GB at position 1 of `volume`, arriving at `at` (microseconds).
fn sized(at: u64, group: GroupId, volume: &str, gb: u64) -> Arrival {
    Arrival {
        size_bytes: gb * GB,
        ..arrival(at, group, volume, 1)
    }
}

/// Two groups of equal share, 1 GB files, one drive at 1 GB/s, SAM held with one slot, usage
/// never forgotten; a1, a2, b1, b2 arrive at 0. By hand: at 0 both groups are back
/// ((0 + 1) / (0 + 1) = 1 is not under 1/2), so the oldest goes: a1. At 1 s a is back (2/2)
/// and b is back ((0 + 1) / (1 + 1) = 1/2 is not under 1/2): the oldest, a2. At 2 s b is front
/// (1/3 < 1/2): b1; at 3 s b2 alone. Done at 4 s; waits a 0 and 1 s, b 2 and 3 s.
#[test]
fn two_groups_one_drive_sam_held_is_worked_by_hand() {
    let p = settings(
        "algorithm = \"sam\"",
        "a = 1\nb = 1",
        "mode = \"held\"\nlimit = 1",
    );
    let (a, b) = (g(&p, "a"), g(&p, "b"));
    let load = vec![
        arrival(0, a, "V1", 1),
        arrival(0, a, "V1", 2),
        arrival(0, b, "V1", 3),
        arrival(0, b, "V1", 4),
    ];
    let o = run(&p, one_drive(Model::Priority), &load, u64::MAX);
    assert_eq!(
        o.start_times,
        vec![(0, a), (SEC, a), (2 * SEC, b), (3 * SEC, b)]
    );
    assert_eq!(o.makespan, 4 * SEC);
    assert_eq!(o.waits[a.0], vec![0, SEC]);
    assert_eq!(o.waits[b.0], vec![2 * SEC, 3 * SEC]);
    assert_eq!(o.unfinished, 0);
    let r = report::run_report(&p, "sam", "held", 4, &o, GB);
    let ga = r.groups.iter().find(|x| x.path == "a").unwrap();
    assert_eq!((ga.files, ga.bytes, ga.wait_max_s), (2, 2 * GB, 1.0));
    // Achieved over the saturated part: only a1 finished while both groups waited.
    assert_eq!(ga.achieved_share, Some(1.0));
    assert_eq!(r.makespan_s, 4.0);
    // Windows of 1 GB done while both groups wait: a1 finishes at 1 s with a2, b1 and b2
    // waiting: one window, all a (50 pp off for both); a2 finishes with only b waiting, b1 with
    // only b2: not saturated, no other window.
    assert_eq!(r.share_error_max_pp, Some(50.0));
    assert_eq!(r.share_error_mean_pp, Some(50.0));
    assert_eq!(r.priority_inversions, 0);
}

/// A fair-share read of volume V1 runs; meanwhile a data-taking request (priority 100) for V2
/// and another fair-share read of V1 arrive. Under the Enstore model the drive holding V1
/// takes V1's next request first (an inversion); under the priority model the data taking
/// goes next.
#[test]
fn a_mounted_volume_goes_before_a_higher_priority_volume_only_under_enstore() {
    let p = sam_pass_through();
    let (a, daq) = (g(&p, "a"), g(&p, "daq"));
    let load = vec![
        arrival(0, a, "V1", 1),
        arrival(SEC / 2, daq, "V2", 1),
        arrival(SEC / 2, a, "V1", 2),
    ];
    let enstore = run(&p, one_drive(Model::Enstore), &load, u64::MAX);
    assert_eq!(enstore.start_order, vec![a, a, daq]);
    assert_eq!(enstore.priority_inversions, 1);
    let priority = run(&p, one_drive(Model::Priority), &load, u64::MAX);
    assert_eq!(priority.start_order, vec![a, daq, a]);
    assert_eq!(priority.priority_inversions, 0);
    assert_eq!(priority.start_times, vec![(0, a), (SEC, daq), (2 * SEC, a)]);
}

/// The run report gives data taking's (the priority classes') p50 and p99 wait, in JSON and in
/// the table, and `-` for a trace without any. By hand, from the case above under Enstore: the
/// data-taking request arrives at 0.5 s and starts at 2 s (after V1's two reads): 1.5 s.
#[test]
fn the_report_gives_data_takings_wait() {
    let p = sam_pass_through();
    let (a, daq) = (g(&p, "a"), g(&p, "daq"));
    let load = vec![
        arrival(0, a, "V1", 1),
        arrival(SEC / 2, daq, "V2", 1),
        arrival(SEC / 2, a, "V1", 2),
    ];
    let o = run(&p, one_drive(Model::Enstore), &load, u64::MAX);
    let r = report::run_report(&p, "sam", "pass_through", 3, &o, GB);
    assert_eq!(r.priority_wait_p50_s, Some(1.5));
    assert_eq!(r.priority_wait_p99_s, Some(1.5));
    let table = report::table(&SimulationReport { runs: vec![r] });
    let cell = |t: &str, column: &str| {
        let mut lines = t.lines().map(|l| l.split_whitespace().collect::<Vec<_>>());
        let header = lines.next().unwrap_or_default();
        let at = header.iter().position(|h| *h == column).unwrap();
        lines.next().unwrap_or_default()[at].to_string()
    };
    assert_eq!(cell(&table, "prio_wait_p50_s"), "2");
    assert_eq!(cell(&table, "prio_wait_p99_s"), "2");
    let fair_only = run(&p, one_drive(Model::Enstore), &[load[0].clone()], u64::MAX);
    let r = report::run_report(&p, "sam", "pass_through", 1, &fair_only, GB);
    assert_eq!(r.priority_wait_p99_s, None);
    let table = report::table(&SimulationReport { runs: vec![r] });
    assert_eq!(cell(&table, "prio_wait_p99_s"), "-");
}

fn shipped() -> Arc<PolicySettings> {
    crate::config::Settings::parse(crate::config::SHIPPED, "embedded")
        .unwrap()
        .policy
}

fn small_trace(requests: u64) -> Vec<crate::trace::TraceRecord> {
    let params = crate::trace::GenParams {
        requests,
        ..Default::default()
    };
    let mut bytes = Vec::new();
    crate::trace::generate(&params, &mut bytes).unwrap();
    crate::trace::read_trace(bytes.as_slice()).unwrap()
}

#[test]
fn the_same_trace_and_seed_give_the_same_json() {
    let p = shipped();
    let load = arrivals(&p, &small_trace(1500)).unwrap();
    let spec = RunSpec {
        baseline: None,
        window_bytes: 100 * GB,
        retry: RetrySettings::default(),
    };
    let once = |lib: &LibraryConfig| {
        let r = simulate(&p, lib, &load, spec).unwrap();
        serde_json::to_string(&SimulationReport { runs: vec![r] }).unwrap()
    };
    let lib = library(4, 7);
    let first = once(&lib);
    assert_eq!(first, once(&lib));
    let v: serde_json::Value = serde_json::from_str(&first).unwrap();
    let files: u64 = v["runs"][0]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["files"].as_u64().unwrap())
        .sum();
    assert_eq!(files, load.len() as u64, "every request done");
}

#[test]
fn share_error_windows_on_a_hand_made_outcome() {
    let (a, b) = (GroupId(0), GroupId(1));
    let f = |group, bytes, saturated| Finished {
        at: 0,
        group,
        bytes,
        saturated,
        eligible: saturated,
    };
    let targets = [Some(0.5), Some(0.5), None];
    let done = [
        f(a, 6, true),
        f(b, 4, true),  // window 1: a 0.6, b 0.4: 10 pp each
        f(a, 5, false), // not saturated: left out
        f(b, 5, true),
        f(b, 5, true), // window 2: b alone: 50 pp each
        f(a, 3, true), // incomplete: dropped
    ];
    let e = share_error(&done, &targets, 10).unwrap();
    assert_eq!(e.windows, 2);
    assert!((e.max_pp - 50.0).abs() < 1e-9);
    assert!((e.mean_pp - 30.0).abs() < 1e-9);
    assert_eq!(share_error(&done[..1], &targets, 10), None);
}

#[test]
fn percentiles_are_nearest_rank() {
    let v: Vec<u64> = (1..=20).collect();
    assert_eq!(percentile(&v, 0.5), 10);
    assert_eq!(percentile(&v, 0.95), 19);
    assert_eq!(percentile(&[], 0.5), 0);
}

/// fifo: held, the oldest waiting request goes whatever its group; pass-through, every
/// fair-share request at one priority, so the priority model starts them in arrival order.
#[test]
fn fifo_releases_in_arrival_order() {
    for mode in ["held", "pass_through"] {
        let p = settings(
            "algorithm = \"sam\"",
            "a = 1\nb = 1",
            &format!("mode = \"{mode}\"\nlimit = 1"),
        );
        let (a, b) = (g(&p, "a"), g(&p, "b"));
        // Under SAM, b would go first once a has used the drive; fifo keeps arrival order.
        let groups = [a, a, a, b, b, a];
        let load: Vec<Arrival> = groups
            .iter()
            .enumerate()
            .map(|(i, &grp)| arrival(i as u64, grp, "V1", i as u64))
            .collect();
        let o = run_with(
            &p,
            one_drive(Model::Priority),
            &load,
            u64::MAX,
            Picker::Baseline(Baseline::Fifo),
        );
        assert_eq!(o.start_order, groups.to_vec(), "{mode}");
    }
}

fn cand(id: i64, group: GroupId) -> Candidate {
    Candidate {
        id,
        group,
        library: String::new(),
        created_ms: 0,
        size_bytes: GB,
        benefit: GB,
        qos: crate::policy::multifactor::Qos::Normal,
        user: 1.0,
        queue: 0.0,
        slots: 1,
        passed: 0,
    }
}

/// weighted_random: groups drawn in proportion to their shares among those waiting (3:1 here:
/// 75 % within a stated 3 points over 4,000 picks), only waiting groups, oldest first within a
/// group, and the same seed the same picks.
#[test]
fn weighted_random_picks_groups_by_share_among_the_waiting() {
    let (a, b) = (GroupId(0), GroupId(1));
    let share = |g: GroupId| if g == a { 0.75 } else { 0.25 };
    let fill = |seed| {
        let mut q = BaselineQueue::new(seed);
        for i in 0..10_000 {
            q.push(cand(2 * i, a));
            q.push(cand(2 * i + 1, b));
        }
        q
    };
    let picks = |seed| {
        let mut q = fill(seed);
        (0..4000)
            .map(|_| q.pick(Baseline::WeightedRandom, 1, share).unwrap())
            .collect::<Vec<_>>()
    };
    let first = picks(3);
    let to_a = first.iter().filter(|c| c.group == a).count() as f64 / 4000.0;
    assert!((to_a - 0.75).abs() < 0.03, "a got {to_a}");
    let a_ids: Vec<i64> = first
        .iter()
        .filter(|c| c.group == a)
        .map(|c| c.id)
        .collect();
    assert!(
        a_ids.windows(2).all(|w| w[0] < w[1]),
        "oldest first in a group"
    );
    assert_eq!(first, picks(3));
    let mut only_b = BaselineQueue::new(1);
    only_b.push(cand(1, b));
    only_b.push(cand(2, b));
    assert_eq!(
        only_b
            .pick(Baseline::WeightedRandom, 1, share)
            .map(|c| c.id),
        Some(1)
    );
    assert_eq!(
        only_b.pick(Baseline::WeightedRandom, 0, share),
        None,
        "no room"
    );
    assert_eq!(only_b.len(), 1);
}

#[test]
fn weighted_random_needs_held_mode() {
    let p = sam_pass_through();
    let spec = RunSpec {
        baseline: Some(Baseline::WeightedRandom),
        window_bytes: GB,
        retry: RetrySettings::default(),
    };
    let e = simulate(&p, &library(1, 1), &[], spec).unwrap_err();
    assert!(e.to_string().contains("--mode held"), "{e}");
}

/// Duplicate reads coalesce as in `serve`: held mode, one slot, one drive at 1 GB/s. a1 (file
/// F) is released at 0; b1 (F, another group) arrives at 0.5 s and rides on it: no transfer
/// of its own, done with a1 at 1 s, its wait 0 (a1 had started). a2 (file G) is queued at 0
/// behind a1's slot; b2 (G) at 0.5 s rides on the queued a2 and waits with it until a2 starts
/// at 1 s. Two transfers, four files done, 2 GB to each group.
#[test]
fn duplicate_reads_ride_on_one_transfer_worked_by_hand() {
    let p = settings(
        "algorithm = \"sam\"",
        "a = 1\nb = 1",
        "mode = \"held\"\nlimit = 1\ncoalesce = \"queued\"",
    );
    let (a, b) = (g(&p, "a"), g(&p, "b"));
    let read = |at, group, pos, file| Arrival {
        file: Some(file),
        ..arrival(at, group, "V1", pos)
    };
    let load = vec![
        read(0, a, 1, 7),
        read(0, a, 2, 8),
        read(SEC / 2, b, 1, 7),
        read(SEC / 2, b, 2, 8),
    ];
    let o = run(&p, one_drive(Model::Priority), &load, u64::MAX);
    assert_eq!(o.coalesced, 2);
    assert_eq!(o.start_times, vec![(0, a), (SEC, a)], "two transfers");
    assert_eq!((o.files[a.0], o.files[b.0]), (2, 2));
    assert_eq!(
        (o.bytes[a.0], o.bytes[b.0]),
        (2 * GB as u128, 2 * GB as u128)
    );
    assert_eq!(o.waits[b.0], vec![0, SEC / 2]);
    assert_eq!(o.makespan, 2 * SEC);
    assert_eq!(o.unfinished, 0);
    // Without the file names, four transfers.
    let apart: Vec<Arrival> = load
        .iter()
        .map(|x| Arrival {
            file: None,
            ..x.clone()
        })
        .collect();
    let o = run(&p, one_drive(Model::Priority), &apart, u64::MAX);
    assert_eq!(
        (o.coalesced, o.start_times.len(), o.makespan),
        (0, 4, 4 * SEC)
    );
    // `coalesce = "in_flight"` (the default): b2 does not ride on the queued a2.
    let p = settings(
        "algorithm = \"sam\"",
        "a = 1\nb = 1",
        "mode = \"held\"\nlimit = 1",
    );
    let o = run(&p, one_drive(Model::Priority), &load, u64::MAX);
    assert_eq!(
        (o.coalesced, o.start_times.len(), o.makespan),
        (1, 3, 3 * SEC)
    );
}

/// A priority-class read beside a fair-share carrier carries the file for the reads after it,
/// as the writer's `Carriers` keeps every read that may carry (`ledger/tests/coalesce.rs`,
/// `a_priority_read_beside_a_fair_share_carrier_carries_for_later_ones`). Held mode, one
/// slot, one drive at 1 GB/s, file F throughout: a1 goes at 0 (0 to 1 s); d1 (daq) at 0.25 s
/// may not ride on the fair-share a1, so it is sent on its own and starts when the drive frees
/// (1 to 2 s); d2 (daq) at 0.5 s rides on d1; a2 at 1.5 s, a1 gone, rides on d1 too (a
/// fair-share read may ride on a priority-class one). Two transfers, four files done at 2 s.
#[test]
fn a_priority_read_beside_a_fair_share_carrier_carries_for_later_ones() {
    let p = settings(
        "algorithm = \"sam\"",
        "a = 1\nb = 1",
        "mode = \"held\"\nlimit = 1",
    );
    let (a, daq) = (g(&p, "a"), g(&p, "daq"));
    let read = |at, group| Arrival {
        file: Some(7),
        ..arrival(at, group, "V1", 1)
    };
    let load = vec![
        read(0, a),
        read(SEC / 4, daq),
        read(SEC / 2, daq),
        read(3 * SEC / 2, a),
    ];
    let o = run(&p, one_drive(Model::Priority), &load, u64::MAX);
    assert_eq!(o.start_times, vec![(0, a), (SEC, daq)], "two transfers");
    assert_eq!(o.coalesced, 2);
    assert_eq!((o.files[a.0], o.files[daq.0]), (2, 2));
    assert_eq!(o.waits[daq.0], vec![3 * SEC / 4, SEC / 2]);
    assert_eq!(o.waits[a.0], vec![0, 0]);
    assert_eq!((o.makespan, o.unfinished), (2 * SEC, 0));
}

/// Multifactor pass-through re-places a request whose group's Fair Tree rank moved, though its
/// own priority would hold for hours on the wait alone. One drive at 1 GB/s, busy with b's
/// 1,000 GB until 1,000 s; shares a = b. At 10 s a1 (1 GB) arrives with a the most
/// under-served: fair share 1 (10,000), normal QoS (1,000), size 0.01 (5), user (1,000):
/// 12,005 of 14,500 on the band 10..20 -> 18. The first pass (60 s) changes nothing. At 70 s
/// a2 (2,000 GB) is charged, so b is now the under-served one; at 80 s b1 (1 GB) arrives at
/// 18. The pass at 120 s moves a1 to a fair share of 1/2: 7,005 -> 15. So when the drive
/// frees, b1 (18) goes before a1 (15, earlier) and a2 (15); without the re-placement a1
/// would have kept 18 and gone first by arrival.
#[test]
fn multifactor_pass_through_re_places_a_request_whose_group_rank_moved() {
    let p = configured(
        "[policy]\nalgorithm = \"multifactor\"\nband_low = 10\nband_high = 20\n\
         max_wait_secs = 0\nreprioritise_secs = 60\n\
         [usage]\nmodel = \"half_life\"\nhalf_life_secs = 604800\n\
         [shares]\na = 1\nb = 1\n[release]\nmode = \"pass_through\"\n",
    );
    let (a, b) = (g(&p, "a"), g(&p, "b"));
    let sized = |at: u64, group, volume: &str, gb: u64| sized(at * SEC, group, volume, gb);
    let load = vec![
        sized(0, b, "B0", 1_000),
        sized(10, a, "A1", 1),
        sized(70, a, "A2", 2_000),
        sized(80, b, "B1", 1),
    ];
    let out = run(&p, one_drive(Model::Priority), &load, u64::MAX);
    assert_eq!(out.start_order, vec![b, b, a, a]);
    let starts: Vec<u64> = out.start_times.iter().map(|&(at, _)| at / SEC).collect();
    assert_eq!(starts, vec![0, 1_000, 1_001, 1_002]);
}

/// Ticks every 10 s: a request done by 1 s, then four arrive at 15 s. The tick of 10 s fell in
/// the idle gap and is skipped; run late, it set the clock back to 10 s with the new arrivals'
/// charges already booked and moved r2 from front to back, so r4 went before it.
#[test]
fn a_tick_in_an_idle_gap_is_skipped_not_run_late() {
    let p = configured(
        "[policy]\nalgorithm = \"sam\"\nmax_wait_secs = 0\nreprioritise_secs = 10\n\
         [usage]\nmodel = \"none\"\n\
         [shares]\na = 1\nb = 1\n[release]\nmode = \"pass_through\"\n",
    );
    let (a, b) = (g(&p, "a"), g(&p, "b"));
    let load = vec![
        sized(0, a, "X", 1),
        sized(15 * SEC, b, "R1", 4),
        sized(15 * SEC, a, "R2", 1),
        sized(15 * SEC, a, "R3", 20),
        sized(15 * SEC, b, "R4", 1),
    ];
    let o = run(&p, one_drive(Model::Priority), &load, u64::MAX);
    assert_eq!(o.start_times[..2], [(0, a), (15 * SEC, b)]);
    assert_eq!(o.start_times[2], (19 * SEC, a), "r2 (front) starts next");
}

/// A charge is re-dated when its transfer ends, as `serve`'s writer does (`settle.rs`,
/// `finalize`). SAM held, one slot, one drive at 1 GB/s; usage kept in windows of 10 s, only
/// the current one counted. a1 (10 GB), a2 and b1 (1 GB each) arrive at 0, in that order. a1
/// goes first (every group back, the oldest) and is charged at 0, in window 0. It ends at
/// 10 s, window 1: its 10 GB are taken back from window 0 and charged to window 1. So at 10 s
/// a has 10 GB: b1 is front ((0 + 1) / (10 + 1) < 1/2), a2 back, and b1 goes. Charged at the
/// decision only, window 1 would be empty at 10 s, both back, and the older a2 would go.
#[test]
fn a_charge_is_re_dated_when_its_transfer_ends() {
    let p = configured(
        "[policy]\nalgorithm = \"sam\"\nmax_wait_secs = 0\nreprioritise_secs = 0\n\
         [usage]\nmodel = \"windows\"\ninterval_secs = 10\ndepth = 1\ndecay = 1\n\
         [shares]\na = 1\nb = 1\n[release]\nmode = \"held\"\nlimit = 1\n",
    );
    let (a, b) = (g(&p, "a"), g(&p, "b"));
    let load = vec![
        sized(0, a, "A1", 10),
        sized(0, a, "A2", 1),
        sized(0, b, "B1", 1),
    ];
    let o = run(&p, one_drive(Model::Priority), &load, u64::MAX);
    assert_eq!(
        o.start_times,
        vec![(0, a), (10 * SEC, b), (11 * SEC, a)],
        "b1 before a2: a1's charge moved to the window it ended in"
    );
}

/// Held mode re-prioritises what waits at the library, as `serve`'s dispatcher does in every
/// mode but a `volumes` batch (`ledger/live.rs`, `reprioritise`). SAM held with 4 slots, usage
/// never forgotten, passes every second; one drive at 1 GB/s, busy with a0 (10 GB) until 10 s.
/// a1 (1 GB) is released at 1 s back ((10 + 1) / (10 + 1)), b1 (1 GB) at 2 s front
/// (1 / 12), b2 (30 GB) at 3 s back (31 / 42). The pass at 4 s places a1 front (11 / 42 < 1/2)
/// and b1 back (31 / 42), so a1 starts at 10 s, then b1 and b2 by arrival. Without the pass
/// b1 (front) would start first, then a1.
#[test]
fn held_mode_re_prioritises_what_waits_at_the_library() {
    let p = configured(
        "[policy]\nalgorithm = \"sam\"\nmax_wait_secs = 0\nreprioritise_secs = 1\n\
         [usage]\nmodel = \"none\"\n\
         [shares]\na = 1\nb = 1\n[release]\nmode = \"held\"\nlimit = 4\n",
    );
    let (a, b) = (g(&p, "a"), g(&p, "b"));
    let load = vec![
        sized(0, a, "A0", 10),
        sized(SEC, a, "A1", 1),
        sized(2 * SEC, b, "B1", 1),
        sized(3 * SEC, b, "B2", 30),
    ];
    let o = run(&p, one_drive(Model::Priority), &load, u64::MAX);
    assert_eq!(
        o.start_times,
        vec![(0, a), (10 * SEC, a), (11 * SEC, b), (12 * SEC, b)]
    );
}

/// The starvation bound of a re-prioritisation pass counts whole milliseconds, as `place` (and
/// so `serve`'s pass) does: `now_ms - created_ms >= max_wait_ms`, `created_ms` the arrival
/// floored to the millisecond. SAM, max wait 3 s, passes every second; one drive busy with a0
/// (3.5 GB) until 3.5 s. a1 (1 GB) arrives at 500 µs (created_ms 0) at a's back priority, b1 at
/// 1 s front. At the 3 s pass a1 has waited 3,000 ms: starved, it starts first at 3.5 s. (Found
/// by a review: compared in microseconds, 500 µs after the bound, a1 stayed back a pass longer
/// and b1 went first, in both modes.)
#[test]
fn the_starvation_bound_counts_milliseconds_as_place_does() {
    for mode in ["held", "pass_through"] {
        let p = configured(&format!(
            "[policy]\nalgorithm = \"sam\"\nmax_wait_secs = 3\nreprioritise_secs = 1\n\
             [usage]\nmodel = \"none\"\n\
             [shares]\na = 1\nb = 1\n[release]\nmode = \"{mode}\"\nlimit = 4\n"
        ));
        let (a, b) = (g(&p, "a"), g(&p, "b"));
        let a0 = Arrival {
            size_bytes: 3 * GB + GB / 2,
            ..sized(0, a, "A0", 1)
        };
        let load = vec![a0, sized(500, a, "A1", 1), sized(SEC, b, "B1", 1)];
        let o = run(&p, one_drive(Model::Priority), &load, u64::MAX);
        assert_eq!(
            o.start_times,
            vec![(0, a), (3 * SEC + SEC / 2, a), (4 * SEC + SEC / 2, b)],
            "{mode}"
        );
    }
}

/// A rider is settled with its carrier's bytes at its own access mode's weight, as `serve`
/// settles it (its own benefit of the bytes done). SAM held, one slot, usage never forgotten,
/// `weighted_bytes`; one drive at 1 GB/s. a1 (1 GB of file F) starts at 0; b1 reads F at 0.5 s
/// as a 2 GB file at weight 3 (benefit 6 GB) and rides on a1. At 1 s a1 is done with 1 GB: b1
/// is charged 1 GB x 3 = 3 GB. Then b2 (0.6 s) and a2 (0.7 s), 1 GB each, wait for the slot: a2
/// is front ((1 + 1) / (4 + 1) < 1/2), b2 back, so a2 goes first. Charged 1 GB (the bytes at
/// weight 1), b would be even with a and both back: the older b2 would go first.
#[test]
fn a_rider_is_settled_at_its_own_weight() {
    let p = configured(
        "[policy]\nalgorithm = \"sam\"\nbenefit = \"weighted_bytes\"\nmax_wait_secs = 0\n\
         reprioritise_secs = 0\n[usage]\nmodel = \"none\"\n\
         [shares]\na = 1\nb = 1\n[release]\nmode = \"held\"\nlimit = 1\n",
    );
    let (a, b) = (g(&p, "a"), g(&p, "b"));
    let f = |x: Arrival| Arrival { file: Some(7), ..x };
    let b1 = Arrival {
        benefit: Some(6 * GB),
        ..f(sized(SEC / 2, b, "V1", 2))
    };
    let load = vec![
        f(sized(0, a, "V1", 1)),
        b1,
        sized(SEC * 6 / 10, b, "V2", 1),
        sized(SEC * 7 / 10, a, "V3", 1),
    ];
    let o = run(&p, one_drive(Model::Priority), &load, u64::MAX);
    assert_eq!(o.coalesced, 1);
    assert_eq!(o.start_times, vec![(0, a), (SEC, a), (2 * SEC, b)]);
    // The same with a0 (3 GB, another volume) read first, so a has 4 GB when a1 ends at 4 s
    // (b1 arrives at 3.5 s, b2 at 3.6 s, a2 at 3.7 s). With b1 at 3 GB both are back
    // ((4 + 1) / (4 + 3 + 1) and (3 + 1) / 8 are not under 1/2): the older b2 goes. Left at
    // its 6 GB estimate (never settled), b1 would put a2 front (5 / 11) and first.
    let later = |x: Arrival| Arrival {
        at: x.at + 3 * SEC,
        ..x
    };
    let mut load: Vec<Arrival> = load.into_iter().map(later).collect();
    load[0].at = 0;
    load.insert(0, sized(0, a, "V0", 3));
    let o = run(&p, one_drive(Model::Priority), &load, u64::MAX);
    assert_eq!(o.coalesced, 1);
    let starts = [(0, a), (3 * SEC, a), (4 * SEC, b), (5 * SEC, a)];
    assert_eq!(o.start_times, starts);
}

/// Where the drive's time went, worked by hand under the Enstore model: one drive at 1 GB/s,
/// 10 s loads and unloads, 5 s locates (no rewind, robot or per-file time), a 20 s dismount
/// delay. a1 (V1 position 1), a2 (V1 position 5) and a3 (V2 position 1), 1 GB each, arrive at
/// 0. V1 mounts (0-10 s), a1, the first file at the start of tape, streams without a locate
/// (to 11 s), a2 locates and streams (to 17 s); the drive waits out its dismount delay while
/// a3 waits for V2 (idle with work, 17-37 s), unmounts (to 47 s), mounts V2 (to 57 s), a3
/// streams (to 58 s): the makespan, up to which the drive's time is counted. Recomputed by
/// hand for issue 38's drive model (file 1 needs no locate after a mount; the time after the
/// makespan is no longer counted), and the parts add up to the makespan.
#[test]
fn the_drive_time_is_reported_by_what_the_drive_did() {
    let p = sam_pass_through();
    let a = g(&p, "a");
    let lib = LibraryConfig {
        tape: TapeDrive {
            load: 10 * SEC,
            unload: 10 * SEC,
            locate: LocateCost {
                base: 5 * SEC,
                ..LocateCost::ZERO
            },
            ..TapeDrive::instant()
        },
        dismount_delay_micros: 20 * SEC,
        ..one_drive(Model::Enstore)
    };
    let load = vec![
        arrival(0, a, "V1", 1),
        arrival(0, a, "V1", 5),
        arrival(0, a, "V2", 1),
    ];
    let o = run(&p, lib, &load, u64::MAX);
    let r = report::run_report(&p, "sam", "pass_through", 3, &o, GB);
    let t = r.drive_time_s;
    assert_eq!(
        (t.stream, t.mount, t.locate, t.unmount, t.per_file),
        (3.0, 20.0, 5.0, 10.0, 0.0)
    );
    assert_eq!((t.idle_with_work, t.idle), (20.0, 0.0));
    assert_eq!(r.locates, 1);
    assert_eq!(r.drive_efficiency, Some(3.0 / 58.0));
    assert_eq!(r.drive_efficiency_working, Some(3.0 / 38.0));
    assert_eq!(o.makespan, 58 * SEC);
    assert_eq!(
        t.total(),
        r.makespan_s,
        "one drive: the parts add up to the makespan"
    );
}

/// [`one_drive`] failing every attempt.
fn failing(model: Model) -> LibraryConfig {
    LibraryConfig {
        failure_rate: 1.0,
        ..one_drive(model)
    }
}

/// `load` to the end on [`failing`]`(model)`, with `attempts` attempts of [`retrying`].
fn run_failing(p: &PolicySettings, model: Model, load: &[Arrival], attempts: u32) -> RunRecord {
    run_retrying(
        p,
        failing(model),
        load,
        u64::MAX,
        Picker::Policy,
        retrying(attempts),
    )
}

/// Retries of 1 s doubling, at most `attempts` attempts in all.
fn retrying(attempts: u32) -> RetrySettings {
    RetrySettings {
        max_attempts: attempts,
        base: std::time::Duration::from_secs(1),
        max: std::time::Duration::from_secs(10),
    }
}

/// A failed attempt goes back for its backoff keeping its slot, as `serve`'s writer keeps it
/// `accepted` (`ledger/writer/settle.rs`, `failed`), and the last attempt's failure is final.
/// SAM held with one slot, two attempts, every transfer failing; one drive at 1 GB/s, no mount.
/// By hand: a1 starts at 0 and fails at 1 s; its slot stays taken through the 1 s backoff, so
/// b1 waits; a1's second attempt runs from 2 s to 3 s and fails for good, which frees the slot:
/// b1 starts at 3 s, fails at 4 s, runs again from 5 s to 6 s. One start each (a retry's start
/// is no new one), two retries, two final failures, 4 s of streaming, nothing done.
#[test]
fn a_failed_attempt_keeps_its_slot_through_its_backoff_and_the_last_is_final() {
    let p = settings(
        "algorithm = \"sam\"",
        "a = 1\nb = 1",
        "mode = \"held\"\nlimit = 1",
    );
    let (a, b) = (g(&p, "a"), g(&p, "b"));
    let load = vec![sized(0, a, "A1", 1), sized(0, b, "B1", 1)];
    let o = run_failing(&p, Model::Priority, &load, 2);
    assert_eq!(o.start_times, vec![(0, a), (3 * SEC, b)]);
    assert_eq!((o.retried, o.failed, o.unfinished), (2, 2, 0));
    assert_eq!(o.library.total().streaming, 4 * SEC);
    assert_eq!(o.files.iter().sum::<u64>(), 0);
}

/// A retry is sent after the backoff of the attempt that failed: 1 s after the first failure,
/// 2 s after the second. SAM pass-through, a1 (1 GB) failing at every attempt on one drive at
/// 1 GB/s (Enstore model, no mount, locate or dismount delay), three attempts: 0–1 s, 2–3 s,
/// 5–6 s, so 3 s of streaming and 3 s idle with nothing to do (1–2 s and 3–5 s); a constant
/// delay would give 2 s idle. With one attempt, the first failure is final.
#[test]
fn a_retry_waits_out_the_backoff_of_the_attempt_that_failed() {
    let p = sam_pass_through();
    let load = vec![sized(0, g(&p, "a"), "A1", 1)];
    let model = Model::Enstore;
    let run = |attempts| {
        let o = run_failing(&p, model, &load, attempts);
        let t = o.library.total();
        (o.retried, o.failed, t.streaming, t.idle_without_work)
    };
    assert_eq!(run(3), (2, 1, 3 * SEC, 3 * SEC));
    assert_eq!(run(1), (0, 1, SEC, 0));
}

/// A retry waiting at the library is re-prioritised as its own attempt, as `serve`'s pass
/// names the row's attempt. SAM pass-through, passes every second, usage never forgotten, one
/// drive at 1 GB/s, every attempt failing, two attempts. By hand: a1 (5 GB) is placed back
/// ((0 + 5) / (0 + 5)) and runs 0–5 s; b1 (10 GB, at 0.5 s) is placed back (10 / 15) and waits.
/// a1 fails at 5 s, b1 runs 5–15 s; a1's second attempt comes back at 6 s at back and waits;
/// the pass at 7 s finds a front (5 / 15 < 1/2): one change, taken by the library only when
/// it names attempt 2. Nothing else changes (b stays back, and a1 is running by the next one).
#[test]
fn a_retry_waiting_at_the_library_is_re_prioritised_as_its_own_attempt() {
    let p = configured(
        "[policy]\nalgorithm = \"sam\"\nmax_wait_secs = 0\nreprioritise_secs = 1\n\
         [usage]\nmodel = \"none\"\n\
         [shares]\na = 1\nb = 1\n[release]\nmode = \"pass_through\"\n",
    );
    let (a, b) = (g(&p, "a"), g(&p, "b"));
    let load = vec![sized(0, a, "A1", 5), sized(SEC / 2, b, "B1", 10)];
    let o = run_failing(&p, Model::Priority, &load, 2);
    assert_eq!((o.retried, o.failed), (2, 2));
    assert_eq!(o.priority_changes, 1);
}

/// A failed attempt keeps its charge through its backoff (`serve` keeps the row `accepted` and
/// charged). SAM pass-through, usage never forgotten, one drive at 1 GB/s, every attempt
/// failing. a1 (2 GB) is charged at 0 and fails at 2 s; b1 (1 GB) arrives at 2.5 s. With a
/// second attempt to come, a's 2 GB still count: b is under its share (1 / 3), front. With one
/// attempt, a1 was refunded at 2 s: b is at its share (1 / 1), back.
#[test]
fn a_failed_attempt_keeps_its_charge_through_its_backoff() {
    let p = sam_pass_through();
    let (a, b) = (g(&p, "a"), g(&p, "b"));
    let load = vec![sized(0, a, "A1", 2), sized(5 * SEC / 2, b, "B1", 1)];
    let model = Model::Priority;
    let b1 = |attempts| {
        let o = run_failing(&p, model, &load, attempts);
        o.decisions[1].class
    };
    assert_eq!(b1(2), Some(Class::Front));
    assert_eq!(b1(1), Some(Class::Back));
}

/// In `volumes` mode a volume whose request waits out a backoff stays in flight
/// (`policy/volumes.rs`: a retried request stays in flight), so `max_volumes = 1` keeps the
/// next volume back until the last attempt ends. a1 (volume A) is released at 0 and fails at
/// 1 s and, again, at 3 s; only then is B released: b1 starts at 3 s, not at 1 s.
#[test]
fn a_retried_request_keeps_its_volume_in_flight() {
    let p = configured(
        "[policy]\nalgorithm = \"sam\"\nmax_wait_secs = 0\nreprioritise_secs = 0\n\
         [usage]\nmodel = \"none\"\n[shares]\na = 1\nb = 1\n\
         [release]\nmode = \"volumes\"\n\
         [release.volumes]\nmin_volume_files = 1\nmax_volumes = 1\nsticky_secs = 0\n",
    );
    let (a, b) = (g(&p, "a"), g(&p, "b"));
    let load = vec![sized(0, a, "A", 1), sized(0, b, "B", 1)];
    let o = run_failing(&p, Model::Priority, &load, 2);
    assert_eq!(o.start_times, vec![(0, a), (3 * SEC, b)]);
    assert_eq!((o.retried, o.failed), (2, 2));
}

/// A read riding on a carrier that waits out a backoff waits for the carrier's next start, and
/// fails with it when that attempt is the last. One drive at 1 GB/s, every attempt failing,
/// two attempts: a1 (file f) runs 0–1 s and 2–3 s; b's read of f arrives at 1.5 s and rides on
/// it: its wait ends at 2 s (0.5 s), and it fails at 3 s with a1.
#[test]
fn a_rider_of_a_retried_carrier_waits_for_its_next_start_and_fails_with_it() {
    let p = sam_pass_through();
    let (a, b) = (g(&p, "a"), g(&p, "b"));
    let read = |at, group| Arrival {
        file: Some(7),
        ..sized(at, group, "A1", 1)
    };
    let load = vec![read(0, a), read(3 * SEC / 2, b)];
    let o = run_failing(&p, Model::Priority, &load, 2);
    assert_eq!(o.coalesced, 1);
    assert_eq!(o.waits[b.0], vec![SEC / 2]);
    assert_eq!((o.retried, o.failed, o.unfinished), (1, 2, 0));
}

/// A priority-class retry waits again from its resend to its start, as `serve` counts a
/// priority-class request `submitted`; during its backoff it is not waiting. Enstore model,
/// one drive at 1 GB/s, no mount, every attempt failing, two attempts. d1 (data taking, V2)
/// runs 0–1 s and comes back at 2 s; a1 (V1, 2 GB, at 0) runs 1–3 s (d1 in its backoff: no
/// inversion); a2 (V1, at 1.5 s) starts at 3 s on the mounted V1 while d1 waits: one
/// inversion. d1 then runs 4–5 s.
#[test]
fn a_priority_class_retry_waits_again_once_sent() {
    let p = sam_pass_through();
    let (a, daq) = (g(&p, "a"), g(&p, "daq"));
    let load = vec![
        arrival(0, daq, "V2", 1),
        sized(0, a, "V1", 2),
        arrival(3 * SEC / 2, a, "V1", 2),
    ];
    let o = run_failing(&p, Model::Enstore, &load, 2);
    assert_eq!(o.start_times, vec![(0, daq), (SEC, a), (3 * SEC, a)]);
    assert_eq!(o.priority_inversions, 1);
}

/// The table gains `retried` and `failed` columns when a run had failures, and is unchanged
/// otherwise. One request failing both of its two attempts: one retry, one failure.
#[test]
fn the_table_shows_retries_and_failures_only_when_there_were_some() {
    let p = sam_pass_through();
    let load = vec![sized(0, g(&p, "a"), "A1", 1)];
    let table = |rate| {
        let lib = LibraryConfig {
            failure_rate: rate,
            ..one_drive(Model::Priority)
        };
        let o = run_retrying(&p, lib, &load, u64::MAX, Picker::Policy, retrying(2));
        let r = report::run_report(&p, "sam", "pass_through", 1, &o, GB);
        report::table(&SimulationReport { runs: vec![r] })
    };
    let failing = table(1.0);
    let lines: Vec<Vec<&str>> = (failing.lines().take(2))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines[0][lines[0].len() - 2..], ["retried", "failed"]);
    assert_eq!(lines[1][lines[1].len() - 2..], ["1", "1"]);
    let plain = table(0.0);
    let header = plain.lines().next().unwrap_or_default();
    assert!(!header.contains("retried"), "{header}");
    assert!(
        header.ends_with("idle%"),
        "the drive-time shares last: {header}"
    );
}

/// Nothing is lost to failures: on a generated trace whose reads repeat files (so riders
/// coalesce on carriers that fail and are retried), with a third of all attempts failing, every
/// request of every release mode ends exactly once, done or failed for good; retries, final
/// failures and riders all occur.
#[test]
fn with_failures_every_request_ends_once_in_every_mode() {
    use crate::config::{Settings, SHIPPED};
    use crate::trace::{generate, read_trace, GenParams};
    let mut params = GenParams {
        seed: 3,
        requests: 3000,
        rate_per_s: 0.5,
        ..Default::default()
    };
    params.volumes.count = 40;
    params.volumes.files_per_volume = 30;
    params.data_taking.rate_per_s = 0.01;
    let mut bytes = Vec::new();
    generate(&params, &mut bytes).expect("valid parameters");
    let records = read_trace(bytes.as_slice()).expect("a trace");
    for mode in ["pass_through", "held", "volumes"] {
        let text = SHIPPED.replacen("mode = \"pass_through\"", &format!("mode = \"{mode}\""), 1);
        let s = Settings::parse(&text, "failures").expect("valid configuration");
        let load = arrivals(&s.policy, &records).expect("classified");
        let lib = LibraryConfig {
            failure_rate: 0.3,
            ..library(4, 1)
        };
        let o = run_retrying(&s.policy, lib, &load, u64::MAX, Picker::Policy, s.mss.retry);
        let done: u64 = o.files.iter().sum();
        assert_eq!(o.unfinished, 0, "{mode}");
        assert_eq!(done + o.failed, load.len() as u64, "{mode}: each ends once");
        assert!(
            o.retried > 0 && o.failed > 0 && o.coalesced > 0,
            "{mode}: retried {}, failed {}, coalesced {}",
            o.retried,
            o.failed,
            o.coalesced
        );
        // 0.3^5 of the transfers fail all five attempts: about 0.24 %.
        assert!(
            o.failed * 100 < load.len() as u64,
            "{mode}: {} failed",
            o.failed
        );
    }
}

/// Issue 37, item 7: a trace line without `volume` or `position` is simulated as `serve` has a
/// request without them. The broker's volume queue puts such requests on their group's
/// pseudo-volume, always eligible: in `volumes` mode they are released at once, where the same
/// requests on a named volume wait for it to become eligible (here `quiet_secs`). The library
/// is given each file's name, from which it derives a volume of the file's own and a position,
/// as it does for such a transfer from `serve`: two files without a volume, two mounts; on one
/// named volume, one.
#[test]
fn a_trace_line_without_volume_or_position_is_a_request_without_them() {
    let p = configured(
        "[policy]\nalgorithm = \"sam\"\nmax_wait_secs = 0\nreprioritise_secs = 0\n\
         [usage]\nmodel = \"none\"\n[shares]\na = 1\nb = 1\n\
         [release]\nmode = \"volumes\"\n\
         [release.volumes]\nmin_volume_files = 1000\nmin_volume_bytes = 1000000000000000\n\
         quiet_secs = 3600\nmax_age_secs = 86400\nmax_volumes = 4\nsticky_secs = 0\n",
    );
    let a = g(&p, "a");
    let trace = |named: &str| {
        let line = |crid: &str, file: &str| {
            format!(
                r#"{{"t":0,"client_request_id":"{crid}","station":"s","user":"u","file":"{file}",{named}"size_bytes":1000000000,"access_mode":"a","physics_group":"p"}}"#
            )
        };
        let text = [line("r1", "/pnfs/x/1.dat"), line("r2", "/pnfs/y/2.dat")].join("\n");
        crate::trace::read_trace(text.as_bytes()).unwrap()
    };
    let lib = LibraryConfig {
        tape: TapeDrive {
            load: 10 * SEC,
            ..TapeDrive::instant()
        },
        ..one_drive(Model::Enstore)
    };
    let bare = arrivals(&p, &trace("")).unwrap();
    assert_eq!((bare[0].volume.as_deref(), bare[0].position), (None, None));
    let o = run(&p, lib.clone(), &bare, u64::MAX);
    assert_eq!(o.unfinished, 0);
    assert!(o.waits[a.0].iter().all(|&w| w < 60 * SEC), "{:?}", o.waits);
    assert_eq!(
        o.library.total().mounting,
        20 * SEC,
        "a volume of each file's own"
    );

    let named = arrivals(&p, &trace(r#""volume":"V1","#)).unwrap();
    assert_eq!(
        (named[0].volume.as_deref(), named[0].position),
        (Some("V1"), None)
    );
    let o = run(&p, lib, &named, u64::MAX);
    assert!(
        o.waits[a.0].iter().all(|&w| w >= 3600 * SEC),
        "{:?}",
        o.waits
    );
    assert_eq!(
        o.library.total().mounting,
        10 * SEC,
        "one volume, one mount"
    );
}

/// A trace's `offset_bytes` places its files (issue 38): the same five 10 GB reads of one LTO-9
/// volume, with the same file sequence numbers 1..5, cost locates by their byte offsets. Back
/// to back (each starts where the one before ends) they need no locate after the mount; spread
/// 4 TB apart they cost the model's locate from each file's end to the next one's start, and
/// nothing else: without the offsets the two traces would be the same load.
#[test]
fn a_traces_byte_offsets_place_its_files_and_cost_their_locates() {
    let p = sam_pass_through();
    let size = 10 * GB;
    let trace = |offset: &dyn Fn(u64) -> u64| {
        let text: Vec<String> = (0..5u64)
            .map(|i| {
                format!(
                    r#"{{"t":0,"client_request_id":"r{i}","station":"s","user":"u","file":"/pnfs/v/{i}.dat","volume":"V1","position":{},"offset_bytes":{},"size_bytes":{size},"access_mode":"a","physics_group":"p"}}"#,
                    i + 1,
                    offset(i)
                )
            })
            .collect();
        crate::trace::read_trace(text.join("\n").as_bytes()).unwrap()
    };
    let (rate, tape) = mss_adapters::sim::library::DriveKind::Lto9.profile();
    let lib = LibraryConfig {
        model: Model::Enstore,
        drives: 1,
        tape,
        bytes_per_sec: rate,
        ..LibraryConfig::default()
    };
    let locate = |records: &[crate::trace::TraceRecord]| {
        let load = arrivals(&p, records).unwrap();
        let o = run(&p, lib.clone(), &load, u64::MAX);
        assert_eq!(o.unfinished, 0);
        (o.library.total().locating, o.library.locates)
    };
    let close = |i: u64| i * size;
    let far = |i: u64| i * 4_000_000_000_000;
    let (near_time, _) = locate(&trace(&close));
    let (far_time, far_locates) = locate(&trace(&far));
    assert_eq!(near_time, 0, "back to back: the head is at each next file");
    // The model's own cost of each move, read in offset order from the start of the tape.
    let by_hand: u64 = (0..5u64)
        .map(|i| {
            let from = if i == 0 { 0 } else { far(i - 1) + size };
            tape.locate_micros(from, far(i))
        })
        .sum();
    assert_eq!(far_time, by_hand);
    assert_eq!(far_locates, 4);
    assert!(far_time > near_time);
    // Without its offsets the far trace is the same load as the close one: the files by their
    // sequence numbers, each next one where the head stops.
    let mut bare = trace(&far);
    bare.iter_mut().for_each(|r| r.offset_bytes = None);
    assert_eq!(locate(&bare).0, near_time);
}

mod cancel;
mod reprioritise;
mod reserve;
mod ride;
mod tape_goals;
mod volumes_goals;

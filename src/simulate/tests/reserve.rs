//! The drive reservation for data taking (`policy::reserve`, issue 39) in virtual time: worked
//! by hand on two drives, and data taking's p99 wait on a generated trace.

use mss_adapters::sim::library::{LibraryConfig, Micros, Model, TapeDrive};

use super::super::engine::{run, Arrival, RunRecord};
use super::super::{arrivals, library, simulate, RunSpec};
use crate::domain::{GroupId, PolicySettings};
use crate::tests::TestConfig;

const SEC: u64 = 1_000_000;
const GB: u64 = 1_000_000_000;

/// Fair Tree over `a` and `b`, data taking `daq` (priority 100), `mode` with two slots, volumes
/// eligible at once, 100 GB batches, 60 s stickiness, and `[release.reserve]` as given.
fn policy(mode: &str, reserve: &str) -> std::sync::Arc<PolicySettings> {
    TestConfig::new()
        .with(&format!(
            "[policy]\nalgorithm = \"fair_tree\"\nmax_wait_secs = 0\nreprioritise_secs = 0\n\
             [usage]\nmodel = \"none\"\n\
             [[priority_classes]]\naccess_mode = \"daq\"\nmss_priority = 100\n\
             [shares]\na = 1\nb = 1\n\
             [release]\nmode = \"{mode}\"\nlimit = 2\n\
             [release.volumes]\nmin_volume_bytes = 1\nquiet_secs = 0\nmax_age_secs = 100000\n\
             batch_max_bytes = 100000000000\nsticky_secs = 60\nmax_volumes = 2\n\
             [release.reserve]\n{reserve}\n"
        ))
        .settings()
        .policy
}

/// Two drives that cost nothing but streaming, 1 GB/s, no dismount delay.
fn two_drives() -> LibraryConfig {
    LibraryConfig {
        model: Model::Enstore,
        drives: 2,
        mount_micros: 0,
        tape: TapeDrive::instant(),
        dismount_delay_micros: 0,
        bytes_per_sec: GB,
        ..LibraryConfig::default()
    }
}

fn file(at: u64, group: GroupId, volume: &str, position: u64, gb: u64) -> Arrival {
    Arrival {
        at,
        group,
        size_bytes: gb * GB,
        volume: Some(volume.to_string()),
        position: Some(position),
        ..Arrival::default()
    }
}

/// Data taking writes 1 GB at 0 s and again at 305 s (on DT1); group `a` reads 150 files of
/// 10 GB on V1 and 50 of 7 GB on V3, every one arriving at 0 s: 1,500 s and 350 s of reading
/// (V1 stays the fuller volume until after 906 s).
fn load(p: &PolicySettings, with_data_taking: bool) -> Vec<Arrival> {
    let g = |path| p.group_by_path(path).expect("group");
    let (a, daq) = (g("a"), g("daq"));
    let mut load = Vec::new();
    if with_data_taking {
        load.push(file(0, daq, "DT1", 1, 1));
    }
    // Interleaved, so the held queue (oldest first) sends both volumes at once.
    for k in 1..=150 {
        load.push(file(0, a, "V1", k, 10));
        if k <= 50 {
            load.push(file(0, a, "V3", k, 7));
        }
    }
    if with_data_taking {
        load.push(file(305 * SEC, daq, "DT1", 2, 1));
    }
    load
}

/// When V3's first batch (14 files of 7 GB: 98 GB, where V1's are 100 GB) went.
fn v3_first_batch(o: &RunRecord) -> Micros {
    (o.batches.iter())
        .find(|b| b.bytes == 98 * GB)
        .expect("a batch of V3")
        .at
}

fn data_taking_waits(p: &PolicySettings, o: &RunRecord) -> Vec<Micros> {
    o.waits[p.group_by_path("daq").expect("daq").0].clone()
}

/// Volumes mode, worked by hand. Without a reservation both drives take a fair-share volume at
/// 0 s (V1 and V3, each kept busy by its sticky batches), so the write arriving at 305 s waits
/// for a drive to come off its volume. With `drives = 1` fair share keeps to one drive while
/// data taking was seen within the 600 s window (last seen when the 305 s write ended at
/// 306 s): the write starts at once on the free drive, and V3 is mounted on the second drive
/// when the window lapses, at 906 s exactly.
#[test]
fn a_priority_request_arriving_while_every_drive_is_busy_starts_on_the_reserved_drive() {
    let off = policy("volumes", "drives = 0");
    let o = run(&off, two_drives(), &load(&off, true), u64::MAX);
    assert_eq!(v3_first_batch(&o), 0, "both drives read fair share at once");
    let waits = data_taking_waits(&off, &o);
    assert_eq!(waits[0], 0);
    assert!(waits[1] > 0, "the write waits for a batch: {waits:?}");

    let on = policy("volumes", "drives = 1\nwindow_secs = 600");
    let o = run(&on, two_drives(), &load(&on, true), u64::MAX);
    assert_eq!(data_taking_waits(&on, &o), vec![0, 0]);
    assert_eq!(
        v3_first_batch(&o),
        906 * SEC,
        "the window's end, not before"
    );
    assert_eq!(o.unfinished, 0);
}

/// Without priority demand the reservation holds nothing back: the same fair-share load with
/// `drives = 1` mounts V3 at 0 s beside V1.
#[test]
fn no_drive_is_reserved_without_priority_demand() {
    let on = policy("volumes", "drives = 1\nwindow_secs = 600");
    let o = run(&on, two_drives(), &load(&on, false), u64::MAX);
    assert_eq!(v3_first_batch(&o), 0);
}

/// Held mode: with a slot reserved the 305 s write starts at once; without, it waits for a
/// fair-share read to end (each 10 or 7 s).
#[test]
fn held_mode_keeps_the_reserved_slot_free() {
    let off = policy("held", "drives = 0");
    let o = run(&off, two_drives(), &load(&off, true), u64::MAX);
    assert!(data_taking_waits(&off, &o)[1] > 0);
    let on = policy("held", "drives = 1\nwindow_secs = 600");
    let o = run(&on, two_drives(), &load(&on, true), u64::MAX);
    assert_eq!(data_taking_waits(&on, &o), vec![0, 0]);
    assert_eq!(o.unfinished, 0);
}

/// Data taking's p99 wait on a generated trace (seed 11: 3,000 recalls at 0.1/s over 600
/// volumes, Zipf s = 1, half in campaigns, one 4 GB data-taking write every 500 s; the shipped
/// share tree and its skewed demand, Fair Tree), the Enstore model with 2 LTO-9 drives and the
/// broker filling both (`limit` and `max_volumes` 2): with a drive reserved (`drives = 1`, the
/// shipped 600 s window) data taking waits at most 300 s at the 99th percentile in `held` and
/// in `volumes` mode; without, the volumes mode's waits for a batch to end put it over.
#[test]
fn with_a_drive_reserved_data_taking_waits_at_most_300_s_at_the_99th_percentile() {
    use crate::config::{Settings, SHIPPED};
    use crate::trace::{generate, read_trace, GenParams};
    let mut params = GenParams {
        seed: 11,
        requests: 3000,
        rate_per_s: 0.1,
        ..Default::default()
    };
    params.volumes.count = 600;
    params.volumes.zipf_s = 1.0;
    params.campaigns.fraction = 0.5;
    params.data_taking.rate_per_s = 0.002;
    let mut bytes = Vec::new();
    generate(&params, &mut bytes).expect("valid parameters");
    let records = read_trace(bytes.as_slice()).expect("a trace");
    let p99 = |mode: &str, reserved: u32| {
        let text = SHIPPED
            .replacen("algorithm = \"sam\"", "algorithm = \"fair_tree\"", 1)
            .replacen("mode = \"pass_through\"", &format!("mode = \"{mode}\""), 1)
            .replacen("\nlimit = 8\n", "\nlimit = 2\n", 1)
            .replacen("\nmax_volumes = 8\n", "\nmax_volumes = 2\n", 1)
            .replacen("\ndrives = 0\n", &format!("\ndrives = {reserved}\n"), 1);
        let s = Settings::parse(&text, "reserve").expect("valid configuration");
        assert_eq!(s.policy.order.release.reserve.drives, reserved);
        let load = arrivals(&s.policy, &records).expect("classified");
        let spec = RunSpec {
            baseline: None,
            window_bytes: 10_000_000_000_000,
            retry: crate::domain::RetrySettings::default(),
        };
        let r = simulate(&s.policy, &library(2, 1), &load, spec).expect("simulated");
        assert_eq!(r.groups.iter().map(|g| g.files).sum::<u64>(), r.requests);
        r.priority_wait_p99_s.expect("data taking in the trace")
    };
    for mode in ["held", "volumes"] {
        let wait = p99(mode, 1);
        assert!(wait <= 300.0, "{mode}: data taking's p99 wait {wait} s");
    }
    let unreserved = p99("volumes", 0);
    assert!(
        unreserved > 300.0,
        "the trace needs the reservation: volumes without it waits {unreserved} s"
    );
}

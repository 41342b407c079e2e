//! Issue 39's `volumes` mode measures: the share error over eligible demand, and (with
//! `ride_lead_bytes`) riding with a repaid lead, worked on small loads in virtual time.

use mss_adapters::sim::library::{LibraryConfig, Model, TapeDrive};

use super::super::engine::{run, Arrival};
use super::super::report::run_report;
use crate::domain::{GroupId, PolicySettings};
use crate::tests::TestConfig;

const GB: u64 = 1_000_000_000;

/// Fair Tree over `a` and `b` of equal shares in the volumes mode: a volume is eligible with
/// `min_files` requests queued, or when its oldest has waited 1,000 s; one volume at a time.
fn policy(min_files: u32) -> std::sync::Arc<PolicySettings> {
    TestConfig::new()
        .with(&format!(
            "[policy]\nalgorithm = \"fair_tree\"\nmax_wait_secs = 0\nreprioritise_secs = 0\n\
             [usage]\nmodel = \"none\"\n[shares]\na = 1\nb = 1\n\
             [release]\nmode = \"volumes\"\n\
             [release.volumes]\nmin_volume_files = {min_files}\nquiet_secs = 0\n\
             max_age_secs = 1000\nmax_volumes = 1\nsticky_secs = 0\n"
        ))
        .settings()
        .policy
}

/// One drive that costs nothing but streaming, 1 GB/s.
fn one_drive() -> LibraryConfig {
    LibraryConfig {
        model: Model::Priority,
        drives: 1,
        mount_micros: 0,
        tape: TapeDrive::instant(),
        dismount_delay_micros: 0,
        bytes_per_sec: GB,
        ..LibraryConfig::default()
    }
}

fn file(group: GroupId, volume: &str, position: u64) -> Arrival {
    Arrival {
        at: 0,
        group,
        size_bytes: GB,
        volume: Some(volume.to_string()),
        position: Some(position),
        ..Arrival::default()
    }
}

/// b's 20 files on its volume and a's one on another, all at 0. While b's are read (20 s) a
/// waits, so today's figure counts every window (b alone: 50 pp); but a's volume, one file under
/// `min_volume_files` = 3, is not eligible before 1,000 s: the policy could not have chosen a,
/// and over eligible demand no window counts. With `min_volume_files` = 1 a's volume is
/// eligible at once and both figures count the same windows.
#[test]
fn a_group_waiting_only_on_volumes_not_yet_eligible_is_not_counted_as_saturated() {
    let figures = |min_files: u32| {
        let p = policy(min_files);
        let (a, b) = (
            p.group_by_path("a").expect("a"),
            p.group_by_path("b").expect("b"),
        );
        let mut load: Vec<Arrival> = (1..=20).map(|pos| file(b, "VB", pos)).collect();
        load.push(file(a, "VA", 1));
        let o = run(&p, one_drive(), &load, u64::MAX);
        assert_eq!(o.unfinished, 0);
        let r = run_report(&p, "fair_tree", "volumes", load.len() as u64, &o, 5 * GB);
        (r.share_error_max_pp, r.share_error_eligible_max_pp)
    };
    let (today, eligible) = figures(3);
    let today = today.expect("saturated windows while a waits");
    assert!(today > 49.9, "b alone in every window: {today}");
    assert_eq!(eligible, None, "no window of eligible demand");
    let (today, eligible) = figures(1);
    assert!(today.is_some());
    assert_eq!(today, eligible);
}

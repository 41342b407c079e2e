//! Issue 39's goals, measured in virtual time on generated traces the size of a suite run:
//! 6 drives (the Enstore model, LTO-9), 10 TB share windows, SAM and Fair Tree, one trace where
//! every group reads every tape and one where each reads mostly its own (`own_fraction` 0.9).
//! The traces are the issue's (docs/volumes.md, "Issue 39's goals") scaled down: seed 7,
//! `SCALE` of its 80,000 recalls at the same 0.3/s over `SCALE` of its 3,000 volumes (the
//! same requests per volume), half in campaigns, data taking at 0.006/s. The configuration is
//! the shipped one with `limit` and `max_volumes` at the 6 drives (`ride_lead_bytes` unset and
//! `remainder_bytes` 50 GB, as shipped). The full-size runs are the documented `simulate --compare`
//! commands; their figures are in docs/volumes.md.

use super::super::*;
use crate::config::{Settings, SHIPPED};
use crate::trace::{generate, read_trace, GenParams};

const TB: u64 = 1_000_000_000_000;

/// The fraction of the issue's trace generated here.
const SCALE: f64 = 0.2;

/// The issue's trace, scaled (`own`: each group reads its own tapes 9 times in 10).
fn trace(own: bool) -> Vec<TraceRecord> {
    let mut params = GenParams {
        seed: 7,
        requests: (80_000.0 * SCALE) as u64,
        rate_per_s: 0.3,
        ..Default::default()
    };
    params.volumes.count = (3000.0 * SCALE) as u64;
    params.volumes.zipf_s = 1.0;
    if own {
        params.volumes.own_fraction = 0.9;
    }
    params.campaigns.fraction = 0.5;
    params.data_taking.rate_per_s = 0.006;
    let mut bytes = Vec::new();
    generate(&params, &mut bytes).expect("valid parameters");
    read_trace(bytes.as_slice()).expect("a trace")
}

/// The shipped configuration under `algorithm` in `mode`, the slots at the 6 drives.
fn policy(algorithm: &str, mode: &str) -> std::sync::Arc<PolicySettings> {
    let text = SHIPPED
        .replacen(
            "algorithm = \"sam\"",
            &format!("algorithm = \"{algorithm}\""),
            1,
        )
        .replacen("mode = \"pass_through\"", &format!("mode = \"{mode}\""), 1)
        .replacen("\nmax_volumes = 8\n", "\nmax_volumes = 6\n", 1)
        .replacen("\nlimit = 8\n", "\nlimit = 6\n", 1);
    let s = Settings::parse(&text, "goals").expect("valid configuration");
    let o = &s.policy.order;
    assert_eq!(
        (o.algorithm.name(), o.release.mode.name()),
        (algorithm, mode)
    );
    assert_eq!(o.release.volumes.max_volumes, 6);
    assert_eq!(o.release.volumes.ride_lead_bytes, None, "the shipped rule");
    s.policy
}

/// One trace under one policy: each mode's report.
struct Modes {
    held: RunReport,
    volumes: RunReport,
    pass_through: RunReport,
}

fn modes(records: &[TraceRecord], algorithm: &str) -> Modes {
    let spec = RunSpec {
        baseline: None,
        window_bytes: 10 * TB,
        retry: RetrySettings::default(),
    };
    let [held, volumes, pass_through] = ["held", "volumes", "pass_through"].map(|mode| {
        let p = policy(algorithm, mode);
        let load = arrivals(&p, records).expect("classified");
        simulate(&p, &library(6, 1), &load, spec).expect("simulated")
    });
    Modes {
        held,
        volumes,
        pass_through,
    }
}

/// Every run, made once for the tests of this module: (trace, policy) -> its modes.
fn runs() -> &'static Vec<((&'static str, &'static str), Modes)> {
    static RUNS: std::sync::OnceLock<Vec<((&'static str, &'static str), Modes)>> =
        std::sync::OnceLock::new();
    RUNS.get_or_init(|| {
        let mut out = Vec::new();
        for (name, own) in [("shared", false), ("own", true)] {
            let records = trace(own);
            for algorithm in ["sam", "fair_tree"] {
                out.push(((name, algorithm), modes(&records, algorithm)));
            }
        }
        out
    })
}

fn mounts(r: &RunReport) -> f64 {
    r.mounts_per_tb.expect("bytes done")
}

fn eff(r: &RunReport) -> f64 {
    r.drive_efficiency.expect("drives busy")
}

/// The figures of one trace and policy, for the failure messages.
fn figures(m: &Modes) -> String {
    [&m.held, &m.volumes, &m.pass_through]
        .iter()
        .map(|r| {
            format!(
                "{}: dt p99 {:?} share {:?}/{:?} mounts/TB {:.1} makespan {:.0} eff {:.3}",
                r.mode,
                r.priority_wait_p99_s,
                r.share_error_max_pp,
                r.share_error_eligible_max_pp,
                mounts(r),
                r.makespan_s,
                eff(r)
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Met on both traces under both policies: data taking's p99 wait at most 300 s in `held` and
/// `volumes`; `volumes` at most a third of `held`'s mounts per TB, within 2 pp of every share
/// per 10 TB window over eligible demand (the figure the goals use: docs/volumes.md), and a
/// drive efficiency at least 0.85 times `pass_through`'s; every request done. Against
/// `pass_through`: mounts per TB at most 1.5 times on shared tapes and no more on own tapes,
/// a makespan at most 1.15 times, under Fair Tree on both traces and under SAM except where
/// `volumes_stays_within_its_measured_distance_of_the_missed_goals` says. No tolerance beyond
/// the goals' own figures.
#[test]
fn issue_39_goals_met_on_shared_and_own_tapes() {
    for ((trace, algorithm), m) in runs() {
        let at = format!("{trace}/{algorithm}: {}", figures(m));
        for r in [&m.held, &m.volumes] {
            let p99 = r.priority_wait_p99_s.expect("data taking");
            assert!(p99 <= 300.0, "{at}: {} data taking p99 {p99}", r.mode);
        }
        assert!(mounts(&m.volumes) <= mounts(&m.held) / 3.0, "{at}");
        for r in [&m.held, &m.volumes, &m.pass_through] {
            let done: u64 = r.groups.iter().map(|g| g.files).sum();
            assert_eq!(done, r.requests, "{at}: {} left requests", r.mode);
        }
        let (v, p) = (&m.volumes, &m.pass_through);
        let err = v.share_error_eligible_max_pp.expect("windows");
        assert!(err <= 2.0, "{at}: share error {err}");
        assert!(eff(v) >= 0.85 * eff(p), "{at}");
        let sam = *algorithm == "sam";
        if *trace == "shared" {
            assert!(mounts(v) <= 1.5 * mounts(p), "{at}");
        } else if !sam {
            assert!(mounts(v) <= mounts(p), "{at}");
        }
        if !(sam && *trace == "shared") {
            assert!(v.makespan_s <= 1.15 * p.makespan_s, "{at}");
        }
    }
}

/// The goals these traces miss, as a bound on how far: `volumes` against `pass_through` no
/// worse than measured (2026-11-30, the shipped defaults, remainders on, SAM's tied groups
/// keeping a mounted volume) by more than 5 %, so a change that moves `volumes` further from a
/// goal fails here, and one that reaches it does not. Only SAM misses any at this size: a
/// makespan of 1.18 times on shared tapes (goal 1.15) and 1.11 times the mounts on own tapes
/// (goal 1.0). docs/volumes.md, "Remainders" and "Ties under SAM", gives the full-size figures
/// and why SAM's `pass_through` is the harder mark.
#[test]
fn volumes_stays_within_its_measured_distance_of_the_missed_goals() {
    for ((trace, algorithm), m) in runs() {
        let at = format!("{trace}/{algorithm}: {}", figures(m));
        let (v, p) = (&m.volumes, &m.pass_through);
        let mount_ratio = mounts(v) / mounts(p);
        let makespan_ratio = v.makespan_s / p.makespan_s;
        let eff_ratio = eff(v) / eff(p);
        eprintln!("{at}\n  volumes/pass_through: mounts x{mount_ratio:.2} makespan x{makespan_ratio:.2} eff x{eff_ratio:.2}");
        if *algorithm != "sam" {
            continue;
        }
        if *trace == "own" {
            // Goal: mounts at most pass_through's (measured 1.11; 1.14 before SAM's ties).
            assert!(mount_ratio <= 1.16, "{at}");
        } else {
            // Goal: a makespan at most 1.15 times pass_through's (measured 1.18; 1.21 before).
            assert!(makespan_ratio <= 1.24, "{at}");
        }
    }
}

/// Bounded waits: on a trace the 6 drives keep up with (the same generator at 0.04 recalls/s,
/// 6,000 of them over 400 volumes, data taking at 0.0008/s: the makespan ends within a day of
/// the last arrival), no fair-share request waits longer than `max_age_secs` plus one batch
/// time (`volumes_goals::batch_secs`: a batch of `batch_max_bytes` in files of the trace's mean
/// size, each at the published average locate, after the longest unmount and a mount), under
/// SAM and Fair Tree, with the shipped starvation bound (7 days).
#[test]
fn on_a_library_that_keeps_up_no_fair_share_request_waits_past_max_age_and_a_batch() {
    let mut params = GenParams {
        seed: 7,
        requests: 6000,
        rate_per_s: 0.04,
        ..Default::default()
    };
    params.volumes.count = 400;
    params.volumes.zipf_s = 1.0;
    params.campaigns.fraction = 0.5;
    params.data_taking.rate_per_s = 0.0008;
    let mut bytes = Vec::new();
    generate(&params, &mut bytes).expect("valid parameters");
    let records = read_trace(bytes.as_slice()).expect("a trace");
    let last = records.iter().map(|r| r.t).fold(0.0, f64::max);
    let mean = records.iter().map(|r| r.size_bytes as f64).sum::<f64>() / records.len() as f64;
    let spec = RunSpec {
        baseline: None,
        window_bytes: 10 * TB,
        retry: RetrySettings::default(),
    };
    let lib = library(6, 1);
    for algorithm in ["sam", "fair_tree"] {
        let p = policy(algorithm, "volumes");
        assert_eq!(p.order.max_wait_ms, Some(604_800_000), "the shipped bound");
        let load = arrivals(&p, &records).expect("classified");
        let r = simulate(&p, &lib, &load, spec).expect("simulated");
        assert!(r.makespan_s <= last + 86_400.0, "{algorithm}: overloaded");
        let s = &p.order.release.volumes;
        let bound = s.max_age_ms as f64 / 1000.0
            + super::volumes_goals::batch_secs(&lib, s.batch_max_bytes, mean);
        assert!(
            r.fair_wait_max_s <= bound,
            "{algorithm}: longest wait {} s over {bound} s",
            r.fair_wait_max_s
        );
    }
}

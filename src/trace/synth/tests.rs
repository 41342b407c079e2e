use std::collections::HashMap;

use proptest::prelude::*;

use super::*;
use crate::trace::Direction;
use crate::trace::{read_trace, write_record, TraceRecord};

fn run(params: &GenParams) -> (Vec<u8>, Summary) {
    let mut out = Vec::new();
    let summary = generate(params, &mut out).expect("generates");
    (out, summary)
}

/// The mix the tolerance test checks: 200k recalls, bursts short enough that the mean rate
/// settles: the index of dispersion of an on/off process's counts is
/// 1 + 2 (l_on - l_off)^2 r_on r_off / ((r_on + r_off)^3 l), here about 3.3, so the measured
/// rate's relative standard deviation is sqrt(3.3 / 200k), 0.4 %, a fifth of the tolerance.
fn mix_params() -> GenParams {
    GenParams {
        seed: 42,
        requests: 200_000,
        rate_per_s: 5.0,
        burst: BurstParams {
            ratio: 4.0,
            mean_on_s: 0.5,
            mean_off_s: 2.0,
        },
        data_taking: DataTakingParams {
            rate_per_s: 0.5,
            ..DataTakingParams::default()
        },
        ..GenParams::default()
    }
}

#[test]
fn the_same_seed_gives_the_same_bytes_and_another_seed_others() {
    let params = GenParams {
        requests: 3_000,
        ..GenParams::default()
    };
    let (a, sa) = run(&params);
    let (b, sb) = run(&params);
    assert_eq!(a, b);
    assert_eq!(sa, sb);
    let (c, _) = run(&GenParams { seed: 2, ..params });
    assert_ne!(a, c);
}

#[test]
fn the_documented_mix_is_reproduced_within_its_tolerances() {
    let params = mix_params();
    let (out, summary) = run(&params);
    let records = read_trace(out.as_slice()).expect("every record reads back, t non-decreasing");
    assert_eq!(records.len() as u64, summary.records);
    let (recalls, writes): (Vec<&TraceRecord>, Vec<&TraceRecord>) = records
        .iter()
        .partition(|r| r.direction == crate::trace::Direction::Read);
    assert_eq!(recalls.len() as u64, params.requests);
    let duration = records.last().expect("records").t;

    // Each group's fraction of recalls within ±1 pp of its weight's share.
    let total_weight: f64 = params.groups.iter().map(|g| g.weight).sum();
    let mut per_group: HashMap<String, u64> = HashMap::new();
    for r in &recalls {
        *per_group
            .entry(format!("{}/{}", r.access_mode, r.physics_group))
            .or_default() += 1;
    }
    for g in &params.groups {
        let got = per_group.get(&g.path()).copied().unwrap_or(0) as f64 / recalls.len() as f64;
        let want = g.weight / total_weight;
        assert!((got - want).abs() <= 0.01, "{}: {got} vs {want}", g.path());
        assert_eq!(
            summary.per_group.get(&g.path()).copied(),
            per_group.get(&g.path()).copied()
        );
    }

    // Mean arrival rate of recalls within ±2 %.
    let rate = recalls.len() as f64 / recalls.last().expect("recalls").t;
    assert!(
        (rate / params.rate_per_s - 1.0).abs() <= 0.02,
        "rate {rate}"
    );

    // Median recall size within ±5 % of median_bytes.
    let mut sizes: Vec<u64> = recalls.iter().map(|r| r.size_bytes).collect();
    sizes.sort_unstable();
    let median = sizes[sizes.len() / 2] as f64;
    assert!(
        (median / params.sizes.median_bytes - 1.0).abs() <= 0.05,
        "median {median}"
    );
    assert!(sizes[0] >= params.sizes.min_bytes);
    assert!(sizes[sizes.len() - 1] <= params.sizes.max_bytes);

    // Campaign fraction within ±2 pp.
    assert!((summary.campaign_share - params.campaigns.fraction).abs() <= 0.02);
    assert_eq!(
        summary.campaign_requests + summary.scattered,
        summary.recalls
    );

    // Data-taking rate within ±2 %, all writes of the configured access mode.
    let dt_rate = writes.len() as f64 / duration;
    assert!(
        (dt_rate / params.data_taking.rate_per_s - 1.0).abs() <= 0.02,
        "{dt_rate}"
    );
    assert!(writes
        .iter()
        .all(|w| w.access_mode == params.data_taking.access_mode));
    assert_eq!(writes.len() as u64, summary.data_taking);
}

#[test]
fn the_most_popular_volume_takes_its_zipf_share_of_scattered_recalls() {
    // Scattered recalls only (no campaigns), so every volume is picked by Zipf.
    let params = GenParams {
        requests: 100_000,
        campaigns: CampaignParams {
            fraction: 0.0,
            ..CampaignParams::default()
        },
        data_taking: DataTakingParams {
            rate_per_s: 0.0,
            ..DataTakingParams::default()
        },
        ..GenParams::default()
    };
    let (out, summary) = run(&params);
    assert_eq!(summary.campaign_requests, 0);
    let records = read_trace(out.as_slice()).expect("reads");
    let top = format!("{}000000", params.volumes.label_prefix);
    let on_top = |r: &&TraceRecord| r.volume.as_deref() == Some(top.as_str());
    let share = records.iter().filter(on_top).count() as f64 / records.len() as f64;
    // Analytic: 1 / H(n, s); with n = 2000, s = 1 about 0.1219. The sampling standard
    // deviation is about 0.1 pp; the tolerance is ±5 % of the value (0.6 pp).
    let v = &params.volumes;
    let harmonic: f64 = (1..=v.count).map(|k| (k as f64).powf(-v.zipf_s)).sum();
    let want = 1.0 / harmonic;
    assert!((share / want - 1.0).abs() <= 0.05, "{share} vs {want}");
    // Positions uniform over the volume's files.
    let position = |r: &TraceRecord| r.position.expect("a generated position") as f64;
    let mean_pos = records.iter().map(position).sum::<f64>() / records.len() as f64;
    let want_pos = (v.files_per_volume as f64 + 1.0) / 2.0;
    assert!((mean_pos / want_pos - 1.0).abs() <= 0.02, "{mean_pos}");
}

/// The index of a recall's volume (`<prefix><index>`).
fn volume_index(r: &TraceRecord, prefix: &str) -> u64 {
    r.volume
        .as_deref()
        .and_then(|v| v.strip_prefix(prefix))
        .and_then(|i| i.parse().ok())
        .expect("a generated label")
}

#[test]
fn with_own_fraction_one_every_recall_reads_its_groups_own_volumes() {
    let mut params = GenParams {
        requests: 20_000,
        ..GenParams::default()
    };
    params.volumes.own_fraction = 1.0;
    params.data_taking.rate_per_s = 0.0;
    let (out, summary) = run(&params);
    assert!(summary.campaign_requests > 1_000 && summary.scattered > 1_000);
    let records = read_trace(out.as_slice()).expect("reads");
    let n = params.groups.len() as u64;
    let prefix = &params.volumes.label_prefix;
    let mut top = vec![0u64; n as usize];
    let mut recalls = vec![0u64; n as usize];
    for r in &records {
        let gi = params
            .groups
            .iter()
            .position(|g| g.physics_group == r.physics_group && g.access_mode == r.access_mode)
            .expect("a generated group") as u64;
        let v = volume_index(r, prefix);
        assert_eq!(v % n, gi, "{} read {:?}", r.physics_group, r.volume);
        recalls[gi as usize] += 1;
        top[gi as usize] += u64::from(v == gi);
    }
    // Scattered recalls pick among the group's own volumes by Zipf: its most popular one (its
    // lowest index) takes about 1 / H(333) = 15 % of them (half the recalls; campaigns pick
    // uniformly), far above a uniform pick's 0.3 %.
    for gi in 0..n as usize {
        let share = top[gi] as f64 / recalls[gi] as f64;
        assert!(share > 0.03, "group {gi}: {share}");
    }
}

#[test]
fn own_fraction_splits_scattered_recalls_between_own_and_any_volumes() {
    // Scattered only: a recall is on its group's own volumes with probability f, else on any
    // volume by the global Zipf law, which lands on the group's own with the Zipf weight of
    // the indices v % groups == gi. So P(own) = f + (1 - f) * that weight.
    let mut params = GenParams {
        requests: 60_000,
        groups: GroupParams::shipped()[..2].to_vec(),
        ..GenParams::default()
    };
    params.volumes.own_fraction = 0.5;
    params.campaigns.fraction = 0.0;
    params.data_taking.rate_per_s = 0.0;
    let (out, _) = run(&params);
    let records = read_trace(out.as_slice()).expect("reads");
    let v = &params.volumes;
    let weight = |k: u64| ((k + 1) as f64).powf(-v.zipf_s);
    let total: f64 = (0..v.count).map(weight).sum();
    let even: f64 = (0..v.count).step_by(2).map(weight).sum::<f64>() / total;
    let on_own = |gi: u64| {
        let of_group: Vec<_> = records
            .iter()
            .filter(|r| r.physics_group == params.groups[gi as usize].physics_group)
            .collect();
        let own = of_group
            .iter()
            .filter(|r| volume_index(r, &v.label_prefix) % 2 == gi)
            .count();
        own as f64 / of_group.len() as f64
    };
    // About 40,000 and 20,000 recalls: a standard deviation under 0.4 pp; tolerance 1.5 pp.
    for (gi, global) in [(0, even), (1, 1.0 - even)] {
        let want = 0.5 + 0.5 * global;
        let got = on_own(gi);
        assert!((got - want).abs() < 0.015, "group {gi}: {got} vs {want}");
    }
}

/// With fewer volumes than groups some group owns none (index v is group `v % groups`'s):
/// its "own" recalls would read the other groups' volumes, so `own_fraction = 1` would not
/// put every group on its own tapes. Refused by its key, rather than generated silently.
#[test]
fn own_fraction_with_a_group_owning_no_volume_is_refused() {
    let mut p = GenParams {
        requests: 1_000,
        ..GenParams::default()
    };
    p.volumes.count = p.groups.len() as u64 - 1;
    p.volumes.own_fraction = 1.0;
    match generate(&p, &mut Vec::new()) {
        Err(TraceError::Param(m)) => assert!(m.starts_with("volumes.own_fraction"), "{m}"),
        other => panic!("generated: {other:?}"),
    }
    // As many volumes as groups: each owns one. Without own volumes, any count goes.
    p.volumes.count = p.groups.len() as u64;
    generate(&p, &mut Vec::new()).expect("one volume each");
    p.volumes.count = 1;
    p.volumes.own_fraction = 0.0;
    generate(&p, &mut Vec::new()).expect("own_fraction 0");
}

#[test]
fn campaigns_read_consecutive_positions_of_few_volumes() {
    let params = GenParams {
        requests: 5_000,
        groups: vec![GroupParams::shipped().remove(3)],
        campaigns: CampaignParams {
            fraction: 1.0,
            min_files: 50,
            max_files: 50,
        },
        data_taking: DataTakingParams {
            rate_per_s: 0.0,
            ..DataTakingParams::default()
        },
        ..GenParams::default()
    };
    let (out, summary) = run(&params);
    assert_eq!(summary.campaigns, 100);
    let records = read_trace(out.as_slice()).expect("reads");
    let mut continued = 0;
    for pair in records.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if a.volume == b.volume && b.position == a.position.map(|p| p + 1) {
            continued += 1;
        }
    }
    // Every step within a campaign continues on the same volume except at a volume's end
    // (49 steps per campaign; a 50-file run starting uniformly on 1000 files crosses an end
    // about 5 % of the time).
    assert!(continued >= 100 * 49 - 20, "{continued}");
    // At most two volumes a campaign.
    assert!(
        summary.distinct_volumes <= 200,
        "{}",
        summary.distinct_volumes
    );
}

#[test]
fn bursts_raise_the_dispersion_of_arrival_counts() {
    let dispersion = |burst: BurstParams| {
        let params = GenParams {
            requests: 50_000,
            burst,
            data_taking: DataTakingParams {
                rate_per_s: 0.0,
                ..DataTakingParams::default()
            },
            ..GenParams::default()
        };
        let (out, _) = run(&params);
        let records = read_trace(out.as_slice()).expect("reads");
        let bins = (records.last().expect("records").t / 10.0) as usize;
        let mut counts = vec![0f64; bins];
        for r in &records {
            if let Some(c) = counts.get_mut((r.t / 10.0) as usize) {
                *c += 1.0;
            }
        }
        let mean = counts.iter().sum::<f64>() / bins as f64;
        let var = counts.iter().map(|c| (c - mean).powi(2)).sum::<f64>() / bins as f64;
        var / mean
    };
    let poisson = dispersion(BurstParams {
        ratio: 1.0,
        ..BurstParams::default()
    });
    let bursty = dispersion(BurstParams::default());
    assert!((poisson - 1.0).abs() < 0.15, "poisson {poisson}");
    assert!(bursty > 5.0, "bursty {bursty}");
}

#[test]
fn a_file_always_has_the_same_size() {
    let (out, _) = run(&GenParams {
        requests: 20_000,
        ..GenParams::default()
    });
    let mut sizes: HashMap<String, u64> = HashMap::new();
    for r in read_trace(out.as_slice()).expect("reads") {
        assert_eq!(
            *sizes.entry(r.file.clone()).or_insert(r.size_bytes),
            r.size_bytes
        );
    }
    assert!(sizes.len() < 20_000, "some files recalled twice");
}

#[test]
fn parameters_out_of_bounds_are_refused_by_key() {
    let refused = |p: GenParams, key: &str| match generate(&p, &mut Vec::new()) {
        Err(TraceError::Param(m)) => assert!(m.starts_with(key), "{m}"),
        other => panic!("{key}: {other:?}"),
    };
    refused(
        GenParams {
            rate_per_s: 0.0,
            ..GenParams::default()
        },
        "rate_per_s",
    );
    refused(
        GenParams {
            groups: vec![],
            ..GenParams::default()
        },
        "groups",
    );
    let mut p = GenParams::default();
    p.campaigns.fraction = 1.5;
    refused(p, "campaigns.fraction");
    let mut p = GenParams::default();
    p.volumes.own_fraction = -0.1;
    refused(p, "volumes.own_fraction");
    let mut p = GenParams::default();
    p.sizes.max_bytes = 0;
    refused(p, "sizes.min_bytes");
    // Past what a trace may hold (its reader would refuse the lines).
    let mut p = GenParams::default();
    p.sizes.max_bytes = crate::trace::format::MAX_SIZE_BYTES + 1;
    refused(p, "sizes.min_bytes");
    let mut p = GenParams::default();
    p.data_taking.size_bytes = crate::trace::format::MAX_SIZE_BYTES + 1;
    refused(p, "data_taking.size_bytes");
    refused(
        GenParams {
            requests: 10,
            rate_per_s: 1e-9,
            ..GenParams::default()
        },
        "rate_per_s",
    );
}

#[test]
fn params_read_from_toml_with_defaults_and_refuse_unknown_keys() {
    let p: GenParams = toml::from_str("seed = 9\n[volumes]\ncount = 10\n").expect("reads");
    assert_eq!(p.seed, 9);
    assert_eq!(p.volumes.count, 10);
    assert_eq!(
        p.volumes.files_per_volume,
        VolumeParams::default().files_per_volume
    );
    assert_eq!(p.groups, GroupParams::shipped());
    assert!(toml::from_str::<GenParams>("sede = 9\n").is_err());
    let json: GenParams = serde_json::from_str(r#"{"requests": 5}"#).expect("reads json");
    assert_eq!(json.requests, 5);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn every_generated_record_round_trips(
        seed in any::<u64>(),
        requests in 0u64..300,
        fraction in 0.0f64..=1.0,
        ratio in 1.0f64..20.0,
        dt_rate in 0.0f64..3.0,
        sigma in 0.0f64..4.0,
    ) {
        let mut p = GenParams { seed, requests, ..GenParams::default() };
        p.campaigns.fraction = fraction;
        p.burst.ratio = ratio;
        p.data_taking.rate_per_s = dt_rate;
        p.sizes.sigma = sigma;
        let (out, summary) = run(&p);
        let records = read_trace(out.as_slice()).expect("reads back");
        prop_assert_eq!(records.len() as u64, summary.records);
        let mut again = Vec::new();
        for r in &records {
            write_record(r, &mut again).expect("writes");
        }
        prop_assert_eq!(again, out);
    }

    #[test]
    fn any_record_round_trips(
        micros in 0u64..100_000_000_000_000,
        id in "[a-z0-9-]{1,20}",
        file in "/[a-z0-9/._-]{1,40}",
        position in proptest::option::of(any::<u64>()),
        offset in proptest::option::of(0u64..=crate::domain::MAX_OFFSET_BYTES),
        named in any::<bool>(),
        size in 1u64..=crate::trace::format::MAX_SIZE_BYTES,
        write in any::<bool>(),
    ) {
        let record = TraceRecord {
            t: micros as f64 / 1e6,
            client_request_id: id.clone(),
            station: "s\u{e9}\"q".into(),
            user: id,
            file,
            volume: named.then(|| "VR000001".into()),
            position,
            // A write names no offset (the trace refuses one).
            offset_bytes: offset.filter(|_| !write),
            size_bytes: size,
            access_mode: "analysis".into(),
            physics_group: "higgs".into(),
            direction: if write { Direction::Write } else { Direction::Read },
            cancelled_t: None,
        };
        let mut out = Vec::new();
        write_record(&record, &mut out).expect("writes");
        prop_assert_eq!(read_trace(out.as_slice()).expect("reads"), vec![record]);
    }
}

/// The shipped example cannot rot: its parameters regenerate it byte for byte. With
/// MSSBROKER_WRITE_EXAMPLE_TRACE=1 this test writes the trace instead (after a deliberate
/// change of the parameters or the generator).
#[test]
fn the_shipped_example_is_what_its_parameters_generate() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/traces");
    let text = std::fs::read_to_string(dir.join("mixed.params.toml")).expect("params file");
    let params: GenParams = toml::from_str(&text).expect("params parse");
    let (out, summary) = run(&params);
    let path = dir.join("mixed.jsonl");
    if std::env::var_os("MSSBROKER_WRITE_EXAMPLE_TRACE").is_some() {
        std::fs::write(&path, &out).expect("writes the example");
    }
    let shipped = std::fs::read(&path).expect("shipped trace");
    assert!(
        shipped == out,
        "examples/traces/mixed.jsonl differs from what its parameters generate"
    );
    assert!(shipped.len() < 1_000_000, "{} bytes", shipped.len());
    // Its groups are the shipped share tree's leaves (or classify into them).
    let leaves = [
        "analysis/higgs",
        "analysis/top",
        "analysis/neutrino",
        "mc/higgs",
        "mc/top",
    ];
    for g in &params.groups {
        assert!(leaves.contains(&g.path().as_str()) || g.access_mode == "reprocessing");
    }
    assert_eq!(
        summary.per_access_mode.get("datataking").copied(),
        Some(summary.data_taking)
    );
}

#[test]
fn the_summary_prints_its_totals_and_a_row_per_group() {
    let (_, summary) = run(&GenParams {
        requests: 100,
        ..GenParams::default()
    });
    let text = summary.to_string();
    assert!(
        text.starts_with(&format!("{} records over ", summary.records)),
        "{text}"
    );
    for group in summary.per_group.keys() {
        assert!(
            text.lines().any(|l| l.starts_with(group.as_str())),
            "{group}: {text}"
        );
    }
}

//! Issue 16's goals for the `volumes` release mode, measured in virtual time on a generated
//! trace (docs/volumes.md has the figures): seed 7, 20,000 recalls at 0.2/s over 3,000 volumes
//! (Zipf s = 1), half of them in bulk campaigns, a data-taking stream of one 4 GB write every
//! 50 s, the shipped share tree and its demand mix skewed against the shares, Fair Tree, the
//! Enstore model with 4 drives and its 60 s dismount delay; `[release.volumes]` as shipped but
//! `max_volumes` = 2 (two of the four drives left for data taking).

use super::super::*;
use crate::config::{Settings, SHIPPED};
use crate::trace::{generate, read_trace, GenParams};

const TB: u64 = 1_000_000_000_000;

fn trace() -> Vec<TraceRecord> {
    generated(0.2, 0.02)
}

/// The goals trace's generator with recalls and data-taking writes at the given rates.
fn generated(rate_per_s: f64, data_taking_per_s: f64) -> Vec<TraceRecord> {
    let mut params = goals_params();
    params.rate_per_s = rate_per_s;
    params.data_taking.rate_per_s = data_taking_per_s;
    generated_from(&params)
}

/// The goals trace's parameters (the module's header).
fn goals_params() -> GenParams {
    let mut params = GenParams {
        seed: 7,
        requests: 20_000,
        rate_per_s: 0.2,
        ..Default::default()
    };
    params.volumes.count = 3000;
    params.volumes.zipf_s = 1.0;
    params.campaigns.fraction = 0.5;
    params.data_taking.rate_per_s = 0.02;
    params
}

fn generated_from(params: &GenParams) -> Vec<TraceRecord> {
    let mut bytes = Vec::new();
    generate(params, &mut bytes).expect("valid parameters");
    read_trace(bytes.as_slice()).expect("a trace")
}

fn policy(mode: &str) -> std::sync::Arc<PolicySettings> {
    let text = SHIPPED
        .replacen("algorithm = \"sam\"", "algorithm = \"fair_tree\"", 1)
        .replacen("mode = \"pass_through\"", &format!("mode = \"{mode}\""), 1)
        .replacen("max_volumes = 8", "max_volumes = 2", 1);
    let s = Settings::parse(&text, "goals").expect("valid configuration");
    assert_eq!(s.policy.order.release.mode.name(), mode);
    assert_eq!(s.policy.order.release.volumes.max_volumes, 2);
    assert_eq!(s.policy.order.algorithm.name(), "fair_tree");
    s.policy
}

/// Each mode's report, the volumes run's outcome, and its settings.
struct Runs {
    held: RunReport,
    volumes: RunReport,
    pass_through: RunReport,
    outcome: RunRecord,
    policy: std::sync::Arc<PolicySettings>,
}

/// The three runs, made once for both tests (each costs seconds in a debug build).
fn runs() -> &'static Runs {
    static RUNS: std::sync::OnceLock<Runs> = std::sync::OnceLock::new();
    RUNS.get_or_init(run_all)
}

fn run_all() -> Runs {
    let records = trace();
    let p = policy("volumes");
    let load = arrivals(&p, &records).expect("classified");
    let [held, volumes, pass_through] = reports(&records);
    Runs {
        held,
        volumes,
        pass_through,
        outcome: run(&p, library(4, 1), &load, Micros::MAX),
        policy: p,
    }
}

/// The `held`, `volumes` and `pass_through` reports of `records` (4 drives, 10 TB windows).
fn reports(records: &[TraceRecord]) -> [RunReport; 3] {
    let spec = RunSpec {
        baseline: None,
        window_bytes: 10 * TB,
        retry: RetrySettings::default(),
    };
    ["held", "volumes", "pass_through"].map(|mode| {
        let p = policy(mode);
        let load = arrivals(&p, records).expect("classified");
        simulate(&p, &library(4, 1), &load, spec).expect("simulated")
    })
}

fn group<'r>(r: &'r RunReport, path: &str) -> &'r report::GroupReport {
    r.groups.iter().find(|g| g.path == path).expect("group")
}

#[test]
fn volumes_mode_reaches_the_mount_share_and_data_taking_goals() {
    let r = runs();
    let (held, vol) = (&r.held, &r.volumes);
    let mounts = |x: &RunReport| x.mounts_per_tb.expect("bytes done");
    assert!(
        mounts(vol) <= mounts(held) / 3.0,
        "mounts per TB: volumes {} held {}",
        mounts(vol),
        mounts(held)
    );
    let err = vol
        .share_error_max_pp
        .expect("10 TB windows while saturated");
    assert!(err <= 2.0, "share error {err} pp over 10 TB windows");
    let dt = |x: &RunReport| group(x, "datataking").wait_p99_s;
    assert!(
        dt(vol) <= dt(held),
        "data taking p99 {} > {}",
        dt(vol),
        dt(held)
    );
    let done: u64 = vol.groups.iter().map(|g| g.files).sum();
    assert_eq!(done, vol.requests, "every request done");
    assert_eq!(r.outcome.unfinished, 0);
    let s = &r.policy.order.release.volumes;
    assert!(!r.outcome.batches.is_empty());
    for b in &r.outcome.batches {
        assert!(b.files >= 1 && b.files <= s.batch_max_files as usize);
        // A batch's remainder may take it past `batch_max_bytes` by `remainder_bytes`.
        assert!(
            b.files == 1 || b.bytes <= s.batch_max_bytes + s.remainder_bytes,
            "{b:?}"
        );
    }
}

/// Where each group reads only its own tapes (`volumes.own_fraction = 1`, Enstore's file
/// families; the scattered variant, 5 % of the recalls in campaigns), the volumes mode mounts
/// no more than pass-through (41.6 against 43.6 per TB) while keeping the shares (0.45 pp) and
/// a third of held's mounts (249.2). With shared tapes it cannot (the test below): a group
/// ahead of its share leaves its requests on a volume mounted for the others.
#[test]
fn on_tapes_of_their_own_the_volumes_mode_mounts_no_more_than_pass_through() {
    let mut params = goals_params();
    params.campaigns.fraction = 0.05;
    params.volumes.own_fraction = 1.0;
    let [held, vol, pass] = reports(&generated_from(&params));
    let mounts = |x: &RunReport| x.mounts_per_tb.expect("bytes done");
    assert!(
        mounts(&vol) <= mounts(&pass),
        "mounts per TB: volumes {} pass-through {}",
        mounts(&vol),
        mounts(&pass)
    );
    assert!(mounts(&vol) <= mounts(&held) / 3.0, "{}", mounts(&held));
    let err = vol.share_error_max_pp.expect("saturated windows");
    assert!(err <= 2.0, "share error {err} pp over 10 TB windows");
    let dt = |x: &RunReport| group(x, "datataking").wait_p99_s;
    assert!(dt(&vol) <= dt(&held), "data taking p99 {}", dt(&vol));
}

/// The goals this trace does not reach (docs/volumes.md, "Goals not reached", says why), pinned
/// as they stand today: each assertion is the goal's miss, so a change that reaches a goal fails
/// here and must turn that line into the goal itself.
#[test]
fn volumes_mode_misses_the_other_goals_as_documented() {
    let r = runs();
    let (held, vol, pass) = (&r.held, &r.volumes, &r.pass_through);
    let mounts = |x: &RunReport| x.mounts_per_tb.expect("bytes done");
    // FIXME(issue 16): the goal is mounts(vol) <= mounts(pass); keeping the shares leaves
    // over-share groups' requests on a volume for a second mount. Reached where each group
    // reads tapes of its own (the test above); here every group reads every tape.
    assert!(
        mounts(vol) > mounts(pass),
        "reached: {} <= {}",
        mounts(vol),
        mounts(pass)
    );
    // FIXME(issue 16): the goal is >= 0.8, which no order of this trace can reach: reading
    // each of its volumes once already costs a mount and an unmount per volume, and the bound
    // below (streaming / (streaming + volumes x (mount + unmount)), locates and dismount
    // delays left out) is under 0.8. Every mode stays under the bound; volumes mode is between
    // held and pass-through (it mounts more volumes twice than pass-through does).
    let eff = |x: &RunReport| x.drive_efficiency.expect("busy");
    let bound = efficiency_bound(&trace(), &library(4, 1));
    assert!(bound < 0.8, "the trace allows {bound}");
    for x in [held, vol, pass] {
        assert!(eff(x) <= bound, "{} above the bound {bound}", eff(x));
    }
    assert!(eff(vol) > eff(held), "{} <= held's {}", eff(vol), eff(held));
    // FIXME(issue 16): the goal is 0; writes wait while a new data-taking volume mounts and
    // every start elsewhere meanwhile counts (`inversions_come_from_data_takings_tape_changes`).
    assert!(vol.priority_inversions > 0, "reached: no inversions");
    // FIXME(issue 16): the goal is no wait over max_age + one batch time; the overloaded
    // library's backlog makes the longest waits in every mode. (At the library's capacity a
    // starvation bound at max_age meets it: the test below.)
    let s = &r.policy.order.release.volumes;
    let batch_s = s.batch_max_bytes as f64 / 300e6;
    let bound = s.max_age_ms as f64 / 1000.0 + batch_s;
    assert!(
        vol.fair_wait_max_s > bound,
        "reached: {} <= {bound}",
        vol.fair_wait_max_s
    );
}

/// Every inversion of this trace comes from data taking's tape changes: the generator starts a
/// new data-taking volume every 500 writes (25,000 s), whose first write waits for a drive and a
/// mount while the writes after it queue on the same volume. With every write on one tape, no
/// mode has any: data taking never waits while fair-share work starts.
#[test]
fn inversions_come_from_data_takings_tape_changes() {
    let mut records = trace();
    let first = records
        .iter()
        .find(|r| r.access_mode == "datataking")
        .map(|r| r.volume.clone())
        .expect("a data-taking stream");
    let mut tapes = std::collections::BTreeSet::new();
    for r in records.iter_mut().filter(|r| r.access_mode == "datataking") {
        tapes.insert(std::mem::replace(&mut r.volume, first.clone()));
    }
    assert_eq!(tapes.len(), 5, "the trace changes tapes four times");
    for one_tape in reports(&records) {
        assert_eq!(one_tape.priority_inversions, 0, "{}", one_tape.mode);
    }
    let r = runs();
    for x in [&r.held, &r.volumes, &r.pass_through] {
        assert_ne!(x.priority_inversions, 0, "{}", x.mode);
    }
}

/// The best drive efficiency any order of `records` can reach on `lib`: every byte streamed
/// once, every volume mounted and unmounted once, no locate and no idle drive.
fn efficiency_bound(records: &[TraceRecord], lib: &LibraryConfig) -> f64 {
    let bytes: u64 = records.iter().map(|r| r.size_bytes).sum();
    let volumes: std::collections::HashSet<Option<&str>> =
        records.iter().map(|r| r.volume.as_deref()).collect();
    let streaming = bytes as f64 / lib.bytes_per_sec as f64;
    let tape = &lib.tape;
    let per_mount = (tape.mount_micros() + tape.unload + tape.robot) as f64 / 1e6;
    streaming / (streaming + volumes.len() as f64 * per_mount)
}

/// One batch's time at most on `lib`'s drive, worked from its figures (issue 38's drive
/// model): the unmount before it at its longest (a full rewind, two archive-unthread steps,
/// unload, robot), a mount, per file of the trace's `mean` size the per-file time and the
/// published average locate (45 s on LTO-9, that of a random file from the start of tape: a
/// batch's files, in position order, cost less), and the bytes at the drive's rate.
pub(super) fn batch_secs(lib: &LibraryConfig, batch_bytes: u64, mean: f64) -> f64 {
    let t = &lib.tape;
    let unmount = t.rewind_full + 2 * t.unthread_step + t.unload + t.robot;
    let files = (batch_bytes as f64 / mean).ceil();
    let fixed = (unmount + t.mount_micros()) as f64 / 1e6;
    fixed
        + files * (t.per_file_read as f64 / 1e6 + 45.0)
        + batch_bytes as f64 / lib.bytes_per_sec as f64
}

/// At the library's capacity (the same generator at 0.025 recalls/s and one write every 333 s:
/// 22,401 requests over 800,065 s), the policy's starvation bound set to `max_age_secs` meets
/// the wait goal: no fair-share request waits longer than `max_age_secs` plus one batch time
/// ([`batch_secs`]: 14,511 s against 14,733 s on the earlier flat costs; 15,547 s against
/// 16,332 s on issue 38's LTO-9 model, whose batch of 100 GB in files of 3.35 GB on average
/// costs some 30 locates). With the shipped bound (7 days) the longest wait is longer
/// (15,761 s on the flat costs; on the LTO-9 model, which this load overloads, 395,217 s with
/// `quiet_secs = 600` and 20,042 s with the shipped hour): an overdue volume of a group the
/// policy ranks last waits for its group's turn. (On an overloaded library the bound makes
/// the release oldest-first and costs the shares: docs/volumes.md.)
#[test]
fn at_capacity_a_starvation_bound_at_max_age_bounds_every_wait() {
    let records = generated(0.025, 0.003);
    let mean = records.iter().map(|r| r.size_bytes as f64).sum::<f64>() / records.len() as f64;
    let spec = RunSpec {
        baseline: None,
        window_bytes: 10 * TB,
        retry: RetrySettings::default(),
    };
    let longest = |max_wait_secs: u64| {
        let text = SHIPPED
            .replacen("algorithm = \"sam\"", "algorithm = \"fair_tree\"", 1)
            .replacen("mode = \"pass_through\"", "mode = \"volumes\"", 1)
            .replacen("max_volumes = 8", "max_volumes = 2", 1)
            .replacen(
                "max_wait_secs = 604800",
                &format!("max_wait_secs = {max_wait_secs}"),
                1,
            );
        let p = Settings::parse(&text, "goals")
            .expect("valid configuration")
            .policy;
        assert_eq!(p.order.max_wait_ms, Some(max_wait_secs as i64 * 1000));
        let load = arrivals(&p, &records).expect("classified");
        let lib = library(4, 1);
        let r = simulate(&p, &lib, &load, spec).expect("simulated");
        assert_eq!(r.requests, 22_401);
        let s = &p.order.release.volumes;
        let bound = s.max_age_ms as f64 / 1000.0 + batch_secs(&lib, s.batch_max_bytes, mean);
        (r.fair_wait_max_s, bound)
    };
    let (bounded, bound) = longest(14_400);
    assert!(bounded <= bound, "longest wait {bounded} s over {bound} s");
    let (shipped, bound) = longest(604_800);
    assert!(
        shipped > bound,
        "the shipped bound already meets it: {shipped} s"
    );
}

/// Near the library's capacity on the LTO-9 model (the goals trace's generator at 0.02
/// recalls/s and one write every 417 s: 22,320 requests over 966,286 s, which `pass_through`
/// finishes in 1.02 times that), the shipped quiet period lets a tape's scattered requests
/// gather before it goes: the volumes mode's fair-share p95 wait stays within `max_age_secs`
/// plus one batch ([`batch_secs`]) and it mounts at most four fifths of `pass_through`'s
/// mounts per TB (13,975 s against 16,332 s; 133.7 against 180.3). With `quiet_secs = 600`,
/// the choice made on the flat costs, most volumes went for a file or two: 25,193 s and 172.8
/// (docs/volumes.md, "Defaults re-chosen on the tape drive model").
#[test]
fn near_capacity_the_shipped_quiet_period_gathers_a_tapes_requests() {
    let records = generated(0.02, 0.0024);
    assert_eq!(records.len(), 22_320);
    let mean = records.iter().map(|r| r.size_bytes as f64).sum::<f64>() / records.len() as f64;
    let spec = RunSpec {
        baseline: None,
        window_bytes: 10 * TB,
        retry: RetrySettings::default(),
    };
    let lib = library(4, 1);
    let [volumes, pass_through] = ["volumes", "pass_through"].map(|mode| {
        let p = policy(mode);
        let load = arrivals(&p, &records).expect("classified");
        simulate(&p, &lib, &load, spec).expect("simulated")
    });
    let s = &policy("volumes").order.release.volumes;
    let bound = s.max_age_ms as f64 / 1000.0 + batch_secs(&lib, s.batch_max_bytes, mean);
    assert!(
        volumes.fair_wait_p95_s <= bound,
        "fair-share p95 wait {} s over {bound} s",
        volumes.fair_wait_p95_s
    );
    let v = volumes.mounts_per_tb.expect("bytes done");
    let p = pass_through.mounts_per_tb.expect("bytes done");
    assert!(v <= 0.8 * p, "mounts per TB {v} against {p}");
}

//! The simulator's re-prioritisation pass against the live side's: every pass of a run, under
//! each policy and release mode, sends what `policy::transition::reprioritise_pass` (the pass
//! `ledger/live.rs` runs over its rows) sends over every request pending at the library. The
//! engine's index (`pending_at_library`) proposes only the requests whose priority may have
//! changed; a difference in who is re-prioritised, to what, in what order or how many a pass
//! fails here (the check is `engine/reprioritise.rs`'s `whole_pass`).

use super::*;
use crate::simulate::engine::{CHECK_PASSES, PASSES_CHECKED};

/// A backlog: `n` reads of groups a, b, c (shares 1, 2, 3), 1 to 20 GB, one every second, on
/// one drive at 1 GB/s, so most wait at the library (pass-through) or in the broker (held)
/// while usage decays and the starvation bound lifts the oldest.
fn backlog(p: &PolicySettings, n: u64) -> Vec<Arrival> {
    let groups = [g(p, "a"), g(p, "b"), g(p, "c")];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let group = groups[(x % 3) as usize];
            sized(i * SEC, group, &format!("V{i}"), 1 + (x >> 8) % 20)
        })
        .collect()
}

#[test]
fn every_pass_of_the_simulator_is_the_live_sides_pass() {
    CHECK_PASSES.set(true);
    for algorithm in ["sam", "fair_tree", "fbsng", "multifactor"] {
        for release in ["mode = \"pass_through\"", "mode = \"held\"\nlimit = 6"] {
            let p = configured(&format!(
                "[policy]\nalgorithm = \"{algorithm}\"\nmax_wait_secs = 400\n\
                 reprioritise_secs = 5\n\
                 [usage]\nmodel = \"half_life\"\nhalf_life_secs = 120\n\
                 [shares]\na = 1\nb = 2\nc = 3\n[release]\n{release}\n"
            ));
            let load = backlog(&p, 150);
            PASSES_CHECKED.set(0);
            let out = run(&p, one_drive(Model::Priority), &load, u64::MAX);
            let what = format!("{algorithm}, {release}");
            assert_eq!(out.unfinished, 0, "{what}: the run ends");
            assert!(PASSES_CHECKED.get() > 0, "{what}: no pass was checked");
            assert!(
                out.priority_changes > 0,
                "{what}: no pass changed a priority"
            );
        }
    }
}

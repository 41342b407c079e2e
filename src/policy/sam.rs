//! The SAM fair-share decision (seed 000, as DESIGN.md states it):
//!
//! ```text
//! front  iff  (B[g] + B(j)) / (U + B(j))  <  b[g]
//! ```
//!
//! with `U` the usage of all fair-share groups (priority classes excluded). Priority-class
//! requests go in at their class's priority. The comparison is exact: `b[g]` is a fraction of
//! integers and both sides are cross-multiplied in `u128`, so equality goes back, always.

//!
//! The decision itself lives in [`crate::shares::sam`], beside the floors and caps and the
//! operator's view that use it, so `shares` does not depend on `policy`; it is re-exported here.

pub use crate::shares::sam::{decide, Decision};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;
    use crate::domain::{Class, GroupId, PolicySettings};
    use crate::shares::sam::less_than;
    use crate::shares::UsageBook;
    use crate::shares::UsageLookup;
    use proptest::prelude::*;
    use std::sync::Arc;

    /// A cumulative book holding `amounts`.
    fn book(p: &PolicySettings, amounts: impl IntoIterator<Item = (GroupId, u64)>) -> UsageBook {
        let mut b = UsageBook::new(p, 0);
        for (g, a) in amounts {
            b.add(g, i128::from(a), 0);
        }
        b
    }

    /// Fair-share groups a (1/4), b (3/4) and the priority classes daq (100), cal (90).
    fn policy() -> Arc<PolicySettings> {
        let text = r#"
[policy]
p_front = 20
p_back = 10
[usage]
model = "none"
[[priority_classes]]
access_mode = "daq"
mss_priority = 100
[[priority_classes]]
access_mode = "cal"
mss_priority = 90
[shares]
a = 1
b = 3
[mss]
adapter = "http"
url = "http://127.0.0.1:1"
"#;
        Settings::parse(text, "t").unwrap().policy
    }

    fn id(p: &PolicySettings, path: &str) -> GroupId {
        p.group_by_path(path).unwrap()
    }

    #[test]
    fn hand_worked_table() {
        let p = policy();
        let (a, b, daq, cal) = (id(&p, "a"), id(&p, "b"), id(&p, "daq"), id(&p, "cal"));
        // (usage a, usage b, usage daq, request group, benefit, expected class)
        let table: &[(u64, u64, u64, GroupId, u64, Class)] = &[
            // The first request of all: (0+100)/(0+100) = 1, not below 1/4: back.
            (0, 0, 0, a, 100, Class::Back),
            // b's first request: 1 is not below 3/4 either.
            (0, 0, 0, b, 100, Class::Back),
            // a has nothing, b has 900: (0+100)/(900+100) = 1/10 < 1/4: front.
            (0, 900, 0, a, 100, Class::Front),
            // Exact boundary: (0+250)/(750+250) = 1/4, equal goes back.
            (0, 750, 0, a, 250, Class::Back),
            // One byte less is front: 249/999 < 1/4.
            (0, 750, 0, a, 249, Class::Front),
            // b at the boundary from below: (600+150)/(250+600+150) = 3/4: back.
            (250, 600, 0, b, 150, Class::Back),
            (250, 600, 0, b, 149, Class::Front),
            // Priority-class usage is not part of U: (0+100)/(900+100) = 1/10, whatever daq did.
            (0, 900, u64::MAX / 2, a, 100, Class::Front),
            // Priority classes ignore shares entirely.
            (0, 0, 0, daq, 1, Class::Priority),
            (0, 0, 10_000, daq, 1 << 40, Class::Priority),
            (0, 0, 0, cal, 5, Class::Priority),
        ];
        for &(ua, ub, ud, g, bj, want) in table {
            let usage = book(&p, [(a, ua), (b, ub), (daq, ud)]);
            let d = decide(&p, &usage.at(0), g, bj);
            assert_eq!(
                d.class,
                want,
                "a={ua} b={ub} daq={ud} {} +{bj}",
                p.group(g).path
            );
            let want_priority = match (want, p.group(g).path.as_str()) {
                (Class::Front, _) => 20,
                (Class::Back, _) => 10,
                (Class::Priority, "daq") => 100,
                (Class::Priority, _) => 90,
            };
            assert_eq!(d.mss_priority, want_priority);
        }
    }

    #[test]
    fn refunds_and_fair_total() {
        let p = policy();
        let (a, daq) = (id(&p, "a"), id(&p, "daq"));
        let mut u = UsageBook::new(&p, 0);
        u.add(a, 500, 0);
        u.add(daq, 700, 0);
        assert_eq!(u.at(0).fair_total(), 500);
        u.add(a, -200, 0);
        assert_eq!((u.at(0).value(a), u.at(0).fair_total()), (300, 300));
        u.add(a, -1_000, 0);
        assert_eq!(
            (u.at(0).value(a), u.at(0).fair_total()),
            (0, 0),
            "never below zero"
        );
    }

    #[test]
    fn exact_comparison_past_u128_products() {
        // 1/3 < 1/2, and the same with numbers whose products overflow u128.
        let big = u128::MAX / 3;
        assert!(less_than(big, big * 3, 1, 2));
        assert!(!less_than(big, big * 2, 1, 2), "equal is not less");
        assert!(!less_than(big + 1, big * 2, 1, 2));
        assert!(less_than(big - 1, big * 2, 1, 2));
    }

    /// Run `steps` completions of a closed loop: every fair-share group keeps `window` (>= 2, so
    /// one is always waiting when a drive frees) requests
    /// at a one-drive simulated library (the real simulator model, in virtual time), each new
    /// request decided by SAM and charged at decision; returns the bytes each group got done.
    fn closed_loop(shares: &[u64], sizes: &[u64], window: usize, steps: usize) -> Vec<u64> {
        use mss_adapters::protocol::{Direction, EventKind, Transfer};
        use mss_adapters::sim::library::{Library, LibraryConfig};
        let mut text = String::from(
            "[policy]\np_front = 20\np_back = 10\n[usage]\nmodel = \"none\"\n[shares]\n",
        );
        for (i, s) in shares.iter().enumerate() {
            text.push_str(&format!("g{i} = {s}\n"));
        }
        text.push_str("[mss]\nadapter = \"http\"\nurl = \"http://127.0.0.1:1\"\n");
        let p = Settings::parse(&text, "t").unwrap().policy;
        let mut lib = Library::new(LibraryConfig {
            drives: 1,
            mount_micros: 0,
            bytes_per_sec: 1_000_000,
            failure_rate: 0.0,
            seed: 1,
            aging: None,
            ..Default::default()
        });
        let mut usage = UsageBook::new(&p, 0);
        let mut next = 0usize;
        let mut now = 0;
        let mut submit = |g: usize, usage: &mut UsageBook, lib: &mut Library, now: u64| {
            let gid = id(&p, &format!("g{g}"));
            let size = sizes[next % sizes.len()];
            let d = decide(&p, &usage.at(0), gid, size);
            usage.add(gid, i128::from(size), 0);
            let key = format!("{g}:{next}");
            next += 1;
            let mut started = Vec::new();
            lib.submit(
                Transfer {
                    key,
                    attempt: 1,
                    file: String::new(),
                    size_bytes: size,
                    priority: d.mss_priority,
                    volume: None,
                    group: String::new(),
                    direction: Direction::Read,
                    local_file: None,
                    bfid: None,
                    position: None,
                    offset_bytes: None,
                },
                now,
                &mut started,
            );
        };
        for g in 0..shares.len() {
            for _ in 0..window {
                submit(g, &mut usage, &mut lib, now);
            }
        }
        let mut done = vec![0u64; shares.len()];
        let mut completions = 0;
        let mut events = Vec::new();
        while completions < steps {
            let Some(t) = lib.next_wakeup() else { break };
            now = t;
            events.clear();
            lib.advance(t, &mut events);
            for e in &events {
                if let EventKind::Done { bytes } = e.kind {
                    let g: usize = e
                        .key
                        .split(':')
                        .next()
                        .and_then(|g| g.parse().ok())
                        .unwrap();
                    done[g] += bytes;
                    completions += 1;
                    submit(g, &mut usage, &mut lib, now);
                }
            }
        }
        done
    }

    proptest! {
        #[test]
        fn cross_multiplication_agrees_with_the_fallback(
            a in 0u128..1 << 60, b in 1u128..1 << 60, c in 0u128..1 << 60, d in 1u128..1 << 60
        ) {
            let direct = a * d < c * b;
            prop_assert_eq!(less_than(a, b, c, d), direct);
            // Scaling both sides by the same large factor forces the fallback path.
            let k = 1u128 << 66;
            prop_assert_eq!(less_than(a * k, b * k, c, d), direct);
        }

        #[test]
        fn priority_classes_always_above_fair_share(
            usages in proptest::collection::vec(0u64..1 << 50, 4),
            benefit in 1u64..1 << 40,
        ) {
            let p = policy();
            let ids: Vec<GroupId> = p.group_ids().collect();
            let usage = book(&p, ids.iter().copied().zip(usages));
            let usage = usage.at(0);
            let fair_max = ["a", "b"].iter().map(|g| decide(&p, &usage, id(&p, g), benefit).mss_priority).max().unwrap();
            for class in ["daq", "cal"] {
                let d = decide(&p, &usage, id(&p, class), benefit);
                prop_assert_eq!(d.class, Class::Priority);
                prop_assert!(d.mss_priority > fair_max);
            }
        }

        /// With every group backlogged (a closed loop that always has requests waiting) and
        /// random sizes, the bytes each group gets done converge to its share.
        #[test]
        fn achieved_shares_converge_to_targets(
            shares in proptest::collection::vec(1u64..10, 2..5),
            sizes in proptest::collection::vec(1u64..1_000, 50..100),
            window in 2usize..5,
        ) {
            let done = closed_loop(&shares, &sizes, window, 6_000);
            let total: u64 = done.iter().sum();
            let all: u64 = shares.iter().sum();
            for (g, (&d, &s)) in done.iter().zip(&shares).enumerate() {
                let achieved = d as f64 / total as f64;
                let target = s as f64 / all as f64;
                prop_assert!((achieved - target).abs() < 0.02,
                    "group {g}: achieved {achieved:.4}, target {target:.4}, done {done:?}");
            }
        }
    }
}

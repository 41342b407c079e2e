//! [`ShareSnapshotCache`] against a fresh [`ShareSnapshot`]: after any sequence of charges and refunds at
//! moving instants, under every usage model, the kept state gives the same `U`, the same Fair
//! Tree ranks and the same placement of every group's request, for every policy.

use proptest::prelude::*;

use super::super::*;
use crate::shares::UsageBook;
use crate::tests::TestConfig;

const SHARES: &str = "a = 2\n\"a/x\" = 1\n\"a/y\" = 3\nb = 1\n\"b/z\" = 1\nc = 3";

fn settings(algorithm: &str, usage: &str) -> std::sync::Arc<PolicySettings> {
    TestConfig::new()
        .with(&format!(
            "[policy]\nalgorithm = \"{algorithm}\"\n[usage]\n{usage}\n\
             [[priority_classes]]\naccess_mode = \"daq\"\nmss_priority = 100\n\
             [shares]\n{SHARES}\n"
        ))
        .settings()
        .policy
}

const MODELS: [&str; 3] = [
    "model = \"none\"",
    "model = \"half_life\"\nhalf_life_secs = 60",
    "model = \"windows\"\ninterval_secs = 10\ndepth = 3\ndecay = 0.5",
];

/// (group index, benefit, milliseconds after the previous step, refund of an earlier charge)
fn steps() -> impl Strategy<Value = Vec<(usize, u32, u16, bool)>> {
    prop::collection::vec(
        (0usize..8, 1u32..5_000_000, 0u16..20_000, any::<bool>()),
        1..40,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn the_kept_standing_equals_a_fresh_one(steps in steps(), model in 0usize..3) {
        for algorithm in ["sam", "fair_tree", "multifactor", "fbsng"] {
            let p = settings(algorithm, MODELS[model]);
            let q = Queues::new(&p.order.fbsng);
            let ids: Vec<GroupId> = p.group_ids().collect();
            let mut book = UsageBook::new(&p, 0);
            let mut kept = ShareSnapshotCache::default();
            let mut now = 0i64;
            let mut charged: Vec<(GroupId, i128, i64)> = Vec::new();
            for &(gi, benefit, dt, refund) in &steps {
                now += i64::from(dt);
                let g = ids[gi % ids.len()];
                match charged.pop().filter(|_| refund) {
                    Some((rg, amount, at)) => book.add(rg, -amount, at),
                    None => {
                        book.add(g, i128::from(benefit), now);
                        charged.push((g, i128::from(benefit), now));
                    }
                }
                book.roll(now);
                // Twice at the same instant: the second read is the kept one.
                for _ in 0..2 {
                    let fresh = ShareSnapshot::new(&p, book.at(now), &q);
                    let mine = kept.snapshot(&p, &book, &q, now);
                    prop_assert_eq!(mine.usage.fair_total(), fresh.usage.fair_total());
                    for &g in &ids {
                        if is_fair(&p, g) {
                            prop_assert_eq!(mine.rank(g), fresh.rank(g));
                        }
                        let c = Candidate {
                            id: 1,
                            group: g,
                            library: String::new(),
                            created_ms: 0,
                            size_bytes: u64::from(benefit),
                            benefit: u64::from(benefit),
                            qos: Qos::Normal,
                            user: 1.0,
                            queue: 0.0,
                            slots: 1,
                            passed: 0,
                        };
                        prop_assert_eq!(
                            place(&p.order, &mine, &c, now),
                            place(&p.order, &fresh, &c, now)
                        );
                    }
                }
            }
        }
    }
}

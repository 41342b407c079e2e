//! One placement (`policy::order::place` with a `Standing`) per policy at 10, 100 and 1,000
//! groups. The configuration is the shipped one with its `[shares]` replaced by a generated
//! two-level tree (parents of ten leaves each) and `policy.algorithm` set, parsed through
//! `config::Settings::parse` as the broker parses its file. Every group has some usage; the
//! request placed belongs to a leaf in the middle of the tree.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use mssbroker::config::{Settings, EMBEDDED};
use mssbroker::domain::order::Qos;
use mssbroker::domain::PolicySettings;
use mssbroker::policy::fbsng::Queues;
use mssbroker::policy::order::{place, Candidate, Standing};
use mssbroker::shares::UsageBook;

const POLICIES: [&str; 4] = ["sam", "fair_tree", "multifactor", "fbsng"];
const SIZES: [usize; 3] = [10, 100, 1_000];

/// The shipped configuration with `leaves` generated leaf groups and `algorithm`.
fn settings(algorithm: &str, leaves: usize) -> Arc<PolicySettings> {
    let (head, rest) = EMBEDDED
        .split_once("[shares]\n")
        .expect("the shipped config has [shares]");
    let tail = &rest[rest.find("\n[").expect("a section after [shares]")..];
    let mut shares = String::from("[shares]\n");
    for p in 0..leaves.div_ceil(10) {
        shares.push_str(&format!("\"p{p}\" = {}\n", 1 + p % 7));
        for c in 0..10.min(leaves - p * 10) {
            shares.push_str(&format!("\"p{p}/c{c}\" = {}\n", 1 + c % 3));
        }
    }
    let head = head.replacen(
        "algorithm = \"sam\"",
        &format!("algorithm = \"{algorithm}\""),
        1,
    );
    let text = format!("{head}{shares}{tail}");
    Settings::parse(&text, "generated")
        .expect("the generated config must validate")
        .policy
}

fn placement(c: &mut Criterion) {
    let mut group = c.benchmark_group("placement");
    for algorithm in POLICIES {
        for leaves in SIZES {
            let policy = settings(algorithm, leaves);
            let mut book = UsageBook::new(&policy, 0);
            let ids: Vec<_> = policy.group_ids().collect();
            for (i, &g) in ids.iter().enumerate() {
                book.add(g, 1_000_000_000 * (1 + i as i128 % 13), 0);
            }
            let queues = Queues::new(&policy.order.fbsng);
            let target = policy
                .group_by_path(&format!("p{}/c0", leaves / 20))
                .expect("a generated leaf");
            let candidate = Candidate {
                id: 1,
                group: target,
                library: String::new(),
                created_ms: 0,
                size_bytes: 5_000_000_000,
                benefit: 5_000_000_000,
                qos: Qos::Normal,
                user: 1.0,
                queue: 0.0,
                slots: 1,
                passed: 0,
            };
            let now = 3_600_000;
            group.bench_with_input(BenchmarkId::new(algorithm, leaves), &leaves, |b, _| {
                // A fresh standing per placement: the Fair Tree is computed on first use, as
                // the writer does for each decision.
                b.iter(|| {
                    let standing = Standing::new(&policy, book.at(now), &queues);
                    black_box(place(&policy.order, &standing, black_box(&candidate), now))
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, placement);
criterion_main!(benches);

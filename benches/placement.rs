//! One placement (`policy::order::place`) per policy at 10, 100 and 1,000 groups, three ways:
//! from a kept standing that is current (`placement`), from a fresh `ShareSnapshot`
//! (`placement_fresh`, the figure of the first measurement) and after a charge at a new instant
//! (`placement_after_charge`). The configuration is the shipped one with its `[shares]` replaced by a generated
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
use mssbroker::policy::order::{place, Candidate, ShareSnapshot, ShareSnapshotCache};
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

/// One configuration's fixture: the policy, a book where every group has usage, the queues
/// and a request of a leaf in the middle of the tree.
struct Fixture {
    policy: Arc<PolicySettings>,
    book: UsageBook,
    queues: Queues,
    candidate: Candidate,
}

fn fixture(algorithm: &str, leaves: usize) -> Fixture {
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
    Fixture {
        policy,
        book,
        queues,
        candidate,
    }
}

const NOW: i64 = 3_600_000;

/// `placement`: one `place` from a kept standing (`policy::order::ShareSnapshotCache`, current: no
/// charge since it was computed, same instant), what the simulator pays for each decision of
/// one instant after the first.
fn placement(c: &mut Criterion) {
    let mut group = c.benchmark_group("placement");
    for algorithm in POLICIES {
        for leaves in SIZES {
            let f = fixture(algorithm, leaves);
            let mut kept = ShareSnapshotCache::default();
            group.bench_with_input(BenchmarkId::new(algorithm, leaves), &leaves, |b, _| {
                b.iter(|| {
                    let s = kept.snapshot(&f.policy, &f.book, &f.queues, NOW);
                    black_box(place(&f.policy.order, &s, black_box(&f.candidate), NOW))
                })
            });
        }
    }
    group.finish();
}

/// `placement_fresh`: one `place` with a fresh `ShareSnapshot` per call (usage summed and, for
/// fair_tree and multifactor, the tree ranked in every call), what the ledger writer does per
/// decision today.
fn placement_fresh(c: &mut Criterion) {
    let mut group = c.benchmark_group("placement_fresh");
    for algorithm in POLICIES {
        for leaves in SIZES {
            let f = fixture(algorithm, leaves);
            group.bench_with_input(BenchmarkId::new(algorithm, leaves), &leaves, |b, _| {
                b.iter(|| {
                    let s = ShareSnapshot::new(&f.policy, f.book.at(NOW), &f.queues);
                    black_box(place(&f.policy.order, &s, black_box(&f.candidate), NOW))
                })
            });
        }
    }
    group.finish();
}

/// `placement_after_charge`: a charge to the request's group, then one `place` from the kept
/// standing at the next millisecond: the book changed and the instant moved, so what is kept is
/// recomputed (the shipped half-life model's `U`; the tree for fair_tree and multifactor). The
/// cost of a decision that follows a charge, as in a busy pass-through simulation.
fn placement_after_charge(c: &mut Criterion) {
    let mut group = c.benchmark_group("placement_after_charge");
    for algorithm in POLICIES {
        for leaves in SIZES {
            let mut f = fixture(algorithm, leaves);
            let mut kept = ShareSnapshotCache::default();
            let mut now = NOW;
            group.bench_with_input(BenchmarkId::new(algorithm, leaves), &leaves, |b, _| {
                b.iter(|| {
                    now += 1;
                    f.book.add(f.candidate.group, 1, now);
                    let s = kept.snapshot(&f.policy, &f.book, &f.queues, now);
                    black_box(place(&f.policy.order, &s, black_box(&f.candidate), now))
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, placement, placement_fresh, placement_after_charge);
criterion_main!(benches);

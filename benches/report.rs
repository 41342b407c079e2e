//! The share report over a long history: 90 days by day and 7 days by hour over 1M requests
//! written through the real writer (`bench_report::fill_file`, as `mssbroker bench
//! --report-requests`). 10M requests take minutes to write, so they run only with
//! `MSSBROKER_BENCH_10M=1`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use mssbroker::ledger::LedgerReader;
use mssbroker::report::{Bucket, ReportRange};

const DAY_MS: i64 = 86_400_000;

/// Run by `cargo test --benches` (criterion's test mode: each benchmark once, no `--bench`
/// argument) rather than `cargo bench`: a history of 2,000 requests, so the suite keeps the
/// benchmark compiling and running in seconds.
fn short_mode() -> bool {
    !std::env::args().any(|a| a == "--bench")
}

fn sizes() -> Vec<usize> {
    if short_mode() {
        return vec![2_000];
    }
    let mut v = vec![1_000_000];
    if std::env::var_os("MSSBROKER_BENCH_10M").is_some() {
        v.push(10_000_000);
    }
    v
}

fn report(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let mut group = c.benchmark_group("report");
    group.sample_size(20);
    for requests in sizes() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("bench.db");
        let (settings, now) = runtime
            .block_on(mssbroker::bench_report::fill_file(&path, requests))
            .expect("the fill");
        let reader = LedgerReader::open(&path).expect("the filled ledger");
        for (name, days, bucket) in [
            ("90 days by day", 90, Bucket::Day),
            ("7 days by hour", 7, Bucket::Hour),
        ] {
            let range = ReportRange {
                since_ms: now - days * DAY_MS,
                until_ms: now,
                bucket,
            };
            group.bench_function(format!("{requests} requests, {name}"), |b| {
                b.iter(|| {
                    black_box(
                        mssbroker::report::read_file(&reader, &settings.policy, range, now)
                            .expect("the report"),
                    )
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, report);
criterion_main!(benches);

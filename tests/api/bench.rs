//! The benchmarks in short mode through the real binary, so they cannot rot: each prints its
//! figures, and every figure is present and positive. Nothing here asserts speed.

use std::process::Command;

use crate::helpers::BIN;

/// Run `mssbroker bench ARGS`; its standard output.
fn bench(args: &[&str]) -> String {
    let out = Command::new(BIN)
        .arg("bench")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("command: ") && text.contains("machine: "),
        "{text}"
    );
    text
}

/// The number right after `key` on the first line containing `line`.
fn figure(text: &str, line: &str, key: &str) -> f64 {
    let l = text
        .lines()
        .find(|l| l.contains(line))
        .unwrap_or_else(|| panic!("no line with {line:?} in\n{text}"));
    let after = &l[l.find(key).unwrap_or_else(|| panic!("no {key:?} in {l:?}")) + key.len()..];
    after
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no number after {key:?} in {l:?}"))
}

#[test]
fn bench_ingest_prints_positive_figures() {
    let text = bench(&[
        "ingest",
        "--connections",
        "2",
        "--seconds",
        "0.3",
        "--rounds",
        "1",
        "--batch",
        "20",
    ]);
    let median = &text[text.find("median over").expect("a median section")..];
    for line in ["GET /healthz", "single requests", "batches of 20"] {
        assert!(figure(median, line, line) > 0.0, "{line}: {text}");
        assert!(figure(median, line, "p50") > 0.0, "{line}: {text}");
        assert!(figure(median, line, "p99") > 0.0, "{line}: {text}");
    }
    assert!(figure(median, "mean commit", "mean commit") > 0.0, "{text}");
    assert!(figure(median, "ratio", "ratio") > 0.0, "{text}");
}

/// `bench ingest` on PostgreSQL beside SQLite, interleaved in one sitting (a throwaway cluster
/// of the distribution's binaries, a new database per round): each backend's median figures,
/// PostgreSQL's round trips per commit, the server's durability settings and the ratio.
#[test]
fn bench_ingest_on_both_backends_prints_each_median_and_the_ratio() {
    let cluster = pg_cluster::Cluster::start().expect("a PostgreSQL cluster");
    let url = cluster.url();
    let text = bench(&[
        "ingest",
        "--connections",
        "2",
        "--seconds",
        "0.3",
        "--rounds",
        "1",
        "--batch",
        "20",
        "--backends",
        "sqlite,postgres",
        "--db",
        &url,
    ]);
    assert!(
        text.contains("synchronous_commit=") && text.contains("fsync="),
        "{text}"
    );
    for backend in ["sqlite", "postgres"] {
        let header = format!("median over 1 round(s) ({backend}):");
        let median = &text[text
            .find(&header)
            .unwrap_or_else(|| panic!("{header}: {text}"))..];
        for line in ["GET /healthz", "single requests", "batches of 20"] {
            assert!(figure(median, line, line) > 0.0, "{backend} {line}: {text}");
            assert!(
                figure(median, line, "p50") > 0.0,
                "{backend} {line}: {text}"
            );
        }
        assert!(figure(median, "mean commit", "mean commit") > 0.0, "{text}");
    }
    let on_postgres = &text[text.find("(postgres):").expect("postgres")..];
    assert!(
        figure(on_postgres, "round trips", "commands,") > 0.0,
        "{text}"
    );
    assert!(
        figure(&text, "postgres/sqlite:", "single requests") > 0.0,
        "{text}"
    );
    assert!(
        figure(&text, "postgres/sqlite:", "batches of 20") > 0.0,
        "{text}"
    );
    let left: Vec<String> = {
        let mut conn = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
        (conn.query(
            "SELECT datname FROM pg_database WHERE datname LIKE 'mssbroker_bench%'",
            &[],
        ))
        .expect("databases")
        .iter()
        .map(|r| r.get(0))
        .collect()
    };
    assert!(
        left.is_empty(),
        "each round's database is dropped: {left:?}"
    );
}

#[test]
fn bench_backlog_prints_positive_figures() {
    let text = bench(&[
        "backlog",
        "--queued",
        "1000",
        "--connections",
        "2",
        "--seconds",
        "0.3",
        "--samples",
        "20",
        "--readers",
        "2",
    ]);
    assert!(
        figure(&text, "queued (held", "bench backlog:") > 0.0,
        "{text}"
    );
    assert!(figure(&text, "restart:", "first 202") > 0.0, "{text}");
    assert!(figure(&text, "restart:", "VmRSS") > 0.0, "{text}");
    let explain = "first explain over HTTP";
    assert!(figure(&text, explain, "restart:") > 0.0, "{text}");
    assert!(figure(&text, explain, "VmRSS") > 0.0, "{text}");
    let read_back = "just-submitted GET";
    assert!(figure(&text, read_back, "p50") > 0.0, "{text}");
    assert!(figure(&text, read_back, "p99") > 0.0, "{text}");
    assert!(
        figure(&text, "ranking of the queue", "requests in") > 0.0,
        "{text}"
    );
    assert!(
        figure(&text, "ingest with the backlog", "connections,") > 0.0,
        "{text}"
    );
    for line in ["release decision", "explain of a queued"] {
        assert!(figure(&text, line, "p50") > 0.0, "{line}: {text}");
        assert!(figure(&text, line, "p99") > 0.0, "{line}: {text}");
    }
}

/// `bench history` in short mode: every line's requests are all final, with the broker's
/// memory, and the run ends with every request accepted and finished.
#[test]
fn bench_history_prints_memory_against_requests_accepted() {
    let text = bench(&[
        "history",
        "--requests",
        "3000",
        "--every",
        "1000",
        "--batch",
        "250",
        "--unfinished",
        "1000",
        "--ingest-seconds",
        "0.3",
    ]);
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("history: "))
        .collect();
    assert_eq!(lines.len(), 4, "a line at 0 and every 1000: {text}");
    for (k, line) in lines.iter().enumerate() {
        assert_eq!(
            figure(line, "history:", "history:"),
            (k * 1000) as f64,
            "{text}"
        );
        assert!(figure(line, "history:", "VmRSS") > 0.0, "{text}");
        assert!(figure(line, "history:", "VmHWM") > 0.0, "{text}");
    }
    for line in &lines[1..] {
        assert!(figure(line, "history:", "database") > 0.0, "{text}");
        let rate = line
            .split(" requests/s")
            .next()
            .and_then(|l| l.rsplit(' ').next());
        let rate: f64 = rate.and_then(|r| r.parse().ok()).unwrap_or(0.0);
        assert!(rate > 0.0, "{line}");
    }
    let end = "requests accepted and finished";
    assert_eq!(figure(&text, end, "bench history:"), 3000.0, "{text}");
    assert!(
        figure(&text, "ingest after 3000 finished", "holding:") > 0.0,
        "{text}"
    );
    assert!(
        figure(&text, "restart on the history", "first 202") > 0.0,
        "{text}"
    );
    assert!(
        figure(&text, "restart on the history", "VmRSS") > 0.0,
        "{text}"
    );
}

#[test]
fn bench_ingest_with_a_serve_child_prints_the_brokers_cpu() {
    let out = Command::new(BIN)
        .args(["bench", "ingest", "--connections", "2", "--seconds", "0.3"])
        .args(["--rounds", "1", "--batch", "20"])
        .env("MSSBROKER_BENCH_SERVE", BIN)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(figure(&text, "`serve` child pid", "pid") > 0.0, "{text}");
    // CPU time is counted in clock ticks: a short phase may show 0, never less.
    for key in ["healthz", "single", "batch"] {
        assert!(figure(&text, "broker CPU:", key) >= 0.0, "{key}: {text}");
    }
    let median = &text[text.find("median over").expect("a median section")..];
    assert!(
        figure(median, "single requests", "single requests") > 0.0,
        "{text}"
    );
}

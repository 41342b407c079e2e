//! `mssbroker bench --report-requests N`: how long a report takes on a long history. Fills a
//! fresh ledger with N requests spread over 90 days (accepted, started and finished through the
//! real writer, with a manual clock), then times a 90-day report by day, a 7-day report by
//! hour, `GET /v1/groups`' share view, and, for comparison, the naive per-group sum over every
//! request row that the aggregates replace.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use mss_adapters::{EventKind, MssEvent};

use crate::clock::{Clock, ManualClock};
use crate::config::Settings;
use crate::domain::PolicySettings;
use crate::ledger::{Accepted, Ledger, LedgerOptions, LedgerReader, NewRequest, RequestInput};
use crate::report::{Bucket, ReportRange};

const DAY_MS: i64 = 86_400_000;
/// Requests accepted per ledger call while filling.
const BATCH: usize = 1_000;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Fill and time; prints its figures.
pub async fn run(requests: usize, rounds: usize) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("mssbroker-bench-report-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("bench.db");
    let filled = Instant::now();
    let (settings, now) = fill_file(&path, requests).await?;
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    println!(
        "bench report: {requests} requests over 90 days written in {:.1} s; database {:.0} MB",
        filled.elapsed().as_secs_f64(),
        size as f64 / 1e6
    );
    let reader = LedgerReader::open(&path)?;
    time_reads(&reader, &settings.policy, now, rounds)?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Fill a fresh ledger at `path` with `requests` requests over 90 days (the shipped config, a
/// manual clock); returns the settings and the clock's time at the end. The criterion report
/// benchmark (`benches/report.rs`) reads the same history.
pub async fn fill_file(path: &Path, requests: usize) -> anyhow::Result<(Settings, i64)> {
    let settings = Settings::parse(crate::config::EMBEDDED, "embedded")?;
    let clock = ManualClock::new(1_800_000_000_000i64 / DAY_MS * DAY_MS);
    fill(&settings, path, &clock, requests).await?;
    Ok((settings, clock.now_ms()))
}

/// Write `requests` requests through the real writer, spread over 90 days of `clock`: each
/// batch accepted, started a third of a step later, finished (one in 50 failed) a third later.
async fn fill(
    settings: &Settings,
    path: &Path,
    clock: &ManualClock,
    requests: usize,
) -> anyhow::Result<()> {
    let policy = settings.policy.clone();
    let options = LedgerOptions {
        path: path.to_path_buf(),
        commit_batch_max: settings.database.commit_batch_max,
        url: None,
        epoch: 1,
        retry: settings.mss.retry,
        metrics: Arc::new(crate::metrics::Metrics::default()),
        read_outputs: settings.mss.read_outputs(),
    };
    let (ledger, writer) = Ledger::open(&options, policy.clone(), Arc::new(clock.clone()))?;
    let step = 90 * DAY_MS / (requests / BATCH).max(1) as i64;
    let mut seq = 0u64;
    for b in 0..requests.div_ceil(BATCH) {
        let items = batch(&policy, b * BATCH, BATCH.min(requests - b * BATCH));
        let accepted = ledger.accept(items).await?;
        clock.advance_ms(step / 3);
        let started = events(&ledger, &accepted, &mut seq, |_| EventKind::Started);
        ledger.apply_status_events(started).await?;
        clock.advance_ms(step / 3);
        let finished = events(&ledger, &accepted, &mut seq, |i| {
            if i % 50 == 0 {
                EventKind::Failed {
                    reason: "bench".into(),
                    retryable: false,
                }
            } else {
                EventKind::Done {
                    bytes: 1_000_000_000,
                }
            }
        });
        ledger.apply_status_events(finished).await?;
        clock.advance_ms(step - 2 * (step / 3));
    }
    drop(ledger);
    let _ = writer.join();
    Ok(())
}

/// Requests `first..first + count`, spread over the configured groups.
fn batch(policy: &PolicySettings, first: usize, count: usize) -> Vec<NewRequest> {
    let groups: Vec<_> = policy.group_ids().collect();
    (first..first + count)
        .map(|n| {
            let g = groups[n % groups.len()];
            let path = policy.group(g).path.to_string();
            NewRequest {
                input: RequestInput {
                    station: "bench".into(),
                    client_request_id: format!("r{n}"),
                    user: "u".into(),
                    file: format!("/pnfs/bench/{n}"),
                    size_bytes: 1_000_000_000 + (n as u64 % 7) * 100_000_000,
                    access_mode: path.split('/').next().unwrap_or("mc").to_string(),
                    physics_group: "x".into(),
                    volume: None,
                    direction: mss_adapters::Direction::Read,
                    extras: Default::default(),
                },
                group: g,
                benefit: 1_000_000_000 + (n as u64 % 7) * 100_000_000,
            }
        })
        .collect()
}

/// One event per accepted request (the `i`-th gets `kind(i)`), numbered on from `seq`.
fn events(
    ledger: &Ledger,
    accepted: &[Accepted],
    seq: &mut u64,
    kind: impl Fn(usize) -> EventKind,
) -> Vec<MssEvent> {
    accepted
        .iter()
        .enumerate()
        .map(|(i, a)| {
            *seq += 1;
            MssEvent {
                seq: *seq,
                key: ledger.mss_key(a.id),
                attempt: 1,
                at_ms: 0,
                kind: kind(i),
            }
        })
        .collect()
}

/// Time the reads on the filled database, `rounds` times each; prints the medians.
fn time_reads(
    reader: &LedgerReader,
    policy: &PolicySettings,
    now: i64,
    rounds: usize,
) -> anyhow::Result<()> {
    let time = |what: &str, f: &dyn Fn() -> anyhow::Result<()>| -> anyhow::Result<()> {
        let mut v = Vec::new();
        for _ in 0..rounds.max(1) {
            let t = Instant::now();
            f()?;
            v.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        println!(
            "  {what:<46} median {:>8.2} ms  ({} runs)",
            median(v),
            rounds.max(1)
        );
        Ok(())
    };
    println!(
        "  aggregate rows (group x hour): {}",
        reader.aggregate_rows()?
    );
    let range = |days: i64, bucket| ReportRange {
        since_ms: now - days * DAY_MS,
        until_ms: now,
        bucket,
    };
    time("report, 90 days by day", &|| {
        crate::report::read_file(reader, policy, range(90, Bucket::Day), now)?;
        Ok(())
    })?;
    time("report, 7 days by hour", &|| {
        crate::report::read_file(reader, policy, range(7, Bucket::Hour), now)?;
        Ok(())
    })?;
    time("share view (GET /v1/groups)", &|| {
        reader.shares(policy, now, now)?;
        Ok(())
    })?;
    time("naive: SUM(bytes_done) GROUP BY over requests", &|| {
        anyhow::ensure!(reader.scan_requests_per_group()? > 0);
        Ok(())
    })?;
    Ok(())
}

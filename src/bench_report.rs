//! `mssbroker bench --report-requests N`: how long a report takes on a long history. Fills a
//! fresh ledger with N requests spread over 90 days (accepted, started and finished through the
//! real writer, with a manual clock), then times a 90-day report by day, a 7-day report by
//! hour, `GET /v1/groups`' share view, and, for comparison, the naive per-group sum over every
//! request row that the aggregates replace.

use std::sync::Arc;
use std::time::Instant;

use mss_adapters::{EventKind, MssEvent};

use crate::clock::{Clock, ManualClock};
use crate::config::Settings;
use crate::ledger::{Ledger, LedgerOptions, NewRequest};
use crate::report::{Bucket, ReportRange};

const DAY_MS: i64 = 86_400_000;

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
    let settings = Settings::parse(crate::config::EMBEDDED, "embedded")?;
    let policy = settings.policy.clone();
    let start = 1_800_000_000_000i64 / DAY_MS * DAY_MS;
    let clock = ManualClock::new(start);
    let options = LedgerOptions {
        path: path.clone(),
        commit_batch_max: settings.database.commit_batch_max,
        retry: settings.mss.retry.clone(),
        metrics: Arc::default(),
    };
    let (ledger, writer) = Ledger::open(&options, policy.clone(), Arc::new(clock.clone()))?;
    let groups: Vec<_> = policy.group_ids().collect();
    let batch = 1_000;
    let step = 90 * DAY_MS / (requests / batch).max(1) as i64;
    let filled = Instant::now();
    let mut seq = 0u64;
    for b in 0..requests.div_ceil(batch) {
        let items: Vec<NewRequest> = (0..batch.min(requests - b * batch))
            .map(|i| {
                let n = b * batch + i;
                let g = groups[n % groups.len()];
                let path = policy.group(g).path.to_string();
                NewRequest {
                    station: "bench".into(),
                    client_request_id: format!("r{n}"),
                    user: "u".into(),
                    file: format!("/pnfs/bench/{n}"),
                    size_bytes: 1_000_000_000 + (n as u64 % 7) * 100_000_000,
                    access_mode: path.split('/').next().unwrap_or("mc").to_string(),
                    physics_group: "x".into(),
                    volume: None,
                    direction: mss_adapters::Direction::Read,
                    group: g,
                    benefit: 1_000_000_000 + (n as u64 % 7) * 100_000_000,
                    extras: Default::default(),
                }
            })
            .collect();
        let accepted = ledger.accept(items).await?;
        clock.advance_ms(step / 3);
        let mut events = Vec::with_capacity(accepted.len() * 2);
        for a in &accepted {
            seq += 1;
            events.push(MssEvent {
                seq,
                key: a.id.to_string(),
                attempt: 1,
                at_ms: 0,
                kind: EventKind::Started,
            });
        }
        ledger.apply_status_events(events).await?;
        clock.advance_ms(step / 3);
        let events = accepted
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let kind = if i % 50 == 0 {
                    EventKind::Failed {
                        reason: "bench".into(),
                        retryable: false,
                    }
                } else {
                    EventKind::Done {
                        bytes: 1_000_000_000,
                    }
                };
                MssEvent {
                    seq: seq + i as u64 + 1,
                    key: a.id.to_string(),
                    attempt: 1,
                    at_ms: 0,
                    kind,
                }
            })
            .collect();
        seq += accepted.len() as u64;
        ledger.apply_status_events(events).await?;
        clock.advance_ms(step - 2 * (step / 3));
    }
    drop(ledger);
    let _ = writer.join();
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    println!(
        "bench report: {requests} requests over 90 days written in {:.1} s; database {:.0} MB",
        filled.elapsed().as_secs_f64(),
        size as f64 / 1e6
    );
    let conn = crate::ledger::open_read_only(&path)?;
    let now = clock.now_ms();
    let hours: i64 = conn.query_row("SELECT COUNT(*) FROM report_hours", [], |r| r.get(0))?;
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
    println!("  aggregate rows (group x hour): {hours}");
    let range = |days: i64, bucket| ReportRange {
        since_ms: now - days * DAY_MS,
        until_ms: now,
        bucket,
    };
    time("report, 90 days by day", &|| {
        crate::ledger::read_report(&conn, &policy, range(90, Bucket::Day), now)?;
        Ok(())
    })?;
    time("report, 7 days by hour", &|| {
        crate::ledger::read_report(&conn, &policy, range(7, Bucket::Hour), now)?;
        Ok(())
    })?;
    time("share view (GET /v1/groups)", &|| {
        crate::ledger::read_shares(&conn, &policy, now, now)?;
        Ok(())
    })?;
    time("naive: SUM(bytes_done) GROUP BY over requests", &|| {
        let mut st = conn.prepare(
            "SELECT group_path, state, COUNT(*), SUM(bytes_done) FROM requests GROUP BY 1, 2",
        )?;
        let n = st.query_map([], |r| r.get::<_, i64>(2))?.count();
        anyhow::ensure!(n > 0);
        Ok(())
    })?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

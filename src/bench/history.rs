//! `mssbroker bench history --requests N`: the broker's memory against its history. A `serve`
//! child on the shipped configuration (pass-through), its MSS an [`InstantMss`] in this process
//! that finishes every transfer at once (so its own memory is not the broker's), takes `N`
//! requests in batches; every `--every` requests the load pauses until every request so far is
//! final, and a line gives the requests accepted and finished, the broker process's `VmRSS` and
//! `VmHWM`, the database's size and the rate since the last line. At the end: ingest alone on
//! that history (the MSS holding), and a restart on it. A broker's steady-state memory must
//! depend on what is unfinished, not on how many requests it ever took.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Value};

use super::child::ChildBroker;
use super::instant_mss::InstantMss;
use super::load::{item, TOKEN};
use super::{command_line, machine};

/// What to run.
#[derive(Debug, Clone)]
pub struct HistoryOptions {
    /// Requests accepted and finished in all.
    pub requests: usize,
    /// A line every this many requests.
    pub every: usize,
    /// Requests per `POST /v1/requests/batch`.
    pub batch: usize,
    /// The load waits while more than this many requests are unfinished.
    pub unfinished: usize,
    /// Seconds of the ingest phase at the end.
    pub ingest_seconds: f64,
}

/// Batches posted at once.
const CLIENTS: usize = 4;

/// Run and print.
pub async fn run(o: &HistoryOptions) -> anyhow::Result<()> {
    println!("{}\n{}", command_line(), machine());
    let dir = std::env::temp_dir().join(format!("mssbroker-bench-history-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let mss = InstantMss::start().await?;
    let db = dir.join("bench.db");
    let broker = ChildBroker::start(&dir, &history_config(&mss.url)?, &db).await?;
    println!(
        "bench history: {} requests in batches of {}, at most {} unfinished, a line every {}",
        o.requests, o.batch, o.unfinished, o.every
    );
    let http = reqwest::Client::new();
    let started = Instant::now();
    let mut line = Line::new(&broker, &db, 0, started);
    let (mut accepted, mut next_line) = (0usize, o.every.max(1));
    while accepted < o.requests {
        let n = CLIENTS.min((o.requests - accepted).div_ceil(o.batch.max(1)));
        let posts: Vec<_> = (0..n)
            .map(|k| {
                let first = accepted + k * o.batch;
                let count = o.batch.min(o.requests.saturating_sub(first));
                let (http, base) = (http.clone(), broker.base.clone());
                tokio::spawn(async move { post_batch(&http, &base, first, count).await })
            })
            .collect();
        for post in posts {
            accepted += post.await??;
        }
        if pending(&http, &broker.base).await? > o.unfinished as u64 {
            wait_pending(&http, &broker.base, o.unfinished as u64 / 2).await?;
        }
        if accepted >= next_line || accepted >= o.requests {
            wait_pending(&http, &broker.base, 0).await?;
            line = line.next(&broker, &db, accepted);
            next_line += o.every.max(1);
        }
    }
    println!(
        "bench history: {accepted} requests accepted and finished in {:.1} s; broker VmRSS {:.0} MB at the end, VmHWM {:.0} MB",
        started.elapsed().as_secs_f64(),
        broker.status_mb("VmRSS"),
        broker.status_mb("VmHWM")
    );
    // Ingest alone on this history: the MSS holds its submissions, so the broker only takes
    // requests (each new one looked up among every finished one's key).
    mss.hold(true);
    let probe = ingest(&http, &broker.base, accepted, o).await?;
    mss.hold(false);
    wait_pending(&http, &broker.base, 0).await?;
    println!(
        "ingest after {accepted} finished: batches of {}, {CLIENTS} clients, the MSS holding: {:.0} requests/s ({} requests, then finished)",
        o.batch, probe.0, probe.1
    );
    broker.stop().await?;
    // A restart on the history: start-up reads the unfinished keys and the finished ones' filter.
    let t = Instant::now();
    let broker = ChildBroker::start(&dir, &history_config(&mss.url)?, &db).await?;
    let probe = super::backlog::first_202(&http, &broker.base).await?;
    println!(
        "restart on the history: first 202 {:.3} s after start (the probe call itself {probe:.3} s); broker VmRSS {:.1} MB, VmHWM {:.1} MB",
        t.elapsed().as_secs_f64(),
        broker.status_mb("VmRSS"),
        broker.status_mb("VmHWM")
    );
    broker.stop().await?;
    drop(mss);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Post batches from [`CLIENTS`] clients for `o.ingest_seconds`, ids from `first` on: requests
/// accepted per second, and how many.
async fn ingest(
    http: &reqwest::Client,
    base: &str,
    first: usize,
    o: &HistoryOptions,
) -> anyhow::Result<(f64, usize)> {
    let started = Instant::now();
    let mut next = first;
    while started.elapsed().as_secs_f64() < o.ingest_seconds {
        let posts: Vec<_> = (0..CLIENTS)
            .map(|k| {
                let (http, base, count) = (http.clone(), base.to_string(), o.batch);
                let from = next + k * count;
                tokio::spawn(async move { post_batch(&http, &base, from, count).await })
            })
            .collect();
        for post in posts {
            post.await??;
        }
        next += CLIENTS * o.batch;
    }
    let n = next - first;
    Ok((n as f64 / started.elapsed().as_secs_f64(), n))
}

/// One line of the table, printed when made.
struct Line {
    accepted: usize,
    at: Instant,
}

impl Line {
    fn new(broker: &ChildBroker, db: &Path, accepted: usize, at: Instant) -> Line {
        println!(
            "history: {accepted} accepted, all final: broker VmRSS {:.1} MB, VmHWM {:.1} MB, database {:.0} MB",
            broker.status_mb("VmRSS"),
            broker.status_mb("VmHWM"),
            database_mb(db)
        );
        Line { accepted, at }
    }

    fn next(self, broker: &ChildBroker, db: &Path, accepted: usize) -> Line {
        let seconds = self.at.elapsed().as_secs_f64();
        let rate = (accepted - self.accepted) as f64 / seconds.max(1e-9);
        println!(
            "history: {accepted} accepted, all final: broker VmRSS {:.1} MB, VmHWM {:.1} MB, database {:.0} MB, {rate:.0} requests/s accepted and finished since the last line",
            broker.status_mb("VmRSS"),
            broker.status_mb("VmHWM"),
            database_mb(db)
        );
        Line {
            accepted,
            at: Instant::now(),
        }
    }
}

/// The database file and its WAL, in MB.
fn database_mb(db: &Path) -> f64 {
    let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
    let wal = db.with_extension("db-wal");
    (size(db) + size(&wal)) as f64 / 1e6
}

/// The shipped configuration, pass-through, with the MSS at `url` (no embedded simulator) and
/// submissions to it bounded by nothing but the broker.
fn history_config(url: &str) -> anyhow::Result<String> {
    let text = crate::config::EMBEDDED;
    let changes = [
        (
            "adapter = \"http\"\n",
            format!("adapter = \"http\"\nurl = \"{url}\"\n"),
        ),
        (
            "[mss.simulator]\nenabled = true\n",
            "[mss.simulator]\nenabled = false\n".into(),
        ),
        (
            "submit_rate_per_sec = 5000\n",
            "submit_rate_per_sec = 1000000\n".into(),
        ),
        ("submit_burst = 500\n", "submit_burst = 20000\n".into()),
        ("submit_batch = 256\n", "submit_batch = 5000\n".into()),
    ];
    let mut config = text.to_string();
    for (from, to) in changes {
        anyhow::ensure!(
            config.contains(from),
            "the shipped config no longer has {from:?} as bench history expects"
        );
        config = config.replacen(from, &to, 1);
    }
    Ok(config)
}

/// Post requests `first..first + count` as one batch; how many were accepted.
async fn post_batch(
    http: &reqwest::Client,
    base: &str,
    first: usize,
    count: usize,
) -> anyhow::Result<usize> {
    if count == 0 {
        return Ok(0);
    }
    let items: Vec<Value> = (first..first + count)
        .map(|n| item("history", n % 8, n))
        .collect();
    let resp = http
        .post(format!("{base}/v1/requests/batch"))
        .bearer_auth(TOKEN)
        .json(&json!({ "requests": items }))
        .send()
        .await?;
    let status = resp.status();
    let _ = resp.bytes().await?;
    anyhow::ensure!(status.as_u16() == 202, "batch: {status}");
    Ok(count)
}

/// Requests not final, summed over the groups (`mssbroker_group_pending_requests`).
async fn pending(http: &reqwest::Client, base: &str) -> anyhow::Result<u64> {
    let text = http
        .get(format!("{base}/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    let values = text
        .lines()
        .filter(|l| l.starts_with("mssbroker_group_pending_requests{"))
        .map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()));
    let mut sum = 0.0;
    for v in values {
        sum += v.context("an unreadable pending figure")?;
    }
    Ok(sum as u64)
}

/// Wait until at most `most` requests are unfinished.
async fn wait_pending(http: &reqwest::Client, base: &str, most: u64) -> anyhow::Result<()> {
    let mut last = (u64::MAX, Instant::now());
    loop {
        let now = pending(http, base).await?;
        if now <= most {
            return Ok(());
        }
        // Progress resets the patience: only a broker that stopped finishing fails the run.
        if now < last.0 {
            last = (now, Instant::now());
        }
        anyhow::ensure!(
            last.1.elapsed() < Duration::from_secs(120),
            "{now} requests stayed unfinished for 2 minutes"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

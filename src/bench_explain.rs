//! `mssbroker bench --explain-queued N`: explains of queued requests against submissions. Starts
//! a real broker (the shipped config in held release mode with a limit of one slot, embedded
//! simulator) on a fresh SQLite file, queues N requests through `POST /v1/requests/batch`, times
//! one explain (`GET /v1/requests/{id}` of a queued request) on the idle broker, then runs
//! `pollers` clients polling queued requests while another station posts single requests for
//! `seconds`, and prints the median and p99 of both latencies.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use crate::config::Settings;
use crate::startup::Application;

/// What to run.
#[derive(Debug, Clone)]
pub struct ExplainOptions {
    /// Requests queued before the load starts.
    pub queued: usize,
    /// Clients polling queued requests.
    pub pollers: usize,
    /// Seconds of load.
    pub seconds: f64,
}

/// The shipped config's demo operator token (may act for any station, not rate limited).
const TOKEN: &str = "demo-operator";
/// Requests per batch while filling the queue.
const FILL_BATCH: usize = 10_000;

/// Fill, time and print.
pub async fn run(o: &ExplainOptions) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("mssbroker-bench-explain-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut settings = Settings::parse(&held_config()?, "embedded config/broker.toml, held")?;
    settings.database.path = dir.join("bench.db");
    settings.server.listen = "127.0.0.1:0".parse()?;
    let app = Application::build(&settings).await?;
    let base = format!("http://{}", app.local_addr());
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until_stopped(async {
        let _ = stopped.await;
    }));
    let http = reqwest::Client::new();

    let t = Instant::now();
    let ids = Arc::new(fill(&http, &base, o.queued).await?);
    println!(
        "bench explain: {} queued in {:.1} s (held, limit 1), {} pollers, {} s, {} cores",
        ids.len(),
        t.elapsed().as_secs_f64(),
        o.pollers,
        o.seconds,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    let probe = ids[ids.len() / 2];
    let mut one = Vec::new();
    for _ in 0..5 {
        one.push(get_once(&http, &base, probe).await?);
    }
    println!(
        "one explain, idle: first {:.2} ms, then median {:.2} ms",
        ms(one[0]),
        ms(median(&one[1..]))
    );

    let running = Arc::new(AtomicBool::new(true));
    let pollers: Vec<_> = (0..o.pollers)
        .map(|p| tokio::spawn(poll(base.clone(), ids.clone(), p, running.clone())))
        .collect();
    let poster = tokio::spawn(post(base.clone(), running.clone()));
    tokio::time::sleep(Duration::from_secs_f64(o.seconds)).await;
    running.store(false, Ordering::Relaxed);
    let mut gets = Vec::new();
    for p in pollers {
        gets.extend(p.await??);
    }
    let posts = poster.await??;
    print_latencies("GET  /v1/requests/{id} (queued)", gets);
    print_latencies("POST /v1/requests (station-b)", posts);
    let _ = stop.send(());
    server.await??;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// The shipped configuration in held release mode with one slot per library.
pub(crate) fn held_config() -> anyhow::Result<String> {
    let text = crate::config::EMBEDDED;
    let (mode, limit) = ("mode = \"pass_through\"\n", "\nlimit = 8\n");
    anyhow::ensure!(
        text.contains(mode) && text.contains(limit),
        "the shipped config no longer has [release] mode and limit as this benchmark expects"
    );
    Ok(text
        .replacen(mode, "mode = \"held\"\n", 1)
        .replacen(limit, "\nlimit = 1\n", 1))
}

pub(crate) fn item(station: &str, n: usize) -> Value {
    let groups = [
        ("analysis", "higgs"),
        ("analysis", "top"),
        ("reprocessing", "x"),
        ("mc", "top"),
    ];
    let (mode, group) = groups[n % groups.len()];
    json!({
        "client_request_id": format!("{station}-{n}"),
        "station": station,
        "user": "bench",
        "file": format!("/pnfs/bench/{station}/{n}"),
        "size_bytes": 10_000_000_000u64 + n as u64,
        "access_mode": mode,
        "physics_group": group,
    })
}

/// Queue `n` requests; returns the ids left queued.
pub(crate) async fn fill(http: &reqwest::Client, base: &str, n: usize) -> anyhow::Result<Vec<i64>> {
    let mut ids = Vec::with_capacity(n);
    let mut sent = 0;
    while sent < n {
        let items: Vec<Value> = (sent..n.min(sent + FILL_BATCH))
            .map(|i| item("station-fill", i))
            .collect();
        sent += items.len();
        let resp = http
            .post(format!("{base}/v1/requests/batch"))
            .bearer_auth(TOKEN)
            .json(&json!({ "requests": items }))
            .send()
            .await?;
        anyhow::ensure!(resp.status().as_u16() == 202, "fill: {}", resp.status());
        let body: Value = resp.json().await?;
        let results = body["results"].as_array().context("fill: no results")?;
        ids.extend(
            results
                .iter()
                .filter(|r| r["state"] == "queued")
                .filter_map(|r| r["id"].as_i64()),
        );
    }
    anyhow::ensure!(!ids.is_empty(), "nothing was queued");
    Ok(ids)
}

/// One explain; its latency in microseconds.
pub(crate) async fn get_once(http: &reqwest::Client, base: &str, id: i64) -> anyhow::Result<u64> {
    let t = Instant::now();
    let resp = http
        .get(format!("{base}/v1/requests/{id}"))
        .bearer_auth(TOKEN)
        .send()
        .await?;
    let status = resp.status();
    let body: Value = resp.json().await?;
    let micros = t.elapsed().as_micros() as u64;
    anyhow::ensure!(status.as_u16() == 200, "GET {id}: {status}");
    if body["state"] == "queued" {
        // No position only before the first ranking since the start (`not_ranked`).
        let basis = body["position_basis"].as_str();
        anyhow::ensure!(
            body["explain"]["position"].is_u64() || basis == Some("not_ranked"),
            "GET {id}: a queued request without a position: {body}"
        );
    }
    Ok(micros)
}

/// Poll queued requests (a fixed pseudo-random walk over `ids`) until told to stop.
async fn poll(
    base: String,
    ids: Arc<Vec<i64>>,
    p: usize,
    running: Arc<AtomicBool>,
) -> anyhow::Result<Vec<u64>> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .build()?;
    let mut lat = Vec::new();
    let mut k = p as u64 * 7919 + 1;
    while running.load(Ordering::Relaxed) {
        k = k.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let id = ids[((k >> 33) as usize) % ids.len()];
        lat.push(get_once(&http, &base, id).await?);
    }
    Ok(lat)
}

/// Another station posting single requests until told to stop.
async fn post(base: String, running: Arc<AtomicBool>) -> anyhow::Result<Vec<u64>> {
    let http = reqwest::Client::new();
    let mut lat = Vec::new();
    let mut n = 0;
    while running.load(Ordering::Relaxed) {
        n += 1;
        let t = Instant::now();
        let resp = http
            .post(format!("{base}/v1/requests"))
            .bearer_auth(TOKEN)
            .json(&item("station-b", n))
            .send()
            .await?;
        let status = resp.status();
        let _ = resp.bytes().await?;
        lat.push(t.elapsed().as_micros() as u64);
        anyhow::ensure!(status.as_u16() == 202, "POST: {status}");
    }
    Ok(lat)
}

fn ms(micros: u64) -> f64 {
    micros as f64 / 1000.0
}

fn median(v: &[u64]) -> u64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

fn print_latencies(what: &str, mut v: Vec<u64>) {
    v.sort_unstable();
    let pct = |p: f64| {
        v.get(((v.len() as f64 * p) as usize).min(v.len().saturating_sub(1)))
            .map_or(0.0, |&x| ms(x))
    };
    println!(
        "{what}: {} calls, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        v.len(),
        pct(0.50),
        pct(0.99),
        v.last().map_or(0.0, |&x| ms(x))
    );
}

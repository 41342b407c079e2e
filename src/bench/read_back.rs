//! `bench backlog`'s read-back phase: clients each post a single request (queued, in held mode)
//! and read it back at once with `GET /v1/requests/{id}`, as docs/api.md tells stations to do
//! after a 202. Times the GET, and counts where its position came from (`position_basis`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::Value;

use super::load::TOKEN;
use super::{summarise, Round};

/// The GETs' figures.
pub(crate) struct ReadBack {
    pub gets: Round,
    /// Answers by `position_basis` (`-`: not queued any more, or no basis).
    pub bases: BTreeMap<String, u64>,
}

/// `clients` clients posting and reading back for `seconds`.
pub(crate) async fn read_back(
    base: &str,
    clients: usize,
    seconds: f64,
) -> anyhow::Result<ReadBack> {
    let running = Arc::new(AtomicBool::new(true));
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let (base, running) = (base.to_string(), running.clone());
            tokio::spawn(async move { client(&base, c, &running).await })
        })
        .collect();
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    running.store(false, Ordering::Relaxed);
    let (mut latencies, mut bases) = (Vec::new(), BTreeMap::new());
    for t in tasks {
        let (lat, seen) = t.await??;
        latencies.extend(lat);
        for basis in seen {
            *bases.entry(basis).or_default() += 1;
        }
    }
    let gets = summarise(
        latencies.len() as u64,
        start.elapsed().as_secs_f64(),
        latencies,
    );
    Ok(ReadBack { gets, bases })
}

/// One client: post, read back, again; each GET's latency (µs) and basis.
async fn client(
    base: &str,
    c: usize,
    running: &AtomicBool,
) -> anyhow::Result<(Vec<u64>, Vec<String>)> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .build()?;
    let station = format!("station-readback-{c}");
    let (mut latencies, mut bases, mut n) = (Vec::new(), Vec::new(), 0);
    while running.load(Ordering::Relaxed) {
        n += 1;
        let resp = http
            .post(format!("{base}/v1/requests"))
            .bearer_auth(TOKEN)
            .json(&crate::bench_explain::item(&station, n))
            .send()
            .await?;
        anyhow::ensure!(resp.status().as_u16() == 202, "POST: {}", resp.status());
        let posted: Value = resp.json().await?;
        let id = posted["id"].as_i64().context("POST: no id")?;
        let t = Instant::now();
        let resp = http
            .get(format!("{base}/v1/requests/{id}"))
            .bearer_auth(TOKEN)
            .send()
            .await?;
        let status = resp.status();
        let body: Value = resp.json().await?;
        latencies.push(t.elapsed().as_micros() as u64);
        anyhow::ensure!(status.as_u16() == 200, "GET {id}: {status}");
        bases.push(body["position_basis"].as_str().unwrap_or("-").to_string());
    }
    Ok((latencies, bases))
}

//! `mssbroker_request_wait_seconds`: how long requests wait from acceptance to their first
//! start at the MSS, per group and kind (`priority` is data taking), as a Prometheus histogram.
//!
//! The source is the ledger's own wait histograms (`report_waits`, four bins per doubling of
//! milliseconds, kept in the transaction that records the start), not an in-process histogram:
//! the figures survive a restart and agree with `GET /v1/report`'s waits. A scrape reads only
//! the rows of the last hours: [`WaitTotals`] keeps the sums of the hours before them, which no
//! longer change (a start is counted in the hour of the writer's clock when it is recorded).
//!
//! Buckets are every fourth ledger bin, so each Prometheus bucket is exact, not interpolated:
//! ledger bin `b` holds the whole-millisecond waits `w` with `floor(4 log2(w + 1)) = b`, so bins
//! `0 ..= 4k - 1` hold exactly the waits `w <= 2^k - 2` ms, the bucket `le = (2^k - 2) / 1000`
//! seconds (k = 1 ..= 28: 0 s up to about 3.1 days; later waits only in `+Inf`).

use std::collections::BTreeMap;
use std::sync::Mutex;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

use super::GroupLabels;
use crate::ledger::aggregates::{hour_of, HourRow};
use crate::ledger::{Ledger, LedgerError, WaitRow};

/// Buckets below `+Inf`: `le = (2^k - 2)` ms for k = 1 ..= BUCKETS.
const BUCKETS: usize = 28;

/// Hours whose rows a scrape always reads again: the current one and the one before (a start
/// recorded just before the hour turned may commit just after).
const OPEN_HOURS: i64 = 2;

/// The Prometheus bucket (index into the `le` list; `BUCKETS` is `+Inf`) of ledger bin `bin`.
fn bucket_of(bin: i64) -> usize {
    let k = (bin.max(0) / 4 + 1) as usize;
    k.min(BUCKETS + 1) - 1
}

/// The upper bounds, in seconds, ending with `+Inf`.
fn bounds() -> Vec<f64> {
    (1..=BUCKETS as i32)
        .map(|k| (2f64.powi(k) - 2.0) / 1000.0)
        .chain(std::iter::once(f64::INFINITY))
        .collect()
}

/// Per group path, the count of each ledger bin.
pub type Bins = BTreeMap<String, BTreeMap<i64, u64>>;

/// The first hour still open at `now_ms`: hours before it are sealed.
fn seal_before(now_ms: i64) -> i64 {
    hour_of(now_ms) - OPEN_HOURS + 1
}

/// The sums of the wait histograms' closed hours, kept between scrapes.
#[derive(Debug)]
pub struct WaitTotals {
    sealed: Mutex<Sealed>,
    /// One read at a time: two would both read the hours the first one seals.
    one_read: tokio::sync::Mutex<()>,
}

#[derive(Debug)]
struct Sealed {
    /// Rows of hours before this are in `bins`; none of later hours are.
    before_hour: i64,
    bins: Bins,
}

impl Default for WaitTotals {
    fn default() -> Self {
        WaitTotals {
            sealed: Mutex::new(Sealed {
                before_hour: i64::MIN,
                bins: Bins::new(),
            }),
            one_read: tokio::sync::Mutex::new(()),
        }
    }
}

fn add(bins: &mut Bins, path: &str, bin: i64, n: i64) {
    let counts = match bins.get_mut(path) {
        Some(c) => c,
        None => bins.entry(path.to_string()).or_default(),
    };
    *counts.entry(bin).or_default() += n.max(0) as u64;
}

impl WaitTotals {
    /// Every group's bins at `now_ms`: the sealed hours' sums and the rows read from the ledger
    /// since (the first read after a start reads every hour, summed in SQL; later ones the last
    /// hours). Run it in a task of its own: a scraper that gives up does not lose the read.
    pub async fn read(&self, ledger: &Ledger, now_ms: i64) -> Result<Bins, LedgerError> {
        let _one = self.one_read.lock().await;
        let rows = ledger
            .metric_waits(self.read_since(), seal_before(now_ms))
            .await?;
        Ok(self.merge(&rows, now_ms))
    }

    /// The first hour whose rows the next scrape must read.
    pub fn read_since(&self) -> i64 {
        self.lock().before_hour
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Sealed> {
        // The sums stay whole under a panic elsewhere: every update is one merge below.
        self.sealed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// All the bins: the closed hours' sums and `rows` (read from [`Self::read_since`] on, at
    /// `now_ms`, a row's hour before [`seal_before`] only if all its hours are), sealing the
    /// hours that closed since. Rows of hours already sealed are skipped.
    pub fn merge(&self, rows: &[WaitRow], now_ms: i64) -> Bins {
        let seal_before = seal_before(now_ms);
        let mut sealed = self.lock();
        let from = sealed.before_hour;
        let mut open = Bins::new();
        for (path, hour, bin, n) in rows.iter().filter(|r| r.1 >= from) {
            if *hour < seal_before {
                add(&mut sealed.bins, path, *bin, *n);
            } else {
                add(&mut open, path, *bin, *n);
            }
        }
        sealed.before_hour = sealed.before_hour.max(seal_before);
        let mut all = sealed.bins.clone();
        for (path, counts) in open {
            for (bin, n) in counts {
                add(&mut all, &path, bin, n as i64);
            }
        }
        all
    }
}

/// One group's wait histogram, ready to encode.
#[derive(Debug)]
struct Series {
    sum_seconds: f64,
    count: u64,
    /// (upper bound, count in that bucket alone), ending with `+Inf`.
    buckets: Vec<(f64, u64)>,
}

/// The family `mssbroker_request_wait_seconds`, built at scrape time.
#[derive(Debug, Default)]
pub(super) struct WaitFamily(Vec<(GroupLabels, Series)>);

impl WaitFamily {
    /// A histogram per group of `totals` (its `_sum` is the ledger's `wait_ms_sum`) and per
    /// group with bins, labelled by `kind_of`.
    pub(super) fn build(
        totals: &[(String, HourRow)],
        bins: &Bins,
        kind_of: impl Fn(&str) -> &'static str,
    ) -> WaitFamily {
        let mut sums: BTreeMap<&str, i64> = bins.keys().map(|p| (p.as_str(), 0)).collect();
        for (path, r) in totals {
            sums.insert(path, r.wait_ms_sum);
        }
        let bounds = bounds();
        let series = sums
            .into_iter()
            .map(|(path, sum_ms)| {
                let mut buckets: Vec<(f64, u64)> = bounds.iter().map(|b| (*b, 0)).collect();
                for (bin, n) in bins.get(path).into_iter().flatten() {
                    buckets[bucket_of(*bin)].1 += n;
                }
                let labels = GroupLabels {
                    group: path.to_string(),
                    kind: kind_of(path).to_string(),
                };
                let series = Series {
                    sum_seconds: sum_ms.max(0) as f64 / 1000.0,
                    count: buckets.iter().map(|b| b.1).sum(),
                    buckets,
                };
                (labels, series)
            })
            .collect();
        WaitFamily(series)
    }
}

impl EncodeMetric for WaitFamily {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for (labels, s) in &self.0 {
            encoder
                .encode_family(labels)?
                .encode_histogram::<NoLabelSet>(s.sum_seconds, s.count, &s.buckets, None)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::aggregates::{wait_bin, HOUR_MS};

    #[test]
    fn each_wait_lands_in_the_first_bucket_whose_bound_holds_it() {
        let le = bounds();
        let mut waits: Vec<i64> = (0..70_000).collect();
        waits.extend([
            1 << 20,
            (1 << 27) - 2,
            (1 << 27) - 1,
            1 << 28,
            86_400_000 * 4,
        ]);
        for w in waits {
            let k = bucket_of(wait_bin(w));
            let s = w as f64 / 1000.0;
            assert!(s <= le[k], "{w} ms above its bucket {}", le[k]);
            if k > 0 {
                assert!(s > le[k - 1], "{w} ms belongs below {}", le[k]);
            }
        }
        assert_eq!(le[0], 0.0);
        assert_eq!(le[BUCKETS], f64::INFINITY);
    }

    #[test]
    fn closed_hours_are_kept_and_never_counted_twice() {
        let t = WaitTotals::default();
        let now = 10 * HOUR_MS + 5;
        let rows = vec![
            ("a".to_string(), 3, 4, 2),
            ("a".to_string(), 9, 4, 1),
            ("a".to_string(), 10, 8, 5),
        ];
        let all = t.merge(&rows, now);
        assert_eq!(all["a"][&4], 3);
        assert_eq!(all["a"][&8], 5);
        // Hours before 9 are sealed; a later scrape reads from hour 9 on.
        assert_eq!(t.read_since(), 9);
        let later = vec![("a".to_string(), 9, 4, 1), ("a".to_string(), 10, 8, 6)];
        let all = t.merge(&later, now + HOUR_MS);
        assert_eq!(all["a"][&4], 3);
        assert_eq!(all["a"][&8], 6);
        assert_eq!(t.read_since(), 10);
        // A scrape that read from an earlier hour, merged after: the sealed hours are skipped.
        let stale = vec![("a".to_string(), 3, 4, 2), ("a".to_string(), 10, 8, 6)];
        let all = t.merge(&stale, now + HOUR_MS);
        assert_eq!(all["a"][&4], 3);
        assert_eq!(all["a"][&8], 6);
    }
}

//! Prometheus metrics (`GET /metrics`: OpenMetrics text to Prometheus, which asks for it;
//! Prometheus' text format 0.0.4 to anything else, see [`wants_openmetrics`]). Two kinds:
//!
//! - **in-process** histograms, observed as things happen: ledger commit latency and batch
//!   size, MSS call latency by call; held in [`Metrics`], shared by the writer, the dispatcher
//!   and the API;
//! - **ledger figures**, read at scrape time from the maintained aggregates (never from
//!   history): per group requests by state and bytes done (counters), pending and held
//!   requests, usage and target share (gauges). A restart does not reset them: they are the
//!   ledger's own totals. Prometheus samples are float64: bytes done is a float counter
//!   because the exact sum may pass `u64`, and past 2^53 it is approximate; the exact figures
//!   are in `GET /v1/groups` and `GET /v1/report`;
//! - **waits** from acceptance to the first MSS start per group (`mssbroker_request_wait_seconds`,
//!   `kind="priority"` is data taking), from the ledger's wait histograms ([`waits`]).
//!
//! The Prometheus exposition (prometheus-client): in-process histograms (commit latency and
//! commands, MSS calls) and the ledger's figures encoded at scrape time (bytes done as a float
//! counter: its exact sum may pass u64); OpenMetrics only to a client whose `Accept` asks for it
//! (every Prometheus scrape does), else `prometheus_text`'s text format 0.0.4 (what curl gets and
//! promtool lints). Names per Prometheus' conventions; `contrib/grafana/mssbroker.json` is a
//! dashboard over them. `metrics/waits.rs`: `mssbroker_request_wait_seconds` from the ledger's
//! `report_waits` (exact buckets, every fourth bin; `WaitTotals` keeps the closed hours' sums so a
//! scrape reads only recent rows).

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

use crate::ledger::aggregates::HourRow;
use crate::shares::view::SharesView;

mod waits;
pub use waits::{Bins as WaitBins, WaitTotals};

/// Labels of an MSS call.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// `submit_batch`, `events`, `status`, `cancel`.
    pub call: String,
    /// `ok` or `error`.
    pub outcome: String,
}

/// Labels of a volume lookup (issue 38).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LookupLabels {
    /// `enstore-layer4` or `command`.
    pub method: String,
    /// `found` or `failed`.
    pub outcome: String,
}

/// Labels of a group.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupLabels {
    group: String,
    /// `fair_share` or `priority`.
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    group: String,
    kind: String,
    state: String,
}

fn seconds_histogram() -> Histogram {
    // 50 µs .. ~100 s.
    Histogram::new(exponential_buckets(0.000_05, 2.0, 22))
}

/// The in-process metrics.
#[derive(Debug)]
pub struct Metrics {
    pub commit_seconds: Histogram,
    pub commit_commands: Histogram,
    /// Round trips to the database server per committed group (PostgreSQL only).
    pub commit_round_trips: Histogram,
    /// Ledger transactions rolled back (a full disk, an I/O error).
    pub rollbacks: Counter,
    /// MSS events for keys the ledger did not issue (a request lost with a restored backup).
    pub unknown_key_events: Counter,
    /// Rankings of the held queue for explain's positions, by how long each took.
    pub ranking_seconds: Histogram,
    pub mss_call_seconds: Family<CallLabels, Histogram>,
    /// Volume lookups by method and outcome, and those the cache answered.
    pub volume_lookups: Family<LookupLabels, Counter>,
    pub volume_lookup_cache_hits: Counter,
    /// The wait histograms' closed hours, summed (see [`waits`]).
    pub waits: WaitTotals,
    /// 1 while this broker holds a term of office, 0 once its term has ended (loops stopped,
    /// writer closed).
    pub leader: Gauge,
    /// The epoch it leads at, or last led at (0: never led).
    pub leader_epoch: Gauge,
    /// Terms of office started in this process (takeovers).
    pub leader_terms: Counter,
    registry: Registry,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// The ledger writer reports each group commit here.
impl crate::ledger::CommitObserver for Metrics {
    fn committed(&self, seconds: f64, commands: usize) {
        self.commit_seconds.observe(seconds);
        self.commit_commands.observe(commands as f64);
    }

    fn rolled_back(&self, _commands: usize) {
        self.rollbacks.inc();
    }

    fn round_trips(&self, trips: u64) {
        self.commit_round_trips.observe(trips as f64);
    }

    fn unknown_key_events(&self, events: u64) {
        self.unknown_key_events.inc_by(events);
    }

    fn ranked(&self, seconds: f64, _requests: usize) {
        self.ranking_seconds.observe(seconds);
    }
}

/// The ledger's commit histograms, registered: time, commands and round trips per commit.
fn commits(registry: &mut Registry) -> (Histogram, Histogram, Histogram) {
    let commit_seconds = seconds_histogram();
    let commit_commands = Histogram::new(exponential_buckets(1.0, 2.0, 15));
    let commit_round_trips = Histogram::new(exponential_buckets(1.0, 2.0, 15));
    // Histograms carry the unit in the name only: OpenMetrics parsers differ on whether a
    // histogram may have a UNIT line.
    registry.register(
        "mssbroker_ledger_commit_seconds",
        "Time of one ledger group commit (one transaction, one fsync)",
        commit_seconds.clone(),
    );
    registry.register(
        "mssbroker_ledger_commit_commands",
        "Commands (requests, batches, event sets) carried by one ledger commit",
        commit_commands.clone(),
    );
    registry.register(
        "mssbroker_ledger_commit_round_trips",
        "Round trips to the PostgreSQL server of one ledger commit (statements prepared or \
         run, BEGIN and COMMIT); nothing on SQLite",
        commit_round_trips.clone(),
    );
    (commit_seconds, commit_commands, commit_round_trips)
}

impl Metrics {
    pub fn new() -> Metrics {
        let mss_call_seconds =
            Family::<CallLabels, Histogram>::new_with_constructor(seconds_histogram as fn() -> _);
        let mut registry = Registry::default();
        let (commit_seconds, commit_commands, commit_round_trips) = commits(&mut registry);
        let rollbacks = Counter::default();
        registry.register(
            "mssbroker_ledger_rollbacks",
            "Ledger transactions rolled back (a full disk, an I/O error, the file replaced): \
             their requests were answered with the error and nothing of them was written",
            rollbacks.clone(),
        );
        let unknown_key_events = Counter::default();
        registry.register(
            "mssbroker_mss_unknown_key_events",
            "MSS events for transfers whose key this ledger did not issue (requests lost with a \
             restored backup, or another broker's): never applied; listed by mssbroker unknown-keys",
            unknown_key_events.clone(),
        );
        let ranking_seconds = seconds_histogram();
        registry.register(
            "mssbroker_queue_ranking_seconds",
            "Time of one ranking of the held queue for explain's positions (off the ledger \
             writer; an explain never waits for one)",
            ranking_seconds.clone(),
        );
        registry.register(
            "mssbroker_mss_call_seconds",
            "Time of one call to the MSS adapter, by call and outcome (events is a long poll)",
            mss_call_seconds.clone(),
        );
        let volume_lookups = Family::<LookupLabels, Counter>::default();
        registry.register(
            "mssbroker_volume_lookups",
            "Lookups of where a file lies for requests without a volume ([mss.volume_lookup]), \
             by method and outcome (found, failed: the request goes without a volume)",
            volume_lookups.clone(),
        );
        let volume_lookup_cache_hits = Counter::default();
        registry.register(
            "mssbroker_volume_lookup_cache_hits",
            "Volume lookups answered from the lookup cache (counted in mssbroker_volume_lookups \
             too)",
            volume_lookup_cache_hits.clone(),
        );
        let (leader, leader_epoch, leader_terms) = leadership(&mut registry);
        Metrics {
            leader,
            leader_epoch,
            leader_terms,
            volume_lookups,
            volume_lookup_cache_hits,
            commit_seconds,
            commit_commands,
            commit_round_trips,
            rollbacks,
            unknown_key_events,
            ranking_seconds,
            mss_call_seconds,
            waits: WaitTotals::default(),
            registry,
        }
    }

    /// A term of office started at `epoch`.
    pub fn took_office(&self, epoch: i64) {
        self.leader_epoch.set(epoch);
        self.leader.set(1);
        self.leader_terms.inc();
    }

    /// The term of office ended: a standby.
    pub fn left_office(&self) {
        self.leader.set(0);
    }

    /// The in-process metrics alone (a standby's: it has no ledger to read figures from).
    pub fn encode_process(&self) -> String {
        let mut out = String::new();
        let _ = encode_registry(&mut out, &self.registry);
        let _ = encode_eof(&mut out);
        out
    }

    /// Record one volume lookup.
    pub fn volume_lookup(&self, method: &str, found: bool, cached: bool) {
        self.volume_lookups
            .get_or_create(&LookupLabels {
                method: method.to_string(),
                outcome: if found { "found" } else { "failed" }.to_string(),
            })
            .inc();
        if cached {
            self.volume_lookup_cache_hits.inc();
        }
    }

    /// Record one MSS call.
    pub fn mss_call(&self, call: &str, ok: bool, seconds: f64) {
        self.mss_call_seconds
            .get_or_create(&CallLabels {
                call: call.to_string(),
                outcome: if ok { "ok" } else { "error" }.to_string(),
            })
            .observe(seconds);
    }

    /// The exposition: the in-process metrics, then the ledger's figures (`wait_bins` from
    /// [`WaitTotals::read`]).
    pub fn encode(&self, ledger: &crate::ledger::MetricFigures, wait_bins: &WaitBins) -> String {
        let (totals, shares) = (&ledger.totals, &ledger.shares);
        let figures = LedgerFigures::default();
        figures.add_totals(totals, shares);
        figures.add_shares(shares);
        let mut figures = figures.registry();
        let unsettled = Gauge::<i64>::default();
        unsettled.set(ledger.unsettled);
        figures.register(
            "mssbroker_unsettled_requests",
            "Requests held for an operator: sends an earlier broker (before a crash, a restart \
             or a takeover) may or may not have made, which this adapter's MSS can neither be \
             asked about nor deduplicate; never sent again by themselves (docs/operations.md, \
             Unsettled sends)",
            unsettled,
        );
        figures.register(
            "mssbroker_request_wait_seconds",
            "Time from a request's acceptance to its first start at the MSS, by group (kind priority: data taking); counted at the start, from the ledger's wait histograms",
            waits::WaitFamily::build(totals, wait_bins, |p| kind_of(shares, p)),
        );
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = encode_registry(&mut out, &self.registry);
        let _ = encode_registry(&mut out, &figures);
        let _ = encode_eof(&mut out);
        out
    }
}

/// The leadership metrics (issue 42): role, epoch, terms started.
fn leadership(registry: &mut Registry) -> (Gauge, Gauge, Counter) {
    let leader = Gauge::default();
    registry.register(
        "mssbroker_leader",
        "1 while this broker holds a term of office (leads: acknowledges writes, sends to the \
         MSS); 0 on a standby, from the moment a term has ended (its dispatcher stopped, its \
         ledger writer closed; /readyz turns 503 before that, at the flip); a broker with no \
         leadership configured leads for good",
        leader.clone(),
    );
    let epoch = Gauge::default();
    registry.register(
        "mssbroker_leader_epoch",
        "The leader epoch this broker leads at, or last led at (0: never led); 1 with no \
         leadership configured",
        epoch.clone(),
    );
    let terms = Counter::default();
    registry.register(
        "mssbroker_leader_terms",
        "Terms of office this process started (takeovers, the first included)",
        terms.clone(),
    );
    (leader, epoch, terms)
}

/// The exposition in Prometheus' text format 0.0.4, for a scraper or a tool (`promtool check
/// metrics`) that asks for `text/plain`: the same families, samples and help, with a counter's
/// HELP and TYPE under its sample name (`..._total`), and no UNIT or EOF line (0.0.4 has none).
pub fn prometheus_text(openmetrics: &str) -> String {
    let counters: Vec<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.strip_suffix(" counter"))
        .filter(|name| !name.ends_with("_total"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let header = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)));
        match header {
            Some((p, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let name = if counters.contains(&name) {
                    format!("{name}_total")
                } else {
                    name.to_string()
                };
                out.push_str(&format!("{p}{name} {tail}"));
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// Whether an `Accept` header asks for OpenMetrics (`application/openmetrics-text` with a
/// q-value above 0), as Prometheus' scrapes do. Anything else (`*/*` from curl, `text/plain`,
/// none) gets Prometheus' text format 0.0.4, which every Prometheus tool reads, as the official
/// client libraries answer.
pub fn wants_openmetrics(accept: &str) -> bool {
    accept.split(',').any(|range| {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default();
        let q = parts
            .filter_map(|p| p.strip_prefix("q="))
            .find_map(|q| q.parse::<f64>().ok())
            .unwrap_or(1.0);
        media.eq_ignore_ascii_case("application/openmetrics-text") && q > 0.0
    })
}

/// A group's `kind` label: `priority` for a priority class, else `fair_share`.
fn kind_of(shares: &SharesView, path: &str) -> &'static str {
    if shares.priority_classes.iter().any(|c| c.path == path) {
        "priority"
    } else {
        "fair_share"
    }
}

/// The ledger's figures as metric families, filled at scrape time.
#[derive(Default)]
struct LedgerFigures {
    requests: Family<StateLabels, Counter>,
    /// A float counter: the exact sum may pass u64 (Prometheus samples are floats anyway).
    bytes: Family<GroupLabels, Counter<f64, AtomicU64>>,
    pending: Family<GroupLabels, Gauge>,
    held: Family<GroupLabels, Gauge>,
    usage_share: Family<GroupLabels, Gauge<f64, AtomicU64>>,
    target_share: Family<GroupLabels, Gauge<f64, AtomicU64>>,
}

impl LedgerFigures {
    /// Requests by state and bytes done, per group, from the ledger's totals.
    fn add_totals(&self, totals: &[(String, HourRow)], shares: &SharesView) {
        for (path, r) in totals {
            let kind = kind_of(shares, path).to_string();
            for (state, n) in [
                ("accepted", r.accepted),
                ("held", r.held),
                ("done", r.done),
                ("failed", r.failed),
                ("cancelled", r.cancelled),
                ("coalesced", r.coalesced),
            ] {
                self.requests
                    .get_or_create(&StateLabels {
                        group: path.clone(),
                        kind: kind.clone(),
                        state: state.to_string(),
                    })
                    .inc_by(n.max(0) as u64);
            }
            self.bytes
                .get_or_create(&GroupLabels {
                    group: path.clone(),
                    kind,
                })
                .inc_by(r.bytes_done.max(0) as f64);
        }
    }

    /// Pending and held requests per group and class, usage and target share per group.
    fn add_shares(&self, shares: &SharesView) {
        for g in shares.groups.iter().filter(|g| g.leaf) {
            let labels = GroupLabels {
                group: g.path.clone(),
                kind: "fair_share".into(),
            };
            if let Some(c) = g.counts {
                self.pending.get_or_create(&labels).set(c.pending as i64);
                self.held.get_or_create(&labels).set(c.held as i64);
            }
            self.usage_share.get_or_create(&labels).set(g.usage_share);
            self.target_share.get_or_create(&labels).set(g.target_share);
        }
        for c in &shares.priority_classes {
            let labels = GroupLabels {
                group: c.path.clone(),
                kind: "priority".into(),
            };
            if let Some(n) = c.counts {
                self.pending.get_or_create(&labels).set(n.pending as i64);
                self.held.get_or_create(&labels).set(n.held as i64);
            }
        }
    }

    /// The families registered under their names, in the exposition's order.
    fn registry(self) -> Registry {
        let mut figures = Registry::default();
        figures.register(
            "mssbroker_group_requests",
            "Requests of a group by what happened to them (accepted, held at acceptance, done, failed, cancelled, coalesced onto another's transfer)",
            self.requests,
        );
        figures.register_with_unit(
            "mssbroker_group_done",
            "Bytes of a group's completed transfers",
            Unit::Bytes,
            self.bytes,
        );
        figures.register(
            "mssbroker_group_pending_requests",
            "Requests of a group not yet final (held included)",
            self.pending,
        );
        figures.register(
            "mssbroker_group_held_requests",
            "Requests of a group held by a feasibility cap",
            self.held,
        );
        figures.register_with_unit(
            "mssbroker_group_usage_share",
            "A group's share of fair-share usage under the configured usage model",
            Unit::Other("ratio".into()),
            self.usage_share,
        );
        figures.register_with_unit(
            "mssbroker_group_target_share",
            "A group's target share of fair-share benefit",
            Unit::Other("ratio".into()),
            self.target_share,
        );
        figures
    }
}

#[cfg(test)]
mod tests {
    use super::{prometheus_text, wants_openmetrics};

    #[test]
    fn openmetrics_only_to_a_client_that_asks_for_it() {
        let prometheus = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,\
                          application/openmetrics-text;version=0.0.1;q=0.5,\
                          text/plain;version=0.0.4;q=0.4,*/*;q=0.1";
        assert!(wants_openmetrics(prometheus));
        assert!(wants_openmetrics("Application/OpenMetrics-Text"));
        for other in [
            "",
            "*/*",
            "text/plain",
            "text/plain;version=0.0.4",
            "application/openmetrics-text;q=0",
        ] {
            assert!(!wants_openmetrics(other), "{other}");
        }
    }

    #[test]
    fn prometheus_text_names_counters_by_their_samples_and_drops_unit_and_eof() {
        let om = "# HELP a_bytes Bytes.\n# TYPE a_bytes counter\n# UNIT a_bytes bytes\n\
                  a_bytes_total{g=\"x\"} 4.0\n# HELP b_ratio A ratio.\n# TYPE b_ratio gauge\n\
                  # UNIT b_ratio ratio\nb_ratio 0.5\n# EOF\n";
        assert_eq!(
            prometheus_text(om),
            "# HELP a_bytes_total Bytes.\n# TYPE a_bytes_total counter\n\
             a_bytes_total{g=\"x\"} 4.0\n# HELP b_ratio A ratio.\n# TYPE b_ratio gauge\n\
             b_ratio 0.5\n"
        );
    }
}

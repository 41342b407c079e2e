//! The configuration file as read, before validation: one struct per table, unknown keys
//! refused. Every default is stated once: in the `impl Default` of a table whose keys are all
//! optional (`#[serde(default)]` on the struct), or at the field with [`default_int`] or a named
//! function where the table also has required keys.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::mss::RawMss;
use super::order::{RawFbsng, RawMultifactor, RawRelease};

/// An integer default stated at its field: `#[serde(default = "default_int::<512>")]`.
pub(super) fn default_int<const N: i64>() -> i64 {
    N
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub server: RawServer,
    #[serde(default)]
    pub database: RawDatabase,
    pub policy: RawPolicy,
    #[serde(default)]
    pub priority_classes: Vec<RawPriorityClass>,
    #[serde(default)]
    pub usage: RawUsage,
    pub shares: toml::Table,
    #[serde(default)]
    pub targets: BTreeMap<String, RawTarget>,
    #[serde(default)]
    pub classification: RawClassification,
    #[serde(default)]
    pub limits: RawLimits,
    pub mss: RawMss,
    #[serde(default)]
    pub auth: Option<RawAuth>,
    #[serde(default)]
    pub release: RawRelease,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAuth {
    pub token_file: Option<String>,
    /// `[[auth.x509]]`: client certificate subjects and their roles.
    #[serde(default)]
    pub x509: Vec<RawX509>,
    /// `[[auth.issuers]]`: WLCG token issuers.
    #[serde(default)]
    pub issuers: Vec<RawIssuer>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawX509 {
    pub subject: Option<String>,
    pub subject_prefix: Option<String>,
    pub role: String,
    pub station: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawIssuer {
    pub iss: String,
    pub audience: Option<String>,
    pub ca_file: Option<String>,
    #[serde(default)]
    pub groups: BTreeMap<String, String>,
    pub station_claim: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    pub cert: Option<String>,
    pub key: Option<String>,
    pub client_ca: Option<String>,
    #[serde(default)]
    pub crl: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawServer {
    pub listen: String,
    pub max_connections: i64,
    pub header_read_timeout_ms: i64,
    pub idle_timeout_ms: i64,
    pub body_timeout_ms: i64,
    /// "loopback_only" (the default) or "behind_proxy".
    pub plain_http: String,
    pub trusted_proxies: Vec<String>,
    pub tls: Option<RawTls>,
}

impl Default for RawServer {
    fn default() -> Self {
        RawServer {
            listen: "127.0.0.1:8080".into(),
            max_connections: 512,
            header_read_timeout_ms: 10_000,
            idle_timeout_ms: 60_000,
            body_timeout_ms: 30_000,
            plain_http: "loopback_only".into(),
            trusted_proxies: Vec::new(),
            tls: None,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawDatabase {
    pub path: String,
    /// A PostgreSQL connection string: when given, the ledger is there and `path` is unused.
    pub url: Option<String>,
    pub commit_batch_max: i64,
}

impl Default for RawDatabase {
    fn default() -> Self {
        RawDatabase {
            path: "data/mssbroker.db".into(),
            url: None,
            commit_batch_max: 8192,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPolicy {
    pub p_front: i64,
    pub p_back: i64,
    #[serde(default = "bytes")]
    pub benefit: String,
    #[serde(default)]
    pub benefit_weights: BTreeMap<String, i64>,
    #[serde(default = "difference")]
    pub fairshare_delta: String,
    #[serde(default = "sam")]
    pub algorithm: String,
    pub band_low: Option<i64>,
    pub band_high: Option<i64>,
    pub starved_priority: Option<i64>,
    #[serde(default)]
    pub max_wait_secs: i64,
    #[serde(default)]
    pub reprioritise_secs: i64,
    #[serde(default)]
    pub multifactor: RawMultifactor,
    #[serde(default)]
    pub qos: BTreeMap<String, String>,
    #[serde(default)]
    pub queue_factors: BTreeMap<String, f64>,
    #[serde(default)]
    pub fbsng: BTreeMap<String, RawFbsng>,
}

/// `policy.benefit`'s default.
fn bytes() -> String {
    "bytes".into()
}

/// `policy.fairshare_delta`'s default.
fn difference() -> String {
    "difference".into()
}

/// `policy.algorithm`'s default.
fn sam() -> String {
    "sam".into()
}

/// `[usage]`; the keys of one model only (`half_life_secs`, or `interval_secs`, `depth` and
/// `decay`) have their defaults where the model is validated, since giving one for another
/// model is refused.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawUsage {
    pub model: String,
    pub half_life_secs: Option<i64>,
    pub interval_secs: Option<i64>,
    pub depth: Option<i64>,
    pub decay: Option<f64>,
    pub held_recheck_ms: i64,
}

impl Default for RawUsage {
    fn default() -> Self {
        RawUsage {
            model: "half_life".into(),
            half_life_secs: None,
            interval_secs: None,
            depth: None,
            decay: None,
            held_recheck_ms: 1_000,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTarget {
    pub floor_percent: Option<f64>,
    pub cap_percent: Option<f64>,
    pub feasibility_cap: Option<i64>,
    pub feasibility_cap_percent: Option<f64>,
    pub max_volumes: Option<i64>,
    pub max_queued_bytes: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPriorityClass {
    pub access_mode: String,
    pub mss_priority: i64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawClassification {
    pub default_group: Option<String>,
    pub rules: Vec<RawRule>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRule {
    pub access_mode: Option<String>,
    pub physics_group: Option<String>,
    pub station: Option<String>,
    pub user: Option<String>,
    pub path_prefix: Option<String>,
    pub group: String,
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawLimits {
    pub station_rate_per_sec: i64,
    pub station_burst: i64,
    pub max_body_bytes: i64,
    pub max_batch: i64,
    pub max_size_bytes: i64,
    pub max_string_len: i64,
    pub max_path_len: i64,
    pub max_report_buckets: i64,
    pub max_bodies_in_memory_bytes: i64,
    pub max_queued_bytes_per_user: Option<i64>,
}

impl Default for RawLimits {
    fn default() -> Self {
        RawLimits {
            station_rate_per_sec: 5_000,
            station_burst: 20_000,
            max_body_bytes: 16 * 1024 * 1024,
            max_batch: 10_000,
            max_size_bytes: 100_000_000_000_000,
            max_string_len: 256,
            max_path_len: 4096,
            max_report_buckets: 2_000,
            max_bodies_in_memory_bytes: 256 << 20,
            max_queued_bytes_per_user: None,
        }
    }
}

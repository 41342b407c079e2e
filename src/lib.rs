//! mssbroker: a fair-share broker for file-transfer requests in front of a tape mass storage
//! system. See ARCHITECTURE.md for the map.

pub mod api;
pub mod auth;
pub mod bench;
pub mod bench_explain;
pub mod bench_report;
pub mod cli;
pub mod clock;
pub mod config;
pub mod database_url;
pub mod dispatcher;
pub mod domain;
pub mod hidden_text;
pub mod leadership;
pub mod ledger;
pub mod live_settings;
pub mod metrics;
pub mod office;
pub mod policy;
pub mod readiness;
pub mod report;
pub mod request_scope;
pub mod server;
pub mod shares;
pub mod simulate;
pub mod startup;
pub mod telemetry;
#[cfg(test)]
pub(crate) mod tests;
pub mod text_table;
pub mod tls;
pub mod trace;

//! `[server]` validated into [`ServerSettings`].

use std::time::Duration;

use super::raw::RawServer;
use super::{parse_addr, Issues};
use crate::server::ServerSettings;

/// `[server]` validated; every refusal names its key.
pub(super) fn validate_server(raw: &RawServer, issues: &mut Issues) -> Option<ServerSettings> {
    let listen = parse_addr(&raw.listen, "server.listen", issues);
    let mut within = |v: i64, key: &str, max: i64, unit: &str| -> i64 {
        if !(1..=max).contains(&v) {
            issues.add(key, format!("must be within 1..={max}{unit}, got {v}"));
        }
        v.clamp(1, max)
    };
    let max_connections = within(raw.max_connections, "server.max_connections", 1_000_000, "");
    let ms = |v: i64| Duration::from_millis(v as u64);
    let header_read_timeout = ms(within(
        raw.header_read_timeout_ms,
        "server.header_read_timeout_ms",
        3_600_000,
        " ms",
    ));
    let idle_timeout = ms(within(
        raw.idle_timeout_ms,
        "server.idle_timeout_ms",
        3_600_000,
        " ms",
    ));
    let body_timeout = ms(within(
        raw.body_timeout_ms,
        "server.body_timeout_ms",
        3_600_000,
        " ms",
    ));
    if idle_timeout < header_read_timeout {
        issues.add(
            "server.idle_timeout_ms",
            "may not be below server.header_read_timeout_ms (it would cut a request head short)",
        );
    }
    Some(ServerSettings {
        listen: listen?,
        max_connections: max_connections as usize,
        header_read_timeout,
        idle_timeout,
        body_timeout,
    })
}

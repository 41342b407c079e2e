//! `[server]` validated into [`ServerSettings`].

use std::path::Path;
use std::time::Duration;

use super::raw::{RawServer, RawTls};
use super::{parse_addr, Issues};
use crate::domain::server::{IpNet, PlainHttp, ServerSettings, TlsSettings};

/// `[server]` validated; every refusal names its key; relative file names are taken from
/// `base` (the configuration's directory).
pub(super) fn validate_server(
    raw: &RawServer,
    base: &Path,
    issues: &mut Issues,
) -> Option<ServerSettings> {
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
    let plain_http = plain_http(&raw.plain_http, issues);
    let trusted_proxies = trusted_proxies(&raw.trusted_proxies, plain_http, issues);
    let tls = raw
        .tls
        .as_ref()
        .and_then(|t| validate_tls(t, base, plain_http, issues));
    Some(ServerSettings {
        listen: listen?,
        max_connections: max_connections as usize,
        header_read_timeout,
        idle_timeout,
        body_timeout,
        plain_http,
        trusted_proxies,
        tls,
    })
}

/// `server.plain_http`: where plain HTTP may be served (loopback only after an issue).
fn plain_http(raw: &str, issues: &mut Issues) -> PlainHttp {
    match raw {
        "loopback_only" => PlainHttp::LoopbackOnly,
        "behind_proxy" => PlainHttp::BehindProxy,
        other => {
            issues.add(
                "server.plain_http",
                format!("`{other}` is not one of loopback_only, behind_proxy"),
            );
            PlainHttp::LoopbackOnly
        }
    }
}

/// `server.trusted_proxies`: each an address or network, used only behind a proxy.
fn trusted_proxies(raw: &[String], plain_http: PlainHttp, issues: &mut Issues) -> Vec<IpNet> {
    let mut trusted_proxies = Vec::new();
    for (i, p) in raw.iter().enumerate() {
        match IpNet::parse(p) {
            Some(net) => trusted_proxies.push(net),
            None => issues.add(
                format!("server.trusted_proxies[{i}]"),
                format!("`{p}` is not an address or network such as 10.0.0.5 or 10.0.0.0/24"),
            ),
        }
    }
    if !trusted_proxies.is_empty() && plain_http != PlainHttp::BehindProxy {
        issues.add(
            "server.trusted_proxies",
            "only used with server.plain_http = \"behind_proxy\"",
        );
    }
    trusted_proxies
}

/// `[server.tls]`: a certificate needs its key; without them only `client_ca` behind a proxy.
fn validate_tls(
    raw: &RawTls,
    base: &Path,
    plain_http: PlainHttp,
    issues: &mut Issues,
) -> Option<TlsSettings> {
    let file = |s: &str| base.join(s);
    let cert = match (&raw.cert, &raw.key) {
        (Some(c), Some(k)) if !c.is_empty() && !k.is_empty() => Some((file(c), file(k))),
        (None, None) if plain_http == PlainHttp::BehindProxy => None,
        (None, None) => {
            issues.add(
                "server.tls.cert",
                "is required (with server.tls.key), unless server.plain_http = \"behind_proxy\"",
            );
            return None;
        }
        (Some(_), None) => {
            issues.add("server.tls.key", "is required with server.tls.cert");
            return None;
        }
        _ => {
            issues.add(
                "server.tls.cert",
                "server.tls.cert and server.tls.key go together, neither empty",
            );
            return None;
        }
    };
    if cert.is_none() && raw.client_ca.is_none() {
        issues.add(
            "server.tls",
            "names no certificate and no client_ca: remove it or fill it in",
        );
    }
    if !raw.crl.is_empty() && raw.client_ca.is_none() {
        issues.add("server.tls.crl", "only used with server.tls.client_ca");
    }
    Some(TlsSettings {
        cert,
        client_ca: raw.client_ca.as_deref().map(file),
        crl: raw.crl.iter().map(|c| file(c)).collect(),
    })
}

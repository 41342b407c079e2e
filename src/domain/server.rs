//! The HTTP server's validated settings (`[server]`), built by `config`, read by `server` and
//! `api` (`trusted_proxies`). Here, below all three, so that none imports another for them.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct ServerSettings {
    pub listen: SocketAddr,
    /// Connections served at once; the excess is answered 503 and closed.
    pub max_connections: usize,
    /// A connection waiting for a request (new, or kept alive after one) must send the whole
    /// request head within this.
    pub header_read_timeout: Duration,
    /// A connection that reads and writes nothing for this long is closed.
    pub idle_timeout: Duration,
    /// A request's whole body must arrive within this (else 408, connection closed).
    pub body_timeout: Duration,
    pub plain_http: PlainHttp,
    /// Whose `X-Forwarded-For` and `X-SSL-Client-Cert` are believed.
    pub trusted_proxies: Vec<IpNet>,
    pub tls: Option<TlsSettings>,
}

/// Whether plain HTTP may be served beyond loopback (`[server] plain_http`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlainHttp {
    /// Plain HTTP on a loopback address only (the default): anything else needs `[server.tls]`.
    LoopbackOnly,
    /// A TLS proxy terminates in front of the broker: plain HTTP on any address, and the
    /// proxy's `X-Forwarded-For` and forwarded client certificate are believed from
    /// `trusted_proxies`.
    BehindProxy,
}

/// An address or network (`10.0.0.0/8`, `::1`) of `[server] trusted_proxies`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl IpNet {
    /// `a.b.c.d`, `a.b.c.d/n`, an IPv6 address with or without `/n`.
    pub fn parse(s: &str) -> Option<IpNet> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a.parse::<IpAddr>().ok()?, Some(p.parse::<u8>().ok()?)),
            None => (s.parse::<IpAddr>().ok()?, None),
        };
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = prefix.unwrap_or(max);
        (prefix <= max).then_some(IpNet { addr, prefix })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// `[server.tls]`: the files (their paths are fixed while the broker runs; their contents are
/// read again at every reload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// The server's certificate chain and key (PEM); `None` only behind a proxy, where
    /// `client_ca` verifies forwarded client certificates.
    pub cert: Option<(PathBuf, PathBuf)>,
    /// A PEM file of CA certificates, or a directory of hashed ones (`/etc/grid-security/certificates`:
    /// `HASH.N` certificates, `HASH.rN` CRLs).
    pub client_ca: Option<PathBuf>,
    /// CRL files (PEM or DER) besides the directory's own.
    pub crl: Vec<PathBuf>,
}

//! The HTTP server's validated settings (`[server]`), built by `config`.

use std::net::SocketAddr;
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
}

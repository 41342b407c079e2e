//! The HTTP server: our own accept loop around hyper, so a connection cannot hold the broker
//! hostage. At most `max_connections` are served at once (the excess gets a short 503 and is
//! closed, itself bounded); a connection must send each request head within
//! `header_read_timeout` (idle and trickling clients are dropped), each body within
//! `body_timeout` (else 408), and one that moves no byte for `idle_timeout` while none of its
//! requests is being handled is closed. Accept
//! errors (`EMFILE`) pause the loop briefly and are logged at most every few seconds. On
//! shutdown the listener closes, idle connections close and requests in flight finish.
//!
//! The HTTP server. `server.rs` (`serve`: the accept loop on hyper's http1 with axum's router as the
//! service; a semaphore of `max_connections`, the excess answered a plain 503 by at most 128 tasks
//! at once; the header-read timeout; graceful shutdown; throttled accept errors), `idle.rs`
//! (`Tracked` stream stamping its reads and writes, `Activity::handling` held while a request is
//! handled, `Activity::idle_for`), `body.rs` (the body deadline middleware: 408 naming `body`),
//! `fds.rs` (`RLIMIT_NOFILE` read and raised), `request_id.rs`
//! (tower-http's request-id and trace layers: a span per request with `x_request_id`, method,
//! route; status and latency on the response line; the id put in scope for the ledger through
//! `request_scope::with_request_id`). TLS (`[server.tls]`: tokio-rustls in the same accept loop)
//! is the `tls` module, below `server` and `api`, which both use it; the settings are
//! `domain::server` (`ServerSettings`: the refusal of plain HTTP beyond loopback unless
//! `plain_http = "behind_proxy"`, forwarded addresses and certificates believed only from
//! `trusted_proxies`).

mod body;
pub mod fds;
mod idle;
pub mod request_id;

pub use crate::domain::server::{IpNet, PlainHttp, ServerSettings, TlsSettings};

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::ServiceExt;
use tracing::{debug, info, warn};

use crate::tls;

/// Connections being answered 503 at once; beyond this the excess is closed unanswered.
const REFUSING_AT_ONCE: usize = 128;
/// Longest a refused connection is kept to deliver its 503 (short: an idle client holding it
/// would keep later ones from being answered).
const REFUSAL_TIME: Duration = Duration::from_millis(250);
/// Pause after an accept error (out of file descriptors), so the loop does not spin.
const ACCEPT_PAUSE: Duration = Duration::from_millis(50);
/// Descriptors kept for everything but connections (database, MSS client, logs).
const RESERVED_FDS: u64 = 128;

/// Serve `router` on `listener` (over TLS when `tls` has a server certificate) until
/// `shutdown` completes, then wait for requests in flight.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    settings: &ServerSettings,
    tls: Option<tls::TlsSource>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    check_fd_limit(settings.max_connections);
    let app = request_id::layer(router.layer(axum::middleware::from_fn_with_state(
        settings.body_timeout,
        body::deadline,
    )));
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(settings.header_read_timeout);
    let slots = Arc::new(Semaphore::new(settings.max_connections));
    let refusing = Arc::new(Semaphore::new(REFUSING_AT_ONCE));
    let graceful = GracefulShutdown::new();
    let mut accept_errors = Throttled::new("accept error (out of file descriptors?); pausing");
    let mut refusals =
        Throttled::new("connection limit (server.max_connections) reached; answering 503");
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, addr)) => match slots.clone().try_acquire_owned() {
                Ok(slot) => {
                    let conn = Connection {
                        stream,
                        addr,
                        slot,
                        idle: settings.idle_timeout,
                        handshake: settings.header_read_timeout,
                    };
                    let material = tls.as_ref().map(tls::TlsSource::current);
                    conn.spawn(&http, app.clone(), &graceful, material);
                }
                Err(_) => {
                    refusals.note(None);
                    refuse(stream, &refusing);
                }
            },
            Err(e) => {
                accept_errors.note(Some(&e));
                tokio::time::sleep(ACCEPT_PAUSE).await;
            }
        }
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// An accepted connection and the slot it holds.
struct Connection {
    stream: TcpStream,
    addr: SocketAddr,
    slot: OwnedSemaphorePermit,
    idle: Duration,
    /// The longest a TLS handshake may take (the header read timeout).
    handshake: Duration,
}

impl Connection {
    /// Serve it on its own task until it closes, times out or goes idle; over TLS when
    /// `material` has a server certificate, the handshake first (bounded by `handshake`).
    fn spawn(
        self,
        http: &http1::Builder,
        app: Router,
        graceful: &GracefulShutdown,
        material: Option<Arc<tls::TlsMaterial>>,
    ) {
        let activity = idle::Activity::new();
        let stream = idle::Tracked::new(self.stream, activity.clone());
        let (http, watcher) = (http.clone(), graceful.watcher());
        let (slot, idle, addr, limit) = (self.slot, self.idle, self.addr, self.handshake);
        tokio::spawn(async move {
            let server = material.as_ref().and_then(|m| m.server.clone());
            let Some(config) = server else {
                let peer = tls::Peer { addr, cert: None };
                serve_io(stream, peer, &http, app, watcher, activity, idle).await;
                drop(slot);
                return;
            };
            let acceptor = tokio_rustls::TlsAcceptor::from(config);
            match tokio::time::timeout(limit, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    let trust = material.as_ref().and_then(|m| m.clients.clone());
                    let presented = tls.get_ref().1.peer_certificates();
                    let cert = match (trust, presented) {
                        (Some(trust), Some(chain)) => Some(Arc::new(trust.verify(chain))),
                        _ => None,
                    };
                    let peer = tls::Peer { addr, cert };
                    serve_io(tls, peer, &http, app, watcher, activity, idle).await;
                }
                Ok(Err(e)) => debug!(peer = %addr, error = %e, "tls handshake failed"),
                Err(_) => debug!(peer = %addr, "tls handshake timed out"),
            }
            drop(slot);
        });
    }
}

/// Serve HTTP/1.1 on `io` until it closes or goes idle for `idle`; each request carries `peer`.
async fn serve_io<I>(
    io: I,
    peer: tls::Peer,
    http: &http1::Builder,
    app: Router,
    watcher: hyper_util::server::graceful::Watcher,
    activity: idle::Activity,
    idle: Duration,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let handling = activity.clone();
    let service = tower::service_fn(move |mut request: Request<Incoming>| {
        let busy = handling.handling();
        request.extensions_mut().insert(peer.clone());
        let answer = app.clone().oneshot(request);
        async move {
            let answer = answer.await;
            drop(busy);
            answer
        }
    });
    let served =
        watcher.watch(http.serve_connection(TokioIo::new(io), TowerToHyperService::new(service)));
    tokio::select! {
        result = served => {
            if let Err(e) = result {
                debug!(error = %e, "connection closed");
            }
        }
        () = activity.idle_for(idle) => debug!("idle connection closed"),
    }
}

/// Answer a connection beyond the limit with a 503 and close it, if fewer than
/// `REFUSING_AT_ONCE` are being answered; otherwise close it at once.
fn refuse(mut stream: TcpStream, refusing: &Arc<Semaphore>) {
    let Ok(permit) = refusing.clone().try_acquire_owned() else {
        return;
    };
    tokio::spawn(async move {
        let answer = async {
            stream.write_all(busy_response().as_bytes()).await?;
            stream.shutdown().await?;
            // Read what the client sent until it closes, so closing does not reset the
            // connection before the client has read the answer.
            let mut sink = [0u8; 1024];
            while stream.read(&mut sink).await? > 0 {}
            Ok::<(), io::Error>(())
        };
        let _ = tokio::time::timeout(REFUSAL_TIME, answer).await;
        drop(permit);
    });
}

fn busy_response() -> String {
    let body =
        r#"{"error":"too many connections (server.max_connections); try again","field":null}"#;
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         retry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Warn if the descriptor limit cannot hold `max_connections` and what the broker needs besides.
fn check_fd_limit(max_connections: usize) {
    match fds::nofile() {
        Ok((soft, _)) => {
            let needed = max_connections as u64 + REFUSING_AT_ONCE as u64 + RESERVED_FDS;
            if needed > soft {
                warn!(
                    max_connections,
                    nofile = soft,
                    needed,
                    "server.max_connections does not fit in the file-descriptor limit; lower it or raise the limit"
                );
            } else {
                info!(max_connections, nofile = soft, "connection limit");
            }
        }
        Err(e) => warn!(error = %e, "cannot read the file-descriptor limit"),
    }
}

/// A warning logged at most every `THROTTLE`, with how many were suppressed.
struct Throttled {
    what: &'static str,
    last: Option<Instant>,
    suppressed: u64,
}

const THROTTLE: Duration = Duration::from_secs(5);

impl Throttled {
    fn new(what: &'static str) -> Throttled {
        Throttled {
            what,
            last: None,
            suppressed: 0,
        }
    }

    fn note(&mut self, error: Option<&io::Error>) {
        if self.last.is_some_and(|t| t.elapsed() < THROTTLE) {
            self.suppressed += 1;
            return;
        }
        match error {
            Some(e) => warn!(error = %e, suppressed = self.suppressed, "{}", self.what),
            None => warn!(suppressed = self.suppressed, "{}", self.what),
        }
        self.last = Some(Instant::now());
        self.suppressed = 0;
    }
}

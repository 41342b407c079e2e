//! Putting the broker together: bind the listener, start the embedded simulator if configured,
//! build the API, and hold office as a leadership `Role` says. `Application::build` binds (port
//! 0 allowed) and exposes the bound address, so tests start a whole broker in three lines;
//! `run_until_stopped` serves until the given shutdown future completes.
//!
//! `Application::build` (binds, port 0 allowed, exposes `local_addr()`), then
//! `run_until_stopped(shutdown)` (serves through `server::serve`). The server's parts live for
//! the process; the ledger, the adapter, the dispatcher and readiness live for one term of office
//! (`startup/term.rs`: `TermContext::open` opens the ledger, then builds the configured adapter
//! (`build_adapter`: the ledger's `instance()` names FTS3 submissions) gated on the term; `hold`
//! follows the `Role` watch). `build_led` takes the role (`term::sole_leader()` without
//! leadership: the leader at epoch 1 for good; `build_with_role` for tests); when it leads at
//! build, the first term is opened there. `build_reloadable` takes the `LoadSettings` function a
//! reload calls again. `startup/reload.rs`: `Reloader` (load, validate, refuse what cannot change
//! live key by key, `Ledger::reload` on the term's ledger, then swap `LiveSettings` with the gate
//! closed; the file's SHA-256 in `Loaded`).

pub mod reload;
pub mod term;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use mss_adapters::encp::EncpAdapter;
use mss_adapters::fts3::Fts3Adapter;
use mss_adapters::http::HttpAdapter;
use mss_adapters::redact;
use mss_adapters::sim::{self, SimConfig};
use mss_adapters::tape_rest::TapeRestAdapter;
use mss_adapters::{MssAdapter, MssError};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tracing::{info, warn};

use crate::api::{self, AppState};
use crate::auth::jwt::Issuers;
use crate::auth::TokenTable;
use crate::clock::{Clock, SystemClock};
use crate::config::Settings;
use crate::dispatcher::{AdapterSettings, SimulatorSettings};
use crate::leadership::Role;
use crate::ledger::{Ledger, LedgerError, LedgerOptions};
use crate::live_settings::{ConfigStamp, Identities, Live, LiveSettings};
use crate::office::OfficeSlot;
use crate::server::{PlainHttp, ServerSettings};
use crate::tls::TlsSource;
use reload::{LoadSettings, Loaded, Reloader};
pub use term::Leadership;
use term::{Term, TermContext};

/// Why the broker could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(
        "cannot listen on {addr} ({key}): {source}{}",
        in_use_hint(source, key)
    )]
    Bind {
        addr: SocketAddr,
        /// The key that sets the address.
        key: &'static str,
        source: std::io::Error,
    },
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error("cannot set up the mss adapter: {0}")]
    Mss(#[from] MssError),
    #[error("the http server failed: {0}")]
    Serve(std::io::Error),
    #[error(transparent)]
    Tokens(#[from] crate::auth::TokenFileError),
    #[error("refusing to listen on {addr}: {why}; listen on a loopback address (127.0.0.1) or configure your own token file")]
    Exposed { addr: SocketAddr, why: &'static str },
    #[error("refusing to listen on {addr} in plain HTTP: every token and request would cross the network in clear text; configure [server.tls] (cert, key), or set [server] plain_http = \"behind_proxy\" if a TLS proxy terminates in front of the broker, or listen on a loopback address (127.0.0.1)")]
    PlainHttp { addr: SocketAddr },
    #[error("cannot use the TLS files: {0}")]
    Tls(#[from] crate::tls::TlsError),
    #[error("auth.issuers: {0}")]
    Issuers(String),
}

/// What to do about an address in use.
fn in_use_hint(error: &std::io::Error, key: &str) -> String {
    if error.kind() == std::io::ErrorKind::AddrInUse {
        format!("; another program (another mssbroker?) listens there: stop it, or set another address in {key}")
    } else {
        String::new()
    }
}

/// A built, bound, not yet serving broker: the server's parts for the process's life, and the
/// terms of office a `Role` watch drives (`startup/term.rs`).
pub struct Application {
    listener: TcpListener,
    addr: SocketAddr,
    mss_url: String,
    state: AppState,
    terms: Arc<TermContext>,
    role: watch::Receiver<Role>,
    /// The first term, opened at build when the role leads then.
    first: Option<Term>,
    simulator: Option<SimulatorHandle>,
    server: crate::server::ServerSettings,
    tls: Option<TlsSource>,
}

impl Application {
    /// Build with the wall clock.
    pub async fn build(settings: &Settings) -> Result<Application, StartupError> {
        Application::build_with_clock(settings, Arc::new(SystemClock)).await
    }

    /// Build from settings given in-process: a reload puts the same settings in force again.
    pub async fn build_with_clock(
        settings: &Settings,
        clock: Arc<dyn Clock>,
    ) -> Result<Application, StartupError> {
        let loaded = Loaded::in_process(settings.clone());
        let again = loaded.clone();
        let load: LoadSettings = Arc::new(move || Ok(again.clone()));
        Application::build_reloadable(loaded, load, clock).await
    }

    /// Build from `loaded`, which `load` produced: SIGHUP and `POST /v1/admin/reload` call
    /// `load` again (see `reload`). No leadership is configured: the broker is the sole leader
    /// (`term::sole_leader`).
    pub async fn build_reloadable(
        loaded: Loaded,
        load: LoadSettings,
        clock: Arc<dyn Clock>,
    ) -> Result<Application, StartupError> {
        Application::build_led(loaded, load, clock, term::sole_leader()).await
    }

    /// Build from settings given in-process, holding office as `leadership` says (the seam a
    /// leadership `Contender`'s `role()` and `resigner()` plug into; tests drive a role watch
    /// through its sender).
    pub async fn build_with_role(
        settings: &Settings,
        clock: Arc<dyn Clock>,
        leadership: impl Into<Leadership>,
    ) -> Result<Application, StartupError> {
        let loaded = Loaded::in_process(settings.clone());
        let again = loaded.clone();
        let load: LoadSettings = Arc::new(move || Ok(again.clone()));
        Application::build_led(loaded, load, clock, leadership).await
    }

    /// Build from `loaded` (which `load` produced), holding office as `role` says: when it
    /// leads already and leadership is not contended (no `Resigner`: the sole leader, or a role
    /// a test drives), the first term's ledger is opened here (an error stops the start). A
    /// contended leadership's first term is opened by the terms' task, off the async threads
    /// (PostgreSQL's blocking client may not run on them) and resigned if it cannot open,
    /// like every later term.
    pub async fn build_led(
        loaded: Loaded,
        load: LoadSettings,
        clock: Arc<dyn Clock>,
        leadership: impl Into<Leadership>,
    ) -> Result<Application, StartupError> {
        let Leadership { role, resigner } = leadership.into();
        let settings = &loaded.settings;
        let identities = load_identities(settings, None)?;
        refuse_plain_http(&settings.server)?;
        let tls = settings
            .server
            .tls
            .as_ref()
            .map(TlsSource::load)
            .transpose()?;
        // The addresses first: a port in use stops the start before a database is created or a
        // simulator started.
        let ((listener, addr), simulator_listener) = bind_listeners(settings).await?;
        for note in &settings.notes {
            warn!(note = %note, "configuration note");
        }
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let live = first_live_settings(&loaded, identities, clock.now_ms());
        let http_url = http_url(settings, simulator_listener.as_ref().map(|(_, a)| *a));
        let mss_url = shown_mss(settings, &http_url)?;
        let terms = Arc::new(TermContext {
            settings: settings.clone(),
            live: live.clone(),
            clock: clock.clone(),
            metrics: metrics.clone(),
            http_url,
            resigner,
        });
        let leading = match terms.resigner {
            Some(_) => None,
            None => role.borrow().leading(),
        };
        let first = match leading {
            Some(epoch) => Some(terms.open(epoch)?),
            None => None,
        };
        // Once the first term's ledger is open: a start that fails starts no simulator.
        let simulator = start_simulator_if_any(settings, simulator_listener);
        let office = Arc::new(OfficeSlot::default());
        let reloader = Reloader::new(
            load,
            settings.clone(),
            live.clone(),
            office.clone(),
            clock.clone(),
            tls.clone(),
        );
        let state = AppState {
            office,
            clock: clock.clone(),
            metrics: metrics.clone(),
            live: live.clone(),
            reloader: Arc::new(reloader),
            limits: settings.limits.clone(),
            tls: tls.clone(),
            trusted_proxies: settings.server.trusted_proxies.clone().into(),
            auth_failures: Arc::new(crate::auth::failures::FailureGate::new()),
        };
        Ok(Application {
            listener,
            addr,
            mss_url,
            state,
            terms,
            role,
            first,
            simulator,
            server: settings.server.clone(),
            tls,
        })
    }

    /// The address the API is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// `https` when the API is served over TLS, else `http`.
    pub fn scheme(&self) -> &'static str {
        match self.tls.as_ref().map(|t| t.current().server.is_some()) {
            Some(true) => "https",
            _ => "http",
        }
    }

    /// What reloads this broker's configuration (SIGHUP's handler calls it).
    pub fn reloader(&self) -> Arc<dyn crate::live_settings::Reload> {
        self.state.reloader.clone()
    }

    /// Base URL of the MSS in use (the embedded simulator's when it runs), without its password
    /// and query string.
    pub fn mss_url(&self) -> &str {
        &self.mss_url
    }

    /// Serve until `shutdown` completes, then end the term of office (its loops stopped, its
    /// ledger writer finishing what it has), and stop the embedded simulator.
    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), StartupError> {
        let scheme = self.scheme();
        let (stop_terms, terms_stop) = oneshot::channel();
        let slot = self.state.office.clone();
        // Published before the first request is served: a leader never answers "standby" at
        // start.
        let first = self.first.map(|t| t.start(&self.terms, &slot));
        let terms = tokio::spawn(term::hold(self.terms, slot, self.role, first, terms_stop));
        info!(addr = %self.addr, scheme, mss = %self.mss_url, "mssbroker serving");
        let router = api::router(self.state);
        let served =
            crate::server::serve(self.listener, router, &self.server, self.tls, shutdown).await;
        // The router is gone: the term's ledger handles are the loops' and the office's.
        let _ = stop_terms.send(());
        let _ = terms.await;
        if let Some((stop, handle)) = self.simulator {
            let _ = stop.send(());
            let _ = handle.await;
        }
        served.map_err(StartupError::Serve)
    }
}

type SimulatorHandle = (
    oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
);

/// The ledger's options from `settings`, for a term at `epoch`.
fn ledger_options(
    settings: &Settings,
    metrics: Arc<crate::metrics::Metrics>,
    epoch: i64,
) -> LedgerOptions {
    LedgerOptions {
        path: settings.database.path.clone(),
        commit_batch_max: settings.database.commit_batch_max,
        url: settings.database.url.clone(),
        epoch,
        retry: settings.mss.retry,
        metrics,
        read_outputs: settings.mss.read_outputs(),
    }
}

/// The API's listener and, when the configuration runs one, the simulator's.
async fn bind_listeners(settings: &Settings) -> Result<(Bound, Option<Bound>), StartupError> {
    let api = bind(settings.server.listen, "server.listen").await?;
    let simulator = match simulator_settings(settings) {
        Some(sim) => Some(bind(sim.listen, "mss.simulator.listen").await?),
        None => None,
    };
    Ok((api, simulator))
}

/// A bound listener and its address.
type Bound = (TcpListener, SocketAddr);

/// The settings a reload may change, as `loaded` gives them at the start.
fn first_live_settings(loaded: &Loaded, identities: Identities, now_ms: i64) -> Arc<LiveSettings> {
    let settings = &loaded.settings;
    let stamp = ConfigStamp {
        origin: settings.origin.clone(),
        sha256: loaded.sha256.clone(),
        loaded_at_ms: now_ms,
    };
    Arc::new(LiveSettings::new(reload::live_of(
        settings, identities, stamp, None,
    )))
}

/// A listener on `listen` (set by `key`), and the address it got (`listen`'s port may be 0).
async fn bind(listen: SocketAddr, key: &'static str) -> Result<Bound, StartupError> {
    let failed = |source| StartupError::Bind {
        addr: listen,
        key,
        source,
    };
    let listener = TcpListener::bind(listen).await.map_err(failed)?;
    let addr = listener.local_addr().map_err(failed)?;
    Ok((listener, addr))
}

/// The embedded simulator's settings, if it runs.
fn simulator_settings(settings: &Settings) -> Option<&SimulatorSettings> {
    match &settings.mss.adapter {
        AdapterSettings::Http { simulator, .. } => simulator.as_ref(),
        _ => None,
    }
}

/// The URL the HTTP adapter talks to: the embedded simulator's (at `simulator`, its bound
/// address), else `[mss] url`, else empty (other adapters).
fn http_url(settings: &Settings, simulator: Option<SocketAddr>) -> String {
    match (&settings.mss.adapter, simulator) {
        (
            AdapterSettings::Http {
                simulator: Some(_), ..
            },
            Some(addr),
        ) => format!("http://{addr}"),
        (AdapterSettings::Http { url, .. }, _) => url.clone().unwrap_or_default(),
        _ => String::new(),
    }
}

/// Start the embedded simulator when the configuration runs one, on its bound `listener`.
fn start_simulator_if_any(
    settings: &Settings,
    listener: Option<(TcpListener, SocketAddr)>,
) -> Option<SimulatorHandle> {
    match (simulator_settings(settings), listener) {
        (Some(sim), Some(listener)) => Some(start_simulator(sim, listener)),
        _ => None,
    }
}

/// The address the configured adapter talks to, as it may be shown (without the URL's
/// password and query).
fn shown_mss(settings: &Settings, http_url: &str) -> Result<String, StartupError> {
    Ok(match &settings.mss.adapter {
        AdapterSettings::Http { .. } => HttpAdapter::new(http_url, settings.mss.timeout)?.base(),
        AdapterSettings::Encp(c) => format!("encp: {}", c.command.display()),
        AdapterSettings::Fts3(c) => redact::urls(&c.url).into_owned(),
        AdapterSettings::TapeRest(c) => redact::urls(&c.url).into_owned(),
    })
}

/// The configured adapter (the ledger's `instance` names FTS3 submissions; `http_url` is what
/// the HTTP adapter talks to).
fn build_adapter(
    settings: &Settings,
    instance: &str,
    http_url: &str,
) -> Result<Arc<dyn MssAdapter>, StartupError> {
    Ok(match &settings.mss.adapter {
        AdapterSettings::Http { .. } => Arc::new(HttpAdapter::new(http_url, settings.mss.timeout)?),
        AdapterSettings::Encp(c) => Arc::new(EncpAdapter::new(c.clone())),
        AdapterSettings::Fts3(c) => Arc::new(Fts3Adapter::new(c.clone(), instance)?),
        AdapterSettings::TapeRest(c) => Arc::new(TapeRestAdapter::new(c.clone())?),
    })
}

/// Refuse plain HTTP beyond loopback unless a TLS proxy is said to terminate in front.
fn refuse_plain_http(server: &ServerSettings) -> Result<(), StartupError> {
    let tls = server.tls.as_ref().is_some_and(|t| t.cert.is_some());
    let loopback = server.listen.ip().is_loopback();
    if !tls && !loopback && server.plain_http != PlainHttp::BehindProxy {
        return Err(StartupError::PlainHttp {
            addr: server.listen,
        });
    }
    Ok(())
}

/// Load the token file and the certificate and issuer rules (key caches taken over from
/// `before`), and refuse to expose publicly known tokens (or none) beyond loopback.
fn load_identities(settings: &Settings, before: Option<&Live>) -> Result<Identities, StartupError> {
    let addr = settings.server.listen;
    let exposed = !addr.ip().is_loopback();
    let issuers = Issuers::new(&settings.auth.issuers, before.map(|b| &*b.issuers))
        .map_err(StartupError::Issuers)?;
    let x509: Arc<[_]> = settings.auth.x509.clone().into();
    let tokens = match &settings.token_file {
        Some(path) => {
            let table = TokenTable::load(path)?;
            if table.demo && exposed {
                return Err(StartupError::Exposed {
                    addr,
                    why: "the configured tokens are the public demo tokens",
                });
            }
            info!(file = %path.display(), demo = table.demo, "bearer tokens loaded");
            Some(Arc::new(table))
        }
        None => None,
    };
    if tokens.is_none() && x509.is_empty() && issuers.is_empty() && exposed {
        return Err(StartupError::Exposed {
            addr,
            why: "authentication is off ([auth] is not configured)",
        });
    }
    Ok(Identities {
        tokens,
        x509,
        issuers: Arc::new(issuers),
    })
}

/// Start the bundled simulator on its bound `listener`; returns its stop handle.
fn start_simulator(
    sim: &SimulatorSettings,
    (listener, addr): (TcpListener, SocketAddr),
) -> SimulatorHandle {
    let (stop, stopped) = oneshot::channel::<()>();
    let handle = tokio::spawn(sim::run(listener, sim_config(sim), async {
        let _ = stopped.await;
    }));
    info!(%addr, "embedded mss simulator started");
    (stop, handle)
}

/// The first ranking of the held queue for explain's positions, made in the background when a
/// term starts: an explain never waits for one, so until it is done explains answer without a
/// position (`not_ranked`). The `volumes` mode ranks no single requests (the term does not
/// start this then).
async fn rank_queue(ledger: Ledger) {
    if let Err(e) = ledger.rank_queue().await {
        warn!(error = %e, "cannot rank the held queue");
    }
}

/// The simulator's settings from the broker's `[mss.simulator]` table.
pub fn sim_config(sim: &SimulatorSettings) -> SimConfig {
    SimConfig {
        library: sim.library.clone(),
        time_scale: sim.time_scale,
        faults: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A batch body is read and its rate charged before the decision gate is awaited (as before
    /// the blocking-thread change): a malformed batch is answered 400 at once while a reload
    /// holds the gate, and reading a large body never holds the gate (a reload waiting on it
    /// would hold every other submitter behind it).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_malformed_batch_is_answered_while_a_reload_holds_the_gate() {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = crate::tests::TestConfig::new().settings();
        settings.database.path = dir.path().join("gate.db");
        settings.server.listen = "127.0.0.1:0".parse().unwrap();
        let app = Application::build(&settings).await.unwrap();
        let live = app.state.live.clone();
        let base = format!("http://{}", app.local_addr());
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(app.run_until_stopped(async {
            let _ = stopped.await;
        }));
        let closed = live.swapping().await;
        let client = reqwest::Client::new();
        let sent = client
            .post(format!("{base}/v1/requests/batch"))
            .header("content-type", "application/json")
            .body("{\"requests\": [")
            .send();
        let answer = tokio::time::timeout(Duration::from_secs(5), sent).await;
        drop(closed);
        let resp = answer
            .expect("a malformed batch is answered while a reload holds the gate")
            .unwrap();
        assert_eq!(resp.status().as_u16(), 400);
        // So is one past the size read on a blocking thread.
        let closed = live.swapping().await;
        let large = format!("{{\"requests\": [{}", " ".repeat(1_100_000));
        let sent = client
            .post(format!("{base}/v1/requests/batch"))
            .header("content-type", "application/json")
            .body(large)
            .send();
        let answer = tokio::time::timeout(Duration::from_secs(5), sent).await;
        drop(closed);
        let resp = answer
            .expect("a large malformed batch is answered while a reload holds the gate")
            .unwrap();
        assert_eq!(resp.status().as_u16(), 400);
        // A large good batch still goes through, its items read back from the body.
        let items: Vec<String> = (0..4000)
            .map(|i| {
                format!(
                    "{{\"client_request_id\": \"c{i}\", \"station\": \"station-a\", \
                     \"user\": \"alice\", \"file\": \"/pnfs/test/c{i}{pad}\", \
                     \"size_bytes\": 1000, \"access_mode\": \"reprocessing\", \
                     \"physics_group\": \"higgs\"}}",
                    pad = "x".repeat(200)
                )
            })
            .collect();
        let good = format!("{{\"requests\": [{}]}}", items.join(", "));
        assert!(good.len() > 1024 * 1024);
        let resp = client
            .post(format!("{base}/v1/requests/batch"))
            .header("content-type", "application/json")
            .body(good)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 202);
        let body: serde_json::Value = resp.json().await.unwrap();
        let results = body["results"].as_array().expect("results");
        assert_eq!(results.len(), 4000);
        assert_eq!(
            results[3999]["id"].as_i64().map(|_| ()),
            Some(()),
            "{}",
            results[3999]
        );
        let _ = stop.send(());
        let _ = server.await;
    }
}

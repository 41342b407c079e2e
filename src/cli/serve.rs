//! `mssbroker serve`: the broker itself, with its signals (SIGTERM and Ctrl-C stop it, logging
//! which and when it has stopped; SIGHUP reloads the configuration: see `reload`).

use crate::config::{layers, ConfigError};
use crate::leadership::{Contender, Identity, Timing};
use crate::live_settings::Reload;
use crate::startup::reload::{LoadSettings, Loaded};
use crate::startup::{Application, Leadership};
use anyhow::Context;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

pub(super) async fn serve(
    config: Option<PathBuf>,
    listen: Option<SocketAddr>,
    db: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    // The one way the configuration is loaded, at start and at every reload: the file, the
    // environment as it was at start, then the flags.
    let over = match super::layers(listen, db) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("{e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let load: LoadSettings = Arc::new(move || Loaded::file(config.as_deref(), &over));
    let loaded = match load() {
        Ok(l) => l,
        Err(
            e @ (ConfigError::Invalid { .. }
            | ConfigError::Syntax { .. }
            | ConfigError::Read { .. }),
        ) => {
            eprintln!("{e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    for s in (loaded.sources.iter()).filter(|s| !matches!(s.source, layers::Source::File(_))) {
        tracing::info!(key = %s.key, source = %s.source, "configuration value from outside the file");
    }
    let settings = loaded.settings.clone();
    // Before anything can take long: from here on SIGHUP no longer kills the process.
    let hangups = hangups()?;
    match crate::server::fds::raise_nofile() {
        Ok((before, after)) => {
            tracing::info!(before, after, "file-descriptor limit (soft RLIMIT_NOFILE)")
        }
        Err(e) => tracing::warn!(error = %e, "cannot raise the file-descriptor limit"),
    }
    let clock = Arc::new(crate::clock::SystemClock);
    // On PostgreSQL every broker of the database contends for its leadership; the contender
    // lives as long as the server (dropped, its session ends and the lock is free).
    let contender = contend(&settings)?;
    let app = match &contender {
        Some(c) => {
            let leadership = Leadership {
                role: c.role(),
                resigner: Some(c.resigner()),
            };
            Application::build_led(loaded, load, clock, leadership).await
        }
        None => Application::build_reloadable(loaded, load, clock).await,
    }
    .with_context(|| format!("cannot start with {}", settings.origin))?;
    reload_on_sighup(hangups, app.reloader());
    // Before the banner and the "serving" line: a SIGTERM from then on stops it gracefully.
    let stops = StopSignals::install()?;
    banner(&format!(
        "mssbroker listening on {}://{}\nmss at {} (config {}, database {})\n",
        app.scheme(),
        app.local_addr(),
        app.mss_url(),
        settings.origin,
        database_shown(&settings)
    ));
    let (why_tx, why) = tokio::sync::oneshot::channel();
    app.run_until_stopped(async move {
        let signal = stops.recv().await;
        tracing::info!(signal, "stopping: finishing the requests in flight");
        let _ = why_tx.send(signal);
    })
    .await?;
    let signal = why.await.unwrap_or("shutdown");
    drop(contender);
    tracing::info!(signal, "mssbroker stopped");
    Ok(ExitCode::SUCCESS)
}

/// The ledger as the banner names it: the SQLite file, or the PostgreSQL URL without its
/// password or query.
fn database_shown(settings: &crate::config::Settings) -> String {
    match &settings.database.url {
        Some(url) => url.to_string(),
        None => settings.database.path.display().to_string(),
    }
}

/// A leadership contender for `[database] url`, when the ledger is on PostgreSQL.
fn contend(settings: &crate::config::Settings) -> anyhow::Result<Option<Contender>> {
    let Some(url) = &settings.database.url else {
        return Ok(None);
    };
    // Until the writer's statements run on PostgreSQL (docs/ha.md, step 4), a term could not
    // open there: refused at start rather than contending for a leadership it cannot hold.
    if !crate::ledger::POSTGRES_LEDGER_COMPLETE {
        anyhow::bail!(
            "database.url: the PostgreSQL ledger is not complete in this build (issue 42, \
             docs/ha.md step 4); use database.path (SQLite)"
        );
    }
    let scheme = match settings.server.tls {
        Some(_) => "https",
        None => "http",
    };
    let identity = Identity {
        holder: format!("{} pid {}", host_name(), std::process::id()),
        advertised_url: format!("{scheme}://{}", settings.server.listen),
    };
    let contender = Contender::start(url.clone(), identity, Timing::default())?;
    tracing::info!(database = %url, "contending for the leadership: standing by until it is won");
    Ok(Some(contender))
}

/// This host's name as the kernel has it (for the `leader` row's holder), or "unknown host".
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown host".to_string())
}

/// Print a start-up banner. It is for whoever reads stdout; a closed stdout (a supervisor that
/// read the address and went away) must not stop the server, so write errors are ignored.
pub(super) fn banner(text: &str) {
    let mut out = std::io::stdout();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

#[cfg(unix)]
type Hangups = tokio::signal::unix::Signal;
#[cfg(not(unix))]
type Hangups = ();

/// Install the SIGHUP handler (without one, SIGHUP's default action ends the process); a
/// SIGHUP that comes before the broker is built is kept and reloads once it is.
fn hangups() -> anyhow::Result<Hangups> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        signal(SignalKind::hangup()).context("cannot install the SIGHUP handler")
    }
    #[cfg(not(unix))]
    Ok(())
}

/// Each SIGHUP reloads the configuration; the outcome is logged (`Reloader::reload`). The task
/// holds the reloader weakly: it holds a ledger handle, and the writer ends (so a SIGTERM can
/// finish) only once every handle is gone with the router.
fn reload_on_sighup(hangups: Hangups, reloader: Arc<dyn Reload>) {
    #[cfg(unix)]
    {
        let mut hup = hangups;
        let reloader = Arc::downgrade(&reloader);
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                tracing::info!("SIGHUP received; reloading the configuration");
                let Some(reloader) = reloader.upgrade() else {
                    tracing::warn!("the broker is stopping; SIGHUP ignored");
                    return;
                };
                let _ = reloader.reload("SIGHUP").await;
            }
        });
    }
    #[cfg(not(unix))]
    let _ = (hangups, reloader);
}

/// SIGTERM and SIGINT (Ctrl-C) with their handlers installed: from then on neither ends the
/// process at once, and [`StopSignals::recv`] completes with the first one's name.
pub struct StopSignals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl StopSignals {
    pub fn install() -> anyhow::Result<StopSignals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(StopSignals {
                term: signal(SignalKind::terminate())
                    .context("cannot install the SIGTERM handler")?,
                int: signal(SignalKind::interrupt())
                    .context("cannot install the SIGINT handler")?,
            })
        }
        #[cfg(not(unix))]
        Ok(StopSignals {})
    }

    /// The name of the first stop signal to come.
    #[cfg(unix)]
    pub async fn recv(mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }

    #[cfg(not(unix))]
    pub async fn recv(self) -> &'static str {
        let _ = tokio::signal::ctrl_c().await;
        "Ctrl-C"
    }
}

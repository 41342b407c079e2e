//! `mssbroker serve`: the broker itself, with its signals (SIGTERM and Ctrl-C stop it, SIGHUP
//! reloads the configuration: see `reload`).

use crate::config::{layers, ConfigError};
use crate::live_settings::Reload;
use crate::startup::reload::{LoadSettings, Loaded};
use crate::startup::Application;
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
    let app = Application::build_reloadable(loaded, load, clock)
        .await
        .with_context(|| format!("cannot start with {}", settings.origin))?;
    reload_on_sighup(hangups, app.reloader());
    banner(&format!(
        "mssbroker listening on http://{}\nmss at {} (config {}, database {})\n",
        app.local_addr(),
        app.mss_url(),
        settings.origin,
        settings.database.path.display()
    ));
    app.run_until_stopped(shutdown_signal()).await?;
    Ok(ExitCode::SUCCESS)
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

/// Completes on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

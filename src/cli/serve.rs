//! `mssbroker serve`: the broker itself, with its signals (SIGTERM and Ctrl-C stop it, SIGHUP
//! is logged and ignored).

use crate::config::{layers, ConfigError};
use crate::startup::Application;
use anyhow::Context;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

pub(super) async fn serve(
    config: Option<PathBuf>,
    listen: Option<SocketAddr>,
    db: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    let loaded = match super::layers(listen, db).and_then(|l| layers::load(config.as_deref(), &l)) {
        Ok(loaded) => loaded,
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
    let settings = loaded.settings;
    // Before anything can take long: from here on SIGHUP no longer kills the process.
    carry_on_after_sighup()?;
    match crate::server::fds::raise_nofile() {
        Ok((before, after)) => {
            tracing::info!(before, after, "file-descriptor limit (soft RLIMIT_NOFILE)")
        }
        Err(e) => tracing::warn!(error = %e, "cannot raise the file-descriptor limit"),
    }
    let app = Application::build(&settings)
        .await
        .with_context(|| format!("cannot start with {}", settings.origin))?;
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

/// Install the SIGHUP handler: it will trigger a configuration reload; until then it logs and
/// the broker carries on (without one, SIGHUP's default action ends the process).
fn carry_on_after_sighup() -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hup = signal(SignalKind::hangup()).context("cannot install the SIGHUP handler")?;
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                tracing::warn!(
                    "SIGHUP received; configuration reload is not implemented yet, carrying on"
                );
            }
        });
    }
    Ok(())
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

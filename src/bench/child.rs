//! A broker run as its own process: `mssbroker serve` started from this binary on a config file
//! and a database, so the memory a benchmark reports is the broker's alone (its `/proc/PID/
//! status`), without the load client's.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A `serve` child listening on a loopback port until `stop`.
pub(crate) struct ChildBroker {
    pub base: String,
    child: Child,
    log: PathBuf,
}

/// Names another `mssbroker` binary to run as the broker (an A/B comparison of two builds under
/// the same load client); unset, this binary.
pub(crate) const SERVE_BINARY: &str = "MSSBROKER_BENCH_SERVE";

/// The text `serve` prints first on stdout (see `cli::serve`).
const BANNER: &str = "mssbroker listening on http://";

impl ChildBroker {
    /// Write `config` (and the demo token file it names) into `dir`, start
    /// `mssbroker serve --config dir/broker.toml --db DB --listen 127.0.0.1:0` and wait for its
    /// banner. Its log goes to `dir/serve.log`.
    pub async fn start(dir: &Path, config: &str, db: &Path) -> anyhow::Result<ChildBroker> {
        let file = dir.join("broker.toml");
        std::fs::write(&file, config)?;
        std::fs::write(
            dir.join("demo-tokens.toml"),
            crate::auth::EMBEDDED_DEMO_TOKENS,
        )?;
        let log = dir.join("serve.log");
        let exe = match std::env::var_os(SERVE_BINARY) {
            Some(path) => PathBuf::from(path),
            None => std::env::current_exe().context("cannot find this executable")?,
        };
        let mut child = Command::new(exe)
            .arg("serve")
            .arg("--config")
            .arg(&file)
            .arg("--db")
            .arg(db)
            .arg("--listen")
            .arg("127.0.0.1:0")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log)?)
            .kill_on_drop(true)
            .spawn()
            .context("cannot start `mssbroker serve`")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let wait = tokio::time::timeout(Duration::from_secs(120), lines.next_line());
        let line = wait.await.ok().and_then(Result::ok).flatten();
        let Some(addr) = line.as_deref().and_then(|l| l.strip_prefix(BANNER)) else {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            anyhow::bail!("`mssbroker serve` did not start: {line:?}\n{text}");
        };
        let base = format!("http://{}", addr.trim());
        // The rest of stdout is not read: drain it so the child never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(ChildBroker { base, child, log })
    }

    /// A field of the child's `/proc/PID/status` in MB (`VmRSS`, `VmHWM`), 0 where unreadable.
    pub fn status_mb(&self, field: &str) -> f64 {
        self.child.id().map_or(0.0, |pid| {
            super::machine::proc_status_mb(&format!("{pid}"), field)
        })
    }

    /// CPU seconds (user and system) the child has used so far, from `/proc/PID/stat`.
    pub fn cpu_seconds(&self) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()?)).ok()?;
        // Fields after the command name (which is in parentheses): utime and stime are the
        // 12th and 13th of them, in clock ticks.
        let rest = &stat[stat.rfind(')')? + 1..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
        // SAFETY: sysconf reads a constant of the system; no memory is touched.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        (hz > 0).then(|| ticks / hz as f64)
    }

    /// SIGTERM, then wait for a clean exit (the broker commits and closes the database).
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let pid = self.child.id().context("the broker already exited")?;
        let pid = libc::pid_t::try_from(pid)?;
        // SAFETY: kill(2) on our own child's pid with a valid signal number has no memory effect.
        if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        let status = self.child.wait().await?;
        if !status.success() {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            anyhow::bail!("`mssbroker serve` exited with {status}\n{text}");
        }
        Ok(())
    }
}

/// The broker of a benchmark round: in this process (the default), or a `serve` child when
/// [`SERVE_BINARY`] names a binary (then the load client and the broker are apart, so a
/// profiler can attach to the broker alone and two builds can be compared under one client).
pub(crate) enum RoundBroker {
    InProcess(super::load::Broker),
    Child(ChildBroker),
}

impl RoundBroker {
    /// Start the broker of `settings` (database path and limits already set); `config` is the
    /// text the child reads, the shipped config as `settings` came from.
    pub async fn start(
        settings: &crate::config::Settings,
        config: &str,
        dir: &Path,
    ) -> anyhow::Result<RoundBroker> {
        if std::env::var_os(SERVE_BINARY).is_none() {
            return Ok(RoundBroker::InProcess(
                super::load::Broker::start(settings).await?,
            ));
        }
        let child = ChildBroker::start(dir, config, &settings.database.path).await?;
        println!(
            "broker: `serve` child pid {} ({SERVE_BINARY})",
            child.child.id().unwrap_or(0)
        );
        Ok(RoundBroker::Child(child))
    }

    pub fn base(&self) -> &str {
        match self {
            RoundBroker::InProcess(b) => &b.base,
            RoundBroker::Child(c) => &c.base,
        }
    }

    /// The broker's CPU seconds so far, when it is a child (in process it shares the client's).
    pub fn cpu_seconds(&self) -> Option<f64> {
        match self {
            RoundBroker::InProcess(_) => None,
            RoundBroker::Child(c) => c.cpu_seconds(),
        }
    }

    pub async fn stop(self) -> anyhow::Result<()> {
        match self {
            RoundBroker::InProcess(b) => b.stop().await,
            RoundBroker::Child(c) => c.stop().await,
        }
    }
}

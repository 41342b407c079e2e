//! Reloading the configuration without a restart (SIGHUP and `POST /v1/admin/reload`): the
//! file is read again through the same loader `serve` started with (the seam: whatever layers
//! it merges), validated as at start-up, compared with what cannot change live, and its live
//! part put in force in one step: the ledger writer takes the new policy between two commits
//! (`Ledger::reload`), then [`LiveSettings`] is swapped while no request is being classified.
//! A refusal changes nothing and says why, naming the key.
//!
//! What cannot change live (a restart does): `[server]` (the listener and the HTTP server are
//! built once), `[database]`, `[auth] token_file`, `[mss]` but its submit rate and burst (the
//! adapter and its table, timeouts, retries, batch size, event wait, staleness), and `[limits]`
//! but the station rate and burst (body sizes and the body budget are built into the router).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tracing::{info, warn};

use crate::clock::Clock;
use crate::config::{ConfigError, Settings, DEFAULT_PATH, EMBEDDED};
use crate::ledger::{Ledger, LedgerError};
use crate::live_settings::{ConfigStamp, Live, LiveSettings};

/// A loaded configuration and the SHA-256 of the file bytes it came from.
#[derive(Clone)]
pub struct Loaded {
    pub settings: Settings,
    pub sha256: String,
}

impl Loaded {
    /// Settings built in-process (tests, benchmarks): no file; the hash is of their text.
    pub fn in_process(settings: Settings) -> Loaded {
        let sha256 = sha256_hex(format!("{settings:?}").as_bytes());
        Loaded { settings, sha256 }
    }

    /// Read `path` (else `config/broker.toml`, else the embedded copy, as
    /// `Settings::load_default` chooses) and load it: the hash is of the bytes the settings
    /// were read from (read before and after loading; a file changed in between is refused).
    pub fn file(path: Option<&Path>) -> Result<Loaded, ConfigError> {
        let chosen = match path {
            Some(p) => Some(p.to_path_buf()),
            None if Path::new(DEFAULT_PATH).exists() => Some(PathBuf::from(DEFAULT_PATH)),
            None => None,
        };
        let bytes = |p: &Path| {
            std::fs::read(p).map_err(|source| ConfigError::Read {
                path: p.to_path_buf(),
                source,
            })
        };
        let Some(file) = chosen else {
            let settings = Settings::load_default(None)?;
            let sha256 = sha256_hex(EMBEDDED.as_bytes());
            return Ok(Loaded { settings, sha256 });
        };
        let before = bytes(&file)?;
        let settings = Settings::load_default(Some(&file))?;
        if bytes(&file)? != before {
            return Err(ConfigError::Read {
                path: file,
                source: std::io::Error::other("the file changed while it was read; try again"),
            });
        }
        Ok(Loaded {
            settings,
            sha256: sha256_hex(&before),
        })
    }
}

/// Lower-case hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// How the configuration is loaded: the same function at start and at every reload.
pub type LoadSettings = Arc<dyn Fn() -> Result<Loaded, ConfigError> + Send + Sync>;

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("{0}")]
    Config(ConfigError),
    #[error("`{key}` cannot change while the broker runs ({was} -> {now}); restart to change it")]
    Fixed {
        key: &'static str,
        was: String,
        now: String,
    },
    #[error("{0}")]
    Ledger(LedgerError),
}

impl ReloadError {
    /// The configuration key the refusal is about.
    pub fn key(&self) -> String {
        match self {
            ReloadError::Config(ConfigError::Invalid { issues, .. }) => issues
                .first()
                .map_or_else(|| "config".to_string(), |i| i.key.clone()),
            ReloadError::Config(_) => "config".to_string(),
            ReloadError::Fixed { key, .. } => key.to_string(),
            ReloadError::Ledger(LedgerError::RemovedGroups(_)) => "shares".to_string(),
            ReloadError::Ledger(_) => "config".to_string(),
        }
    }

    /// Whether the configuration is at fault (not the broker: its ledger failed).
    pub fn is_refusal(&self) -> bool {
        !matches!(
            self,
            ReloadError::Ledger(e) if !matches!(e, LedgerError::RemovedGroups(_))
        )
    }
}

/// What is in force after a reload.
#[derive(Debug, Clone)]
pub struct Reloaded {
    pub stamp: ConfigStamp,
    /// The file's bytes differ from the previous configuration's.
    pub changed: bool,
}

/// Reloads the configuration of one running broker.
pub struct Reloader {
    load: LoadSettings,
    /// The configuration the broker started with: what cannot change is compared to it.
    started: Settings,
    live: Arc<LiveSettings>,
    ledger: Ledger,
    clock: Arc<dyn Clock>,
    /// One reload at a time (SIGHUP and the endpoint may come together).
    one: tokio::sync::Mutex<()>,
}

impl Reloader {
    pub fn new(
        load: LoadSettings,
        started: Settings,
        live: Arc<LiveSettings>,
        ledger: Ledger,
        clock: Arc<dyn Clock>,
    ) -> Reloader {
        Reloader {
            load,
            started,
            live,
            ledger,
            clock,
            one: tokio::sync::Mutex::new(()),
        }
    }

    /// Read, check and put in force the configuration; logs the outcome either way.
    pub async fn reload(&self, why: &str) -> Result<Reloaded, ReloadError> {
        let outcome = self.reload_quietly().await;
        match &outcome {
            Ok(r) => info!(trigger = why, sha256 = %r.stamp.sha256, changed = r.changed,
                origin = %r.stamp.origin, "configuration reloaded"),
            Err(e) => warn!(trigger = why, key = %e.key(), error = %e,
                "configuration reload refused; nothing changed"),
        }
        outcome
    }

    async fn reload_quietly(&self) -> Result<Reloaded, ReloadError> {
        let _one = self.one.lock().await;
        let load = self.load.clone();
        let loaded = tokio::task::spawn_blocking(move || load())
            .await
            .map_err(|e| ReloadError::Ledger(LedgerError::Storage(e.to_string())))?
            .map_err(ReloadError::Config)?;
        fixed_unchanged(&self.started, &loaded.settings)?;
        let new = &loaded.settings;
        for note in &new.notes {
            warn!(note = %note, "configuration note");
        }
        let before = self.live.get();
        let _closed = self.live.swapping().await;
        (self.ledger.reload(new.policy.clone()).await).map_err(ReloadError::Ledger)?;
        let stamp = ConfigStamp {
            origin: new.origin.clone(),
            sha256: loaded.sha256.clone(),
            loaded_at_ms: self.clock.now_ms(),
        };
        self.live.swap(live_of(new, stamp.clone(), Some(&before)));
        Ok(Reloaded {
            changed: stamp.sha256 != before.stamp.sha256,
            stamp,
        })
    }
}

/// The live part of `settings`.
pub fn live_of(settings: &Settings, stamp: ConfigStamp, before: Option<&Live>) -> Live {
    Live::new(
        settings.policy.clone(),
        (
            settings.limits.station_rate_per_sec,
            settings.limits.station_burst,
        ),
        (settings.mss.submit_rate_per_sec, settings.mss.submit_burst),
        stamp,
        before,
    )
}

/// Refuse a change of what cannot change live, naming its key.
fn fixed_unchanged(was: &Settings, now: &Settings) -> Result<(), ReloadError> {
    let (ws, ns) = (&was.server, &now.server);
    let (wl, nl) = (&was.limits, &now.limits);
    let (wm, nm) = (&was.mss, &now.mss);
    let fixed: [(&'static str, String, String); 21] = [
        (
            "server.listen",
            ws.listen.to_string(),
            ns.listen.to_string(),
        ),
        (
            "server.max_connections",
            d(ws.max_connections),
            d(ns.max_connections),
        ),
        (
            "server.header_read_timeout_ms",
            d(ws.header_read_timeout),
            d(ns.header_read_timeout),
        ),
        (
            "server.idle_timeout_ms",
            d(ws.idle_timeout),
            d(ns.idle_timeout),
        ),
        (
            "server.body_timeout_ms",
            d(ws.body_timeout),
            d(ns.body_timeout),
        ),
        (
            "database.path",
            d(&was.database.path),
            d(&now.database.path),
        ),
        (
            "database.commit_batch_max",
            d(was.database.commit_batch_max),
            d(now.database.commit_batch_max),
        ),
        ("auth.token_file", d(&was.token_file), d(&now.token_file)),
        (
            "mss.adapter",
            wm.adapter.name().into(),
            nm.adapter.name().into(),
        ),
        (adapter_key(&wm.adapter), d(&wm.adapter), d(&nm.adapter)),
        ("mss.timeout_ms", d(wm.timeout), d(nm.timeout)),
        ("mss.submit_batch", d(wm.submit_batch), d(nm.submit_batch)),
        (
            "mss.retry_max_attempts",
            d(wm.retry.max_attempts),
            d(nm.retry.max_attempts),
        ),
        ("mss.retry_base_ms", d(wm.retry.base), d(nm.retry.base)),
        ("mss.retry_max_ms", d(wm.retry.max), d(nm.retry.max)),
        ("mss.event_wait_ms", d(wm.event_wait), d(nm.event_wait)),
        ("mss.stale_after_ms", d(wm.stale_after), d(nm.stale_after)),
        (
            "limits.max_body_bytes",
            d(wl.max_body_bytes),
            d(nl.max_body_bytes),
        ),
        (
            "limits.max_bodies_in_memory_bytes",
            d(wl.max_bodies_in_memory_bytes),
            d(nl.max_bodies_in_memory_bytes),
        ),
        ("limits.max_batch", d(wl.max_batch), d(nl.max_batch)),
        ("limits", d(limits_but_rates(wl)), d(limits_but_rates(nl))),
    ];
    match fixed.into_iter().find(|(_, w, n)| w != n) {
        Some((key, was, now)) => Err(ReloadError::Fixed { key, was, now }),
        None => Ok(()),
    }
}

fn d(v: impl std::fmt::Debug) -> String {
    format!("{v:?}")
}

/// The key of the adapter's own settings.
fn adapter_key(a: &crate::dispatcher::AdapterSettings) -> &'static str {
    use crate::dispatcher::AdapterSettings as A;
    match a {
        A::Http {
            simulator: Some(_), ..
        } => "mss.simulator",
        A::Http { .. } => "mss.url",
        A::Encp(_) => "mss.encp",
        A::Fts3(_) => "mss.fts3",
        A::TapeRest(_) => "mss.tape_rest",
    }
}

/// `[limits]` without what may change live.
fn limits_but_rates(l: &crate::api::InputLimits) -> crate::api::InputLimits {
    crate::api::InputLimits {
        station_rate_per_sec: 0,
        station_burst: 0,
        ..l.clone()
    }
}

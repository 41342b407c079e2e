//! Reloading the configuration without a restart (SIGHUP and `POST /v1/admin/reload`): the
//! file is read again through the same loader `serve` started with (the seam: whatever layers
//! it merges), validated as at start-up, compared with what cannot change live, and its live
//! part put in force in one step: the ledger reads the new policy's queues off the writer from a
//! snapshot (`Ledger::prepare_reload`, while requests are still decided under the old one), the
//! writer takes the new policy between two commits after catching up with the rows committed
//! since (`Ledger::install_reload`), and [`LiveSettings`] is swapped, both while no request is
//! being classified. A refusal changes nothing and says why, naming the key.
//!
//! What cannot change live (a restart does): `[server]` (the listener and the HTTP server are
//! built once), `[database]`, `[auth] token_file`, `[mss]` but its submit rate and burst (the
//! adapter and its table, timeouts, retries, batch size, event wait, staleness), and `[limits]`
//! but the station rate and burst (body sizes and the body budget are built into the router).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use mss_adapters::redact;
use tracing::{info, warn};

use crate::api::InputLimits;
use crate::clock::Clock;
use crate::config::layers::{self, Layers, Sourced};
use crate::config::{ConfigError, Settings, DEFAULT_PATH, EMBEDDED};
use crate::dispatcher::MssSettings;
use crate::ledger::LedgerError;
use crate::live_settings::{ConfigStamp, Identities, Live, LiveSettings};
use crate::live_settings::{Refusal, Reload, ReloadRefused, Reloaded};
use crate::office::{OfficeSlot, Standby};
use crate::tls::TlsSource;

/// A loaded configuration and the SHA-256 of the file bytes it came from.
#[derive(Clone)]
pub struct Loaded {
    pub settings: Settings,
    pub sha256: String,
    /// Where each set value came from (the file, an environment variable, a flag).
    pub sources: Vec<Sourced>,
}

impl Loaded {
    /// Settings built in-process (tests, benchmarks): no file; the hash is of their text.
    pub fn in_process(settings: Settings) -> Loaded {
        let sha256 = sha256_hex(format!("{settings:?}").as_bytes());
        Loaded {
            settings,
            sha256,
            sources: Vec::new(),
        }
    }

    /// Read `path` (else `config/broker.toml`, else the embedded copy, as `layers::load`
    /// chooses) and load it with `layers` (environment and flags) over it: the hash is of the
    /// file's bytes the settings were read from (read before and after loading; a file changed
    /// in between is refused).
    pub fn file(path: Option<&Path>, over: &Layers) -> Result<Loaded, ConfigError> {
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
            let loaded = layers::load(None, over)?;
            let sha256 = sha256_hex(EMBEDDED.as_bytes());
            return Ok(Loaded {
                settings: loaded.settings,
                sha256,
                sources: loaded.sources,
            });
        };
        let before = bytes(&file)?;
        let loaded = layers::load(Some(&file), over)?;
        if bytes(&file)? != before {
            return Err(ConfigError::Read {
                path: file,
                source: std::io::Error::other("the file changed while it was read; try again"),
            });
        }
        Ok(Loaded {
            settings: loaded.settings,
            sha256: sha256_hex(&before),
            sources: loaded.sources,
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
    /// The token file (its path is fixed) cannot be read or is refused.
    #[error("{0}")]
    Tokens(String),
    /// The TLS files (their paths are fixed) cannot be read or are refused.
    #[error("{0}")]
    Tls(crate::tls::TlsError),
    /// No term of office: there is no ledger to take a new policy.
    #[error("{0}")]
    Standby(Standby),
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
            ReloadError::Tokens(_) => "auth.token_file".to_string(),
            ReloadError::Tls(e) => e.key.to_string(),
            ReloadError::Standby(_) => "leadership".to_string(),
        }
    }

    /// The refusal as the API answers it.
    pub fn refused(&self) -> ReloadRefused {
        let why = match self {
            ReloadError::Config(_) => Refusal::Invalid,
            ReloadError::Fixed { .. } => Refusal::Fixed,
            ReloadError::Ledger(LedgerError::RemovedGroups(_)) => Refusal::RemovedGroups,
            ReloadError::Ledger(_) | ReloadError::Standby(_) => Refusal::Failed,
            ReloadError::Tokens(_) | ReloadError::Tls(_) => Refusal::Invalid,
        };
        ReloadRefused {
            why,
            key: self.key(),
            message: self.to_string(),
        }
    }
}

/// Reloads the configuration of one running broker.
pub struct Reloader {
    load: LoadSettings,
    /// The configuration the broker started with: what cannot change is compared to it.
    started: Settings,
    live: Arc<LiveSettings>,
    /// The term of office whose ledger takes the new policy.
    office: Arc<OfficeSlot>,
    clock: Arc<dyn Clock>,
    /// The TLS files in force, read again at every reload.
    tls: Option<TlsSource>,
    /// One reload at a time (SIGHUP and the endpoint may come together).
    one: tokio::sync::Mutex<()>,
}

impl Reloader {
    pub fn new(
        load: LoadSettings,
        started: Settings,
        live: Arc<LiveSettings>,
        office: Arc<OfficeSlot>,
        clock: Arc<dyn Clock>,
        tls: Option<TlsSource>,
    ) -> Reloader {
        Reloader {
            load,
            started,
            live,
            office,
            clock,
            tls,
            one: tokio::sync::Mutex::new(()),
        }
    }

    /// Read, check and put in force the configuration; logs the outcome either way.
    pub async fn reload_now(&self, why: &str) -> Result<Reloaded, ReloadError> {
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
        let office = self.office.current().map_err(ReloadError::Standby)?;
        let load = self.load.clone();
        let loaded = tokio::task::spawn_blocking(move || load())
            .await
            .map_err(|e| ReloadError::Ledger(LedgerError::Storage(e.to_string())))?
            .map_err(ReloadError::Config)?;
        fixed_unchanged(&self.started, &loaded.settings)?;
        let new = &loaded.settings;
        // The token file's contents are live (the path is not): tokens rotate by a reload; so
        // are the TLS files' (a renewed certificate is served from the next handshake on).
        let before = self.live.get();
        let identities = super::load_identities(new, Some(&before))
            .map_err(|e| ReloadError::Tokens(e.to_string()))?;
        let tls = match &self.tls {
            Some(source) => Some(source.prepare().map_err(ReloadError::Tls)?),
            None => None,
        };
        for note in &new.notes {
            warn!(note = %note, "configuration note");
        }
        // The new policy's queues are read off the writer while requests are still decided
        // under the old one; then, with the gate closed, the writer catches up with what was
        // committed meanwhile and takes the new policy (see `ledger::Ledger::prepare_reload`).
        let prepared = (office.ledger.prepare_reload(new.policy.clone()).await)
            .map_err(ReloadError::Ledger)?;
        let _closed = self.live.swapping().await;
        (office.ledger.install_reload(prepared).await).map_err(ReloadError::Ledger)?;
        let stamp = ConfigStamp {
            origin: new.origin.clone(),
            sha256: loaded.sha256.clone(),
            loaded_at_ms: self.clock.now_ms(),
        };
        self.live
            .swap(live_of(new, identities, stamp.clone(), Some(&before)));
        if let (Some(source), Some(material)) = (&self.tls, tls) {
            source.install(material);
        }
        Ok(Reloaded {
            changed: stamp.sha256 != before.stamp.sha256,
            stamp,
        })
    }
}

impl Reload for Reloader {
    fn reload<'a>(
        &'a self,
        trigger: &'a str,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Reloaded, ReloadRefused>> + Send + 'a>,
    > {
        Box::pin(async move { self.reload_now(trigger).await.map_err(|e| e.refused()) })
    }
}

/// The live part of `settings`.
pub fn live_of(
    settings: &Settings,
    identities: Identities,
    stamp: ConfigStamp,
    before: Option<&Live>,
) -> Live {
    Live::new(
        settings.policy.clone(),
        (
            settings.limits.station_rate_per_sec,
            settings.limits.station_burst,
        ),
        (settings.mss.submit_rate_per_sec, settings.mss.submit_burst),
        identities,
        stamp,
        before,
    )
}

/// Refuse a change of what cannot change live, naming its key.
fn fixed_unchanged(was: &Settings, now: &Settings) -> Result<(), ReloadError> {
    let mut fixed = fixed_server(was, now);
    fixed.extend(fixed_mss(&was.mss, &now.mss));
    fixed.extend(fixed_limits(&was.limits, &now.limits));
    match fixed.into_iter().find(|(_, w, n)| w != n) {
        // The values are shown in the answer and the log: an adapter's URL without its secrets.
        Some((key, was, now)) => Err(ReloadError::Fixed {
            key,
            was: redact::urls(&was).into_owned(),
            now: redact::urls(&now).into_owned(),
        }),
        None => Ok(()),
    }
}

/// A key and its value before and after, as text.
type Pair = (&'static str, String, String);

fn fixed_server(was: &Settings, now: &Settings) -> Vec<Pair> {
    let (w, n) = (&was.server, &now.server);
    vec![
        ("server.listen", debug_text(w.listen), debug_text(n.listen)),
        (
            "server.max_connections",
            debug_text(w.max_connections),
            debug_text(n.max_connections),
        ),
        (
            "server.header_read_timeout_ms",
            debug_text(w.header_read_timeout),
            debug_text(n.header_read_timeout),
        ),
        (
            "server.idle_timeout_ms",
            debug_text(w.idle_timeout),
            debug_text(n.idle_timeout),
        ),
        (
            "server.body_timeout_ms",
            debug_text(w.body_timeout),
            debug_text(n.body_timeout),
        ),
        (
            "database.path",
            debug_text(&was.database.path),
            debug_text(&now.database.path),
        ),
        (
            "database.url",
            debug_text(&was.database.url),
            debug_text(&now.database.url),
        ),
        (
            "database.commit_batch_max",
            debug_text(was.database.commit_batch_max),
            debug_text(now.database.commit_batch_max),
        ),
        (
            "auth.token_file",
            debug_text(&was.token_file),
            debug_text(&now.token_file),
        ),
        (
            "server.plain_http",
            debug_text(w.plain_http),
            debug_text(n.plain_http),
        ),
        (
            "server.trusted_proxies",
            debug_text(&w.trusted_proxies),
            debug_text(&n.trusted_proxies),
        ),
        ("server.tls", debug_text(&w.tls), debug_text(&n.tls)),
    ]
}

fn fixed_mss(w: &MssSettings, n: &MssSettings) -> Vec<Pair> {
    vec![
        (
            "mss.adapter",
            w.adapter.name().into(),
            n.adapter.name().into(),
        ),
        (
            adapter_key(&w.adapter),
            debug_text(&w.adapter),
            debug_text(&n.adapter),
        ),
        (
            "mss.timeout_ms",
            debug_text(w.timeout),
            debug_text(n.timeout),
        ),
        (
            "mss.submit_batch",
            debug_text(w.submit_batch),
            debug_text(n.submit_batch),
        ),
        (
            "mss.retry_max_attempts",
            debug_text(w.retry.max_attempts),
            debug_text(n.retry.max_attempts),
        ),
        (
            "mss.retry_base_ms",
            debug_text(w.retry.base),
            debug_text(n.retry.base),
        ),
        (
            "mss.retry_max_ms",
            debug_text(w.retry.max),
            debug_text(n.retry.max),
        ),
        (
            "mss.event_wait_ms",
            debug_text(w.event_wait),
            debug_text(n.event_wait),
        ),
        (
            "mss.stale_after_ms",
            debug_text(w.stale_after),
            debug_text(n.stale_after),
        ),
        // The locator runs with the lookup it started with.
        (
            "mss.volume_lookup",
            lookup_shown(&w.volume_lookup),
            lookup_shown(&n.volume_lookup),
        ),
    ]
}

fn fixed_limits(w: &InputLimits, n: &InputLimits) -> Vec<Pair> {
    vec![
        (
            "limits.max_body_bytes",
            debug_text(w.max_body_bytes),
            debug_text(n.max_body_bytes),
        ),
        (
            "limits.max_bodies_in_memory_bytes",
            debug_text(w.max_bodies_in_memory_bytes),
            debug_text(n.max_bodies_in_memory_bytes),
        ),
        (
            "limits.max_batch",
            debug_text(w.max_batch),
            debug_text(n.max_batch),
        ),
        (
            "limits.max_size_bytes",
            debug_text(w.max_size_bytes),
            debug_text(n.max_size_bytes),
        ),
        (
            "limits.max_string_len",
            debug_text(w.max_string_len),
            debug_text(n.max_string_len),
        ),
        (
            "limits.max_path_len",
            debug_text(w.max_path_len),
            debug_text(n.max_path_len),
        ),
        (
            "limits.max_report_buckets",
            debug_text(w.max_report_buckets),
            debug_text(n.max_report_buckets),
        ),
    ]
}

/// `[mss.volume_lookup]` as a refusal shows it: the method and a digest of the rest (a
/// command's arguments may carry a site's secret).
fn lookup_shown(l: &Option<(mss_adapters::locate::LookupSettings, i64)>) -> String {
    use std::hash::{Hash, Hasher};
    match l {
        None => "not set".into(),
        Some((s, wait)) => {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            format!("{s:?} {wait}").hash(&mut h);
            format!("{} #{:016x}", s.method.name(), h.finish())
        }
    }
}

fn debug_text(v: impl std::fmt::Debug) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"
[server]
listen = "127.0.0.1:0"
[policy]
p_front = 20
p_back = 10
[shares]
a = 1
b = 1
[limits]
station_rate_per_sec = 100
[mss]
adapter = "http"
url = "http://127.0.0.1:1"
submit_rate_per_sec = 1000
"#;

    fn changed(from: &str, to: &str) -> Result<(), ReloadError> {
        let was = Settings::parse(CONFIG, "test").unwrap();
        let now = Settings::parse(&CONFIG.replacen(from, to, 1), "test").unwrap();
        fixed_unchanged(&was, &now)
    }

    fn refused_key(from: &str, to: &str) -> String {
        match changed(from, to) {
            Err(e @ ReloadError::Fixed { .. }) => e.key(),
            other => panic!("{from} -> {to}: {other:?}"),
        }
    }

    /// Shares, the policy, the station and submit rates change live; the listener, the
    /// database, the adapter and its table, and the body limits do not, each named by key.
    #[test]
    fn what_may_change_live_and_what_is_refused_by_key() {
        for (from, to) in [
            ("b = 1", "b = 3\nc = 2"),
            ("p_back = 10", "p_back = 5"),
            ("station_rate_per_sec = 100", "station_rate_per_sec = 7"),
            ("submit_rate_per_sec = 1000", "submit_rate_per_sec = 300"),
        ] {
            assert!(changed(from, to).is_ok(), "{from} -> {to}");
        }
        let listen = "listen = \"127.0.0.1:0\"";
        let url = "url = \"http://127.0.0.1:1\"";
        let rate = "station_rate_per_sec = 100";
        for (from, to, key) in [
            (listen, "listen = \"127.0.0.1:9\"", "server.listen"),
            (
                "[policy]",
                "[database]\npath = \"other.db\"\n[policy]",
                "database.path",
            ),
            (url, "url = \"http://127.0.0.1:2\"", "mss.url"),
            (
                url,
                "url = \"http://127.0.0.1:1\"\ntimeout_ms = 5",
                "mss.timeout_ms",
            ),
            (rate, "max_body_bytes = 1000", "limits.max_body_bytes"),
        ] {
            assert_eq!(refused_key(from, to), key, "{from} -> {to}");
        }
    }
}

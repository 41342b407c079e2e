//! Configuration: the TOML file is read into raw structs, then validated into typed [`Settings`].
//! Every validation error names the key it is about. The shipped `config/broker.toml` is also
//! embedded in the binary ([`EMBEDDED`]), so `mssbroker serve` runs with no file at all.
//!
//! Start-up's: the TOML file validated into `Settings`, every `ConfigIssue` naming its key; nothing
//! but start-up code (`startup`, `cli`, `bench*`) imports it. It depends on the domain (where the
//! settings types it builds live: `domain::{limits, mss, server, auth}`, re-exported by the modules
//! that read them) and on the pure modules whose values it builds (`policy`, `shares`), never on a
//! module above it. `raw.rs` (the raw tables,
//! `deny_unknown_fields`; every default stated once: `#[serde(default)]` with one `impl Default`,
//! or at the field), `config.rs` (loading, `validate`), one file per section that builds the settings
//! of the module that reads them: `server.rs`, `limits.rs`, `policy.rs` (priority classes, groups,
//! classification into `PolicySettings`), `tree.rs` (the share tree, an exact `Fraction` per node;
//! 0 under siblings that all have 0 shares, the parent's for a `"parent"` leaf), `targets.rs`
//! (floors and caps), `usage.rs` (`UsageModel`), `order.rs` (ordering keys and `[release]` into
//! `OrderSettings`), `mss.rs` (`[mss]`: the adapter `mss.adapter` names is chosen with its table
//! alone (`ChosenAdapter`), validated by the adapter into `AdapterSettings`; FTS3's default bands)
//! with `mss/checks.rs` (`check_against_policy`: the adapter's `Capabilities` against the ordering
//! policy and release mode; errors for what cannot work, `Settings.notes` for what works with less)
//! and `mss/drive.rs` (`[mss.simulator]`'s drive profile and its keys into a `LibraryConfig`, read
//! whole by `serve` and `simulate` alike, enabled or not), `describe.rs` (`check-config`'s view,
//! and `describe_sources`: each value set and its source), `layers.rs` (`layers::load`: the file's
//! TOML table, then `MSSBROKER__*` variables as TOML values, then flags, merged as tables before
//! `RawConfig` is read, so the file's checks apply to every layer; `Sourced` per value set);
//! `read.rs` (the merged table read, every unknown key reported with its line or layer, the rest
//! still validated). The shipped `config/broker.toml` is embedded as `EMBEDDED`, copied into
//! OUT_DIR by `build.rs` (so an edit of the file alone rebuilds nothing; a checkout reads the file
//! at run time).

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod auth;
mod describe;
pub mod layers;
mod limits;
mod mss;
mod order;
mod policy;
mod raw;
mod read;
mod server;
mod targets;
mod tree;
mod usage;

pub use describe::{describe, describe_sources};

use mss_adapters::redact;
use raw::RawConfig;

use crate::domain::limits::InputLimits;
use crate::domain::mss::MssSettings;
use crate::domain::server::ServerSettings;
use crate::domain::PolicySettings;

/// The shipped configuration, used when no file is given and `config/broker.toml` is absent (a
/// binary run away from a checkout): `config/broker.toml` as it was at the last build of the
/// crate's code, copied by build.rs so that an edit of the file alone rebuilds nothing.
pub const EMBEDDED: &str = include_str!(concat!(env!("OUT_DIR"), "/broker.toml"));
/// The shipped file as it is now, for the tests that check it (a test build depends on it).
#[cfg(test)]
pub(crate) const SHIPPED: &str = include_str!("../config/broker.toml");
/// Where `serve` looks for a configuration file when none is named.
pub const DEFAULT_PATH: &str = "config/broker.toml";

/// One thing wrong with a configuration, and the key it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigIssue {
    pub key: String,
    pub message: String,
}

impl fmt::Display for ConfigIssue {
    /// A URL the message quotes is shown without its password or query (`mss.url`'s secrets).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, redact::urls(&self.message))
    }
}

/// Why a configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// TOML's message quotes the offending line, which may hold a URL with its secrets.
    #[error(
        "{origin}: not valid TOML for this configuration: {}",
        redact::urls(message)
    )]
    Syntax { origin: String, message: String },
    #[error("{origin}: {} problem(s):\n{}", issues.len(), issues.iter().map(|i| format!("  {i}")).collect::<Vec<_>>().join("\n"))]
    Invalid {
        origin: String,
        issues: Vec<ConfigIssue>,
    },
}

// ---------------------------------------------------------------------------------------------
// Validated settings
// ---------------------------------------------------------------------------------------------

/// Everything the broker needs, validated.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where the configuration came from (a path, or "embedded").
    pub origin: String,
    /// The token file (`[auth] token_file`, relative to the configuration's directory); `None`
    /// turns authentication off.
    pub token_file: Option<PathBuf>,
    /// Client certificate subjects and token issuers (`[[auth.x509]]`, `[[auth.issuers]]`).
    pub auth: crate::domain::auth::AuthSettings,
    pub server: ServerSettings,
    pub database: DatabaseSettings,
    pub policy: Arc<PolicySettings>,
    pub limits: InputLimits,
    pub mss: MssSettings,
    /// What works, but with less than the configuration seems to ask (shown by `check-config`,
    /// logged by `serve`).
    pub notes: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct DatabaseSettings {
    /// The SQLite ledger's file (unused when `url` is given).
    pub path: PathBuf,
    /// The PostgreSQL ledger's connection string, checked (`[database] url`); shown without
    /// its password or query.
    pub url: Option<crate::database_url::DatabaseUrl>,
    /// Most commands one group commit takes.
    pub commit_batch_max: usize,
}

// ---------------------------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------------------------

impl Settings {
    /// Read and validate a file.
    pub fn load(path: &Path) -> Result<Settings, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let mut settings = Settings::parse_in(&text, &path.display().to_string(), base)?;
        // A relative token file is next to the configuration, wherever serve is started.
        if let (Some(file), Some(dir)) = (&settings.token_file, path.parent()) {
            if file.is_relative() {
                settings.token_file = Some(dir.join(file));
            }
        }
        Ok(settings)
    }

    /// The named file, else `config/broker.toml` if present, else the embedded copy.
    pub fn load_default(path: Option<&Path>) -> Result<Settings, ConfigError> {
        match path {
            Some(p) => Settings::load(p),
            None if Path::new(DEFAULT_PATH).exists() => Settings::load(Path::new(DEFAULT_PATH)),
            None => Settings::parse(EMBEDDED, "embedded config/broker.toml"),
        }
    }

    /// Validate TOML text; `origin` names it in errors. Files it names are taken from the
    /// working directory.
    pub fn parse(text: &str, origin: &str) -> Result<Settings, ConfigError> {
        Settings::parse_in(text, origin, Path::new("."))
    }

    /// Validate TOML text whose relative file names are taken from `base`.
    pub fn parse_in(text: &str, origin: &str, base: &Path) -> Result<Settings, ConfigError> {
        let table: toml::Table = toml::from_str(text).map_err(|e| ConfigError::Syntax {
            origin: origin.to_string(),
            message: e.to_string().trim_end().to_string(),
        })?;
        let (raw, unknown) = read::read_raw(table, text, origin, &[])?;
        Settings::from_raw(raw, unknown, origin, base)
    }

    /// Validate the raw structs (read from a file, or from layers merged over it); `unknown`
    /// are the unknown keys left out of them, reported with every other problem.
    fn from_raw(
        raw: RawConfig,
        unknown: Vec<ConfigIssue>,
        origin: &str,
        base: &Path,
    ) -> Result<Settings, ConfigError> {
        let mut issues = Issues(unknown);
        let settings = validate(raw, origin, base, &mut issues);
        match settings {
            Some(s) if issues.0.is_empty() => Ok(s),
            _ => Err(ConfigError::Invalid {
                origin: origin.to_string(),
                issues: issues.0,
            }),
        }
    }
}

#[derive(Default)]
struct Issues(Vec<ConfigIssue>);

impl Issues {
    fn add(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.0.push(ConfigIssue {
            key: key.into(),
            message: message.into(),
        });
    }
}

impl mss_adapters::check::Issues for Issues {
    fn record(&mut self, key: &str, message: String) {
        self.add(key, message);
    }
}

// ---------------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------------

/// `[database] url`, checked: readable, naming a host, user and database, its TLS files
/// readable, and without TLS on loopback or a unix socket. The errors never quote the string.
fn database_url(
    text: Option<&str>,
    issues: &mut Issues,
) -> Option<crate::database_url::DatabaseUrl> {
    let url = match crate::database_url::DatabaseUrl::parse(text?) {
        Ok(url) => url,
        Err(e) => {
            let message = e.to_string();
            let message = message.strip_prefix("database url: ").unwrap_or(&message);
            issues.add("database.url", message.to_string());
            return None;
        }
    };
    if let Err(e) = url.only_loopback() {
        let message = e.to_string();
        let message = message.strip_prefix("database.url: ").unwrap_or(&message);
        issues.add("database.url", message.to_string());
        return None;
    }
    Some(url)
}

fn validate(raw: RawConfig, origin: &str, base: &Path, issues: &mut Issues) -> Option<Settings> {
    let server = server::validate_server(&raw.server, base, issues);
    let database = DatabaseSettings {
        path: PathBuf::from(&raw.database.path),
        url: database_url(raw.database.url.as_deref(), issues),
        commit_batch_max: positive(
            raw.database.commit_batch_max,
            "database.commit_batch_max",
            issues,
        ),
    };
    if raw.database.path.is_empty() {
        issues.add("database.path", "may not be empty");
    }
    let limits = limits::validate_limits(&raw.limits, issues);
    let policy = policy::validate_policy(&raw, issues);
    let bands = mss::default_bands(
        raw.policy.p_front,
        raw.priority_classes.iter().map(|c| c.mss_priority).min(),
    );
    let mss = mss::validate_mss(raw.mss, base, bands, issues);
    let mut notes = Vec::new();
    if let (Some(m), Some(p)) = (&mss, &policy) {
        mss::check_against_policy(m, p, issues, &mut notes);
    }
    let (token_file, auth) = match raw.auth {
        Some(a) => auth::validate_auth(a, base, issues),
        None => (None, crate::domain::auth::AuthSettings::default()),
    };
    let client_ca = |s: &ServerSettings| s.tls.as_ref().is_some_and(|t| t.client_ca.is_some());
    if server.as_ref().is_some_and(|s| !client_ca(s)) && !auth.x509.is_empty() {
        issues.add(
            "auth.x509",
            "client certificates need server.tls.client_ca to verify them",
        );
    }
    if server.as_ref().is_some_and(client_ca) && auth.x509.is_empty() {
        notes.push("server.tls.client_ca is set but no [[auth.x509]] maps a certificate to a role: certificates are verified and refused".into());
    }
    Some(Settings {
        origin: origin.to_string(),
        token_file,
        auth,
        server: server?,
        database,
        policy: Arc::new(with_lookup(policy?, mss.as_ref())),
        limits,
        mss: mss?,
        notes,
    })
}

/// `[mss.volume_lookup] wait_secs` into the volumes mode's rules: with a lookup, a request
/// without a volume waits that long for its answer.
fn with_lookup(
    mut policy: crate::domain::PolicySettings,
    mss: Option<&MssSettings>,
) -> crate::domain::PolicySettings {
    policy.order.release.volumes.lookup_wait_ms = mss
        .and_then(|m| m.volume_lookup.as_ref())
        .map(|(_, wait)| *wait);
    policy
}

fn parse_addr(s: &str, key: &str, issues: &mut Issues) -> Option<SocketAddr> {
    match s.parse::<SocketAddr>() {
        Ok(a) => Some(a),
        Err(_) => {
            issues.add(
                key,
                format!("`{s}` is not an address such as 127.0.0.1:8080"),
            );
            None
        }
    }
}

/// The adapters' check ([`mss_adapters::check::positive`]), as the broker's counts (`usize`).
fn positive(v: i64, key: &str, issues: &mut Issues) -> usize {
    mss_adapters::check::positive(v, key, issues) as usize
}

#[cfg(test)]
mod tests;

//! Layered configuration: the file (or the embedded copy), then environment variables
//! `MSSBROKER__SECTION__KEY` (nested tables by more `__`, names lower-cased), then command-line
//! flags; a later layer replaces a key of an earlier one. Each layer is merged into the file's
//! TOML table before the table is read into the raw structs, so a key from the environment is
//! checked exactly as one in the file: an unknown key or a wrong type is refused, naming the
//! variable. Where every value set came from is kept for `check-config`.
//!
//! A value from the environment is read as a TOML value when it is one (`512`, `true`, `2.5`,
//! `"text"`, `[1, 2]`) and as a string otherwise (`127.0.0.1:9000`, `/var/lib/x.db`); quote it
//! (`'"512"'`) to pass a string that looks like a number.

use std::ffi::OsString;
use std::fmt;
use std::path::Path;

use super::{ConfigError, ConfigIssue, Settings, DEFAULT_PATH, EMBEDDED};

/// What an environment variable must start with to be read as configuration.
pub const ENV_PREFIX: &str = "MSSBROKER__";

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The configuration file (its path, or "embedded").
    File(String),
    /// An environment variable (its name).
    Env(String),
    /// A command-line flag (`--listen`).
    Flag(&'static str),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::File(p) => write!(f, "file:{p}"),
            Source::Env(v) => write!(f, "env:{v}"),
            Source::Flag(x) => write!(f, "flag:{x}"),
        }
    }
}

/// One value put over the file's.
#[derive(Debug, Clone)]
struct Override {
    key: Vec<String>,
    value: toml::Value,
    source: Source,
}

/// The layers above the file, in the order they apply.
#[derive(Debug, Clone, Default)]
pub struct Layers(Vec<Override>);

/// A key set by some layer, its value and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Sourced {
    /// Dotted, with keys that are not bare quoted (`shares."analysis/higgs"`).
    pub key: String,
    pub value: toml::Value,
    pub source: Source,
}

/// Settings and where each of their set values came from.
#[derive(Debug)]
pub struct Loaded {
    pub settings: Settings,
    pub sources: Vec<Sourced>,
}

impl Layers {
    /// The configuration variables among `vars` (pass `std::env::vars_os()`), sorted by name.
    pub fn from_env(
        vars: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Result<Layers, ConfigError> {
        let mut issues = Vec::new();
        let mut found: Vec<(String, Override)> = Vec::new();
        for (name, value) in vars {
            let Some(name) = name.to_str().filter(|n| n.starts_with(ENV_PREFIX)) else {
                continue;
            };
            let key: Vec<String> = (name[ENV_PREFIX.len()..].split("__"))
                .map(str::to_ascii_lowercase)
                .collect();
            if key.iter().any(String::is_empty) {
                issues.push(issue(name, "names an empty key (a `__` too many?)"));
                continue;
            }
            let Some(value) = value.to_str() else {
                issues.push(issue(name, "its value is not UTF-8"));
                continue;
            };
            let source = Source::Env(name.to_string());
            let value = parse_value(value);
            found.push((name.to_string(), Override { key, value, source }));
        }
        if !issues.is_empty() {
            return Err(ConfigError::Invalid {
                origin: "the environment".into(),
                issues,
            });
        }
        found.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(Layers(found.into_iter().map(|(_, o)| o).collect()))
    }

    /// A flag's value for `key` (dotted), over everything before it.
    pub fn flag(&mut self, flag: &'static str, key: &str, value: impl Into<String>) {
        self.0.push(Override {
            key: key.split('.').map(String::from).collect(),
            value: toml::Value::String(value.into()),
            source: Source::Flag(flag),
        });
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn issue(variable: &str, message: &str) -> ConfigIssue {
    ConfigIssue {
        key: variable.to_string(),
        message: message.to_string(),
    }
}

/// `text` as a TOML value if it is exactly one, else as a string.
fn parse_value(text: &str) -> toml::Value {
    match toml::from_str::<toml::Table>(&format!("v = {text}")) {
        Ok(mut t) if t.len() == 1 => t.remove("v"),
        _ => None,
    }
    .unwrap_or_else(|| toml::Value::String(text.to_string()))
}

/// The settings `serve` would run with from the named file (else `config/broker.toml` if
/// present, else the embedded copy): the `MSSBROKER__*` variables of the environment over it.
/// For the commands that read a configuration without serving (`shares`, `report`).
pub fn load_with_env(path: Option<&Path>) -> Result<Settings, ConfigError> {
    Ok(load(path, &Layers::from_env(std::env::vars_os())?)?.settings)
}

/// Load the named file (else `config/broker.toml` if present, else the embedded copy) with
/// `layers` over it.
pub fn load(path: Option<&Path>, layers: &Layers) -> Result<Loaded, ConfigError> {
    let (text, origin, dir) = match path {
        Some(p) => (read(p)?, p.display().to_string(), p.parent()),
        None if Path::new(DEFAULT_PATH).exists() => {
            let p = Path::new(DEFAULT_PATH);
            (read(p)?, DEFAULT_PATH.to_string(), p.parent())
        }
        None => (
            EMBEDDED.to_string(),
            "embedded config/broker.toml".into(),
            None,
        ),
    };
    let syntax = |message: String| ConfigError::Syntax {
        origin: origin.clone(),
        message: message.trim_end().to_string(),
    };
    let mut table: toml::Table = toml::from_str(&text).map_err(|e| syntax(e.to_string()))?;
    let mut sources = Vec::new();
    leaves(&table, "", &Source::File(origin.clone()), &mut sources);
    let mut issues = Vec::new();
    for o in &layers.0 {
        match set(&mut table, &o.key, o.value.clone()) {
            Ok(()) => {
                let key = dotted(&o.key);
                sources.retain(|s| s.key != key && !s.key.starts_with(&format!("{key}.")));
                sources.push(Sourced {
                    key,
                    value: o.value.clone(),
                    source: o.source.clone(),
                });
            }
            Err(message) => issues.push(ConfigIssue {
                key: dotted(&o.key),
                message: format!("{message} (set by {})", o.source),
            }),
        }
    }
    let invalid = |issues| ConfigError::Invalid {
        origin: origin.clone(),
        issues,
    };
    if !issues.is_empty() {
        return Err(invalid(issues));
    }
    let (raw, unknown) = super::read::read_raw(table, &text, &origin, &sources)?;
    let base = dir.unwrap_or(Path::new("."));
    let mut settings = Settings::from_raw(raw, unknown, &origin, base)?;
    // A relative token file from the file is next to it; from elsewhere, as given.
    let token_from_file =
        (sources.iter()).any(|s| s.key == "auth.token_file" && matches!(s.source, Source::File(_)));
    if let (Some(file), Some(dir), true) = (&settings.token_file, dir, token_from_file) {
        if file.is_relative() {
            settings.token_file = Some(dir.join(file));
        }
    }
    Ok(Loaded { settings, sources })
}

fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Set `key` in `table`, making the tables on the way.
fn set(table: &mut toml::Table, key: &[String], value: toml::Value) -> Result<(), String> {
    let Some((last, parents)) = key.split_last() else {
        return Err("an empty key".into());
    };
    let mut at = table;
    for (i, part) in parents.iter().enumerate() {
        let entry = at
            .entry(part.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        at = match entry {
            toml::Value::Table(t) => t,
            other => {
                return Err(format!(
                    "{} is a {}, not a table",
                    dotted(&key[..=i]),
                    other.type_str()
                ))
            }
        };
    }
    at.insert(last.clone(), value);
    Ok(())
}

/// Every non-table value under `table`, with its dotted key.
fn leaves(table: &toml::Table, prefix: &str, source: &Source, out: &mut Vec<Sourced>) {
    for (k, v) in table {
        let key = format!("{prefix}{}", quoted(k));
        match v {
            toml::Value::Table(t) => leaves(t, &format!("{key}."), source, out),
            _ => out.push(Sourced {
                key,
                value: v.clone(),
                source: source.clone(),
            }),
        }
    }
}

fn dotted(key: &[String]) -> String {
    key.iter().map(|k| quoted(k)).collect::<Vec<_>>().join(".")
}

/// A key as TOML writes it: bare if it can be, else quoted.
pub(super) fn quoted(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        key.to_string()
    } else {
        toml::Value::String(key.to_string()).to_string()
    }
}

#[cfg(test)]
mod tests;

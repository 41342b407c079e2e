//! `[mss.fts3]`: as written (`RawFts3Config`) and validated (`Fts3Config`), each refusal naming
//! its key, and what the adapter can do under it.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::check::{non_negative, positive};
use crate::rest::{self, Issue, RawAuth, RestAuth};
use crate::{Band, Capabilities, PriorityScale, Settling};

/// FTS3's priority range.
pub const MIN_PRIORITY: i64 = 1;
pub const MAX_PRIORITY: i64 = 5;

/// `[mss.fts3]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFts3Config {
    pub url: String,
    pub vo: String,
    pub tape_endpoint: String,
    #[serde(default)]
    pub read_destination: Option<String>,
    #[serde(default)]
    pub sid_prefix: Option<String>,
    #[serde(default)]
    pub activity: Option<String>,
    #[serde(default = "d_bring_online")]
    pub bring_online_secs: i64,
    #[serde(default = "d_pin")]
    pub copy_pin_lifetime_secs: i64,
    #[serde(default = "d_archive")]
    pub archive_timeout_secs: i64,
    #[serde(default)]
    pub priority_bands: Option<Vec<RawBand>>,
    #[serde(default)]
    pub max_outstanding: Option<i64>,
    #[serde(default = "d_job_max_files")]
    pub job_max_files: i64,
    #[serde(default = "d_poll")]
    pub poll_ms: i64,
    #[serde(default = "d_timeout")]
    pub timeout_ms: i64,
    #[serde(default)]
    pub auth: RawAuth,
}

/// One `[[mss.fts3.priority_bands]]`: broker priorities from `from` up get FTS3 `priority`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBand {
    pub from: i64,
    pub priority: i64,
}

fn d_bring_online() -> i64 {
    86_400
}
fn d_pin() -> i64 {
    86_400
}
fn d_archive() -> i64 {
    86_400
}
fn d_job_max_files() -> i64 {
    1000
}
fn d_poll() -> i64 {
    5_000
}
fn d_timeout() -> i64 {
    30_000
}

/// A validated `[mss.fts3]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fts3Config {
    pub url: String,
    pub vo: String,
    pub tape_endpoint: String,
    pub read_destination: Option<String>,
    /// `None`: `mssbroker-<ledger instance>`, given at construction.
    pub sid_prefix: Option<String>,
    /// The one activity every job gets, lower-cased; `None`: none sent (FTS3's "default").
    pub activity: Option<String>,
    pub bring_online: u64,
    pub copy_pin_lifetime: u64,
    pub archive_timeout: u64,
    pub bands: Vec<Band>,
    pub max_outstanding: Option<usize>,
    /// Most files in one job: a submission's transfers of one volume (a `volumes` batch) go
    /// in jobs of up to this many; 1 sends every transfer in a job of its own.
    pub job_max_files: usize,
    pub poll: Duration,
    pub timeout: Duration,
    pub auth: RestAuth,
}

impl RawFts3Config {
    /// Validate. `default_bands` applies when `priority_bands` is not given (the broker derives
    /// it from its own priorities); files are resolved against `base`. The issues come in the
    /// order of the keys checked, which `check-config` shows as it is.
    pub fn validate(
        &self,
        base: &Path,
        default_bands: Vec<Band>,
    ) -> Result<Fts3Config, Vec<Issue>> {
        let mut issues = Vec::new();
        self.check_names(&mut issues);
        let bring_online = non_negative(self.bring_online_secs, "bring_online_secs", &mut issues);
        let copy_pin_lifetime = non_negative(
            self.copy_pin_lifetime_secs,
            "copy_pin_lifetime_secs",
            &mut issues,
        );
        let archive_timeout = non_negative(
            self.archive_timeout_secs,
            "archive_timeout_secs",
            &mut issues,
        );
        let bands = match &self.priority_bands {
            Some(raw) => validate_bands(raw, &mut issues),
            None => default_bands,
        };
        let max_outstanding = match self.max_outstanding {
            Some(n) if n <= 0 => {
                issues.push(Issue::new("max_outstanding", "must be a positive integer"));
                None
            }
            Some(n) => Some(n as usize),
            None => None,
        };
        if self.job_max_files <= 0 {
            issues.push(Issue::new("job_max_files", "must be a positive integer"));
        }
        let poll = Duration::from_millis(positive(self.poll_ms, "poll_ms", &mut issues));
        let timeout = Duration::from_millis(positive(self.timeout_ms, "timeout_ms", &mut issues));
        let tape = bring_online > 0 || archive_timeout > 0;
        let auth = self.auth(base, tape, &mut issues);
        if !issues.is_empty() {
            return Err(issues);
        }
        Ok(Fts3Config {
            url: self.url.trim_end_matches('/').to_string(),
            vo: self.vo.clone(),
            tape_endpoint: self.tape_endpoint.trim_end_matches('/').to_string(),
            read_destination: self
                .read_destination
                .as_ref()
                .map(|d| d.trim_end_matches('/').to_string()),
            sid_prefix: self.sid_prefix.clone(),
            // FTS3 lower-cases activity names (cern-fts/fts3 `src/db/mysql/Config.cpp`).
            activity: self.activity.as_ref().map(|a| a.trim().to_lowercase()),
            bring_online,
            copy_pin_lifetime,
            archive_timeout,
            bands,
            max_outstanding,
            job_max_files: self.job_max_files.max(1) as usize,
            poll,
            timeout,
            auth,
        })
    }

    /// The server, the VO, the endpoints' URLs, the sid prefix and the activity.
    fn check_names(&self, issues: &mut Vec<Issue>) {
        // Parsed as the adapter builds its calls from it (the message hides its secrets).
        if let Err(why) = crate::endpoint::Endpoint::parse(&self.url) {
            issues.push(Issue::new("url", why));
        }
        if self.vo.is_empty() {
            issues.push(Issue::new(
                "vo",
                "may not be empty: the VO the credential is expected to map to",
            ));
        }
        check_url_prefix(&self.tape_endpoint, "tape_endpoint", issues);
        if let Some(d) = &self.read_destination {
            check_url_prefix(d, "read_destination", issues);
        }
        if self.sid_prefix.as_deref().is_some_and(str::is_empty) {
            issues.push(Issue::new(
                "sid_prefix",
                "may not be empty (leave it out instead)",
            ));
        }
        if self
            .activity
            .as_deref()
            .is_some_and(|a| a.trim().is_empty())
        {
            issues.push(Issue::new(
                "activity",
                "may not be empty (leave it out to send none)",
            ));
        }
    }

    /// The credential (its issues under `auth.`); a token cannot stage from or archive to tape.
    fn auth(&self, base: &Path, tape: bool, issues: &mut Vec<Issue>) -> RestAuth {
        let mut auth_issues = Vec::new();
        let auth = self.auth.validate(base, &mut auth_issues);
        issues.extend(auth_issues.into_iter().map(|i| Issue {
            key: format!("auth.{}", i.key),
            message: i.message,
        }));
        if matches!(auth.auth, rest::Auth::Bearer { .. }) && tape {
            issues.push(Issue::new(
                "auth.method",
                "FTS3 refuses tape staging and archiving with token authentication (\"Requests to \
                 retrieve from tape using token authentication are not supported\"): use method = \
                 \"certificate\", or set bring_online_secs = 0 and archive_timeout_secs = 0 for an \
                 endpoint that is not tape",
            ));
        }
        auth
    }
}

fn check_url_prefix(url: &str, key: &str, issues: &mut Vec<Issue>) {
    let ok = url
        .split_once("://")
        .is_some_and(|(scheme, rest)| !scheme.is_empty() && scheme != "file" && !rest.is_empty());
    if !ok {
        issues.push(Issue::new(
            key,
            format!("`{url}` is not a storage URL such as davs://tape.example.org:2880"),
        ));
    }
}

fn validate_bands(raw: &[RawBand], issues: &mut Vec<Issue>) -> Vec<Band> {
    if raw.is_empty() {
        issues.push(Issue::new("priority_bands", "needs at least one band"));
    }
    let mut out: Vec<Band> = Vec::with_capacity(raw.len());
    for (i, b) in raw.iter().enumerate() {
        let key = format!("priority_bands[{i}]");
        if !(MIN_PRIORITY..=MAX_PRIORITY).contains(&b.priority) {
            issues.push(Issue::new(
                &format!("{key}.priority"),
                format!(
                    "FTS3 priorities are {MIN_PRIORITY} to {MAX_PRIORITY}, got {}",
                    b.priority
                ),
            ));
        }
        if let Some(prev) = out.last() {
            if b.from <= prev.from {
                issues.push(Issue::new(
                    &format!("{key}.from"),
                    "bands must be listed by increasing `from`",
                ));
            }
            if b.priority < prev.level {
                issues.push(Issue::new(
                    &format!("{key}.priority"),
                    "a higher band may not get a lower FTS3 priority",
                ));
            }
        }
        out.push(Band {
            from: b.from,
            level: b.priority,
        });
    }
    out
}

impl Fts3Config {
    /// A station-side copy must be a URL FTS3 takes: a scheme other than `file`, a host and a
    /// path.
    /// Whether `local_file`, a URL the station names, is one FTS3 takes.
    pub fn check_local_file(&self, local_file: &str) -> Result<(), String> {
        let Some((scheme, rest)) = local_file.trim().split_once("://") else {
            return Err(
                "must be a URL such as davs://host/path (FTS3 moves between storages)".into(),
            );
        };
        // FTS3 strips it and parses it with `urlparse` (fts-rest-flask `lib/JobBuilder.py`,
        // `lib/JobBuilder_utils.py` `validate_url`): a scheme is a letter then letters, digits,
        // `+-.`; the path ends at a `?` or `#` (for http(s) and (s)ftp also at the last
        // segment's `;params`), and `/` alone is a path only with a query; the host is the
        // netloc without user and port.
        let (netloc, tail) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
        let tail = tail.split('#').next().unwrap_or_default();
        let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
        let scheme = scheme.to_ascii_lowercase();
        let path = match (scheme.as_str(), path.rfind('/')) {
            ("http" | "https" | "ftp" | "sftp", Some(i)) => {
                path[i..].find(';').map_or(path, |j| &path[..i + j])
            }
            _ => path,
        };
        let host = netloc.rsplit_once('@').map_or(netloc, |(_, h)| h);
        let no_host = host.is_empty() || host.starts_with(':');
        let no_path = path.is_empty() || (path == "/" && query.is_empty());
        let bad_scheme = !scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            || !scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
        if bad_scheme || scheme == "file" || no_host || no_path {
            return Err("must be a URL with a scheme other than file, a host and a path".into());
        }
        Ok(())
    }

    pub fn capabilities(&self) -> Capabilities {
        Capabilities {
            priority: PriorityScale::Bands(self.bands.clone()),
            reprioritize: true,
            cancel: true,
            release: false,
            writes: true,
            reads_need_local_file: self.read_destination.is_none(),
            writes_need_local_file: true,
            bfid: false,
            max_outstanding: self.max_outstanding,
            // Deterministic job ids (`sid = <prefix>-<key>-<attempt>`): a resend is FTS3's 409
            // for our sid, and a key's job is found by its sid or among this broker's jobs in
            // flight (`fts3.rs`, `batch/lookup.rs`).
            settling: Settling::BY_KEY,
        }
    }
}

/// Whether `file` can be appended to a storage URL as it is (`job.rs` writes
/// `{tape_endpoint}{file}`): FTS3 parses the URL with Python's `urlparse`
/// (fts-rest-flask `src/fts3rest/lib/JobBuilder_utils.py` `validate_url`), so a `?` or `#`
/// would end the path there and stage another file, a `%` would be decoded by the storage as
/// an escape, and whitespace is no part of a URL.
pub fn check_file(file: &str) -> Result<(), String> {
    match file
        .chars()
        .find(|c| matches!(c, '?' | '#' | '%') || c.is_whitespace())
    {
        Some(c) => Err(format!(
            "may not contain {c:?}: FTS3 names files by URL, where it would end or change the path"
        )),
        None => Ok(()),
    }
}

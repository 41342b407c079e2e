//! `[mss.tape_rest]`: as written (`RawTapeRestConfig`) and validated (`TapeRestConfig`), each
//! refusal naming its key, and what the adapter can do under it.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use super::duration;
use crate::check::positive;
use crate::rest::{Issue, RawAuth, RestAuth};
use crate::{Capabilities, PriorityScale, Settling};

/// Errors that mean staging the file again will not help.
pub const DEFAULT_FATAL_PATTERNS: &[&str] = &[
    "No such file",
    "does not exist",
    "not found",
    "Permission denied",
    "not on tape",
];

/// `[mss.tape_rest]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTapeRestConfig {
    pub url: String,
    #[serde(default = "d_lifetime")]
    pub disk_lifetime: String,
    #[serde(default)]
    pub metadata_key: Option<String>,
    #[serde(default = "d_files")]
    pub max_files_per_request: i64,
    #[serde(default)]
    pub max_outstanding: Option<i64>,
    #[serde(default = "d_poll")]
    pub poll_ms: i64,
    #[serde(default = "d_timeout")]
    pub timeout_ms: i64,
    #[serde(default = "d_fatal")]
    pub fatal_patterns: Vec<String>,
    #[serde(default)]
    pub auth: RawAuth,
}

fn d_lifetime() -> String {
    "P1D".into()
}
/// dCache's `bulk.limits.max.targets-per-flat-request` (dCache/dcache
/// `skel/share/defaults/bulk.properties`): a stage request with more files is a 413.
fn d_files() -> i64 {
    500
}
fn d_poll() -> i64 {
    5_000
}
fn d_timeout() -> i64 {
    30_000
}
fn d_fatal() -> Vec<String> {
    DEFAULT_FATAL_PATTERNS
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// A validated `[mss.tape_rest]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TapeRestConfig {
    /// The API's base, e.g. `https://dcache.example.org:3880/api/v1/tape`.
    pub url: String,
    pub disk_lifetime: String,
    /// The `targetedMetadata` key when the site's discovery document names no `sitename`: the
    /// configured `metadata_key`, or the url's host.
    pub metadata_key: String,
    pub max_files_per_request: usize,
    pub max_outstanding: Option<usize>,
    pub poll: Duration,
    pub timeout: Duration,
    pub fatal_patterns: Vec<String>,
    pub auth: RestAuth,
}

impl RawTapeRestConfig {
    pub fn validate(&self, base: &Path) -> Result<TapeRestConfig, Vec<Issue>> {
        let mut issues = Vec::new();
        let host = self.host(&mut issues);
        if let Some(why) = duration::lifetime_problem(&self.disk_lifetime) {
            issues.push(Issue::new("disk_lifetime", why));
        }
        if self.metadata_key.as_deref().is_some_and(str::is_empty) {
            issues.push(Issue::new(
                "metadata_key",
                "may not be empty (leave it out instead)",
            ));
        }
        let max_files = positive(
            self.max_files_per_request,
            "max_files_per_request",
            &mut issues,
        ) as usize;
        let max_outstanding = self
            .max_outstanding
            .map(|n| positive(n, "max_outstanding", &mut issues) as usize);
        let poll = Duration::from_millis(positive(self.poll_ms, "poll_ms", &mut issues));
        let timeout = Duration::from_millis(positive(self.timeout_ms, "timeout_ms", &mut issues));
        if self.fatal_patterns.iter().any(String::is_empty) {
            issues.push(Issue::new(
                "fatal_patterns",
                "an empty pattern would match everything",
            ));
        }
        // Parsed as the adapter builds its calls from it (the message hides its secrets).
        if let (Some(_), Err(why)) = (host, crate::endpoint::Endpoint::parse(&self.url)) {
            issues.push(Issue::new("url", why));
        }
        let auth = self.auth(base, &mut issues);
        if !issues.is_empty() {
            return Err(issues);
        }
        Ok(TapeRestConfig {
            url: self.url.trim_end_matches('/').to_string(),
            disk_lifetime: self.disk_lifetime.clone(),
            metadata_key: self
                .metadata_key
                .clone()
                .unwrap_or_else(|| host.unwrap_or_default().to_string()),
            max_files_per_request: max_files,
            max_outstanding,
            poll,
            timeout,
            fatal_patterns: self.fatal_patterns.clone(),
            auth,
        })
    }

    /// The API's base URL; its host is the `targetedMetadata` key when nothing else names one.
    fn host(&self, issues: &mut Vec<Issue>) -> Option<&str> {
        let host = self
            .url
            .strip_prefix("https://")
            .or_else(|| self.url.strip_prefix("http://"))
            .and_then(|r| r.split(['/', ':']).next())
            .filter(|h| !h.is_empty());
        if host.is_none() {
            issues.push(Issue::new(
                "url",
                format!(
                    "`{}` must be the API's https:// base, e.g. https://dcache.example.org:3880/api/v1/tape",
                    crate::redact::urls(&self.url)
                ),
            ));
        }
        host
    }

    /// The credential, its issues under `auth.`.
    fn auth(&self, base: &Path, issues: &mut Vec<Issue>) -> RestAuth {
        let mut auth_issues = Vec::new();
        let auth = self.auth.validate(base, &mut auth_issues);
        issues.extend(auth_issues.into_iter().map(|i| Issue {
            key: format!("auth.{}", i.key),
            message: i.message,
        }));
        auth
    }
}

impl TapeRestConfig {
    pub fn capabilities(&self) -> Capabilities {
        Capabilities {
            priority: PriorityScale::None,
            reprioritize: false,
            cancel: true,
            release: true,
            writes: false,
            reads_need_local_file: false,
            writes_need_local_file: false,
            bfid: false,
            max_outstanding: self.max_outstanding,
            // No client-chosen request id and no listing of stage requests (`tape_rest.rs`): a
            // stage request whose answer was not recorded cannot be found again, and a resend
            // is a second stage request.
            settling: Settling::NONE,
        }
    }
}

impl TapeRestConfig {
    pub(super) fn is_fatal(&self, error: &str) -> bool {
        self.fatal_patterns
            .iter()
            .any(|p| error.contains(p.as_str()))
    }
}

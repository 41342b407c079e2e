//! The FTS3 adapter: one FTS3 job per transfer, over FTS3's REST interface.
//!
//! - **Submit**: `POST /jobs` with one file (`sources`: the tape endpoint's URL of the file for a
//!   read, the station's `local_file` for a write; `destinations` the other way round;
//!   the configured `activity` if any (one for every job, lower-cased as FTS3 keeps it: with
//!   activity shares FTS3 draws slots by weighted random, which would re-order the broker's
//!   decisions), `filesize`, `metadata`) and `params`: the priority (FTS3's 1..5, mapped from the
//!   broker's priority by `priority_bands`), `bring_online` and `copy_pin_lifetime` for reads
//!   from tape, `archive_timeout` for writes to tape, `retry = -1` (no FTS3 retries: the broker
//!   retries; 0 would mean the server's default, cern-fts/fts3 `src/db/mysql/Config.cpp`
//!   `getRetry`) and a deterministic job id: `id_generator = "deterministic"` with
//!   `sid = <prefix>-<key>-<attempt>`. FTS3 derives the job id as
//!   `uuid5(uuid5(BASE_ID, user.vos[0]), sid)`, `vos[0]` being the VO it derives from the
//!   credential (cern-fts/fts-rest-flask `fts3rest/lib/JobBuilder.py`,
//!   `fts3rest/lib/middleware/fts3auth/methods/ssl.py`), which the adapter reads once from
//!   `GET /whoami` (`vos_id[0]`, `fts3rest/controllers/delegation.py`). A second submission of
//!   the same sid is 409 "The sid provided by the user is duplicated", so a transfer submitted
//!   again after a broker crash is recognised, never queued twice; 409 "The submission is
//!   duplicated" (the files clash with another job) is a refusal.
//! - **Progress**: every `poll_ms`, `GET /jobs/{id,id,...}?files=...` for the jobs in flight;
//!   a file becoming `ACTIVE` or `ARCHIVING` is a start, and so is `STARTED` for a staging job
//!   (the bring-online request was sent; cern-fts/fts3 `src/db/mysql/MySqlAPI.cpp`),
//!   `FINISHED` is done with the file's size, `FAILED` a failure (retryable unless FTS3 marked it
//!   unrecoverable; FTS3 leaves `recoverable` null for staging failures, classified then by the
//!   reason text as FTS3's own `src/url-copy/heuristics.cpp` does), `CANCELED` a cancellation.
//! - **Priority**: `POST /jobs/{id}` with `{"params": {"priority": n}}`; **cancel**:
//!   `DELETE /jobs/{id}`.
//! - **Authentication**: a bearer token (read from a file at every call) or an X.509 client
//!   certificate. FTS3 refuses tape staging and archiving with tokens, so configuration refuses
//!   that combination.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use reqwest::{Client, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};
use tracing::{debug, warn};

use crate::event_log::{EventLog, Seen};
use crate::protocol::{Direction, EventKind, Transfer};
use crate::rest::{self, Issue, RawAuth, RestAuth};
use crate::{
    Band, Capabilities, EventBatch, EventCursor, MssAdapter, MssError, PriorityScale, Progress,
    Submitted, TransferRef, TransferStatus,
};

/// FTS3's base for deterministic job ids (`fts3rest.lib.JobBuilder_utils.BASE_ID`).
pub const BASE_ID: uuid::Uuid = uuid::uuid!("01874efb-4735-4595-bc9c-591aef8240c9");

/// FTS3's priority range.
pub const MIN_PRIORITY: i64 = 1;
pub const MAX_PRIORITY: i64 = 5;

/// Most job ids asked for in one poll.
const POLL_BATCH: usize = 50;

/// The file fields a poll asks for.
const FILE_FIELDS: &str = "file_state,filesize,user_filesize,reason,recoverable";

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

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
    pub poll: Duration,
    pub timeout: Duration,
    pub auth: RestAuth,
}

impl RawFts3Config {
    /// Validate. `default_bands` applies when `priority_bands` is not given (the broker derives
    /// it from its own priorities); files are resolved against `base`.
    pub fn validate(
        &self,
        base: &Path,
        default_bands: Vec<Band>,
    ) -> Result<Fts3Config, Vec<Issue>> {
        let mut issues = Vec::new();
        if !(self.url.starts_with("https://") || self.url.starts_with("http://")) {
            issues.push(Issue::new(
                "url",
                format!("`{}` must start with https://", self.url),
            ));
        }
        if self.vo.is_empty() {
            issues.push(Issue::new(
                "vo",
                "may not be empty: the VO the credential is expected to map to",
            ));
        }
        check_url_prefix(&self.tape_endpoint, "tape_endpoint", &mut issues);
        if let Some(d) = &self.read_destination {
            check_url_prefix(d, "read_destination", &mut issues);
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
        let non_negative = |v: i64, key: &str, issues: &mut Vec<Issue>| -> u64 {
            if v < 0 {
                issues.push(Issue::new(key, format!("must be 0 or more, got {v}")));
                0
            } else {
                v as u64
            }
        };
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
        let positive_ms = |v: i64, key: &str, issues: &mut Vec<Issue>| {
            if v <= 0 {
                issues.push(Issue::new(
                    key,
                    format!("must be a positive integer, got {v}"),
                ));
            }
            Duration::from_millis(v.max(1) as u64)
        };
        let poll = positive_ms(self.poll_ms, "poll_ms", &mut issues);
        let timeout = positive_ms(self.timeout_ms, "timeout_ms", &mut issues);
        let mut auth_issues = Vec::new();
        let auth = self.auth.validate(base, &mut auth_issues);
        issues.extend(auth_issues.into_iter().map(|i| Issue {
            key: format!("auth.{}", i.key),
            message: i.message,
        }));
        if matches!(auth.auth, rest::Auth::Bearer { .. })
            && (bring_online > 0 || archive_timeout > 0)
        {
            issues.push(Issue::new(
                "auth.method",
                "FTS3 refuses tape staging and archiving with token authentication (\"Requests to \
                 retrieve from tape using token authentication are not supported\"): use method = \
                 \"certificate\", or set bring_online_secs = 0 and archive_timeout_secs = 0 for an \
                 endpoint that is not tape",
            ));
        }
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
            poll,
            timeout,
            auth,
        })
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
    pub fn check_local_file(&self, local_file: &str) -> Result<(), String> {
        let Some((scheme, rest)) = local_file.split_once("://") else {
            return Err(
                "must be a URL such as davs://host/path (FTS3 moves between storages)".into(),
            );
        };
        let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        if scheme.is_empty() || scheme == "file" || host.is_empty() || path.len() < 2 {
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
        }
    }
}

/// A JSON answer as text for a message, clipped.
fn clip_json(v: &Value) -> String {
    crate::answer::clip(&v.to_string(), crate::answer::MAX_MESSAGE_CHARS).into_owned()
}

/// FTS3's `vos_id` of a VO: `uuid5(BASE_ID, vo)` (fts-rest-flask `JobBuilder_utils.get_vo_id`).
pub fn vo_id(vo: &str) -> uuid::Uuid {
    uuid::Uuid::new_v5(&BASE_ID, vo.as_bytes())
}

/// The deterministic FTS3 job id of a submission id: `uuid5(uuid5(BASE_ID, vo), sid)`.
pub fn job_id(vo: &str, sid: &str) -> String {
    job_id_in(&vo_id(vo), sid)
}

/// The deterministic FTS3 job id of a submission id under a VO id from `GET /whoami`.
pub fn job_id_in(vo_id: &uuid::Uuid, sid: &str) -> String {
    uuid::Uuid::new_v5(vo_id, sid.as_bytes()).to_string()
}

/// What FTS3's 409 means: our own sid again (the job exists: recover it), or "The submission
/// is duplicated" (its files clash with another job: fts-rest-flask `controllers/jobs.py`).
pub fn conflict_is_ours(message: &str) -> bool {
    !message.contains("submission is duplicated")
}

/// Reason texts after which FTS3 retries a transfer, then those after which it does not
/// (cern-fts/fts3 `src/url-copy/heuristics.cpp` `retryTransfer`), for failures whose
/// `recoverable` FTS3 left null (staging failures).
const REASONS_RETRYABLE: &[&str] = &[
    "performance marker",
    "Name or service not known",
    "Connection timed out",
    "end-of-file was reached",
    "end of file occurred",
    "SRM_INTERNAL_ERROR",
    "was forcefully killed",
    "operation timeout",
];
const REASONS_FATAL: &[&str] = &[
    "proxy expired",
    "with an error 550 File not found",
    "File exists and overwrite",
    "No such file or directory",
    "SRM_INVALID_PATH",
    "The certificate has expired",
    "The available CRL has expired",
    "SRM Authentication failed",
    "SRM_DUPLICATION_ERROR",
    "SRM_AUTHENTICATION_FAILURE",
    "SRM_NO_FREE_SPACE",
    "Permission denied",
    "File exists",
    "checksum do not match",
    "CHECKSUM MISMATCH",
    "The source file is not ONLINE",
    "Operation not permitted",
    "Is a directory",
];

/// Whether a failure FTS3 did not classify is worth another attempt, by its reason text.
pub fn retryable_by_reason(reason: &str) -> bool {
    if REASONS_RETRYABLE.iter().any(|r| reason.contains(r)) {
        return true;
    }
    !REASONS_FATAL.iter().any(|r| reason.contains(r))
}

/// The body of `POST /jobs` for a transfer.
pub fn job_body(cfg: &Fts3Config, sid: &str, level: i64, t: &Transfer) -> Result<Value, MssError> {
    let tape = format!("{}{}", cfg.tape_endpoint, t.file);
    let (source, destination) = match t.direction {
        Direction::Read => {
            let dest = match (&t.local_file, &cfg.read_destination) {
                (Some(f), _) => f.clone(),
                (None, Some(prefix)) => format!("{prefix}{}", t.file),
                (None, None) => {
                    return Err(MssError::Rejected(
                        "a read needs local_file (its destination URL): \
                         mss.fts3.read_destination is not set"
                            .into(),
                    ))
                }
            };
            (tape, dest)
        }
        Direction::Write => match &t.local_file {
            Some(src) => (src.clone(), tape),
            None => {
                return Err(MssError::Rejected(
                    "a write needs local_file (the URL of the file to store)".into(),
                ))
            }
        },
    };
    let metadata = json!({"mssbroker_key": t.key, "attempt": t.attempt});
    let mut params = json!({
        "priority": level,
        "id_generator": "deterministic",
        "sid": sid,
        // -1: no retries at FTS3 (0 would be the server's default); the broker retries.
        "retry": -1,
        "job_metadata": metadata,
    });
    match t.direction {
        Direction::Read if cfg.bring_online > 0 => {
            params["bring_online"] = json!(cfg.bring_online);
            params["copy_pin_lifetime"] = json!(cfg.copy_pin_lifetime);
        }
        Direction::Write if cfg.archive_timeout > 0 => {
            params["archive_timeout"] = json!(cfg.archive_timeout);
        }
        _ => {}
    }
    let mut file = json!({
        "sources": [source],
        "destinations": [destination],
        "filesize": t.size_bytes,
        "metadata": metadata,
    });
    if let Some(activity) = &cfg.activity {
        file["activity"] = json!(activity);
    }
    Ok(json!({"files": [file], "params": params}))
}

/// Whether a polled job stages from tape (`bring_online` set), for a job followed after a
/// restart.
pub fn is_staging(job: &Value) -> bool {
    job.get("bring_online")
        .and_then(Value::as_i64)
        .is_some_and(|b| b > 0)
}

/// Where a job stands, from its (one) file's state, or the job's when no file is given.
/// `staging`: the job brings files online, so `STARTED` (the request sent to tape) is a start;
/// for other jobs it is still queued.
pub fn progress_of(job: &Value, declared_bytes: u64, staging: bool) -> Option<Progress> {
    let file = job.get("files").and_then(|f| f.get(0));
    let state = file
        .and_then(|f| f.get("file_state"))
        .or_else(|| job.get("job_state"))
        .and_then(Value::as_str)?;
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_string();
    Some(match state {
        "STARTED" if staging => Progress::Running,
        "ACTIVE" | "ARCHIVING" => Progress::Running,
        "FINISHED" => {
            let size = |field| file.and_then(|f| f.get(field)).and_then(Value::as_u64);
            let bytes = size("filesize")
                .filter(|&b| b > 0)
                .or_else(|| size("user_filesize").filter(|&b| b > 0))
                .unwrap_or(declared_bytes);
            Progress::Finished(EventKind::Done { bytes })
        }
        "FAILED" | "FINISHEDDIRTY" => {
            let mut reason = text(file.and_then(|f| f.get("reason")));
            if reason.is_empty() {
                reason = text(job.get("reason"));
            }
            // Null for staging failures: not known, so the reason text decides.
            let recoverable = file
                .and_then(|f| f.get("recoverable"))
                .and_then(Value::as_bool)
                .unwrap_or_else(|| retryable_by_reason(&reason));
            Progress::Finished(EventKind::Failed {
                reason: format!("fts3 job failed: {reason}"),
                retryable: recoverable,
            })
        }
        "CANCELED" => Progress::Finished(EventKind::Cancelled),
        _ => Progress::Queued,
    })
}

// ---------------------------------------------------------------------------------------------
// The adapter
// ---------------------------------------------------------------------------------------------

/// The FTS3 adapter.
pub struct Fts3Adapter {
    shared: Arc<Shared>,
    poller: tokio::task::JoinHandle<()>,
}

struct Shared {
    cfg: Fts3Config,
    sid_prefix: String,
    client: Client,
    log: EventLog,
    jobs: Mutex<HashMap<String, Track>>,
    /// The namespace of this credential's job ids, FTS3's `vos_id[0]` from `GET /whoami`.
    vo_id: tokio::sync::OnceCell<uuid::Uuid>,
}

/// A job in flight.
#[derive(Debug, Clone)]
struct Track {
    attempt: u32,
    job_id: String,
    level: i64,
    started: bool,
    staging: bool,
    size_bytes: u64,
}

/// The part of FTS3's `GET /whoami` the adapter reads.
#[derive(Debug, Deserialize)]
struct WhoAmI {
    #[serde(default)]
    vos: Vec<String>,
    #[serde(default)]
    vos_id: Vec<String>,
}

impl Fts3Adapter {
    /// Build the adapter and start its poller. `instance` names the broker's ledger (used in
    /// the submission ids unless `sid_prefix` is set). Must run inside a tokio runtime.
    pub fn new(cfg: Fts3Config, instance: &str) -> Result<Fts3Adapter, MssError> {
        let client = cfg.auth.client()?;
        let sid_prefix = cfg
            .sid_prefix
            .clone()
            .unwrap_or_else(|| format!("mssbroker-{instance}"));
        let shared = Arc::new(Shared {
            cfg,
            sid_prefix,
            client,
            log: EventLog::new("fts3"),
            jobs: Mutex::new(HashMap::new()),
            vo_id: tokio::sync::OnceCell::new(),
        });
        let poller = tokio::spawn(poll_loop(shared.clone()));
        Ok(Fts3Adapter { shared, poller })
    }

    /// Jobs being followed.
    pub fn in_flight(&self) -> usize {
        self.shared.lock().len()
    }
}

impl Drop for Fts3Adapter {
    fn drop(&mut self) {
        self.poller.abort();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Track>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn sid(&self, key: &str, attempt: u32) -> String {
        format!("{}-{key}-{attempt}", self.sid_prefix)
    }

    async fn job_id_of(&self, t: &TransferRef) -> Result<String, MssError> {
        if let Some(track) = self.lock().get(&t.key).filter(|j| j.attempt == t.attempt) {
            return Ok(track.job_id.clone());
        }
        match &t.mss_id {
            Some(id) => Ok(id.clone()),
            None => Ok(job_id_in(
                &self.vo_id().await?,
                &self.sid(&t.key, t.attempt),
            )),
        }
    }

    /// The VO id FTS3 derives job ids from for this credential: `vos_id[0]` of `GET /whoami`,
    /// read once (fts-rest-flask `controllers/delegation.py` `whoami`).
    async fn vo_id(&self) -> Result<uuid::Uuid, MssError> {
        self.vo_id
            .get_or_try_init(|| async {
                let rb = self.request(reqwest::Method::GET, "/whoami")?;
                let who: WhoAmI = rest::decode(rest::send(rb, self.cfg.timeout).await?).await?;
                let first = who.vos_id.first().ok_or_else(|| {
                    MssError::Protocol("fts3's /whoami lists no vos_id".into())
                })?;
                let id = uuid::Uuid::parse_str(first).map_err(|e| {
                    MssError::Protocol(format!("fts3's /whoami vos_id `{first}`: {e}"))
                })?;
                let vo = who.vos.first().map(String::as_str).unwrap_or("");
                if vo != self.cfg.vo {
                    warn!(configured = %self.cfg.vo, fts3 = %vo, "fts3 maps the credential to another VO than mss.fts3.vo; job ids follow fts3's");
                }
                Ok(id)
            })
            .await
            .copied()
    }

    fn level(&self, priority: i64) -> i64 {
        PriorityScale::Bands(self.cfg.bands.clone())
            .map(priority)
            .unwrap_or(MIN_PRIORITY)
    }

    fn request(
        &self,
        method: reqwest::Method,
        path: &str,
    ) -> Result<reqwest::RequestBuilder, MssError> {
        let rb = self
            .client
            .request(method, format!("{}{path}", self.cfg.url))
            .header("accept", "application/json");
        self.cfg.auth.authorize(rb)
    }

    /// `GET /jobs/{ids}` with the file fields: one JSON object per id asked for.
    async fn get_jobs(&self, ids: &[String]) -> Result<Vec<Value>, MssError> {
        let rb = self
            .request(reqwest::Method::GET, &format!("/jobs/{}", ids.join(",")))?
            .query(&[("files", FILE_FIELDS)]);
        let answer = rest::Answer::read(rest::send(rb, self.cfg.timeout).await?).await?;
        // Only FTS3's own 404 (its JSON error) says the job is unknown, not a proxy's page.
        if answer.not_found() && ids.len() == 1 {
            return Ok(vec![
                json!({"job_id": ids[0], "http_status": "404 Not Found"}),
            ]);
        }
        let status = answer.status;
        if !(status.is_success() || status == StatusCode::MULTI_STATUS) {
            return Err(answer.error());
        }
        let body: Value = answer.json()?;
        Ok(match body {
            Value::Array(items) => items,
            one => vec![one],
        })
    }

    /// The job id of a 409 answer: ours again (recover it), or a refusal.
    async fn conflict(&self, resp: reqwest::Response, sid: &str) -> Result<String, MssError> {
        let answer = rest::Answer::read(resp).await?;
        let message = answer.server_error().unwrap_or_else(|| answer.text());
        if !conflict_is_ours(&message) {
            return Err(MssError::Rejected(format!(
                "fts3 refuses the submission as a duplicate of another job's files (not this \
                 transfer's own earlier submission): {message}"
            )));
        }
        // FTS3 holds this transfer's job: failing the request now would let a later request
        // copy the file again, so a job id that cannot be derived yet is an unknown outcome
        // (resent, answered 409 again, derived then).
        let vo_id = self.vo_id().await.map_err(|e| match e {
            MssError::Protocol(m) | MssError::Rejected(m) => MssError::Unknown(format!(
                "fts3 already holds this transfer's job, but its id cannot be derived yet: {m}"
            )),
            other => other,
        })?;
        Ok(job_id_in(&vo_id, sid))
    }

    /// Turn a polled job into events, and stop following it once final.
    fn observe(&self, key: &str, job: &Value) {
        let Some(track) = self.lock().get(key).cloned() else {
            return;
        };
        if job
            .get("http_status")
            .and_then(Value::as_str)
            .is_some_and(|s| s.starts_with("404"))
        {
            warn!(key, job_id = %track.job_id, "fts3 no longer knows the job; the broker's status check will settle it");
            self.lock().remove(key);
            return;
        }
        let Some(progress) = progress_of(job, track.size_bytes, track.staging) else {
            return;
        };
        match self
            .log
            .observe(key, track.attempt, track.started, progress)
        {
            Seen::Nothing => {}
            Seen::Started => {
                if let Some(t) = self.lock().get_mut(key) {
                    t.started = true;
                }
            }
            Seen::Final => {
                self.lock().remove(key);
            }
        }
    }
}

/// Poll the jobs in flight every `poll_ms`.
async fn poll_loop(sh: Arc<Shared>) {
    // The credential's VO id, read at start (submissions wait for it if this fails).
    if let Err(e) = sh.vo_id().await {
        warn!(error = %e, "cannot read fts3's /whoami yet; retried at the first submission");
    }
    loop {
        tokio::time::sleep(sh.cfg.poll).await;
        let tracked: Vec<(String, String)> = sh
            .lock()
            .iter()
            .map(|(k, t)| (t.job_id.clone(), k.clone()))
            .collect();
        for chunk in tracked.chunks(POLL_BATCH) {
            let ids: Vec<String> = chunk.iter().map(|(id, _)| id.clone()).collect();
            let key_of: HashMap<&str, &str> = chunk
                .iter()
                .map(|(id, k)| (id.as_str(), k.as_str()))
                .collect();
            match sh.get_jobs(&ids).await {
                Ok(jobs) => {
                    for job in &jobs {
                        let id = job.get("job_id").and_then(Value::as_str).unwrap_or("");
                        if let Some(key) = key_of.get(id) {
                            sh.observe(key, job);
                        }
                    }
                }
                Err(e) => {
                    debug!(error = %e, "cannot poll fts3; next period");
                    break;
                }
            }
        }
    }
}

#[async_trait]
impl MssAdapter for Fts3Adapter {
    fn name(&self) -> &'static str {
        "fts3"
    }

    fn capabilities(&self) -> Capabilities {
        self.shared.cfg.capabilities()
    }

    fn room(&self) -> Option<usize> {
        self.shared
            .cfg
            .max_outstanding
            .map(|max| max.saturating_sub(self.shared.lock().len()))
    }

    fn check_local_file(&self, local_file: &str) -> Result<(), String> {
        self.shared.cfg.check_local_file(local_file)
    }

    async fn submit(&self, t: &Transfer) -> Result<Submitted, MssError> {
        let sh = &self.shared;
        if let Some(track) = sh.lock().get(&t.key).filter(|j| j.attempt == t.attempt) {
            return Ok(Submitted {
                mss_id: track.job_id.clone(),
                duplicate: true,
            });
        }
        let sid = sh.sid(&t.key, t.attempt);
        let level = sh.level(t.priority);
        let body = job_body(&sh.cfg, &sid, level, t)?;
        let staging = body["params"].get("bring_online").is_some();
        let rb = sh.request(reqwest::Method::POST, "/jobs")?.json(&body);
        let resp = rest::send(rb, sh.cfg.timeout).await?;
        let (job_id, duplicate) = if resp.status() == StatusCode::CONFLICT {
            // FTS3 has this sid already: our earlier submission, whose answer we lost.
            (sh.conflict(resp, &sid).await?, true)
        } else {
            let answer: Value = rest::decode(resp).await?;
            let id = answer
                .get("job_id")
                .and_then(Value::as_str)
                // FTS3 may have created the job: retried, it answers 409 (same sid).
                .ok_or_else(|| MssError::Unknown(format!("no job_id in {}", clip_json(&answer))))?;
            (id.to_string(), false)
        };
        sh.lock().insert(
            t.key.clone(),
            Track {
                attempt: t.attempt,
                job_id: job_id.clone(),
                level,
                started: false,
                staging,
                size_bytes: t.size_bytes,
            },
        );
        Ok(Submitted {
            mss_id: job_id,
            duplicate,
        })
    }

    async fn cancel(&self, t: &TransferRef) -> Result<(), MssError> {
        let sh = &self.shared;
        let id = sh.job_id_of(t).await?;
        let rb = sh.request(reqwest::Method::DELETE, &format!("/jobs/{id}"))?;
        let job: Value = rest::decode(rest::send(rb, sh.cfg.timeout).await?).await?;
        // FTS3 answers a job already final with its state and "304 Not Modified".
        let unchanged = job
            .get("http_status")
            .and_then(Value::as_str)
            .is_some_and(|s| s.starts_with("304"));
        match job.get("job_state").and_then(Value::as_str) {
            Some("CANCELED") if !unchanged => Ok(()),
            Some(other) => Err(MssError::Rejected(format!(
                "the fts3 job is already {other}"
            ))),
            None => Err(MssError::Protocol(format!("no job_state in {job}"))),
        }
    }

    async fn reprioritize(&self, t: &TransferRef, priority: i64) -> Result<(), MssError> {
        let sh = &self.shared;
        let level = sh.level(priority);
        let current = sh
            .lock()
            .get(&t.key)
            .filter(|j| j.attempt == t.attempt)
            .map(|j| j.level);
        if current == Some(level) {
            // The new broker priority falls in the same FTS3 band: nothing to change there.
            return Ok(());
        }
        let id = sh.job_id_of(t).await?;
        let rb = sh
            .request(reqwest::Method::POST, &format!("/jobs/{id}"))?
            .json(&json!({"params": {"priority": level}}));
        let job: Value = rest::decode(rest::send(rb, sh.cfg.timeout).await?).await?;
        let state = job.get("job_state").and_then(Value::as_str).unwrap_or("");
        if !matches!(state, "SUBMITTED" | "STAGING" | "READY") {
            return Err(MssError::Rejected(format!("the fts3 job is {state}")));
        }
        if let Some(j) = sh.lock().get_mut(&t.key) {
            j.level = level;
        }
        Ok(())
    }

    async fn status(&self, t: &TransferRef) -> Result<Option<TransferStatus>, MssError> {
        let sh = &self.shared;
        let id = sh.job_id_of(t).await?;
        let job = sh
            .get_jobs(std::slice::from_ref(&id))
            .await?
            .into_iter()
            .next()
            .unwrap_or(Value::Null);
        if job
            .get("http_status")
            .and_then(Value::as_str)
            .is_some_and(|s| s.starts_with("404"))
        {
            return Ok(None);
        }
        let staging = is_staging(&job);
        let Some(progress) = progress_of(&job, t.size_bytes, staging) else {
            return Err(MssError::Protocol(format!("no state in {job}")));
        };
        if !matches!(progress, Progress::Finished(_)) {
            // A job submitted before a restart: follow it from now on.
            let level = job
                .get("priority")
                .and_then(Value::as_i64)
                .unwrap_or(MIN_PRIORITY);
            sh.lock().entry(t.key.clone()).or_insert(Track {
                attempt: t.attempt,
                job_id: id,
                level,
                started: progress == Progress::Running,
                staging,
                size_bytes: t.size_bytes,
            });
        }
        Ok(Some(TransferStatus {
            attempt: t.attempt,
            progress,
        }))
    }

    async fn events(&self, cursor: &EventCursor, wait: Duration) -> Result<EventBatch, MssError> {
        Ok(self.shared.log.read(cursor, wait).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> Fts3Config {
        let raw: RawFts3Config = serde_json::from_value(json!({
            "url": "https://fts3.example.org:8446",
            "vo": "cms",
            "tape_endpoint": "davs://tape.example.org:2880",
            "read_destination": "davs://disk.example.org:2880/stage",
            "activity": "Tape Recall",
            "priority_bands": [{"from": 0, "priority": 1}, {"from": 20, "priority": 3},
                               {"from": 100, "priority": 5}],
            "auth": {"method": "none"}
        }))
        .unwrap();
        raw.validate(Path::new("/"), Vec::new()).unwrap()
    }

    fn transfer(direction: Direction) -> Transfer {
        Transfer {
            key: "42".into(),
            attempt: 1,
            file: "/cms/run42/f1.root".into(),
            size_bytes: 2_500_000_000,
            priority: 20,
            volume: None,
            group: "analysis/higgs".into(),
            direction,
            local_file: None,
            bfid: None,
        }
    }

    #[test]
    fn job_ids_are_ftss_deterministic_uuids() {
        // Golden values from Python's uuid module: uuid5(uuid5(BASE_ID, vo), sid).
        assert_eq!(
            job_id("cms", "mssbroker-0123456789abcdef-42-1"),
            "4d51513f-254b-53f3-a897-8bcabed19699"
        );
        assert_eq!(
            job_id("dteam", "x-7-2"),
            "b8c61371-63d2-5851-b9b2-e1e7d208d6f8"
        );
    }

    #[test]
    fn a_read_stages_from_the_tape_endpoint_with_the_one_activity_and_no_fts3_retries() {
        let body = job_body(&cfg(), "p-42-1", 3, &transfer(Direction::Read)).unwrap();
        let file = &body["files"][0];
        assert_eq!(
            file["sources"][0],
            "davs://tape.example.org:2880/cms/run42/f1.root"
        );
        assert_eq!(
            file["destinations"][0],
            "davs://disk.example.org:2880/stage/cms/run42/f1.root"
        );
        assert_eq!(
            file["activity"], "tape recall",
            "lower-cased as FTS3 keeps it"
        );
        assert_eq!(
            body["params"]["retry"], -1,
            "0 would be FTS3's server default"
        );
        let mut none = cfg();
        none.activity = None;
        let body = job_body(&none, "p-42-1", 3, &transfer(Direction::Read)).unwrap();
        assert!(body["files"][0].get("activity").is_none(), "{body}");
        assert_eq!(file["filesize"], 2_500_000_000u64);
        let params = &body["params"];
        assert_eq!(params["priority"], 3);
        assert_eq!(params["sid"], "p-42-1");
        assert_eq!(params["id_generator"], "deterministic");
        assert_eq!(params["bring_online"], 86_400);
        assert!(params.get("archive_timeout").is_none());
    }

    #[test]
    fn a_write_archives_the_local_file_to_tape() {
        let mut t = transfer(Direction::Write);
        assert!(job_body(&cfg(), "s", 1, &t).is_err());
        t.local_file = Some("https://station.example.org/data/f1.root".into());
        let body = job_body(&cfg(), "s", 1, &t).unwrap();
        assert_eq!(
            body["files"][0]["sources"][0],
            "https://station.example.org/data/f1.root"
        );
        assert_eq!(
            body["files"][0]["destinations"][0],
            "davs://tape.example.org:2880/cms/run42/f1.root"
        );
        assert_eq!(body["params"]["archive_timeout"], 86_400);
        assert!(body["params"].get("bring_online").is_none());
    }

    #[test]
    fn local_files_must_be_urls_fts3_takes() {
        let c = cfg();
        assert!(c
            .check_local_file("davs://disk.example.org/stage/f")
            .is_ok());
        for bad in [
            "/data/f",
            "file:///data/f",
            "davs:///f",
            "davs://host",
            "davs://host/",
        ] {
            assert!(c.check_local_file(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn bands_map_broker_priorities_onto_one_to_five() {
        let caps = cfg().capabilities();
        let PriorityScale::Bands(_) = &caps.priority else {
            panic!("{caps:?}")
        };
        let map = |p| caps.priority.map(p);
        assert_eq!(map(-1), None);
        assert_eq!(map(10), Some(1));
        assert_eq!(map(20), Some(3));
        assert_eq!(map(99), Some(3));
        assert_eq!(map(100), Some(5));
    }

    #[test]
    fn file_states_become_progress() {
        let job = |state: &str| {
            json!({"job_state": "ACTIVE", "files": [{"file_state": state,
            "filesize": 7, "reason": "SOURCE srm error", "recoverable": false}]})
        };
        assert_eq!(
            progress_of(&job("STAGING"), 1, true),
            Some(Progress::Queued)
        );
        assert_eq!(
            progress_of(&job("STARTED"), 1, true),
            Some(Progress::Running)
        );
        assert_eq!(
            progress_of(&job("STARTED"), 1, false),
            Some(Progress::Queued)
        );
        assert_eq!(
            progress_of(&job("ACTIVE"), 1, false),
            Some(Progress::Running)
        );
        assert_eq!(
            progress_of(&job("FINISHED"), 1, false),
            Some(Progress::Finished(EventKind::Done { bytes: 7 }))
        );
        assert_eq!(
            progress_of(&job("FAILED"), 1, false),
            Some(Progress::Finished(EventKind::Failed {
                reason: "fts3 job failed: SOURCE srm error".into(),
                retryable: false
            }))
        );
        assert_eq!(
            progress_of(&job("CANCELED"), 1, false),
            Some(Progress::Finished(EventKind::Cancelled))
        );
        assert_eq!(
            progress_of(&json!({"job_state": "FINISHED"}), 9, false),
            Some(Progress::Finished(EventKind::Done { bytes: 9 }))
        );
    }

    #[test]
    fn staging_failures_without_recoverable_are_classified_by_their_reason() {
        let failed = |reason: &str| {
            let job = json!({"job_state": "FAILED", "files": [{"file_state": "FAILED",
                "reason": reason, "recoverable": null}]});
            match progress_of(&job, 1, true) {
                Some(Progress::Finished(EventKind::Failed { retryable, .. })) => retryable,
                other => panic!("{other:?}"),
            }
        };
        assert!(!failed(
            "[gfal_http_bring_online] No such file or directory"
        ));
        assert!(!failed("SRM_INVALID_PATH"));
        assert!(failed("Connection timed out"));
        assert!(failed("Staging request expired"));
    }

    #[test]
    fn an_empty_activity_is_refused_and_one_is_lower_cased() {
        let raw = |activity: &str| -> RawFts3Config {
            serde_json::from_value(json!({
                "url": "https://fts3.example.org:8446", "vo": "cms",
                "tape_endpoint": "davs://tape.example.org:2880",
                "activity": activity, "auth": {"method": "none"}
            }))
            .unwrap()
        };
        let issues = raw(" ").validate(Path::new("/"), Vec::new()).unwrap_err();
        assert_eq!(issues[0].key, "activity", "{issues:?}");
        let cfg = raw("Data Taking")
            .validate(Path::new("/"), Vec::new())
            .unwrap();
        assert_eq!(cfg.activity.as_deref(), Some("data taking"));
    }

    #[test]
    fn only_the_sid_conflict_is_our_own_job() {
        assert!(conflict_is_ours(
            "The sid provided by the user is duplicated"
        ));
        assert!(!conflict_is_ours(
            "The submission is duplicated (IntegrityError) Duplicate entry"
        ));
        assert_eq!(job_id_in(&vo_id("cms"), "x-7-2"), job_id("cms", "x-7-2"));
    }

    #[test]
    fn validation_refuses_tokens_with_tape_and_bad_bands() {
        let raw: RawFts3Config = serde_json::from_value(json!({
            "url": "fts3.example.org",
            "vo": "",
            "tape_endpoint": "/pnfs",
            "priority_bands": [{"from": 10, "priority": 3}, {"from": 5, "priority": 6}],
            "auth": {"method": "bearer", "token_file": "Cargo.toml"}
        }))
        .unwrap();
        let issues = raw
            .validate(Path::new(env!("CARGO_MANIFEST_DIR")), Vec::new())
            .unwrap_err();
        let keys: Vec<&str> = issues.iter().map(|i| i.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "url",
                "vo",
                "tape_endpoint",
                "priority_bands[1].priority",
                "priority_bands[1].from",
                "auth.method"
            ],
            "{issues:?}"
        );
    }
}

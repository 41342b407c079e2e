//! The WLCG Tape REST API adapter (dCache, EOS-CTA, StoRM): staging files from tape.
//!
//! - **Discovery**: at start, `GET {origin}/.well-known/wlcg-tape-rest-api` ([`discovery`]): its
//!   `sitename` keys `targetedMetadata`; `metadata_key` (or the url's host) only when the site
//!   has none.
//! - **Submit**: first `POST {url}/archiveinfo` for the batch's paths ([`archive`]): a file on
//!   disk is done at once, a LOST or NONE one (or an error) fails at once, UNAVAILABLE fails
//!   retryably; the rest, one `POST {url}/stage` per at most `max_files_per_request` distinct
//!   paths, `{"files": [{"path", "diskLifetime", "targetedMetadata": {<sitename>:
//!   {"activity": <group>}}}]}`; the answer (201) names the stage request (`requestId`), which is
//!   every transfer's MSS id. A 413 (dCache: more than `bulk.limits.max.targets-per-flat-request`
//!   files) splits the request to the maximum dCache's message names (or halves it) and lowers
//!   the limit for later ones. The API only stages: writes
//!   are refused. Paths are sent and matched lexically normalised ([`paths`]).
//! - **Progress**: every `poll_ms`, `GET {url}/stage/{id}` for each request with files in flight
//!   ([`file_progress`]: dCache's `state` form and EOS-CTA's `{path, onDisk, error}` form).
//!   Once every file of a request is final, `DELETE {url}/stage/{id}` (dCache keeps requests
//!   for `bulk.limits.archiver-window`, 14 days, otherwise).
//! - **Cancel**: `POST {url}/stage/{id}/cancel` with `{"paths": [path]}`; **release** (unpin the
//!   disk copy once the station has it): `POST {url}/release/{id}` with `{"paths": [path]}`
//!   (dCache unpins by the stage request's id, so a release still works after the DELETE).
//! - **diskLifetime** must be what Java's `Duration.parse` reads ([`duration`]); EOS ignores it
//!   (cern-eos/eos `mgm/http/rest-api/json/tape/TapeModelBuilders.hh` reads only `path` and
//!   the `activity` under its sitename, or under `default`).
//! - **No priority**: the API has no priority field, so the broker must order requests itself
//!   (`release.mode = "held"`); configuration refuses `pass_through` with this adapter.
//!
//! The API has no client-chosen request id and no way to list stage requests, so a batch whose
//! answer is lost to a broker crash (between the POST and the broker's commit) is staged again
//! under a new request; the first request's pins expire after `diskLifetime`.

mod archive;
mod discovery;
mod duration;
mod paths;

pub use paths::normal as normal_path;

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use reqwest::{Client, Method, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::OnceCell;
use tracing::{debug, info, warn};

use crate::event_log::{EventLog, Seen};
use crate::protocol::{Direction, EventKind, Transfer};
use crate::rest::{self, Issue, RawAuth, RestAuth};
use crate::{
    Capabilities, EventBatch, EventCursor, MssAdapter, MssError, PriorityScale, Progress,
    Submitted, TransferRef, TransferStatus,
};

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
                    self.url
                ),
            ));
        }
        if let Some(why) = duration::lifetime_problem(&self.disk_lifetime) {
            issues.push(Issue::new("disk_lifetime", why));
        }
        if self.metadata_key.as_deref().is_some_and(str::is_empty) {
            issues.push(Issue::new(
                "metadata_key",
                "may not be empty (leave it out instead)",
            ));
        }
        let positive = |v: i64, key: &str, issues: &mut Vec<Issue>| -> u64 {
            if v <= 0 {
                issues.push(Issue::new(
                    key,
                    format!("must be a positive integer, got {v}"),
                ));
                1
            } else {
                v as u64
            }
        };
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
        let mut auth_issues = Vec::new();
        let auth = self.auth.validate(base, &mut auth_issues);
        issues.extend(auth_issues.into_iter().map(|i| Issue {
            key: format!("auth.{}", i.key),
            message: i.message,
        }));
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
        }
    }
}

/// The body of `POST /stage` for a set of reads (paths unique once normalised), their
/// `targetedMetadata` under `site` (the sitename).
pub fn stage_body(cfg: &TapeRestConfig, site: &str, transfers: &[&Transfer]) -> Value {
    let files: Vec<Value> = transfers
        .iter()
        .map(|t| {
            json!({
                "path": paths::normal(&t.file),
                "diskLifetime": cfg.disk_lifetime,
                "targetedMetadata": {site: {"activity": t.group}},
            })
        })
        .collect();
    json!({ "files": files })
}

/// Where a file of a stage request stands, from the request's `GET` answer, in either form the
/// v1 specification allows (pages 11 and 14):
///
/// - dCache's, with `state` (`SUBMITTED`, `STARTED`, `COMPLETED`, `FAILED`, `CANCELLED`; dCache/dcache
///   `providers/tape/StagedFileInfo.java`; gfal2 also reads `CANCELED`);
/// - EOS-CTA's `{path, onDisk?, error?}` with no `state` and no start (cern-eos/eos
///   `mgm/http/rest-api/json/tape/TapeJsonifiers.cc`, `GetStageBulkRequestJsonifier`).
///
/// As gfal2 does (cern-fts/gfal2 `src/plugins/http/gfal_http_plugin_tape.cpp`,
/// `gfal_http_bring_online_poll_list`), any `error` fails the file (retryable unless it matches
/// `fatal_patterns`), `onDisk: true` is done, and a file with neither is still waiting.
pub fn file_progress(
    cfg: &TapeRestConfig,
    request: &Value,
    path: &str,
    bytes: u64,
) -> Option<Progress> {
    let want = paths::normal(path);
    let file = request.get("files")?.as_array()?.iter().find(|f| {
        f.get("path")
            .and_then(Value::as_str)
            .is_some_and(|p| paths::normal(p) == want)
    })?;
    let error = file
        .get("error")
        .and_then(Value::as_str)
        .filter(|e| !e.is_empty());
    let state = file.get("state").and_then(Value::as_str);
    let on_disk = file.get("onDisk").and_then(Value::as_bool);
    Some(match (state, error) {
        (Some("CANCELLED" | "CANCELED"), _) => Progress::Finished(EventKind::Cancelled),
        (Some("FAILED"), _) | (_, Some(_)) => {
            let error = error.unwrap_or("no reason given");
            Progress::Finished(EventKind::Failed {
                reason: format!("staging failed: {error}"),
                retryable: !cfg.is_fatal(error),
            })
        }
        (Some("COMPLETED"), _) => Progress::Finished(EventKind::Done { bytes }),
        _ if on_disk == Some(true) => Progress::Finished(EventKind::Done { bytes }),
        (Some("STARTED"), _) => Progress::Running,
        _ => Progress::Queued,
    })
}

/// Whether every file of a polled stage request is final (so the request can be deleted).
fn all_final(cfg: &TapeRestConfig, request: &Value) -> bool {
    let Some(files) = request.get("files").and_then(Value::as_array) else {
        return false;
    };
    files.iter().all(|f| {
        let path = f.get("path").and_then(Value::as_str).unwrap_or("");
        matches!(
            file_progress(cfg, request, path, 0),
            Some(Progress::Finished(_))
        )
    })
}

impl TapeRestConfig {
    fn is_fatal(&self, error: &str) -> bool {
        self.fatal_patterns
            .iter()
            .any(|p| error.contains(p.as_str()))
    }
}

/// The MSS id of a transfer settled by `POST /archiveinfo`, with no stage request.
pub const SETTLED_BEFORE_STAGING: &str = "archiveinfo";

// ---------------------------------------------------------------------------------------------
// The adapter
// ---------------------------------------------------------------------------------------------

/// The WLCG Tape REST API adapter.
pub struct TapeRestAdapter {
    shared: Arc<Shared>,
    poller: tokio::task::JoinHandle<()>,
}

struct Shared {
    cfg: TapeRestConfig,
    client: Client,
    log: EventLog,
    tracks: Mutex<HashMap<String, Track>>,
    /// The `targetedMetadata` key, once the discovery document has been read.
    site: OnceCell<String>,
    /// Most files in one stage request now: `max_files_per_request`, lowered by a 413.
    max_files: AtomicUsize,
    /// Stage requests whose files are all final, to `DELETE`.
    finished: Mutex<BTreeSet<String>>,
}

/// A file being staged for one transfer.
#[derive(Debug, Clone)]
struct Track {
    attempt: u32,
    request_id: String,
    /// Normalised.
    path: String,
    size_bytes: u64,
    started: bool,
}

/// Why a stage request was not created.
enum StageError {
    /// 413: too many files for the server in one request.
    TooLarge(String),
    Mss(MssError),
}

impl TapeRestAdapter {
    /// Build the adapter and start its poller (which reads the discovery document first). Must
    /// run inside a tokio runtime.
    pub fn new(cfg: TapeRestConfig) -> Result<TapeRestAdapter, MssError> {
        let client = cfg.auth.client()?;
        let max_files = AtomicUsize::new(cfg.max_files_per_request);
        let shared = Arc::new(Shared {
            cfg,
            client,
            log: EventLog::new("tape-rest"),
            tracks: Mutex::new(HashMap::new()),
            site: OnceCell::new(),
            max_files,
            finished: Mutex::new(BTreeSet::new()),
        });
        let poller = tokio::spawn(poll_loop(shared.clone()));
        Ok(TapeRestAdapter { shared, poller })
    }
}

impl Drop for TapeRestAdapter {
    fn drop(&mut self) {
        self.poller.abort();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Track>> {
        self.tracks.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn finished(&self) -> MutexGuard<'_, BTreeSet<String>> {
        self.finished.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn request(&self, method: Method, path: &str) -> Result<reqwest::RequestBuilder, MssError> {
        let rb = self
            .client
            .request(method, format!("{}{path}", self.cfg.url))
            .header("accept", "application/json");
        self.cfg.auth.authorize(rb)
    }

    /// The `targetedMetadata` key: the site's `sitename`, read once from its discovery document.
    async fn site(&self) -> Result<String, MssError> {
        self.site.get_or_try_init(|| self.discover()).await.cloned()
    }

    /// Read the discovery document. Unreachable or a server error: try again later; any other
    /// answer without a `sitename`: the configured key.
    async fn discover(&self) -> Result<String, MssError> {
        let fallback = self.cfg.metadata_key.clone();
        let Some(url) = discovery::document_url(&self.cfg.url) else {
            return Ok(fallback);
        };
        let rb = self.client.get(&url).header("accept", "application/json");
        let answer = rest::Answer::read(rest::send(rb, self.cfg.timeout).await?).await?;
        let retry_later = answer.status.is_server_error()
            || answer.status == StatusCode::TOO_MANY_REQUESTS
            || answer.status == StatusCode::REQUEST_TIMEOUT;
        if retry_later {
            return Err(answer.error());
        }
        let doc = answer
            .status
            .is_success()
            .then(|| answer.json::<Value>().ok())
            .flatten();
        let found = doc.as_ref().map(discovery::read);
        match found.as_ref().and_then(|d| d.endpoint.as_ref()) {
            Some((uri, version)) if uri.trim_end_matches('/') != self.cfg.url => warn!(
                %uri, %version, configured = %self.cfg.url,
                "the site's discovery document lists another tape endpoint than the configured url"
            ),
            Some(_) => {}
            None => {
                warn!(%url, status = %answer.status, "no v1 tape endpoint in the site's discovery document")
            }
        }
        let site = found.and_then(|d| d.sitename);
        info!(%url, sitename = ?site, metadata_key = %site.as_deref().unwrap_or(&fallback),
              "read the tape site's discovery document");
        Ok(site.unwrap_or(fallback))
    }

    /// `GET /stage/{id}`, or `None` when the server does not know the request.
    async fn stage_request(&self, id: &str) -> Result<Option<Value>, MssError> {
        let rb = self.request(Method::GET, &format!("/stage/{id}"))?;
        let answer = rest::Answer::read(rest::send(rb, self.cfg.timeout).await?).await?;
        // Only the server's own 404 (its JSON problem) says the request is unknown.
        if answer.not_found() {
            return Ok(None);
        }
        if !answer.status.is_success() {
            return Err(answer.error());
        }
        answer.json().map(Some)
    }

    /// `POST /archiveinfo` for `paths`.
    async fn archive_info(&self, paths: &[String]) -> Result<Value, MssError> {
        let rb = self
            .request(Method::POST, "/archiveinfo")?
            .json(&json!({ "paths": paths }));
        rest::decode::<Value>(rest::send(rb, self.cfg.timeout).await?).await
    }

    /// `DELETE /stage/{id}`; done when the server no longer has it.
    async fn delete(&self, id: &str) -> Result<(), MssError> {
        let rb = self.request(Method::DELETE, &format!("/stage/{id}"))?;
        let answer = rest::Answer::read(rest::send(rb, self.cfg.timeout).await?).await?;
        if answer.status.is_success() || answer.not_found() {
            return Ok(());
        }
        Err(answer.error())
    }

    /// The stage request a transfer is in: followed, or recorded by the broker.
    fn request_id_of(&self, t: &TransferRef) -> Option<String> {
        self.lock()
            .get(&t.key)
            .filter(|tr| tr.attempt == t.attempt)
            .map(|tr| tr.request_id.clone())
            .or_else(|| t.mss_id.clone())
    }

    /// `POST {path}` with `{"paths": [file]}` for a transfer's file.
    async fn paths_call(&self, path: &str, t: &TransferRef) -> Result<(), MssError> {
        let Some(id) = self
            .request_id_of(t)
            .filter(|id| id != SETTLED_BEFORE_STAGING)
        else {
            return Err(MssError::Rejected(
                "no stage request is known for this transfer".into(),
            ));
        };
        let rb = self
            .request(Method::POST, &path.replace("{id}", &id))?
            .json(&json!({"paths": [paths::normal(&t.file)]}));
        rest::no_content(rest::send(rb, self.cfg.timeout).await?).await
    }

    /// Turn one polled request into events for the transfers in it; a request whose files are
    /// all final and no longer followed is marked for deletion.
    fn observe(&self, id: &str, request: Option<&Value>) {
        let mine: Vec<(String, Track)> = self
            .lock()
            .iter()
            .filter(|(_, t)| t.request_id == id)
            .map(|(k, t)| (k.clone(), t.clone()))
            .collect();
        let Some(request) = request else {
            warn!(request_id = id, "the tape endpoint no longer knows the stage request; the broker's status check will settle it");
            let mut tracks = self.lock();
            for (k, _) in &mine {
                tracks.remove(k);
            }
            return;
        };
        for (key, track) in mine {
            let Some(progress) = file_progress(&self.cfg, request, &track.path, track.size_bytes)
            else {
                continue;
            };
            match self
                .log
                .observe(&key, track.attempt, track.started, progress)
            {
                Seen::Nothing => {}
                Seen::Started => {
                    if let Some(t) = self.lock().get_mut(&key) {
                        t.started = true;
                    }
                }
                Seen::Final => {
                    self.lock().remove(&key);
                }
            }
        }
        let followed = self.lock().values().any(|t| t.request_id == id);
        if !followed && all_final(&self.cfg, request) {
            self.finished().insert(id.to_string());
        }
    }

    /// Delete the stage requests that are over; a failure is tried again next period.
    async fn delete_finished(&self) {
        let ids: Vec<String> = self.finished().iter().cloned().collect();
        for id in ids {
            match self.delete(&id).await {
                Ok(()) => {
                    self.finished().remove(&id);
                }
                Err(e) => {
                    debug!(request_id = %id, error = %e, "cannot delete the stage request; next period")
                }
            }
        }
    }
}

async fn poll_loop(sh: Arc<Shared>) {
    if let Err(e) = sh.site().await {
        warn!(error = %e, "cannot read the tape site's discovery document; trying again at the first submission");
    }
    loop {
        tokio::time::sleep(sh.cfg.poll).await;
        let ids: BTreeSet<String> = sh.lock().values().map(|t| t.request_id.clone()).collect();
        for id in ids {
            match sh.stage_request(&id).await {
                Ok(request) => sh.observe(&id, request.as_ref()),
                Err(e) => {
                    debug!(error = %e, "cannot poll the tape endpoint; next period");
                    break;
                }
            }
        }
        sh.delete_finished().await;
    }
}

#[async_trait]
impl MssAdapter for TapeRestAdapter {
    fn name(&self) -> &'static str {
        "tape_rest"
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

    async fn submit(&self, t: &Transfer) -> Result<Submitted, MssError> {
        self.submit_batch(std::slice::from_ref(t))
            .await
            .pop()
            .unwrap_or_else(|| Err(MssError::Protocol("no answer".into())))
    }

    /// Archive info first, then one stage request per group of distinct paths; writes and
    /// transfers already followed are answered without a call.
    async fn submit_batch(&self, transfers: &[Transfer]) -> Vec<Result<Submitted, MssError>> {
        let mut out: Vec<Option<Result<Submitted, MssError>>> = vec![None; transfers.len()];
        let todo = self.triage(transfers, &mut out);
        if !todo.is_empty() {
            match self.shared.site().await {
                Ok(site) => {
                    let todo = self.settle_before_staging(transfers, todo, &mut out).await;
                    self.stage_all(transfers, todo, &site, &mut out).await;
                }
                Err(e) => {
                    for i in todo {
                        out[i] = Some(Err(e.clone()));
                    }
                }
            }
        }
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(MssError::Protocol("no answer".into()))))
            .collect()
    }

    async fn cancel(&self, t: &TransferRef) -> Result<(), MssError> {
        self.shared.paths_call("/stage/{id}/cancel", t).await
    }

    async fn release(&self, t: &TransferRef) -> Result<(), MssError> {
        if self.shared.request_id_of(t).as_deref() == Some(SETTLED_BEFORE_STAGING) {
            // Found on disk before staging: no stage request, so no pin of ours to release.
            return Ok(());
        }
        self.shared.paths_call("/release/{id}", t).await
    }

    async fn status(&self, t: &TransferRef) -> Result<Option<TransferStatus>, MssError> {
        let sh = &self.shared;
        let Some(id) = sh.request_id_of(t) else {
            return Ok(None);
        };
        if id == SETTLED_BEFORE_STAGING {
            return self.settled_status(t).await;
        }
        let Some(request) = sh.stage_request(&id).await? else {
            return Ok(None);
        };
        let Some(progress) = file_progress(&sh.cfg, &request, &t.file, t.size_bytes) else {
            return Ok(None);
        };
        if !matches!(progress, Progress::Finished(_)) {
            // Staged before a restart: follow it from now on.
            sh.lock().entry(t.key.clone()).or_insert(Track {
                attempt: t.attempt,
                request_id: id,
                path: paths::normal(&t.file),
                size_bytes: t.size_bytes,
                started: progress == Progress::Running,
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

impl TapeRestAdapter {
    /// Answer writes and transfers already followed; the indices left to stage.
    fn triage(
        &self,
        transfers: &[Transfer],
        out: &mut [Option<Result<Submitted, MssError>>],
    ) -> Vec<usize> {
        let tracks = self.shared.lock();
        let mut todo = Vec::new();
        for (i, t) in transfers.iter().enumerate() {
            if t.direction == Direction::Write {
                out[i] = Some(Err(MssError::Rejected(
                    "the WLCG Tape REST API only stages files (reads)".into(),
                )));
            } else if let Some(tr) = tracks.get(&t.key).filter(|tr| tr.attempt == t.attempt) {
                out[i] = Some(Ok(Submitted {
                    mss_id: tr.request_id.clone(),
                    duplicate: true,
                }));
            } else {
                todo.push(i);
            }
        }
        todo
    }

    /// `POST /archiveinfo` for the files to stage: those on disk are done and those lost or
    /// missing failed at once (an event each, MSS id [`SETTLED_BEFORE_STAGING`]); the indices
    /// still to stage.
    async fn settle_before_staging(
        &self,
        transfers: &[Transfer],
        todo: Vec<usize>,
        out: &mut [Option<Result<Submitted, MssError>>],
    ) -> Vec<usize> {
        let sh = &self.shared;
        let wanted: BTreeSet<String> = todo
            .iter()
            .map(|&i| paths::normal(&transfers[i].file))
            .collect();
        let wanted: Vec<String> = wanted.into_iter().collect();
        let info = match sh.archive_info(&wanted).await {
            Ok(info) => info,
            Err(e) => {
                debug!(error = %e, "no archiveinfo; staging every file");
                return todo;
            }
        };
        let mut left = Vec::new();
        for i in todo {
            let t = &transfers[i];
            match archive::before_staging(&info, &t.file, t.size_bytes, |e| sh.cfg.is_fatal(e)) {
                archive::Before::Stage => left.push(i),
                archive::Before::Settled(kind) => {
                    debug!(key = %t.key, ?kind, "settled by archiveinfo without staging");
                    sh.log.push(&t.key, t.attempt, kind);
                    out[i] = Some(Ok(Submitted {
                        mss_id: SETTLED_BEFORE_STAGING.into(),
                        duplicate: false,
                    }));
                }
            }
        }
        left
    }

    /// Stage `todo` in requests of distinct paths, in order, halving a request the server
    /// finds too large (413) and keeping the lower limit for later ones.
    async fn stage_all(
        &self,
        transfers: &[Transfer],
        todo: Vec<usize>,
        site: &str,
        out: &mut [Option<Result<Submitted, MssError>>],
    ) {
        let sh = &self.shared;
        let mut groups = group_distinct(transfers, &todo, sh.max_files.load(Ordering::Relaxed));
        while let Some(group) = groups.pop_front() {
            let batch: Vec<&Transfer> = group.iter().map(|&i| &transfers[i]).collect();
            let result = match self.stage(&batch, site).await {
                Err(StageError::TooLarge(why)) if group.len() > 1 => {
                    let limit = lower_limit(group.len(), &why);
                    sh.max_files.fetch_min(limit, Ordering::Relaxed);
                    warn!(files = group.len(), now = limit, server = %why,
                          "the tape endpoint refused a stage request as too large (413); splitting it");
                    for chunk in group.chunks(limit).rev() {
                        groups.push_front(chunk.to_vec());
                    }
                    continue;
                }
                Err(StageError::TooLarge(why)) => {
                    warn!(server = %why, "the tape endpoint refuses even one file per stage request (413)");
                    Err(MssError::Unavailable(format!(
                        "413: even one file is too many for the tape endpoint: {why}"
                    )))
                }
                Err(StageError::Mss(e)) => Err(e),
                Ok(s) => Ok(s),
            };
            if let Ok(s) = &result {
                self.follow(&batch, &s.mss_id);
            }
            for &i in &group {
                out[i] = Some(result.clone());
            }
        }
    }

    fn follow(&self, batch: &[&Transfer], request_id: &str) {
        let mut tracks = self.shared.lock();
        for t in batch {
            tracks.insert(
                t.key.clone(),
                Track {
                    attempt: t.attempt,
                    request_id: request_id.to_string(),
                    path: paths::normal(&t.file),
                    size_bytes: t.size_bytes,
                    started: false,
                },
            );
        }
    }

    /// `POST /stage` for a group of reads; their shared stage request id.
    async fn stage(&self, batch: &[&Transfer], site: &str) -> Result<Submitted, StageError> {
        let sh = &self.shared;
        let rb = sh
            .request(Method::POST, "/stage")
            .map_err(StageError::Mss)?
            .json(&stage_body(&sh.cfg, site, batch));
        let resp = rest::send(rb, sh.cfg.timeout)
            .await
            .map_err(StageError::Mss)?;
        let answer = rest::Answer::read(resp).await.map_err(StageError::Mss)?;
        // Before the shared classification: a 413 is not a refusal of these files.
        if answer.status == StatusCode::PAYLOAD_TOO_LARGE {
            return Err(StageError::TooLarge(
                answer.server_error().unwrap_or_else(|| answer.text()),
            ));
        }
        if !answer.status.is_success() {
            return Err(StageError::Mss(answer.error()));
        }
        let body: Value = answer.json().map_err(StageError::Mss)?;
        let id = body
            .get("requestId")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                let text = crate::answer::clip(&body.to_string(), crate::answer::MAX_MESSAGE_CHARS)
                    .into_owned();
                StageError::Mss(MssError::Unknown(format!("no requestId in {text}")))
            })?;
        Ok(Submitted {
            mss_id: id.to_string(),
            duplicate: false,
        })
    }

    /// The status of a transfer settled by archiveinfo: asked again (after a restart its event
    /// may be lost); `None` (resubmit) when the file now needs staging.
    async fn settled_status(&self, t: &TransferRef) -> Result<Option<TransferStatus>, MssError> {
        let sh = &self.shared;
        let info = sh.archive_info(&[paths::normal(&t.file)]).await?;
        Ok(
            match archive::before_staging(&info, &t.file, t.size_bytes, |e| sh.cfg.is_fatal(e)) {
                archive::Before::Settled(kind) => Some(TransferStatus {
                    attempt: t.attempt,
                    progress: Progress::Finished(kind),
                }),
                archive::Before::Stage => None,
            },
        )
    }
}

/// The files per request to try after a 413 for `files`: the maximum dCache names in its
/// message ("The number of targets N exceeds maximum M ...", dCache/dcache `BulkService.java`)
/// when it gives one below `files`, otherwise half.
fn lower_limit(files: usize, why: &str) -> usize {
    let named = why
        .split("maximum ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|n| (1..files).contains(n));
    named.unwrap_or(files / 2).max(1)
}

/// `todo` in groups of at most `max` distinct (normalised) paths, in order.
fn group_distinct(transfers: &[Transfer], todo: &[usize], max: usize) -> VecDeque<Vec<usize>> {
    let mut groups: VecDeque<Vec<usize>> = VecDeque::new();
    let mut in_last: HashSet<String> = HashSet::new();
    for &i in todo {
        let path = paths::normal(&transfers[i].file);
        let fits = groups
            .back()
            .is_some_and(|g| g.len() < max.max(1) && !in_last.contains(&path));
        match groups.back_mut() {
            Some(g) if fits => g.push(i),
            _ => {
                groups.push_back(vec![i]);
                in_last.clear();
            }
        }
        in_last.insert(path);
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> TapeRestConfig {
        let raw: RawTapeRestConfig = serde_json::from_value(json!({
            "url": "https://dcache.example.org:3880/api/v1/tape",
            "auth": {"method": "none"}
        }))
        .unwrap();
        raw.validate(Path::new("/")).unwrap()
    }

    #[test]
    fn the_stage_body_carries_the_group_as_activity() {
        let t = Transfer {
            key: "5".into(),
            attempt: 1,
            file: "/pnfs/fnal.gov/usr/cms/f.root".into(),
            size_bytes: 9,
            priority: 0,
            volume: None,
            group: "mc/top".into(),
            direction: Direction::Read,
            local_file: None,
            bfid: None,
        };
        let body = stage_body(&cfg(), "dcache.example.org", &[&t]);
        assert_eq!(
            body,
            json!({"files": [{"path": "/pnfs/fnal.gov/usr/cms/f.root", "diskLifetime": "P1D",
                "targetedMetadata": {"dcache.example.org": {"activity": "mc/top"}}}]})
        );
    }

    #[test]
    fn file_states_and_on_disk_become_progress() {
        let c = cfg();
        let req = json!({"id": "r", "files": [
            {"path": "/a", "state": "STARTED"},
            {"path": "/b", "state": "COMPLETED"},
            {"path": "/c", "state": "FAILED", "error": "No such file or directory"},
            {"path": "/d", "state": "FAILED", "error": "drive error"},
            {"path": "/e", "onDisk": true},
            {"path": "/f", "state": "SUBMITTED"},
            {"path": "/g", "state": "CANCELLED"}]});
        let p = |path| file_progress(&c, &req, path, 4);
        assert_eq!(p("/a"), Some(Progress::Running));
        assert_eq!(
            p("/b"),
            Some(Progress::Finished(EventKind::Done { bytes: 4 }))
        );
        assert!(matches!(
            p("/c"),
            Some(Progress::Finished(EventKind::Failed {
                retryable: false,
                ..
            }))
        ));
        assert!(matches!(
            p("/d"),
            Some(Progress::Finished(EventKind::Failed {
                retryable: true,
                ..
            }))
        ));
        assert_eq!(
            p("/e"),
            Some(Progress::Finished(EventKind::Done { bytes: 4 }))
        );
        assert_eq!(p("/f"), Some(Progress::Queued));
        assert_eq!(p("/g"), Some(Progress::Finished(EventKind::Cancelled)));
        assert_eq!(p("/zz"), None);
        assert!(c.capabilities().priority == PriorityScale::None);
    }

    #[test]
    fn a_request_holds_distinct_normalised_paths_up_to_the_limit() {
        let t = |file: &str| Transfer {
            key: file.into(),
            attempt: 1,
            file: file.into(),
            size_bytes: 1,
            priority: 0,
            volume: None,
            group: "g".into(),
            direction: Direction::Read,
            local_file: None,
            bfid: None,
        };
        let batch = [t("/a/b"), t("/c"), t("/a//b"), t("/d"), t("/e")];
        let groups = group_distinct(&batch, &[0, 1, 2, 3, 4], 3);
        assert_eq!(groups, [vec![0, 1], vec![2, 3, 4]]);
        assert_eq!(group_distinct(&batch, &[1, 3, 4], 2), [vec![1, 3], vec![4]]);
    }

    #[test]
    fn a_413_names_the_limit_or_halves() {
        let dcache = "The number of targets 501 exceeds maximum 500 for directory expansion NONE.";
        assert_eq!(lower_limit(501, dcache), 500);
        assert_eq!(lower_limit(9, "Content Too Large"), 4);
        assert_eq!(lower_limit(2, "maximum 7"), 1);
        assert_eq!(cfg().max_files_per_request, 500, "dCache's default");
    }

    #[test]
    fn the_eos_form_without_state_is_read_as_gfal2_reads_it() {
        let c = cfg();
        // cern-eos/eos GetStageBulkRequestJsonifier: path, onDisk when known, error when any.
        let req = json!({"id": "r", "createdAt": 1, "startedAt": 1, "files": [
            {"path": "/a", "onDisk": false},
            {"path": "/b", "onDisk": true},
            {"path": "/c", "onDisk": false, "error": "Retrieve failed: tape drive error"},
            {"path": "/d", "error": "No such file or directory"},
            {"path": "/e"},
            {"path": "/f//g/./h", "onDisk": true}]});
        let p = |path| file_progress(&c, &req, path, 4);
        assert_eq!(p("/a"), Some(Progress::Queued));
        assert_eq!(p("/e"), Some(Progress::Queued));
        assert_eq!(
            p("/b"),
            Some(Progress::Finished(EventKind::Done { bytes: 4 }))
        );
        assert_eq!(
            p("/c"),
            Some(Progress::Finished(EventKind::Failed {
                reason: "staging failed: Retrieve failed: tape drive error".into(),
                retryable: true
            }))
        );
        assert!(matches!(
            p("/d"),
            Some(Progress::Finished(EventKind::Failed {
                retryable: false,
                ..
            }))
        ));
        assert_eq!(
            p("/f/g/h"),
            Some(Progress::Finished(EventKind::Done { bytes: 4 }))
        );
        assert!(!all_final(&c, &req));
    }
}

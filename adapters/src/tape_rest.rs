//! The WLCG Tape REST API adapter (dCache, EOS-CTA, StoRM): staging files from tape.
//!
//! - **Submit**: one `POST {url}/stage` per batch, `{"files": [{"path", "diskLifetime",
//!   "targetedMetadata": {<metadata_key>: {"activity": <group>}}}]}`; the answer (201) names the
//!   stage request (`requestId`), which is every transfer's MSS id. The API only stages: writes
//!   are refused.
//! - **Progress**: every `poll_ms`, `GET {url}/stage/{id}` for each request with files in flight;
//!   a file `STARTED` is a start, `COMPLETED` (or `onDisk: true`) is done with its declared size
//!   (the API reports no bytes), `FAILED` a failure (retryable unless its error matches
//!   `fatal_patterns`), `CANCELLED` a cancellation.
//! - **Cancel**: `POST {url}/stage/{id}/cancel` with `{"paths": [path]}`; **release** (unpin the
//!   disk copy once the station has it): `POST {url}/release/{id}` with `{"paths": [path]}`.
//! - **No priority**: the API has no priority field, so the broker must order requests itself
//!   (`release.mode = "held"`); configuration refuses `pass_through` with this adapter.
//!
//! The API has no client-chosen request id and no way to list stage requests, so a batch whose
//! answer is lost to a broker crash (between the POST and the broker's commit) is staged again
//! under a new request; the first request's pins expire after `diskLifetime`.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use reqwest::{Client, Method};
use serde::Deserialize;
use serde_json::{json, Value};
use tracing::{debug, warn};

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
fn d_files() -> i64 {
    1000
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
        if !is_iso_duration(&self.disk_lifetime) {
            issues.push(Issue::new(
                "disk_lifetime",
                format!(
                    "`{}` is not an ISO 8601 duration such as P1D or PT12H",
                    self.disk_lifetime
                ),
            ));
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

/// A plausible ISO 8601 duration: `P`, then date parts and/or `T` with time parts.
fn is_iso_duration(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('P') else {
        return false;
    };
    let (date, time) = match rest.split_once('T') {
        Some((d, t)) => (d, Some(t)),
        None => (rest, None),
    };
    let parts_ok = |part: &str, units: &str| {
        let mut digits = 0;
        for c in part.chars() {
            if c.is_ascii_digit() {
                digits += 1;
            } else if units.contains(c) && digits > 0 {
                digits = 0;
            } else {
                return false;
            }
        }
        digits == 0
    };
    let has_any = !date.is_empty() || time.is_some_and(|t| !t.is_empty());
    has_any && parts_ok(date, "YMWD") && time.is_none_or(|t| !t.is_empty() && parts_ok(t, "HMS"))
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

/// The body of `POST /stage` for a set of reads (paths unique).
pub fn stage_body(cfg: &TapeRestConfig, transfers: &[&Transfer]) -> Value {
    let files: Vec<Value> = transfers
        .iter()
        .map(|t| {
            json!({
                "path": t.file,
                "diskLifetime": cfg.disk_lifetime,
                "targetedMetadata": {cfg.metadata_key.clone(): {"activity": t.group}},
            })
        })
        .collect();
    json!({ "files": files })
}

/// Where a file of a stage request stands, from the request's `GET` answer.
pub fn file_progress(
    cfg: &TapeRestConfig,
    request: &Value,
    path: &str,
    bytes: u64,
) -> Option<Progress> {
    let file = request
        .get("files")?
        .as_array()?
        .iter()
        .find(|f| f.get("path").and_then(Value::as_str) == Some(path))?;
    let error = file.get("error").and_then(Value::as_str).unwrap_or("");
    let state = file.get("state").and_then(Value::as_str);
    Some(match (state, file.get("onDisk").and_then(Value::as_bool)) {
        (Some("STARTED"), _) => Progress::Running,
        (Some("COMPLETED"), _) | (None, Some(true)) => {
            Progress::Finished(EventKind::Done { bytes })
        }
        (Some("FAILED"), _) => Progress::Finished(EventKind::Failed {
            reason: format!("staging failed: {error}"),
            retryable: !cfg
                .fatal_patterns
                .iter()
                .any(|p| error.contains(p.as_str())),
        }),
        (Some("CANCELLED"), _) => Progress::Finished(EventKind::Cancelled),
        _ => Progress::Queued,
    })
}

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
}

/// A file being staged for one transfer.
#[derive(Debug, Clone)]
struct Track {
    attempt: u32,
    request_id: String,
    path: String,
    size_bytes: u64,
    started: bool,
}

impl TapeRestAdapter {
    /// Build the adapter and start its poller. Must run inside a tokio runtime.
    pub fn new(cfg: TapeRestConfig) -> Result<TapeRestAdapter, MssError> {
        let client = cfg.auth.client()?;
        let shared = Arc::new(Shared {
            cfg,
            client,
            log: EventLog::new("tape-rest"),
            tracks: Mutex::new(HashMap::new()),
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

    fn request(&self, method: Method, path: &str) -> Result<reqwest::RequestBuilder, MssError> {
        let rb = self
            .client
            .request(method, format!("{}{path}", self.cfg.url))
            .header("accept", "application/json");
        self.cfg.auth.authorize(rb)
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
        let Some(id) = self.request_id_of(t) else {
            return Err(MssError::Rejected(
                "no stage request is known for this transfer".into(),
            ));
        };
        let rb = self
            .request(Method::POST, &path.replace("{id}", &id))?
            .json(&json!({"paths": [t.file]}));
        rest::no_content(rest::send(rb, self.cfg.timeout).await?).await
    }

    /// Turn one polled request into events for the transfers in it.
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
    }
}

async fn poll_loop(sh: Arc<Shared>) {
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

    /// One stage request per group of distinct paths; writes and transfers already followed are
    /// answered without a call.
    async fn submit_batch(&self, transfers: &[Transfer]) -> Vec<Result<Submitted, MssError>> {
        let sh = &self.shared;
        let mut out: Vec<Option<Result<Submitted, MssError>>> = vec![None; transfers.len()];
        let mut todo: Vec<usize> = Vec::new();
        {
            let tracks = sh.lock();
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
        }
        // Split into requests of distinct paths, in order.
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for i in todo {
            let fits = groups.last().is_some_and(|g| {
                g.len() < sh.cfg.max_files_per_request
                    && !g.iter().any(|&j| transfers[j].file == transfers[i].file)
            });
            match groups.last_mut() {
                Some(g) if fits => g.push(i),
                _ => groups.push(vec![i]),
            }
        }
        for group in groups {
            let batch: Vec<&Transfer> = group.iter().map(|&i| &transfers[i]).collect();
            let result = self.stage(&batch).await;
            for &i in &group {
                out[i] = Some(result.clone());
            }
            if let Ok(s) = &result {
                let mut tracks = sh.lock();
                for t in &batch {
                    tracks.insert(
                        t.key.clone(),
                        Track {
                            attempt: t.attempt,
                            request_id: s.mss_id.clone(),
                            path: t.file.clone(),
                            size_bytes: t.size_bytes,
                            started: false,
                        },
                    );
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
        self.shared.paths_call("/release/{id}", t).await
    }

    async fn status(&self, t: &TransferRef) -> Result<Option<TransferStatus>, MssError> {
        let sh = &self.shared;
        let Some(id) = sh.request_id_of(t) else {
            return Ok(None);
        };
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
                path: t.file.clone(),
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
    /// `POST /stage` for a group of reads; their shared stage request id.
    async fn stage(&self, batch: &[&Transfer]) -> Result<Submitted, MssError> {
        let sh = &self.shared;
        let rb = sh
            .request(Method::POST, "/stage")?
            .json(&stage_body(&sh.cfg, batch));
        let answer: Value = rest::decode(rest::send(rb, sh.cfg.timeout).await?).await?;
        let id = answer
            .get("requestId")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                let text =
                    crate::answer::clip(&answer.to_string(), crate::answer::MAX_MESSAGE_CHARS)
                        .into_owned();
                MssError::Unknown(format!("no requestId in {text}"))
            })?;
        Ok(Submitted {
            mss_id: id.to_string(),
            duplicate: false,
        })
    }
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
    fn iso_durations() {
        for ok in ["P1D", "PT12H", "P1DT2H30M", "P2W", "PT45S"] {
            assert!(is_iso_duration(ok), "{ok}");
        }
        for bad in ["1D", "P", "PT", "P1", "PD", "P1H", "PT1D", "P1DT"] {
            assert!(!is_iso_duration(bad), "{bad}");
        }
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
        let body = stage_body(&cfg(), &[&t]);
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
}

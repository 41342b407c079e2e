//! A stand-in FTS3 REST server for tests: `POST /jobs`, `GET /jobs/{ids}`, `POST /jobs/{id}`
//! (modify), `DELETE /jobs/{id}` (cancel), with the answers FTS3 gives.
//!
//! Submissions are checked against what FTS3 accepts (its submit JSON schema and `JobBuilder`):
//! top-level `files` and `params` only, each file with `sources` and `destinations` (non-empty
//! lists of URLs with a scheme other than `file`, a host and a path), typed optional fields, and
//! `params` with FTS3's types. It is stricter than FTS3 in one way on purpose: FTS3 ignores
//! fields it does not know, the stand-in refuses them, so a misspelt field fails a test instead
//! of being dropped. FTS3's semantics are kept: priorities are clamped to 1..5, a deterministic
//! id is `uuid5(uuid5(BASE_ID, vos[0]), sid)` with `vos` derived from the credential as
//! fts-rest-flask does (`lib/middleware/fts3auth/methods/ssl.py`: each VOMS FQAN's VO and
//! group, else the gridmap VO; served by `GET /whoami` with `vos_id`), a second submission of a
//! sid is 409 "The sid provided by the user is duplicated", tape staging or archiving with a
//! bearer token is 400, a certificate caller whose delegated proxy is missing or has under an
//! hour left is 419 (`controllers/jobs.py`; [`Fts3Standin::set_delegation`] switches it, as
//! `fts-delegation-init` would renew it), and an unknown job is 404. `retry` 0 or absent means
//! the server's default ([`SERVER_RETRY`]), below 0 none (cern-fts/fts3
//! `src/db/mysql/Config.cpp` `getRetry`); `activity` is lower-cased ("default" when absent).
//!
//! Jobs move on the wall clock: queued (`SUBMITTED`; for a staging job `STAGING` then, once the
//! bring-online request is sent, `STARTED`) for `plan.queued`, `ACTIVE` for `plan.active`, then
//! `FINISHED` with the declared size. A source or destination path containing `/hold/` stays
//! queued until cancelled, `/fail/` fails (recoverable: run again while FTS3 retries are left),
//! `/fatal/` fails unrecoverably. A staging job's failure has `recoverable` null, as FTS3's
//! bring-online path leaves it (cern-fts/fts3 `src/db/mysql/MySqlAPI.cpp`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Map, Value};
use tokio::net::TcpListener;

use super::{Call, Caller, Desk, Plan};
use crate::fts3::{job_id, vo_id};

/// The stand-in's server-side retry count (`t_server_config.retry`), applied when a job asks
/// for 0.
pub const SERVER_RETRY: i64 = 2;

/// The delegated proxy of certificate callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delegation {
    Valid,
    /// Under an hour left: FTS3 refuses submissions with 419.
    Expiring,
    /// None delegated: 419 too.
    Missing,
}

/// A job as the stand-in keeps it.
#[derive(Debug, Clone)]
pub struct Job {
    pub job_id: String,
    pub sid: Option<String>,
    pub priority: i64,
    pub staging: bool,
    pub source: String,
    pub destination: String,
    pub activity: String,
    /// FTS3 retries after a recoverable failure: the job's `retry`, the server's for 0.
    pub retries: i64,
    pub bring_online: i64,
    pub filesize: u64,
    pub job_metadata: Value,
    created: Instant,
    cancelled_at: Option<Instant>,
}

struct Inner {
    /// The gridmap VO of a certificate without VOMS extensions, and of tokens.
    vo: String,
    /// The certificate's VOMS FQANs (`/cms/uscms/Role=production`), if any.
    fqans: Vec<String>,
    delegation: Delegation,
    /// Answer the next submissions 409 "The submission is duplicated".
    duplicates: bool,
    desk: Desk,
    plan: Plan,
    jobs: HashMap<String, Job>,
    /// Job ids in submission order.
    order: Vec<String>,
}

/// A running stand-in FTS3 server.
pub struct Fts3Standin {
    pub url: String,
    state: Arc<Mutex<Inner>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Fts3Standin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Fts3Standin {
    /// Serve on a free loopback port. With `token`, every call needs `Authorization: Bearer
    /// <token>` (FTS3's token method); without, calls are taken as authenticated by a client
    /// certificate.
    pub async fn start(vo: &str, token: Option<&str>, plan: Plan) -> std::io::Result<Fts3Standin> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        Ok(Fts3Standin::serve(listener, url, vo, token, plan))
    }

    /// Serve on any listener (a TLS one that requires client certificates, say), reachable
    /// at `url`.
    pub fn serve<L>(
        listener: L,
        url: String,
        vo: &str,
        token: Option<&str>,
        plan: Plan,
    ) -> Fts3Standin
    where
        L: axum::serve::Listener,
        L::Addr: std::fmt::Debug,
    {
        let state = Arc::new(Mutex::new(Inner {
            vo: vo.to_string(),
            fqans: Vec::new(),
            delegation: Delegation::Valid,
            duplicates: false,
            desk: Desk::new(token),
            plan,
            jobs: HashMap::new(),
            order: Vec::new(),
        }));
        let app = Router::new()
            .route("/jobs", post(submit))
            .route("/whoami", axum::routing::get(whoami))
            .route(
                "/jobs/{ids}",
                axum::routing::get(get_jobs).post(modify).delete(cancel),
            )
            .with_state(state.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Fts3Standin { url, state, task }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        lock(&self.state)
    }

    /// Every call received, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.lock().desk.calls.clone()
    }

    /// Every job created, in submission order.
    pub fn jobs(&self) -> Vec<Job> {
        let s = self.lock();
        s.order
            .iter()
            .filter_map(|id| s.jobs.get(id).cloned())
            .collect()
    }

    /// The state a job shows now.
    pub fn job_state(&self, job_id: &str) -> Option<String> {
        let s = self.lock();
        s.jobs
            .get(job_id)
            .map(|j| state_of(j, &s.plan).0.to_string())
    }

    /// Answer every call with 503 (an FTS3 outage) or serve again.
    pub fn set_down(&self, down: bool) {
        self.lock().desk.down = down;
    }

    /// The VOMS FQANs the client certificate carries: FTS3 derives the VOs from them.
    pub fn set_fqans(&self, fqans: &[&str]) {
        self.lock().fqans = fqans.iter().map(|f| f.to_string()).collect();
    }

    /// The state of the delegated proxy (renewed: `Delegation::Valid`).
    pub fn set_delegation(&self, delegation: Delegation) {
        self.lock().delegation = delegation;
    }

    /// Answer submissions 409 "The submission is duplicated" (a clash with another job).
    pub fn set_duplicates(&self, on: bool) {
        self.lock().duplicates = on;
    }

    /// Forget every job (a database wiped, jobs archived away).
    pub fn forget_jobs(&self) {
        let mut s = self.lock();
        s.jobs.clear();
        s.order.clear();
    }
}

fn lock(state: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// The VO of a VOMS FQAN: its groups up to the first `Role=` (fts-rest-flask
/// `credentials.vo_from_fqan`: `/dteam/cern/Role=lcgadmin` is `dteam/cern`).
pub fn vo_from_fqan(fqan: &str) -> String {
    fqan.split('/')
        .skip(1)
        .take_while(|c| !c.to_lowercase().starts_with("role="))
        .collect::<Vec<_>>()
        .join("/")
}

impl Inner {
    /// The caller's VOs as FTS3 derives them: for a certificate each FQAN's VO, in order and
    /// once, else the gridmap VO; for a token the configured VO.
    fn vos(&self, caller: Caller) -> Vec<String> {
        let mut vos: Vec<String> = Vec::new();
        if caller == Caller::Certificate {
            for vo in self.fqans.iter().map(|f| vo_from_fqan(f)) {
                if !vo.is_empty() && !vos.contains(&vo) {
                    vos.push(vo);
                }
            }
        }
        if vos.is_empty() {
            vos.push(self.vo.clone());
        }
        vos
    }

    /// FTS3's 419 for a certificate caller without a good delegated proxy.
    fn delegation_refusal(&self, caller: Caller) -> Option<&'static str> {
        if caller != Caller::Certificate {
            return None;
        }
        match self.delegation {
            Delegation::Valid => None,
            Delegation::Expiring => {
                Some("The delegated credentials has less than one hour left (standin)")
            }
            Delegation::Missing => Some("No delegation found for \"/DC=org/CN=standin\""),
        }
    }
}

async fn whoami(State(state): State<Arc<Mutex<Inner>>>, headers: HeaderMap) -> Response {
    let caller = match admit(
        &state,
        Call::new("GET", "/whoami".into(), HashMap::new(), &headers, None),
    ) {
        Ok(c) => c,
        Err(r) => return r.into_response(),
    };
    let s = lock(&state);
    let vos = s.vos(caller);
    let vos_id: Vec<String> = vos.iter().map(|v| vo_id(v).to_string()).collect();
    let method = if caller == Caller::Token {
        "oauth2"
    } else {
        "certificate"
    };
    Json(json!({
        "dn": ["/DC=org/CN=standin"],
        "user_dn": "/DC=org/CN=standin",
        "vos": vos,
        "vos_id": vos_id,
        "voms_cred": s.fqans,
        "method": method,
        "base_id": crate::fts3::BASE_ID.to_string(),
    }))
    .into_response()
}

/// A refusal: its status and message, made into the server's error body when answered.
struct Refusal(StatusCode, String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        error(self.0, &self.1)
    }
}

fn error(status: StatusCode, message: &str) -> Response {
    (
        status,
        Json(json!({
            "status": format!("{} {}", status.as_u16(), status.canonical_reason().unwrap_or("")),
            "message": message,
        })),
    )
        .into_response()
}

/// Record the call, then check the service is up and the caller authenticated.
fn admit(state: &Mutex<Inner>, call: Call) -> Result<Caller, Refusal> {
    lock(state).desk.admit(call).map_err(|(s, m)| Refusal(s, m))
}

const FILE_KEYS: &[&str] = &[
    "sources",
    "destinations",
    "priority",
    "metadata",
    "filesize",
    "checksum",
    "activity",
    "selection_strategy",
    "staging_metadata",
    "archive_metadata",
    "scitag",
    "source_tokens",
    "destination_tokens",
];

/// `params` FTS3 reads, with the JSON type it expects (`int`, `bool`, `str`, `obj`).
const PARAMS: &[(&str, &str)] = &[
    ("verify_checksum", "any"),
    ("reuse", "bool"),
    ("spacetoken", "str"),
    ("destination_spacetoken", "str"),
    ("bring_online", "int"),
    ("copy_pin_lifetime", "int"),
    ("archive_timeout", "int"),
    ("job_metadata", "obj"),
    ("source_spacetoken", "str"),
    ("overwrite", "bool"),
    ("overwrite_on_retry", "bool"),
    ("overwrite_hop", "bool"),
    ("overwrite_when_only_on_disk", "bool"),
    ("dst_file_report", "bool"),
    ("gridftp", "str"),
    ("retry", "int"),
    ("retry_delay", "int"),
    ("multihop", "bool"),
    ("timeout", "int"),
    ("nostreams", "int"),
    ("buffer_size", "int"),
    ("strict_copy", "bool"),
    ("priority", "int"),
    ("ipv4", "bool"),
    ("ipv6", "bool"),
    ("id_generator", "str"),
    ("sid", "str"),
    ("max_time_in_queue", "any"),
    ("disable_cleanup", "bool"),
    ("s3alternate", "bool"),
    ("unmanaged_tokens", "bool"),
    ("credential", "str"),
];

fn type_ok(v: &Value, want: &str) -> bool {
    v.is_null()
        || match want {
            "int" => v.is_i64() || v.is_u64(),
            "bool" => v.is_boolean(),
            "str" => v.is_string(),
            "obj" => v.is_object(),
            _ => true,
        }
}

/// A URL FTS3 takes: a scheme that is not `file`, a host and a path.
fn url_problem(url: &str) -> Option<String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Some(format!("Missing scheme ({url})"));
    };
    if scheme == "file" {
        return Some(format!("Can not transfer local files ({url})"));
    }
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if host.is_empty() {
        return Some(format!("Missing host ({url})"));
    }
    if path.is_empty() || path == "/" {
        return Some(format!("Missing path ({url})"));
    }
    None
}

/// Check a submission; the job to create, or the message of a 400.
fn check_submission(body: &Value) -> Result<(Map<String, Value>, Value), String> {
    let Some(top) = body.as_object() else {
        return Err("the submission is not a JSON object".into());
    };
    for (k, v) in top {
        // FTS3's own client sends `"delete": null` with transfers.
        if !(matches!(k.as_str(), "files" | "params") || (k == "delete" && v.is_null())) {
            return Err(format!("unknown top-level field `{k}`"));
        }
    }
    let params = match top.get("params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(p)) => p.clone(),
        Some(_) => return Err("`params` must be an object".into()),
    };
    for (k, v) in &params {
        match PARAMS.iter().find(|(name, _)| name == k) {
            None => return Err(format!("unknown parameter `params.{k}`")),
            Some((_, want)) if !type_ok(v, want) => {
                return Err(format!("`params.{k}` must be of type {want}"))
            }
            _ => {}
        }
    }
    if let Some(c) = params.get("copy_pin_lifetime").and_then(Value::as_i64) {
        if c < -1 {
            return Err("`params.copy_pin_lifetime` must be -1 or more".into());
        }
    }
    let files = match top.get("files") {
        Some(Value::Array(f)) if !f.is_empty() => f,
        Some(Value::Array(_)) | None | Some(Value::Null) => {
            return Err("No transfers operations specified".into())
        }
        Some(_) => return Err("`files` must be an array".into()),
    };
    if files.len() != 1 {
        return Err("this stand-in takes one file per job, as the broker sends".into());
    }
    let file = files[0]
        .as_object()
        .ok_or_else(|| "`files[0]` must be an object".to_string())?;
    for k in file.keys() {
        if !FILE_KEYS.contains(&k.as_str()) {
            return Err(format!("unknown field `files[0].{k}`"));
        }
    }
    for list in ["sources", "destinations"] {
        let urls = file
            .get(list)
            .and_then(Value::as_array)
            .filter(|a| !a.is_empty())
            .ok_or_else(|| format!("Missing parameter: '{list}' (a non-empty list)"))?;
        for u in urls {
            let u = u
                .as_str()
                .ok_or_else(|| format!("`files[0].{list}` holds a non-string"))?;
            if let Some(p) = url_problem(u) {
                return Err(format!("Invalid value within the request: {p}"));
            }
        }
    }
    for (k, want) in [
        ("filesize", "int"),
        ("activity", "str"),
        ("metadata", "obj"),
        ("checksum", "str"),
    ] {
        if let Some(v) = file.get(k) {
            if !type_ok(v, want) || v.as_i64().is_some_and(|n| n < 0) {
                return Err(format!("`files[0].{k}` must be of type {want}"));
            }
        }
    }
    Ok((params, files[0].clone()))
}

async fn submit(
    State(state): State<Arc<Mutex<Inner>>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let parsed: Result<Value, _> = serde_json::from_slice(&body);
    let caller = match admit(
        &state,
        Call::new(
            "POST",
            "/jobs".into(),
            HashMap::new(),
            &headers,
            parsed.as_ref().ok().cloned(),
        ),
    ) {
        Ok(c) => c,
        Err(r) => return r.into_response(),
    };
    if let Some(m) = lock(&state).delegation_refusal(caller) {
        return error(
            StatusCode::from_u16(419).unwrap_or(StatusCode::UNAUTHORIZED),
            m,
        );
    }
    let Ok(body) = parsed else {
        return error(StatusCode::BAD_REQUEST, "Badly formatted JSON request");
    };
    let (params, file) = match check_submission(&body) {
        Ok(x) => x,
        Err(m) => return error(StatusCode::BAD_REQUEST, &m),
    };
    let int = |k: &str| params.get(k).and_then(Value::as_i64).unwrap_or(0);
    if caller == Caller::Token && int("archive_timeout") > 0 {
        return error(
            StatusCode::BAD_REQUEST,
            "Requests to archive to tape using token authentication are not supported",
        );
    }
    if caller == Caller::Token && int("bring_online") > 0 {
        return error(
            StatusCode::BAD_REQUEST,
            "Requests to retrieve from tape using token authentication are not supported",
        );
    }
    let mut s = lock(&state);
    let sid = params
        .get("sid")
        .and_then(Value::as_str)
        .map(str::to_string);
    let id = match params.get("id_generator").and_then(Value::as_str) {
        Some("deterministic") => match &sid {
            Some(sid) => job_id(&s.vos(caller)[0], sid),
            None => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "Need sid for deterministic job id generation",
                )
            }
        },
        None | Some("standard") => uuid::Uuid::new_v4().to_string(),
        Some(other) => {
            return error(
                StatusCode::BAD_REQUEST,
                &format!("unknown id_generator `{other}`"),
            )
        }
    };
    if s.duplicates {
        return error(
            StatusCode::CONFLICT,
            "The submission is duplicated (IntegrityError) Duplicate entry for key 'file_hash'",
        );
    }
    if s.jobs.contains_key(&id) {
        return error(
            StatusCode::CONFLICT,
            "The sid provided by the user is duplicated",
        );
    }
    let first = |list: &str| {
        file.get(list)
            .and_then(|l| l.get(0))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let job = Job {
        job_id: id.clone(),
        sid,
        priority: params
            .get("priority")
            .and_then(Value::as_i64)
            .unwrap_or(3)
            .clamp(1, 5),
        staging: int("bring_online") > 0 || int("copy_pin_lifetime") > 0,
        source: first("sources"),
        destination: first("destinations"),
        activity: file
            .get("activity")
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_lowercase(),
        retries: match params.get("retry").and_then(Value::as_i64).unwrap_or(0) {
            0 => SERVER_RETRY,
            n if n < 0 => 0,
            n => n,
        },
        bring_online: int("bring_online"),
        filesize: file.get("filesize").and_then(Value::as_u64).unwrap_or(0),
        job_metadata: params.get("job_metadata").cloned().unwrap_or(Value::Null),
        created: Instant::now(),
        cancelled_at: None,
    };
    s.jobs.insert(id.clone(), job);
    s.order.push(id.clone());
    Json(json!({"job_id": id})).into_response()
}

/// A job's state now: `(job_state, file_state, reason, recoverable)`; `recoverable` is `None`
/// (null) for a staging job's failure.
type Shown = (&'static str, &'static str, &'static str, Option<bool>);

fn state_of(job: &Job, plan: &Plan) -> Shown {
    let age = job.created.elapsed();
    let run = plan.queued + plan.active;
    let marked = |m: &str| job.source.contains(m) || job.destination.contains(m);
    // A recoverable failure is run again while FTS3 retries are left.
    let runs = if marked("/fail/") && !marked("/fatal/") {
        1 + job.retries.max(0) as u32
    } else {
        1
    };
    let done_at = run * runs;
    let in_run = if age < done_at {
        age.as_nanos() % run.as_nanos().max(1)
    } else {
        u128::MAX
    };
    let queued = if !job.staging {
        "SUBMITTED"
    } else if marked("/hold/") || in_run < plan.queued.as_nanos() / 2 {
        "STAGING"
    } else {
        // The bring-online request has been sent.
        "STARTED"
    };
    let recoverable = |r: bool| if job.staging { None } else { Some(r) };
    let natural: Shown = if marked("/hold/") || in_run < plan.queued.as_nanos() {
        (queued, queued, "", Some(true))
    } else if age < done_at {
        ("ACTIVE", "ACTIVE", "", Some(true))
    } else if marked("/fatal/") {
        (
            "FAILED",
            "FAILED",
            "SOURCE [2] No such file or directory",
            recoverable(false),
        )
    } else if marked("/fail/") {
        (
            "FAILED",
            "FAILED",
            "TRANSFER [110] Connection timed out",
            recoverable(true),
        )
    } else {
        ("FINISHED", "FINISHED", "", Some(true))
    };
    match job.cancelled_at {
        Some(at) if !is_terminal(natural.0) || at < job.created + done_at => (
            "CANCELED",
            "CANCELED",
            "Job canceled by the user",
            Some(true),
        ),
        _ => natural,
    }
}

fn is_terminal(state: &str) -> bool {
    matches!(state, "FINISHED" | "FAILED" | "FINISHEDDIRTY" | "CANCELED")
}

fn job_json(job: &Job, plan: &Plan, file_fields: Option<&str>, http_status: &str) -> Value {
    let (job_state, file_state, reason, recoverable) = state_of(job, plan);
    let mut out = json!({
        "job_id": job.job_id,
        "job_state": job_state,
        "priority": job.priority,
        "reason": reason,
        "retry": job.retries,
        "bring_online": job.bring_online,
        "job_metadata": job.job_metadata,
        "http_status": http_status,
    });
    if let Some(fields) = file_fields {
        let full = json!({
            "file_state": file_state,
            "filesize": if file_state == "FINISHED" { job.filesize } else { 0 },
            "user_filesize": job.filesize,
            "reason": reason,
            "recoverable": recoverable,
            "source_surl": job.source,
            "dest_surl": job.destination,
            "activity": job.activity,
        });
        let mut file = Map::new();
        for f in fields.split(',') {
            if let Some(v) = full.get(f) {
                file.insert(f.to_string(), v.clone());
            }
        }
        out["files"] = json!([file]);
    }
    out
}

/// One job per id, FTS3-style: a single object for one id (its error status as the answer's),
/// a list for several (207 if any failed).
fn per_job(
    state: &Mutex<Inner>,
    ids: &str,
    mut each: impl FnMut(&mut Job, &Plan) -> (Value, bool),
) -> Response {
    let mut s = lock(state);
    let plan = s.plan;
    let mut out = Vec::new();
    let mut failed = false;
    for id in ids.split(',').filter(|i| !i.is_empty()) {
        match s.jobs.get_mut(id) {
            Some(job) => out.push(each(job, &plan).0),
            None => {
                failed = true;
                out.push(json!({
                    "job_id": id,
                    "http_status": "404 Not Found",
                    "http_message": format!("No job with the id \"{id}\" has been found"),
                }))
            }
        }
    }
    if out.len() == 1 {
        let one = out.remove(0);
        if failed {
            return (StatusCode::NOT_FOUND, Json(one)).into_response();
        }
        return Json(one).into_response();
    }
    let status = if failed {
        StatusCode::MULTI_STATUS
    } else {
        StatusCode::OK
    };
    (status, Json(Value::Array(out))).into_response()
}

async fn get_jobs(
    State(state): State<Arc<Mutex<Inner>>>,
    Path(ids): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = admit(
        &state,
        Call::new("GET", format!("/jobs/{ids}"), query.clone(), &headers, None),
    ) {
        return r.into_response();
    }
    let fields = query.get("files").cloned();
    per_job(&state, &ids, |job, plan| {
        (job_json(job, plan, fields.as_deref(), "200 Ok"), true)
    })
}

async fn cancel(
    State(state): State<Arc<Mutex<Inner>>>,
    Path(ids): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = admit(
        &state,
        Call::new(
            "DELETE",
            format!("/jobs/{ids}"),
            HashMap::new(),
            &headers,
            None,
        ),
    ) {
        return r.into_response();
    }
    per_job(&state, &ids, |job, plan| {
        if is_terminal(state_of(job, plan).0) {
            (job_json(job, plan, None, "304 Not Modified"), false)
        } else {
            job.cancelled_at = Some(Instant::now());
            (job_json(job, plan, None, "200 Ok"), true)
        }
    })
}

async fn modify(
    State(state): State<Arc<Mutex<Inner>>>,
    Path(ids): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let parsed: Option<Value> = serde_json::from_slice(&body).ok();
    if let Err(r) = admit(
        &state,
        Call::new(
            "POST",
            format!("/jobs/{ids}"),
            HashMap::new(),
            &headers,
            parsed.clone(),
        ),
    ) {
        return r.into_response();
    }
    let priority = match parsed
        .as_ref()
        .and_then(|b| b.get("params"))
        .and_then(|p| p.get("priority"))
    {
        Some(p) => match p.as_i64() {
            Some(p) => Some(p),
            None => return error(StatusCode::BAD_REQUEST, "Invalid priority value"),
        },
        None => None,
    };
    per_job(&state, &ids, |job, plan| {
        if is_terminal(state_of(job, plan).0) {
            return (job_json(job, plan, None, "304 Not Modified"), false);
        }
        if let Some(p) = priority {
            job.priority = p;
        }
        (job_json(job, plan, None, "200 Ok"), true)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn submissions_are_checked_like_fts3_and_strictly_for_unknown_fields() {
        let ok = json!({"files": [{"sources": ["davs://a.example/x"], "destinations":
            ["davs://b.example/y"], "filesize": 5, "activity": "g"}], "params": {"priority": 3}});
        assert!(check_submission(&ok).is_ok());
        let bad = [
            (json!({"files": [], "params": {}}), "No transfers"),
            (json!({"delete": []}), "unknown top-level"),
            (
                json!({"files": [{"sources": ["/local/x"], "destinations": ["davs://b/y"]}]}),
                "Missing scheme",
            ),
            (
                json!({"files": [{"sources": ["file:///x"], "destinations": ["davs://b/y"]}]}),
                "local files",
            ),
            (
                json!({"files": [{"sources": ["davs://a/"], "destinations": ["davs://b/y"]}]}),
                "Missing path",
            ),
            (
                json!({"files": [{"sources": ["davs://a/x"]}]}),
                "destinations",
            ),
            (
                json!({"files": [{"sources": ["davs://a/x"], "destinations": ["davs://b/y"], "prority": 1}]}),
                "unknown field",
            ),
            (
                json!({"files": [{"sources": ["davs://a/x"], "destinations": ["davs://b/y"]}], "params": {"priority": "high"}}),
                "params.priority",
            ),
            (
                json!({"files": [{"sources": ["davs://a/x"], "destinations": ["davs://b/y"], "filesize": -1}]}),
                "filesize",
            ),
        ];
        for (body, want) in bad {
            let err = check_submission(&body).unwrap_err();
            assert!(err.contains(want), "{body}: {err}");
        }
    }
}

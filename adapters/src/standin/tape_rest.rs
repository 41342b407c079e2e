//! A stand-in WLCG Tape REST API endpoint for tests: `POST /stage`, `GET /stage/{id}`,
//! `POST /stage/{id}/cancel`, `DELETE /stage/{id}`, `POST /release/{id}`,
//! `POST /archiveinfo` and the discovery document `GET /.well-known/wlcg-tape-rest-api`,
//! answering as the API's v1 specification, dCache and EOS do.
//!
//! A stage submission must be `{"files": [...]}` and nothing else, each file with a `path`
//! (absolute) and optionally `diskLifetime` (an ISO 8601 duration) and `targetedMetadata` (an
//! object of objects); anything else is refused (400), as dCache refuses unrecognised payload
//! elements. More than `max_files_per_request` files is a 413 with dCache's message (dCache/dcache
//! `BulkService.checkTargetCount`, `BulkServiceCommunicator.checkError`). Paths are kept and
//! answered lexically normalised, as StoRM does. Cancel must name paths of the request.
//!
//! Files move on the wall clock: `SUBMITTED` for `plan.queued`, `STARTED` for `plan.active`,
//! then `COMPLETED` (on disk). A path containing `/hold/` stays `SUBMITTED` until cancelled,
//! `/fail/` fails with a drive error. In the EOS form ([`Form::Eos`]) a file is
//! `{path, onDisk, error?}` with no state and no start (cern-eos/eos `TapeJsonifiers.cc`,
//! `TapeRestApiBusiness.cc`: a cancelled file shows "File not requested with request ID").
//!
//! `POST /archiveinfo` answers `{path, locality}` or `{path, error}` as dCache's
//! `ArchiveInfoCollector` does: `/fatal/` has no such file (an error), `/lost/` is LOST,
//! `/none/` NONE, `/unavailable/` UNAVAILABLE, `/disk/` and anything staged DISK_AND_TAPE, the
//! rest TAPE. `DELETE /stage/{id}` clears a request (a later GET is 404); a release still works
//! afterwards, since dCache unpins by the request's id without looking the request up
//! (`ReleaseResources.java` answers 200 to any well-formed release).
//!
//! A created stage request is answered 201 with `{"requestId"}` and a `Location` header naming
//! it by an absolute URL, as each real server builds it (see `location`). Told to
//! ([`TapeRestStandin::set_bad_stage_answer`]), the stand-in still creates the request but
//! answers it badly ([`BadStageAnswer`]): what a proxy or a broken connection makes of it.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::{OriginalUri, Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use futures_util::stream::{self, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpListener;

use super::{Call, Desk, Plan};
use crate::tape_rest::normal_path;

/// How the stand-in answers a file's progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// dCache: `{path, state, error?, startedAt?, finishedAt?}`.
    Dcache,
    /// EOS-CTA: `{path, onDisk, error?}`, no state, never a start.
    Eos,
}

/// What the stand-in is like beyond its timing.
#[derive(Debug, Clone)]
pub struct TapeRestOptions {
    pub form: Form,
    /// dCache's `bulk.limits.max.targets-per-flat-request` (default 500).
    pub max_files_per_request: usize,
    /// The discovery document's `sitename`; `None`: no document (404).
    pub sitename: Option<String>,
}

impl Default for TapeRestOptions {
    fn default() -> Self {
        TapeRestOptions {
            form: Form::Dcache,
            max_files_per_request: 500,
            sitename: Some("standin-tape-site".into()),
        }
    }
}

/// How the stand-in answers a stage request it has created, instead of its own good answer
/// ([`TapeRestStandin::set_bad_stage_answer`]). The request is created all the same: the
/// answer, not the submission, is what goes wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadStageAnswer {
    /// 201 and the `Location` header, with a JSON body cut short (a proxy that mangles it).
    GarbledBody,
    /// 201 with the same body cut short and no `Location` header (a proxy that drops it).
    GarbledBodyNoLocation,
    /// 201 and the `Location` header, then the connection breaks off in the body.
    BodyCutOff,
    /// 201 and the `Location` header, with a whole JSON body whose `requestId` is empty.
    EmptyRequestId,
}

/// dCache's `archiveinfo maxpaths` default: paths past it are left out of the answer.
const ARCHIVEINFO_MAX_PATHS: usize = 10_000;

/// A stage request as the stand-in keeps it.
#[derive(Debug, Clone)]
pub struct StageRequest {
    pub id: String,
    /// The files as submitted (path, diskLifetime, targetedMetadata).
    pub files: Vec<Value>,
    pub cancelled: BTreeSet<String>,
    pub released: BTreeSet<String>,
    /// Cleared by `DELETE /stage/{id}`.
    pub deleted: bool,
    created: Instant,
    created_s: u64,
}

struct Inner {
    desk: Desk,
    plan: Plan,
    options: TapeRestOptions,
    /// The API's base, as the discovery document lists it.
    url: String,
    /// The port served on, for the absolute `Location` of a created request.
    port: u16,
    requests: HashMap<String, StageRequest>,
    order: Vec<String>,
    next: u64,
    bad_stage_answer: Option<BadStageAnswer>,
}

/// A running stand-in Tape REST endpoint; its API base is `url`.
pub struct TapeRestStandin {
    pub url: String,
    state: Arc<Mutex<Inner>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TapeRestStandin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TapeRestStandin {
    /// Serve on a free loopback port under `/api/v1/tape`. With `token`, every call needs it
    /// as a bearer token.
    pub async fn start(token: Option<&str>, plan: Plan) -> std::io::Result<TapeRestStandin> {
        Self::start_with(token, plan, TapeRestOptions::default()).await
    }

    /// The same, like a particular server (`options`).
    pub async fn start_with(
        token: Option<&str>,
        plan: Plan,
        options: TapeRestOptions,
    ) -> std::io::Result<TapeRestStandin> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let url = format!("http://{addr}/api/v1/tape");
        let state = Arc::new(Mutex::new(Inner {
            desk: Desk::new(token),
            plan,
            options,
            url: url.clone(),
            port: addr.port(),
            requests: HashMap::new(),
            order: Vec::new(),
            next: 1,
            bad_stage_answer: None,
        }));
        let api = Router::new()
            .route("/stage", post(stage))
            .route(
                "/stage/{id}",
                axum::routing::get(get_request).delete(delete_request),
            )
            .route("/stage/{id}/cancel", post(cancel))
            .route("/release/{id}", post(release))
            .route("/archiveinfo", post(archive_info))
            .with_state(state.clone());
        let app = Router::new()
            .route(
                "/.well-known/wlcg-tape-rest-api",
                axum::routing::get(well_known),
            )
            .with_state(state.clone())
            .nest("/api/v1/tape", api);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(TapeRestStandin { url, state, task })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        lock(&self.state)
    }

    pub fn calls(&self) -> Vec<Call> {
        self.lock().desk.calls.clone()
    }

    /// Every stage request created, in order.
    pub fn requests(&self) -> Vec<StageRequest> {
        let s = self.lock();
        s.order
            .iter()
            .filter_map(|id| s.requests.get(id).cloned())
            .collect()
    }

    pub fn set_down(&self, down: bool) {
        self.lock().desk.down = down;
    }

    /// Answer every stage request created from now on badly (`Some`), or well again (`None`).
    pub fn set_bad_stage_answer(&self, bad: Option<BadStageAnswer>) {
        self.lock().bad_stage_answer = bad;
    }
}

fn lock(state: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// A refusal: its status and message, made into the server's error body when answered.
struct Refusal(StatusCode, String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        error(self.0, &self.1)
    }
}

fn error(status: StatusCode, detail: &str) -> Response {
    (
        status,
        Json(
            json!({"title": status.canonical_reason().unwrap_or(""), "status": status.as_u16(),
                    "detail": detail}),
        ),
    )
        .into_response()
}

/// Record the call, then check the service is up and the caller authenticated.
fn admit(
    state: &Mutex<Inner>,
    method: &str,
    path: String,
    headers: &HeaderMap,
    body: Option<Value>,
) -> Result<(), Refusal> {
    let call = Call::new(method, path, HashMap::new(), headers, body);
    lock(state)
        .desk
        .admit(call)
        .map(|_| ())
        .map_err(|(s, m)| Refusal(s, m))
}

/// Check a stage submission against the specification; the files or the 400's detail.
fn check_stage(body: &Value) -> Result<Vec<Value>, String> {
    let top = body.as_object().ok_or("the payload is not a JSON object")?;
    let extra: Vec<&String> = top.keys().filter(|k| *k != "files").collect();
    if !extra.is_empty() {
        return Err(format!("unrecognized payload element(s): {extra:?}"));
    }
    let files = top
        .get("files")
        .and_then(Value::as_array)
        .filter(|f| !f.is_empty())
        .ok_or("request contains no files.")?;
    for (i, f) in files.iter().enumerate() {
        let f = f
            .as_object()
            .ok_or(format!("files[{i}] is not an object"))?;
        for k in f.keys() {
            if !matches!(k.as_str(), "path" | "diskLifetime" | "targetedMetadata") {
                return Err(format!("files[{i}]: unknown field `{k}`"));
            }
        }
        let path = f.get("path").and_then(Value::as_str).unwrap_or("");
        if !path.starts_with('/') {
            return Err(format!("files[{i}].path must be an absolute path"));
        }
        if let Some(l) = f.get("diskLifetime") {
            if !l
                .as_str()
                .is_some_and(|s| s.starts_with('P') && s.len() > 1)
            {
                return Err(format!(
                    "files[{i}].diskLifetime must be an ISO 8601 duration"
                ));
            }
        }
        if let Some(m) = f.get("targetedMetadata") {
            let ok = m
                .as_object()
                .is_some_and(|o| o.values().all(Value::is_object));
            if !ok {
                return Err(format!(
                    "files[{i}].targetedMetadata must map endpoint ids to objects"
                ));
            }
        }
    }
    Ok(files.clone())
}

async fn stage(
    State(state): State<Arc<Mutex<Inner>>>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let parsed: Result<Value, _> = serde_json::from_slice(&body);
    if let Err(r) = admit(
        &state,
        "POST",
        "/stage".into(),
        &headers,
        parsed.as_ref().ok().cloned(),
    ) {
        return r.into_response();
    }
    let files = match parsed
        .map_err(|e| e.to_string())
        .and_then(|b| check_stage(&b))
    {
        Ok(f) => f,
        Err(m) => return error(StatusCode::BAD_REQUEST, &m),
    };
    let mut s = lock(&state);
    let max = s.options.max_files_per_request;
    if files.len() > max {
        // dCache/dcache BulkService.TARGET_COUNT_ERROR_FORMAT, answered 413.
        let detail = format!(
            "The number of targets {} exceeds maximum {max} for directory expansion NONE.",
            files.len()
        );
        return error(StatusCode::PAYLOAD_TOO_LARGE, &detail);
    }
    // Kept normalised, as StoRM keeps them (`lexically_normal()`).
    let files: Vec<Value> = files
        .into_iter()
        .map(|mut f| {
            let path = f["path"].as_str().map(normal_path).unwrap_or_default();
            f["path"] = json!(path);
            f
        })
        .collect();
    let id = format!("stage-{:04}", s.next);
    s.next += 1;
    s.requests.insert(
        id.clone(),
        StageRequest {
            id: id.clone(),
            files,
            cancelled: BTreeSet::new(),
            released: BTreeSet::new(),
            deleted: false,
            created: Instant::now(),
            created_s: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        },
    );
    s.order.push(id.clone());
    let location = location(&s, &headers, uri.path(), &id);
    let body = json!({"requestId": id}).to_string();
    let json_type = (header::CONTENT_TYPE, "application/json");
    match s.bad_stage_answer {
        None => (
            StatusCode::CREATED,
            [json_type, (header::LOCATION, location.as_str())],
            body,
        )
            .into_response(),
        Some(BadStageAnswer::GarbledBody) => (
            StatusCode::CREATED,
            [json_type, (header::LOCATION, location.as_str())],
            garbled(&body),
        )
            .into_response(),
        Some(BadStageAnswer::EmptyRequestId) => (
            StatusCode::CREATED,
            [json_type, (header::LOCATION, location.as_str())],
            json!({"requestId": ""}).to_string(),
        )
            .into_response(),
        Some(BadStageAnswer::GarbledBodyNoLocation) => {
            (StatusCode::CREATED, [json_type], garbled(&body)).into_response()
        }
        Some(BadStageAnswer::BodyCutOff) => {
            let start = Bytes::from(garbled(&body));
            let broken = std::io::Error::other("the stand-in breaks off the answer");
            // A pause first, so that the status, headers and first bytes go out (hyper
            // sends nothing of an answer whose body fails at once).
            let broken_off = stream::once(async move {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                Err(broken)
            });
            let chunks = stream::iter([Ok(start)]).chain(broken_off);
            (
                StatusCode::CREATED,
                [json_type, (header::LOCATION, location.as_str())],
                Body::from_stream(chunks),
            )
                .into_response()
        }
    }
}

/// The first half of `body`: JSON cut short.
fn garbled(body: &str) -> String {
    body[..body.len() / 2].to_string()
}

/// The `Location` of created request `id`: an absolute URL, as the real servers build it, that
/// need not be under the URL the client uses (another scheme, host or route):
/// - dCache: the URL the client posted to, as the servlet sees it (scheme, `Host` header, path,
///   no query), `/`, the request's UUID (dCache/dcache
///   `modules/dcache-frontend/.../restful/resources/tape/StageResources.java` `submit`:
///   `setUrlPrefix(request.getRequestURL())`, `.header("location", message.getRequestUrl())`;
///   `modules/dcache-bulk/.../bulk/BulkService.java`: `getUrlPrefix() + "/" + getUid()`).
/// - EOS: always `https://`, the MGM's alias and XrdHttp port, the fixed route
///   `/api/v1/stage/` and the id, whatever URL the client used (cern-eos/eos
///   `mgm/http/rest-api/action/tape/stage/CreateStageBulkRequest.cc` `generateAccessURL`,
///   `handler/tape/TapeRestHandler.cc` `getAccessURLBuilder`, `initializeStageRoutes`).
fn location(s: &Inner, headers: &HeaderMap, path: &str, id: &str) -> String {
    match s.options.form {
        Form::Dcache => {
            let host = headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_string)
                .unwrap_or_else(|| format!("127.0.0.1:{}", s.port));
            format!("http://{host}{path}/{id}")
        }
        Form::Eos => format!("https://localhost:{}/api/v1/stage/{id}", s.port),
    }
}

/// A file's state now, and its error.
fn file_state(r: &StageRequest, path: &str, plan: &Plan) -> (&'static str, Option<&'static str>) {
    if r.cancelled.contains(path) {
        return ("CANCELLED", None);
    }
    let age = r.created.elapsed();
    if path.contains("/hold/") || age < plan.queued {
        ("SUBMITTED", None)
    } else if age < plan.queued + plan.active {
        ("STARTED", None)
    } else if path.contains("/fatal/") {
        ("FAILED", Some("No such file or directory"))
    } else if path.contains("/fail/") {
        ("FAILED", Some("tape drive error: medium error"))
    } else {
        ("COMPLETED", None)
    }
}

fn paths_of(r: &StageRequest) -> Vec<String> {
    r.files
        .iter()
        .filter_map(|f| f.get("path").and_then(Value::as_str).map(str::to_string))
        .collect()
}

/// A file as the configured form answers it.
fn file_json(r: &StageRequest, path: &str, plan: &Plan, form: Form) -> Value {
    let (state, err) = file_state(r, path, plan);
    match form {
        Form::Dcache => {
            let mut f = json!({"path": path, "state": state});
            if let Some(e) = err {
                f["error"] = json!(e);
            }
            f
        }
        Form::Eos => {
            let mut f = json!({"path": path, "onDisk": state == "COMPLETED"});
            if let Some(e) = err {
                f["error"] = json!(e);
            } else if state == "CANCELLED" {
                f["error"] = json!(format!("File not requested with request ID {}", r.id));
            }
            f
        }
    }
}

async fn get_request(
    State(state): State<Arc<Mutex<Inner>>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = admit(&state, "GET", format!("/stage/{id}"), &headers, None) {
        return r.into_response();
    }
    let s = lock(&state);
    let Some(r) = s.requests.get(&id).filter(|r| !r.deleted) else {
        return error(StatusCode::NOT_FOUND, &format!("{id} not found"));
    };
    let files: Vec<Value> = paths_of(r)
        .into_iter()
        .map(|p| file_json(r, &p, &s.plan, s.options.form))
        .collect();
    Json(json!({"id": r.id, "createdAt": r.created_s, "startedAt": r.created_s, "files": files}))
        .into_response()
}

/// dCache's `clearRequest`: cancel what still runs, then clear; 404 once cleared.
async fn delete_request(
    State(state): State<Arc<Mutex<Inner>>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = admit(&state, "DELETE", format!("/stage/{id}"), &headers, None) {
        return r.into_response();
    }
    let mut s = lock(&state);
    let plan = s.plan;
    match s.requests.get_mut(&id).filter(|r| !r.deleted) {
        Some(r) => {
            for p in paths_of(r) {
                if !matches!(file_state(r, &p, &plan).0, "COMPLETED" | "FAILED") {
                    r.cancelled.insert(p);
                }
            }
            r.deleted = true;
            StatusCode::OK.into_response()
        }
        None => error(StatusCode::NOT_FOUND, &format!("{id} not found")),
    }
}

/// The `paths` of a cancel or release body, all belonging to request `id`.
fn request_paths(s: &Inner, id: &str, body: &Option<Value>) -> Result<Vec<String>, Refusal> {
    let Some(r) = s.requests.get(id).filter(|r| !r.deleted) else {
        return Err(Refusal(StatusCode::NOT_FOUND, format!("{id} not found")));
    };
    let paths = body_paths(body);
    if paths.is_empty() {
        return Err(Refusal(
            StatusCode::BAD_REQUEST,
            "request contains no paths.".into(),
        ));
    }
    let mine = paths_of(r);
    if let Some(p) = paths.iter().find(|p| !mine.contains(p)) {
        return Err(Refusal(
            StatusCode::BAD_REQUEST,
            format!("File missing from stage request: {p}"),
        ));
    }
    Ok(paths)
}

/// The `paths` of a body, normalised.
fn body_paths(body: &Option<Value>) -> Vec<String> {
    body.as_ref()
        .and_then(|b| b.get("paths"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(normal_path)
                .collect()
        })
        .unwrap_or_default()
}

/// `POST {what}` of request `id` with `{"paths": [...]}`, all of the request: `apply` them.
async fn on_paths(
    state: &Mutex<Inner>,
    what: String,
    id: &str,
    headers: &HeaderMap,
    body: &[u8],
    apply: impl FnOnce(&mut StageRequest, Vec<String>, &Plan),
) -> Response {
    let body: Option<Value> = serde_json::from_slice(body).ok();
    if let Err(r) = admit(state, "POST", what, headers, body.clone()) {
        return r.into_response();
    }
    let mut s = lock(state);
    let paths = match request_paths(&s, id, &body) {
        Ok(p) => p,
        Err(r) => return r.into_response(),
    };
    let plan = s.plan;
    if let Some(r) = s.requests.get_mut(id) {
        apply(r, paths, &plan);
    }
    StatusCode::OK.into_response()
}

async fn cancel(
    State(state): State<Arc<Mutex<Inner>>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let what = format!("/stage/{id}/cancel");
    on_paths(&state, what, &id, &headers, &body, |r, paths, plan| {
        for p in paths {
            if !matches!(file_state(r, &p, plan).0, "COMPLETED" | "FAILED") {
                r.cancelled.insert(p);
            }
        }
    })
    .await
}

async fn release(
    State(state): State<Arc<Mutex<Inner>>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let what = format!("/release/{id}");
    let parsed: Option<Value> = serde_json::from_slice(&body).ok();
    let cleared = lock(&state).requests.get(&id).is_some_and(|r| r.deleted);
    if cleared {
        // dCache unpins by the stage request's id; the cleared request is not looked up.
        if let Err(r) = admit(&state, "POST", what, &headers, parsed.clone()) {
            return r.into_response();
        }
        let paths = body_paths(&parsed);
        if let Some(r) = lock(&state).requests.get_mut(&id) {
            r.released.extend(paths);
        }
        return StatusCode::OK.into_response();
    }
    on_paths(&state, what, &id, &headers, &body, |r, paths, _| {
        r.released.extend(paths)
    })
    .await
}

async fn archive_info(
    State(state): State<Arc<Mutex<Inner>>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let body: Option<Value> = serde_json::from_slice(&body).ok();
    if let Err(r) = admit(
        &state,
        "POST",
        "/archiveinfo".into(),
        &headers,
        body.clone(),
    ) {
        return r.into_response();
    }
    let s = lock(&state);
    let info: Vec<Value> = body_paths(&body)
        .iter()
        .take(ARCHIVEINFO_MAX_PATHS)
        .map(|p| locality(&s, p))
        .collect();
    Json(Value::Array(info)).into_response()
}

/// One path's archive info, as dCache's `ArchiveInfoCollector` answers it.
fn locality(s: &Inner, path: &str) -> Value {
    if path.contains("/fatal/") {
        // dCache's ChimeraNameSpaceProvider: FileNotFoundCacheException's message.
        return json!({"path": path, "error": format!("No such file or directory: {path}")});
    }
    let staged = s.order.iter().filter_map(|id| s.requests.get(id)).any(|r| {
        paths_of(r).iter().any(|p| p == path) && file_state(r, path, &s.plan).0 == "COMPLETED"
    });
    let locality = if path.contains("/lost/") {
        "LOST"
    } else if path.contains("/none/") {
        "NONE"
    } else if path.contains("/unavailable/") {
        "UNAVAILABLE"
    } else if path.contains("/disk/") || staged {
        "DISK_AND_TAPE"
    } else {
        "TAPE"
    };
    json!({"path": path, "locality": locality})
}

/// The discovery document, as dCache serves `wlcg-tape-rest-api.json`; 404 without a sitename.
async fn well_known(State(state): State<Arc<Mutex<Inner>>>, headers: HeaderMap) -> Response {
    let call = Call::new(
        "GET",
        "/.well-known/wlcg-tape-rest-api".into(),
        HashMap::new(),
        &headers,
        None,
    );
    let mut s = lock(&state);
    s.desk.calls.push(call);
    match &s.options.sitename {
        Some(site) => Json(json!({
            "sitename": site,
            "description": "stand-in WLCG Tape REST API endpoint",
            "endpoints": [{"uri": s.url, "version": "v1", "metadata": {}}]
        }))
        .into_response(),
        None => error(StatusCode::NOT_FOUND, "no discovery document"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_payloads_are_checked_like_the_specification() {
        assert!(
            check_stage(&json!({"files": [{"path": "/a", "diskLifetime": "P1D",
            "targetedMetadata": {"dcache": {"activity": "x"}}}]}))
            .is_ok()
        );
        for (body, want) in [
            (json!({"files": []}), "no files"),
            (
                json!({"files": [{"path": "/a"}], "priority": 3}),
                "unrecognized",
            ),
            (json!({"files": [{"path": "a"}]}), "absolute"),
            (
                json!({"files": [{"path": "/a", "lifetime": "P1D"}]}),
                "unknown field",
            ),
            (
                json!({"files": [{"path": "/a", "diskLifetime": "1 day"}]}),
                "ISO 8601",
            ),
            (
                json!({"files": [{"path": "/a", "targetedMetadata": {"x": 1}}]}),
                "targetedMetadata",
            ),
        ] {
            let err = check_stage(&body).unwrap_err();
            assert!(err.contains(want), "{body}: {err}");
        }
    }
}

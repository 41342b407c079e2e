//! A stand-in WLCG Tape REST API endpoint for tests: `POST /stage`, `GET /stage/{id}`,
//! `POST /stage/{id}/cancel`, `DELETE /stage/{id}`, `POST /release/{id}` and
//! `POST /archiveinfo`, answering as the API's v1 specification (and dCache) do.
//!
//! A stage submission must be `{"files": [...]}` and nothing else, each file with a `path`
//! (absolute) and optionally `diskLifetime` (an ISO 8601 duration) and `targetedMetadata` (an
//! object of objects); anything else is refused (400), as dCache refuses unrecognised payload
//! elements. Cancel and release must name paths of the request.
//!
//! Files move on the wall clock: `SUBMITTED` for `plan.queued`, `STARTED` for `plan.active`,
//! then `COMPLETED` (on disk). A path containing `/hold/` stays `SUBMITTED` until cancelled,
//! `/fail/` fails with a drive error, `/fatal/` fails with "No such file or directory".

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::net::TcpListener;

use super::{Call, Desk, Plan};

/// A stage request as the stand-in keeps it.
#[derive(Debug, Clone)]
pub struct StageRequest {
    pub id: String,
    /// The files as submitted (path, diskLifetime, targetedMetadata).
    pub files: Vec<Value>,
    pub cancelled: BTreeSet<String>,
    pub released: BTreeSet<String>,
    created: Instant,
    created_s: u64,
}

struct Inner {
    desk: Desk,
    plan: Plan,
    requests: HashMap<String, StageRequest>,
    order: Vec<String>,
    next: u64,
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
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/api/v1/tape", listener.local_addr()?);
        let state = Arc::new(Mutex::new(Inner {
            desk: Desk::new(token),
            plan,
            requests: HashMap::new(),
            order: Vec::new(),
            next: 1,
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
        let app = Router::new().nest("/api/v1/tape", api);
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
    let id = format!("stage-{:04}", s.next);
    s.next += 1;
    s.requests.insert(
        id.clone(),
        StageRequest {
            id: id.clone(),
            files,
            cancelled: BTreeSet::new(),
            released: BTreeSet::new(),
            created: Instant::now(),
            created_s: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        },
    );
    s.order.push(id.clone());
    (
        StatusCode::CREATED,
        [("location", format!("/api/v1/tape/stage/{id}"))],
        Json(json!({"requestId": id})),
    )
        .into_response()
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

async fn get_request(
    State(state): State<Arc<Mutex<Inner>>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = admit(&state, "GET", format!("/stage/{id}"), &headers, None) {
        return r.into_response();
    }
    let s = lock(&state);
    let Some(r) = s.requests.get(&id) else {
        return error(StatusCode::NOT_FOUND, &format!("{id} not found"));
    };
    let files: Vec<Value> = paths_of(r)
        .into_iter()
        .map(|p| {
            let (st, err) = file_state(r, &p, &s.plan);
            let mut f = json!({"path": p, "state": st});
            if let Some(e) = err {
                f["error"] = json!(e);
            }
            f
        })
        .collect();
    Json(json!({"id": r.id, "createdAt": r.created_s, "startedAt": r.created_s, "files": files}))
        .into_response()
}

async fn delete_request(
    State(state): State<Arc<Mutex<Inner>>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = admit(&state, "DELETE", format!("/stage/{id}"), &headers, None) {
        return r.into_response();
    }
    let mut s = lock(&state);
    match s.requests.remove(&id) {
        Some(_) => StatusCode::OK.into_response(),
        None => error(StatusCode::NOT_FOUND, &format!("{id} not found")),
    }
}

/// The `paths` of a cancel or release body, all belonging to request `id`.
fn request_paths(s: &Inner, id: &str, body: &Option<Value>) -> Result<Vec<String>, Refusal> {
    let Some(r) = s.requests.get(id) else {
        return Err(Refusal(StatusCode::NOT_FOUND, format!("{id} not found")));
    };
    let paths: Vec<String> = body
        .as_ref()
        .and_then(|b| b.get("paths"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|p| p.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
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
    let paths: Vec<Value> = body
        .as_ref()
        .and_then(|b| b.get("paths"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let info: Vec<Value> = paths
        .iter()
        .map(|p| json!({"path": p, "locality": "TAPE"}))
        .collect();
    Json(Value::Array(info)).into_response()
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

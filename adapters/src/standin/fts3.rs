//! A stand-in FTS3 REST server for tests: `POST /jobs`, `GET /jobs/{ids}`, `POST /jobs/{id}`
//! (modify), `DELETE /jobs/{id}` (cancel), `GET /jobs/{id}/files` and
//! `DELETE /jobs/{id}/files/{file_ids}` (cancel some files of a job), with the answers FTS3
//! gives (fts-rest-flask `controllers/jobs.py`).
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
//! sid is 409 "The sid provided by the user is duplicated", for the VOs of `CheckDuplicates`
//! ([`Fts3Standin::set_check_duplicates`]) a file to a destination that a file not ended yet
//! holds (its `dest_surl_uuid`, cleared when it ends: cern-fts/fts3 `src/db/mysql/MySqlAPI.cpp`)
//! is 409 "The submission is duplicated" naming that uuid, tape staging or archiving with a
//! bearer token is 400, a certificate caller whose delegated proxy is missing or has under an
//! hour left is 419 (`controllers/jobs.py`; [`Fts3Standin::set_delegation`] switches it, as
//! `fts-delegation-init` would renew it), and an unknown job is 404. `retry` 0 or absent means
//! the server's default ([`SERVER_RETRY`]), below 0 none (cern-fts/fts3
//! `src/db/mysql/Config.cpp` `getRetry`); `activity` is lower-cased ("default" when absent).
//!
//! A job holds one file or many (`file_index` their place in the submission, `file_id` FTS3's
//! own number for each); a poll with `?files=...` lists the fields asked for of every file, in
//! FTS3's order, which need not be the submission's. Cancelling one file of a session-reuse job
//! (`job_type` `Y`, which FTS3's `AutoSessionReuse` makes of 5 to 1000 small files between one
//! pair of storage elements; [`Fts3Standin::set_auto_session_reuse`]) is 400, as FTS3 refuses
//! it. The job's state follows its files (`FINISHEDDIRTY` for a mix).
//!
//! Jobs move on the wall clock: queued (`SUBMITTED`; for a staging job `STAGING` then, once the
//! bring-online request is sent, `STARTED`) for `plan.queued`, `ACTIVE` for `plan.active`, then
//! `FINISHED` with the declared size. A source or destination path containing `/hold/` stays
//! queued until cancelled or let go ([`Fts3Standin::release_held`]), `/fail/` fails (recoverable: run again while FTS3 retries are left),
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
use serde_json::{json, Value};
use tokio::net::TcpListener;

use super::{Call, Caller, Desk, Plan};
use crate::fts3::{dest_surl_uuid, job_id, vo_id};
use jobs::check_submission;
pub use jobs::{Job, JobFile};

mod jobs;

/// The DN of the stand-in's one caller.
const STANDIN_DN: &str = "/DC=org/CN=standin";

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

struct Inner {
    /// The gridmap VO of a certificate without VOMS extensions, and of tokens.
    vo: String,
    /// The certificate's VOMS FQANs (`/cms/uscms/Role=production`), if any.
    fqans: Vec<String>,
    /// The `wlcg.groups` of bearer tokens, by token: their VOs when set.
    token_groups: HashMap<String, Vec<String>>,
    delegation: Delegation,
    /// FTS3's `CheckDuplicates`: the VOs (`*` for all) whose files hold their destination
    /// (`dest_surl_uuid`) until they end.
    check_duplicates: Vec<String>,
    desk: Desk,
    plan: Plan,
    jobs: HashMap<String, Job>,
    /// Job ids in submission order.
    order: Vec<String>,
    /// The last file id given.
    next_file_id: u64,
    /// FTS3's `AutoSessionReuse`.
    auto_session_reuse: bool,
    /// List a job's files last first.
    reversed: bool,
    /// Answer `GET /jobs` (the listing) with a 500.
    listing_fails: bool,
    /// Submissions still to lose the answer of (created, then answered by a proxy's 502).
    lose_answers: usize,
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
            token_groups: HashMap::new(),
            delegation: Delegation::Valid,
            check_duplicates: Vec::new(),
            desk: Desk::new(token),
            plan,
            jobs: HashMap::new(),
            order: Vec::new(),
            next_file_id: 41_000,
            auto_session_reuse: false,
            lose_answers: 0,
            reversed: false,
            listing_fails: false,
        }));
        let app = Router::new()
            .route("/jobs", post(submit).get(list_jobs))
            .route("/whoami", axum::routing::get(whoami))
            .route(
                "/jobs/{ids}",
                axum::routing::get(get_jobs).post(modify).delete(cancel),
            )
            .route("/jobs/{id}/files", axum::routing::get(get_files))
            .route(
                "/jobs/{id}/files/{file_ids}",
                axum::routing::delete(cancel_files),
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
        s.jobs.get(job_id).map(|j| j.state(&s.plan).to_string())
    }

    /// The state each file of a job shows now, in submission order.
    pub fn file_states(&self, job_id: &str) -> Vec<String> {
        let s = self.lock();
        let Some(job) = s.jobs.get(job_id) else {
            return Vec::new();
        };
        let state = |f: &JobFile| f.state(job, &s.plan).0.to_string();
        job.files.iter().map(state).collect()
    }

    /// Answer every call with 503 (an FTS3 outage) or serve again.
    pub fn set_down(&self, down: bool) {
        self.lock().desk.down = down;
    }

    /// The VOMS FQANs the client certificate carries: FTS3 derives the VOs from them.
    pub fn set_fqans(&self, fqans: &[&str]) {
        self.lock().fqans = fqans.iter().map(|f| f.to_string()).collect();
    }

    /// The `wlcg.groups` claim of a bearer token: FTS3 takes a token's VOs from it, in order,
    /// when neither its gridmap nor its provider's configuration names one (fts-rest-flask
    /// `lib/middleware/fts3auth/methods/oauth2.py` `_build_vo_from_token_auth`); a token
    /// without gets the stand-in's VO. A token renewed with other groups (or their order)
    /// changes `vos[0]`, and with it the namespace of new job ids.
    pub fn set_token_groups(&self, token: &str, groups: &[&str]) {
        let groups = groups.iter().map(|g| g.to_string()).collect();
        self.lock().token_groups.insert(token.to_string(), groups);
    }

    /// The state of the delegated proxy (renewed: `Delegation::Valid`).
    pub fn set_delegation(&self, delegation: Delegation) {
        self.lock().delegation = delegation;
    }

    /// FTS3's `CheckDuplicates` (fts-rest-flask `JobBuilder_utils.is_dest_surl_uuid_enabled`):
    /// the VOs (`"*"` for all) whose submissions give each file a `dest_surl_uuid`, so that a
    /// file to a destination a file not ended yet holds is refused, 409 "The submission is
    /// duplicated", until that file ends. For the jobs submitted from now.
    pub fn set_check_duplicates(&self, vos: &[&str]) {
        self.lock().check_duplicates = vos.iter().map(|v| v.to_string()).collect();
    }

    /// Let the `/hold/` files of a job go: they run from now, as any other file.
    pub fn release_held(&self, job_id: &str) {
        if let Some(job) = self.lock().jobs.get_mut(job_id) {
            job.files.iter_mut().for_each(JobFile::release);
        }
    }

    /// Turn FTS3's `AutoSessionReuse` on or off for the jobs submitted from now.
    pub fn set_auto_session_reuse(&self, on: bool) {
        self.lock().auto_session_reuse = on;
    }

    /// Answer the job listing (`GET /jobs`) with a 500, or serve it again.
    pub fn set_listing_fails(&self, on: bool) {
        self.lock().listing_fails = on;
    }

    /// List each job's files last first, as FTS3 may (its database's order).
    pub fn set_files_reversed(&self, on: bool) {
        self.lock().reversed = on;
    }

    /// Create the next `n` jobs submitted, then lose their answers: a proxy in front of FTS3
    /// answers 502 with its own page, as when it timed out waiting for FTS3.
    pub fn lose_next_answers(&self, n: usize) {
        self.lock().lose_answers = n;
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
    /// once, else the gridmap VO; for a token its groups (without the leading `/`, once each)
    /// if set, else the configured VO.
    fn vos(&self, caller: Caller, headers: &HeaderMap) -> Vec<String> {
        let mut vos: Vec<String> = Vec::new();
        if caller == Caller::Certificate {
            for vo in self.fqans.iter().map(|f| vo_from_fqan(f)) {
                if !vo.is_empty() && !vos.contains(&vo) {
                    vos.push(vo);
                }
            }
        }
        let token = (headers.get("authorization").and_then(|v| v.to_str().ok()))
            .and_then(|a| a.strip_prefix("Bearer "))
            .filter(|_| caller == Caller::Token);
        for group in token
            .and_then(|t| self.token_groups.get(t))
            .into_iter()
            .flatten()
        {
            let vo = group.strip_prefix('/').unwrap_or(group).to_string();
            if !vo.is_empty() && !vos.contains(&vo) {
                vos.push(vo);
            }
        }
        if vos.is_empty() {
            vos.push(self.vo.clone());
        }
        vos
    }

    /// Whether FTS3's `CheckDuplicates` names this VO (or `*`).
    fn checks_duplicates(&self, vo: &str) -> bool {
        (self.check_duplicates.iter()).any(|v| v == vo || v == "*")
    }

    /// The `dest_surl_uuid` of a file of `job` that another of its files, or a file of another
    /// job not ended yet, holds: the unique key FTS3's insertion of the files breaks.
    fn destination_clash(&self, job: &Job) -> Option<uuid::Uuid> {
        let mut seen = std::collections::HashSet::new();
        for uuid in job.files.iter().filter_map(|f| f.dest_surl_uuid) {
            let held = (self.jobs.values())
                .any(|j| (j.files.iter()).any(|f| f.holds_destination(&uuid, j, &self.plan)));
            if held || !seen.insert(uuid) {
                return Some(uuid);
            }
        }
        None
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
    let vos = s.vos(caller, &headers);
    let vos_id: Vec<String> = vos.iter().map(|v| vo_id(v).to_string()).collect();
    let method = if caller == Caller::Token {
        "oauth2"
    } else {
        "certificate"
    };
    Json(json!({
        "dn": [STANDIN_DN],
        "user_dn": STANDIN_DN,
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

/// The job id a submission gets: derived from its `sid`, or random.
fn new_job_id(params: &serde_json::Map<String, Value>, vo: &str) -> Result<String, Refusal> {
    let bad = |m: String| Refusal(StatusCode::BAD_REQUEST, m);
    match params.get("id_generator").and_then(Value::as_str) {
        Some("deterministic") => match params.get("sid").and_then(Value::as_str) {
            Some(sid) => Ok(job_id(vo, sid)),
            None => Err(bad("Need sid for deterministic job id generation".into())),
        },
        None | Some("standard") => Ok(uuid::Uuid::new_v4().to_string()),
        Some(other) => Err(bad(format!("unknown id_generator `{other}`"))),
    }
}

/// FTS3 refuses tape operations to a token caller.
fn token_refusal(caller: Caller, params: &serde_json::Map<String, Value>) -> Option<Response> {
    let int = |k: &str| params.get(k).and_then(Value::as_i64).unwrap_or(0);
    if caller != Caller::Token {
        return None;
    }
    if int("archive_timeout") > 0 {
        return Some(error(
            StatusCode::BAD_REQUEST,
            "Requests to archive to tape using token authentication are not supported",
        ));
    }
    if int("bring_online") > 0 {
        return Some(error(
            StatusCode::BAD_REQUEST,
            "Requests to retrieve from tape using token authentication are not supported",
        ));
    }
    None
}

async fn submit(
    State(state): State<Arc<Mutex<Inner>>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let parsed: Result<Value, _> = serde_json::from_slice(&body);
    let call = Call::new(
        "POST",
        "/jobs".into(),
        HashMap::new(),
        &headers,
        parsed.as_ref().ok().cloned(),
    );
    let caller = match admit(&state, call) {
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
    let (params, files) = match check_submission(&body) {
        Ok(x) => x,
        Err(m) => return error(StatusCode::BAD_REQUEST, &m),
    };
    if let Some(r) = token_refusal(caller, &params) {
        return r;
    }
    let mut s = lock(&state);
    let vo = s.vos(caller, &headers)[0].clone();
    let id = match new_job_id(&params, &vo) {
        Ok(id) => id,
        Err(r) => return r.into_response(),
    };
    // The job's row goes in first (a sid again: 409), then its files' (a destination held:
    // 409), in one transaction rolled back on either (fts-rest-flask `controllers/jobs.py`
    // `submit`).
    if s.jobs.contains_key(&id) {
        return error(
            StatusCode::CONFLICT,
            "The sid provided by the user is duplicated",
        );
    }
    let reuse = s.auto_session_reuse;
    let mut next_file_id = s.next_file_id;
    let mut job = Job::new(id.clone(), &params, &files, &mut next_file_id, reuse);
    job.vo_name = vo.clone();
    if s.checks_duplicates(&vo) {
        for f in job.files.iter_mut() {
            f.dest_surl_uuid = Some(dest_surl_uuid(&f.destination));
        }
        if let Some(clash) = s.destination_clash(&job) {
            // MySQL's unique key `dest_surl_uuid` on `t_file`, as SQLAlchemy words it.
            let m = format!(
                "The submission is duplicated (MySQLdb.IntegrityError) (1062, \"Duplicate entry \
                 '{clash}' for key 't_file.dest_surl_uuid'\")\n[SQL: INSERT INTO t_file (...)]"
            );
            return error(StatusCode::CONFLICT, &m);
        }
    }
    s.next_file_id = next_file_id;
    s.jobs.insert(id.clone(), job);
    s.order.push(id.clone());
    if s.lose_answers > 0 {
        s.lose_answers -= 1;
        let page = "<html><body><h1>502 Bad Gateway</h1></body></html>";
        return (StatusCode::BAD_GATEWAY, page).into_response();
    }
    Json(json!({"job_id": id})).into_response()
}

/// One job per id, FTS3-style: a single object for one id (its error status as the answer's),
/// a list for several (207 if any failed).
fn per_job(
    state: &Mutex<Inner>,
    ids: &str,
    mut each: impl FnMut(&mut Job, &Plan) -> Value,
) -> Response {
    let mut s = lock(state);
    let plan = s.plan;
    let mut out = Vec::new();
    let mut failed = false;
    for id in ids.split(',').filter(|i| !i.is_empty()) {
        match s.jobs.get_mut(id) {
            Some(job) => out.push(each(job, &plan)),
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

fn no_job(id: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        &format!("No job with the id \"{id}\" has been found"),
    )
}

async fn get_jobs(
    State(state): State<Arc<Mutex<Inner>>>,
    Path(ids): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let call = Call::new("GET", format!("/jobs/{ids}"), query.clone(), &headers, None);
    if let Err(r) = admit(&state, call) {
        return r.into_response();
    }
    let fields = query.get("files").cloned();
    let reversed = lock(&state).reversed;
    per_job(&state, &ids, |job, plan| {
        job.json(plan, fields.as_deref(), "200 Ok", reversed)
    })
}

/// `GET /jobs` (fts-rest-flask `index`): the jobs not finished, each with the `fields` asked
/// for (all of its own fields without), in submission order. (FTS3 limits what a credential
/// sees by its granted level; the stand-in's one caller sees every job.)
async fn list_jobs(
    State(state): State<Arc<Mutex<Inner>>>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let call = Call::new("GET", "/jobs".into(), query.clone(), &headers, None);
    if let Err(r) = admit(&state, call) {
        return r.into_response();
    }
    let s = lock(&state);
    if s.listing_fails {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "database unavailable (standin)",
        );
    }
    if query.get("user_dn").is_some_and(|dn| dn != STANDIN_DN) {
        // fts-rest-flask `index`: a DN other than the caller's.
        return error(
            StatusCode::BAD_REQUEST,
            "The provided DN and delegation id do not correspond to the same user",
        );
    }
    let listed = (s.order.iter()).filter_map(|id| s.jobs.get(id));
    let open = listed.filter(|j| !jobs::is_terminal(j.state(&s.plan)));
    let out: Vec<Value> = open
        .map(|j| {
            let full = j.json(&s.plan, None, "200 Ok", false);
            match query.get("fields") {
                None => full,
                Some(fields) => {
                    let pick = fields.split(',').filter_map(|f| Some((f, full.get(f)?)));
                    Value::Object(pick.map(|(f, v)| (f.to_string(), v.clone())).collect())
                }
            }
        })
        .collect();
    Json(Value::Array(out)).into_response()
}

/// `GET /jobs/{id}/files`: every file of the job, whole.
async fn get_files(
    State(state): State<Arc<Mutex<Inner>>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let call = Call::new(
        "GET",
        format!("/jobs/{id}/files"),
        HashMap::new(),
        &headers,
        None,
    );
    if let Err(r) = admit(&state, call) {
        return r.into_response();
    }
    let s = lock(&state);
    let Some(job) = s.jobs.get(&id) else {
        return no_job(&id);
    };
    let mut files: Vec<Value> = job.files.iter().map(|f| f.json(job, &s.plan)).collect();
    if s.reversed {
        files.reverse();
    }
    Json(Value::Array(files)).into_response()
}

/// `DELETE /jobs/{id}/files/{file_ids}` (fts-rest-flask `cancel_files`): each file's new state
/// (`CANCELED`), its state if already ended, or "File does not belong to the job"; one string
/// for one id, a list for several. Refused for a session-reuse job.
async fn cancel_files(
    State(state): State<Arc<Mutex<Inner>>>,
    Path((id, file_ids)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let path = format!("/jobs/{id}/files/{file_ids}");
    if let Err(r) = admit(
        &state,
        Call::new("DELETE", path, HashMap::new(), &headers, None),
    ) {
        return r.into_response();
    }
    let mut s = lock(&state);
    let plan = s.plan;
    let Some(job) = s.jobs.get_mut(&id) else {
        return no_job(&id);
    };
    if job.job_type != "N" {
        let m = format!(
            "Multihop or reuse jobs must be cancelled at once ({})",
            job.job_type
        );
        return error(StatusCode::BAD_REQUEST, &m);
    }
    let snapshot = job.clone();
    let mut changed: Vec<Value> = Vec::new();
    for fid in file_ids.split(',') {
        let found = fid
            .parse::<u64>()
            .ok()
            .and_then(|n| (job.files.iter_mut()).find(|f| f.file_id == n));
        changed.push(json!(match found {
            None => "File does not belong to the job",
            Some(f) if !f.active(&snapshot, &plan) => f.state(&snapshot, &plan).0,
            Some(f) => {
                f.cancelled_at = Some(Instant::now());
                "CANCELED"
            }
        }));
    }
    if changed.len() == 1 {
        return Json(changed.remove(0)).into_response();
    }
    Json(Value::Array(changed)).into_response()
}

async fn cancel(
    State(state): State<Arc<Mutex<Inner>>>,
    Path(ids): Path<String>,
    headers: HeaderMap,
) -> Response {
    let call = Call::new(
        "DELETE",
        format!("/jobs/{ids}"),
        HashMap::new(),
        &headers,
        None,
    );
    if let Err(r) = admit(&state, call) {
        return r.into_response();
    }
    per_job(&state, &ids, |job, plan| {
        if jobs::is_terminal(job.state(plan)) {
            return job.json(plan, None, "304 Not Modified", false);
        }
        let snapshot = job.clone();
        for f in job.files.iter_mut() {
            if f.active(&snapshot, plan) {
                f.cancelled_at = Some(Instant::now());
            }
        }
        job.json(plan, None, "200 Ok", false)
    })
}

async fn modify(
    State(state): State<Arc<Mutex<Inner>>>,
    Path(ids): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let parsed: Option<Value> = serde_json::from_slice(&body).ok();
    let call = Call::new(
        "POST",
        format!("/jobs/{ids}"),
        HashMap::new(),
        &headers,
        parsed.clone(),
    );
    if let Err(r) = admit(&state, call) {
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
        if jobs::is_terminal(job.state(plan)) {
            return job.json(plan, None, "304 Not Modified", false);
        }
        if let Some(p) = priority {
            job.priority = p;
        }
        job.json(plan, None, "200 Ok", false)
    })
}

//! The HTTP API (axum, JSON, under `/v1`). Handlers parse and classify a request off the ledger
//! writer (so JSON and classification cost the writer nothing), then hand typed requests to the
//! ledger and answer 202 only after the commit.

mod body_budget;
pub mod error;
pub mod wire;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use tokio::sync::mpsc;

use crate::auth::{Principal, Role, RoleKind, TokenTable};
use crate::config::{InputLimits, PolicySettings};
use crate::domain::RequestState;
use crate::ledger::{CancelOutcome, Ledger, NewRequest};
use crate::policy::{self, RequestFields};
use crate::shares::view::SharesView;
use error::ApiError;
use wire::{AcceptedBody, BatchBody, BatchResult, CancelBody, RequestBody, RequestInput};

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    pub ledger: Ledger,
    /// The broker's clock: share figures are computed for its now.
    pub clock: Arc<dyn crate::clock::Clock>,
    /// In-process metrics, exposed with the ledger's figures at `/metrics`.
    pub metrics: Arc<crate::metrics::Metrics>,
    pub policy: Arc<PolicySettings>,
    pub limits: InputLimits,
    /// Ids whose cancellation the dispatcher must carry to the MSS.
    pub cancels: mpsc::UnboundedSender<i64>,
    /// `None`: authentication is off and every caller is an operator.
    pub tokens: Option<Arc<TokenTable>>,
    /// Per station token: requests per second and burst.
    pub station_limits: Arc<governor::DefaultKeyedRateLimiter<String>>,
    /// The MSS adapter: what it can do decides what a request may ask for.
    pub mss: Arc<dyn mss_adapters::MssAdapter>,
}

/// A keyed limiter for station tokens.
pub fn station_limiter(limits: &InputLimits) -> Arc<governor::DefaultKeyedRateLimiter<String>> {
    let rate =
        std::num::NonZeroU32::new(limits.station_rate_per_sec).unwrap_or(std::num::NonZeroU32::MIN);
    let burst =
        std::num::NonZeroU32::new(limits.station_burst).unwrap_or(std::num::NonZeroU32::MIN);
    Arc::new(governor::RateLimiter::keyed(
        governor::Quota::per_second(rate).allow_burst(burst),
    ))
}

/// The authenticated caller of a request.
pub struct Caller(pub Principal);

impl axum::extract::FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let Some(tokens) = &state.tokens else {
            return Ok(Caller(Principal::anonymous_operator()));
        };
        let header = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let token = header.and_then(bearer_or_basic_token);
        match token.as_deref().and_then(|t| tokens.authenticate(t)) {
            Some(p) => Ok(Caller(p.clone())),
            None => Err(ApiError::unauthenticated()),
        }
    }
}

/// The token of an `Authorization` header: `Bearer TOKEN`, or `Basic` with the token as the
/// password (any user name), so a browser's login prompt can open the HTML report. Both are
/// accepted on every endpoint, with the same roles (README, Authentication).
fn bearer_or_basic_token(h: &str) -> Option<String> {
    use base64::Engine as _;
    if let Some(t) = h
        .strip_prefix("Bearer ")
        .or_else(|| h.strip_prefix("bearer "))
    {
        return Some(t.trim().to_string());
    }
    let encoded = h
        .strip_prefix("Basic ")
        .or_else(|| h.strip_prefix("basic "))?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (_, password) = text.split_once(':')?;
    Some(password.to_string())
}

impl Caller {
    /// 403 unless the caller has one of `roles`.
    fn require(&self, roles: &[RoleKind], what: &str) -> Result<(), ApiError> {
        if roles.contains(&self.0.role.kind()) {
            return Ok(());
        }
        Err(ApiError::forbidden(
            "authorization",
            format!("a {} token may not {what}", self.0.role.name()),
        ))
    }

    /// Charge `n` requests to a station token's rate limit (other roles are not limited).
    fn charge(&self, state: &AppState, n: usize) -> Result<(), ApiError> {
        if !matches!(self.0.role, Role::Station(_)) {
            return Ok(());
        }
        let cost = std::num::NonZeroU32::new(n.min(u32::MAX as usize) as u32)
            .unwrap_or(std::num::NonZeroU32::MIN);
        match state.station_limits.check_key_n(&self.0.name, cost) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(not_until)) => {
                let now = governor::clock::Clock::now(&governor::clock::DefaultClock::default());
                let wait = not_until.wait_time_from(now);
                Err(ApiError::too_many(
                    "authorization",
                    format!(
                        "this station token is over its request rate; retry in {:.1} s",
                        wait.as_secs_f64()
                    ),
                    wait.as_secs_f64().ceil() as u64,
                ))
            }
            Err(_) => Err(ApiError::too_many(
                "requests",
                format!(
                    "a batch of {n} is more than this token's burst ({})",
                    state.limits.station_burst
                ),
                1,
            )),
        }
    }

    /// 403 unless the caller may submit for `station`.
    fn may_submit_for(&self, station: &str, field: &str) -> Result<(), ApiError> {
        if self.0.may_act_for(station) {
            return Ok(());
        }
        Err(ApiError::forbidden(
            field,
            format!("this token may not submit for station `{station}`"),
        ))
    }
}

/// The API's routes and its OpenAPI document, built together from the handlers' `#[utoipa::path]`
/// attributes, so neither can drift from the other.
pub fn router_and_openapi(state: AppState) -> (Router, utoipa::openapi::OpenApi) {
    let body_limit = state.limits.max_body_bytes;
    let budget = body_budget::BodyBudget::new(state.limits.max_bodies_in_memory_bytes, body_limit);
    let (router, mut api) = utoipa_axum::router::OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(utoipa_axum::routes!(submit_one))
        .routes(utoipa_axum::routes!(submit_batch))
        .routes(utoipa_axum::routes!(get_request, cancel_request))
        .routes(utoipa_axum::routes!(release_request))
        .routes(utoipa_axum::routes!(mss))
        .routes(utoipa_axum::routes!(groups))
        .routes(utoipa_axum::routes!(report))
        .routes(utoipa_axum::routes!(metrics))
        .routes(utoipa_axum::routes!(report_page))
        .routes(utoipa_axum::routes!(healthz))
        .split_for_parts();
    api.info.version = env!("CARGO_PKG_VERSION").to_string();
    let document = Arc::new(api.to_json().unwrap_or_default());
    let router = router
        .route(
            "/v1/openapi.json",
            get(move || {
                let document = document.clone();
                async move {
                    (
                        [(header::CONTENT_TYPE, "application/json")],
                        (*document).clone(),
                    )
                }
            }),
        )
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, None, "no such endpoint") })
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn_with_state(
            budget,
            body_budget::bounded,
        ))
        .layer(axum::middleware::map_response(error::json_errors))
        .with_state(state);
    (router, api)
}

/// The API's routes.
pub fn router(state: AppState) -> Router {
    router_and_openapi(state).0
}

#[derive(utoipa::OpenApi)]
#[openapi(
    info(title = "mssbroker", description = "Fair-share broker for file-transfer requests in front of a tape mass storage system"),
    modifiers(&BearerAuth),
    security(("bearer" = []), ("basic" = [])),
    components(schemas(error::ErrorBody))
)]
struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, api: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = api.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        // Any user name, the token as the password: accepted wherever a bearer token is.
        components.add_security_scheme(
            "basic",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Basic).build()),
        );
    }
}

use utoipa::OpenApi as _;

/// Check the content type and read the body.
fn json_bytes(headers: &HeaderMap, body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mime = content_type.split(';').next().unwrap_or("").trim();
    if !mime.eq_ignore_ascii_case("application/json") {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Some("content-type"),
            format!("expected content-type application/json, got `{content_type}`"),
        ));
    }
    body.map_err(|e| ApiError::new(e.status(), Some("body"), e.body_text()))
}

/// Classify a parsed request into what the ledger takes.
fn prepare(state: &AppState, input: RequestInput, prefix: &str) -> Result<NewRequest, ApiError> {
    let fields = RequestFields {
        access_mode: &input.access_mode,
        physics_group: &input.physics_group,
        station: &input.station,
        user: &input.user,
        file: &input.file,
    };
    let group = policy::classify(&state.policy, &fields)
        .map_err(|e| ApiError::field(&format!("{prefix}physics_group"), e.to_string()))?;
    mss_can_take(state.mss.as_ref(), &input, prefix)?;
    let benefit = policy::benefit(&state.policy, &input.access_mode, input.size_bytes);
    Ok(NewRequest {
        station: input.station,
        client_request_id: input.client_request_id,
        user: input.user,
        file: input.file,
        size_bytes: input.size_bytes,
        access_mode: input.access_mode,
        physics_group: input.physics_group,
        volume: input.volume,
        direction: input.direction,
        group,
        benefit,
        extras: crate::ledger::RequestExtras {
            library: input.library.unwrap_or_default(),
            qos: input.qos,
            user_factor: input.user_factor,
            local_file: input.local_file,
            bfid: input.bfid,
        },
    })
}

/// Refuse what the configured MSS cannot do with this request, naming the field: a write to an
/// MSS that only stages, a missing `local_file` the adapter needs, a bfid it cannot use.
fn mss_can_take(
    mss: &dyn mss_adapters::MssAdapter,
    input: &RequestInput,
    prefix: &str,
) -> Result<(), ApiError> {
    use mss_adapters::Direction;
    let caps = mss.capabilities();
    let name = mss.name();
    let field = |f: &str, m: String| Err(ApiError::field(&format!("{prefix}{f}"), m));
    match input.direction {
        Direction::Write if !caps.writes => {
            return field(
                "direction",
                format!("the {name} adapter's MSS only stages files: \"read\" only"),
            )
        }
        Direction::Read if caps.reads_need_local_file && input.local_file.is_none() => {
            return field(
                "local_file",
                format!("is required for a read with the {name} adapter: where the file goes"),
            )
        }
        Direction::Write if caps.writes_need_local_file && input.local_file.is_none() => {
            return field(
                "local_file",
                format!("is required for a write with the {name} adapter: the file to store"),
            )
        }
        _ => {}
    }
    if let Some(f) = &input.local_file {
        if let Err(why) = mss.check_local_file_for(&input.station, f) {
            return field("local_file", format!("{why} for the {name} adapter"));
        }
    }
    if input.bfid.is_some() && !caps.bfid {
        return field(
            "bfid",
            format!("the {name} adapter names files by path and cannot use a bfid"),
        );
    }
    Ok(())
}

/// Submit one request.
#[utoipa::path(post, path = "/v1/requests", request_body = wire::SubmitRequest, responses(
    (status = 202, description = "committed (or a replay of a committed request)", body = AcceptedBody),
    (status = 400, body = error::ErrorBody), (status = 401, body = error::ErrorBody),
    (status = 403, body = error::ErrorBody), (status = 413, body = error::ErrorBody),
    (status = 415, body = error::ErrorBody), (status = 422, body = wire::Unprocessable),
    (status = 429, body = error::ErrorBody), (status = 503, body = error::ErrorBody),
))]
async fn submit_one(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    caller.require(&[RoleKind::Station, RoleKind::Operator], "submit requests")?;
    caller.charge(&state, 1)?;
    let bytes = json_bytes(&headers, body)?;
    let input = RequestInput::from_slice(&bytes, &state.limits)?;
    caller.may_submit_for(&input.station, "station")?;
    let item = prepare(&state, input, "")?;
    let mut accepted = state.ledger.accept(vec![item]).await?;
    let a = accepted.pop().ok_or_else(|| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            None,
            "no answer from the ledger",
        )
    })?;
    tracing::debug!(request_id = a.id, group = %a.group, class = a.class.as_str(), priority = a.mss_priority, "accepted");
    Ok((StatusCode::ACCEPTED, Json(AcceptedBody::from(a))).into_response())
}

/// Submit a batch; answers in order, one result per request.
#[utoipa::path(post, path = "/v1/requests/batch", request_body = wire::SubmitBatch, responses(
    (status = 202, description = "the valid requests are committed", body = BatchBody),
    (status = 400, body = error::ErrorBody), (status = 401, body = error::ErrorBody),
    (status = 403, body = error::ErrorBody), (status = 413, body = error::ErrorBody),
    (status = 415, body = error::ErrorBody), (status = 422, body = wire::Unprocessable),
    (status = 429, body = error::ErrorBody), (status = 503, body = error::ErrorBody),
))]
async fn submit_batch(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    caller.require(&[RoleKind::Station, RoleKind::Operator], "submit requests")?;
    let bytes = json_bytes(&headers, body)?;
    let items = wire::batch_items(&bytes, &state.limits)?;
    caller.charge(&state, items.len())?;
    let mut results: Vec<Option<BatchResult>> = Vec::with_capacity(items.len());
    let mut valid = Vec::new();
    for (i, raw) in items.iter().enumerate() {
        let prefix = format!("requests[{i}].");
        let parsed = RequestInput::from_slice_at(raw.get().as_bytes(), &state.limits, &prefix);
        // Another station's request in a station's batch refuses the whole batch: it is a
        // client error, and nothing of the batch is committed.
        if let Some(station) = station_of(&parsed, raw) {
            caller.may_submit_for(&station, &format!("{prefix}station"))?;
        }
        match parsed.and_then(|input| prepare(&state, input, &prefix)) {
            Ok(item) => {
                valid.push(item);
                results.push(None);
            }
            Err(e) => results.push(Some(BatchResult::Refused {
                error: e.message,
                field: e.field,
            })),
        }
    }
    let accepted_count = valid.len();
    let mut accepted = state.ledger.accept(valid).await?.into_iter();
    let results: Vec<BatchResult> = results
        .into_iter()
        .map(|r| match r {
            Some(refused) => Ok(refused),
            None => accepted
                .next()
                .map(|a| BatchResult::Accepted(a.into()))
                .ok_or_else(|| {
                    ApiError::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        None,
                        "the ledger answered fewer items than sent",
                    )
                }),
        })
        .collect::<Result<_, _>>()?;
    let body = BatchBody {
        refused: results.len() - accepted_count,
        accepted: accepted_count,
        results,
    };
    let status = if accepted_count == 0 {
        StatusCode::UNPROCESSABLE_ENTITY
    } else {
        StatusCode::ACCEPTED
    };
    Ok((status, Json(body)).into_response())
}

/// The station a batch item names: parsed, or read alone from an item refused for another field.
fn station_of(
    parsed: &Result<RequestInput, ApiError>,
    raw: &serde_json::value::RawValue,
) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Station<'a> {
        #[serde(borrow)]
        station: Option<std::borrow::Cow<'a, str>>,
    }
    match parsed {
        Ok(input) => Some(input.station.clone()),
        Err(_) => serde_json::from_str::<Station<'_>>(raw.get())
            .ok()
            .and_then(|s| s.station.map(|s| s.into_owned())),
    }
}

/// A request id in a path: ASCII digits only, without a sign or leading zeros, so one request
/// has one spelling (`+1` and `01` are not request 1).
fn parse_id(raw: &str) -> Result<i64, ApiError> {
    let canonical = raw.bytes().all(|b| b.is_ascii_digit()) && !raw.starts_with('0');
    match raw.parse::<i64>() {
        Ok(id) if canonical && id > 0 => Ok(id),
        _ => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            Some("id"),
            format!("`{raw}` is not a request id (a positive integer)"),
        )),
    }
}

/// Liveness; needs no token.
#[utoipa::path(get, path = "/healthz", security(()), responses((status = 200, body = wire::Health)))]
async fn healthz() -> Json<wire::Health> {
    Json(wire::Health {
        status: "ok".into(),
    })
}

/// A request's state.
#[utoipa::path(get, path = "/v1/requests/{id}", params(("id" = i64, Path, description = "request id")), responses(
    (status = 200, body = RequestBody),
    (status = 400, body = error::ErrorBody), (status = 401, body = error::ErrorBody),
    (status = 403, body = error::ErrorBody), (status = 404, body = error::ErrorBody),
    (status = 503, body = error::ErrorBody),
))]
async fn get_request(
    State(state): State<AppState>,
    caller: Caller,
    Path(raw): Path<String>,
) -> Result<Response, ApiError> {
    caller.require(&[RoleKind::Station, RoleKind::Operator], "read requests")?;
    let id = parse_id(&raw)?;
    match state.ledger.request(id).await? {
        // Another station's request answers as if it did not exist: ids do not leak.
        Some(r) if caller.0.may_act_for(&r.station) => {
            let queued = r.state == crate::domain::RequestState::Queued;
            let mut body = RequestBody::from(r);
            if queued {
                // Its placement now (one placement, off the writer) and its position in the latest
                // ranking of the queue (built off the writer).
                if let Some(q) = state.ledger.explain_queued(id).await? {
                    /// A queued request's explain: its live placement and its place in the
                    /// latest ranking, side by side in one object.
                    #[derive(serde::Serialize)]
                    struct Live<'a> {
                        #[serde(flatten)]
                        explain: &'a crate::ledger::stored_explain::Explanation,
                        position: Option<usize>,
                        waiting: Option<usize>,
                        ranked_at_ms: i64,
                    }
                    let live = Live {
                        explain: &q.explain,
                        position: q.position,
                        waiting: q.waiting,
                        ranked_at_ms: q.ranked_at_ms,
                    };
                    body.explain = Some(serde_json::to_value(&live).unwrap_or_default());
                }
            }
            Ok(Json(body).into_response())
        }
        _ => Err(ApiError::not_found(format!("no request {id}"))),
    }
}

/// Cancel a request.
#[utoipa::path(delete, path = "/v1/requests/{id}", params(("id" = i64, Path, description = "request id")), responses(
    (status = 200, description = "cancelled and refunded", body = CancelBody),
    (status = 202, description = "queued at the MSS: the MSS is asked to drop it", body = CancelBody),
    (status = 400, body = error::ErrorBody), (status = 401, body = error::ErrorBody),
    (status = 403, body = error::ErrorBody), (status = 404, body = error::ErrorBody),
    (status = 409, body = error::ErrorBody), (status = 503, body = error::ErrorBody),
))]
async fn cancel_request(
    State(state): State<AppState>,
    caller: Caller,
    Path(raw): Path<String>,
) -> Result<Response, ApiError> {
    caller.require(&[RoleKind::Station, RoleKind::Operator], "cancel requests")?;
    let id = parse_id(&raw)?;
    match state.ledger.request(id).await? {
        Some(r) if caller.0.may_act_for(&r.station) => {}
        _ => return Err(ApiError::not_found(format!("no request {id}"))),
    }
    match state.ledger.cancel(id).await? {
        CancelOutcome::Cancelled => Ok(Json(CancelBody {
            id,
            state: RequestState::Cancelled,
            cancel_requested: true,
        })
        .into_response()),
        CancelOutcome::Requested(current) => {
            // The dispatcher may have stopped; the ledger keeps the flag and it is retried then.
            let _ = state.cancels.send(id);
            Ok((
                StatusCode::ACCEPTED,
                Json(CancelBody {
                    id,
                    state: current,
                    cancel_requested: true,
                }),
            )
                .into_response())
        }
        CancelOutcome::AlreadyFinal(s) => Err(ApiError::new(
            StatusCode::CONFLICT,
            Some("id"),
            format!("request {id} is already {}", s.as_str()),
        )),
        CancelOutcome::NotFound => Err(ApiError::not_found(format!("no request {id}"))),
    }
}

/// Release the disk copy of a staged file at the MSS.
#[utoipa::path(post, path = "/v1/requests/{id}/release", params(("id" = i64, Path, description = "request id")), responses(
    (status = 200, description = "the MSS released the disk copy", body = wire::ReleaseBody),
    (status = 400, body = error::ErrorBody), (status = 401, body = error::ErrorBody),
    (status = 403, body = error::ErrorBody), (status = 404, body = error::ErrorBody),
    (status = 409, body = error::ErrorBody), (status = 502, body = error::ErrorBody),
    (status = 503, body = error::ErrorBody),
))]
async fn release_request(
    State(state): State<AppState>,
    caller: Caller,
    Path(raw): Path<String>,
) -> Result<Json<wire::ReleaseBody>, ApiError> {
    caller.require(
        &[RoleKind::Station, RoleKind::Operator],
        "release staged files",
    )?;
    let id = parse_id(&raw)?;
    let r = match state.ledger.request(id).await? {
        Some(r) if caller.0.may_act_for(&r.station) => r,
        _ => return Err(ApiError::not_found(format!("no request {id}"))),
    };
    let conflict = |m: String| ApiError::new(StatusCode::CONFLICT, Some("id"), m);
    if !state.mss.capabilities().release {
        return Err(conflict(format!(
            "the {} adapter keeps no disk copies to release",
            state.mss.name()
        )));
    }
    if r.state != RequestState::Done || r.direction != mss_adapters::Direction::Read {
        return Err(conflict(format!(
            "request {id} is a {} {}: only a finished read has a disk copy to release",
            r.direction.as_str(),
            r.state.as_str()
        )));
    }
    match state.mss.release(&r.transfer_ref()).await {
        Ok(()) => Ok(Json(wire::ReleaseBody { id, released: true })),
        Err(mss_adapters::MssError::Rejected(m)) => Err(conflict(format!("the mss refused: {m}"))),
        Err(mss_adapters::MssError::Unavailable(m)) => {
            let mut e = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                format!("the mss cannot be reached: {m}"),
            );
            e.retry_after = Some(5);
            Err(e)
        }
        Err(mss_adapters::MssError::Protocol(m) | mss_adapters::MssError::Unknown(m)) => {
            Err(ApiError::new(
                StatusCode::BAD_GATEWAY,
                None,
                format!("the mss answered something unexpected: {m}"),
            ))
        }
    }
}

/// The MSS adapter and what it can do.
#[utoipa::path(get, path = "/v1/mss", responses(
    (status = 200, body = wire::MssBody),
    (status = 401, body = error::ErrorBody), (status = 403, body = error::ErrorBody),
))]
async fn mss(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<wire::MssBody>, ApiError> {
    caller.require(
        &[RoleKind::Station, RoleKind::Reader, RoleKind::Operator],
        "read the mss capabilities",
    )?;
    Ok(Json(
        wire::MssBody::new(
            state.mss.name(),
            &state.mss.capabilities(),
            state.mss.room(),
        )
        .cancel_reaches_mss(state.mss.cancel_reaches_mss()),
    ))
}

/// `GET /v1/groups` query.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct GroupsQuery {
    /// The instant to compute the figures for (RFC 3339 or epoch milliseconds); default now.
    pub at: Option<String>,
}

/// The share tree with every node's target, usage under the configured model, Fair Tree rank,
/// SAM class and cap state: the figures of `mssbroker shares`.
#[utoipa::path(get, path = "/v1/groups", params(GroupsQuery), responses(
    (status = 200, body = SharesView),
    (status = 400, body = error::ErrorBody),
    (status = 401, body = error::ErrorBody), (status = 403, body = error::ErrorBody),
    (status = 503, body = error::ErrorBody),
))]
async fn groups(
    State(state): State<AppState>,
    caller: Caller,
    query: Result<Query<GroupsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    caller.require(
        &[RoleKind::Reader, RoleKind::Operator],
        "read group figures",
    )?;
    let bad = |m: String| ApiError::new(StatusCode::BAD_REQUEST, Some("at"), m);
    let Query(query) = query.map_err(|e| bad(e.body_text()))?;
    let now = state.clock.now_ms();
    let at_ms = match query.at.as_deref() {
        None => now,
        Some(s) => crate::clock::parse_instant(s).map_err(bad)?,
    };
    let view = state.ledger.shares(at_ms, now).await?;
    Ok(Json(view).into_response())
}

/// `GET /v1/report` query.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ReportQuery {
    /// Start (RFC 3339 or epoch ms); default 7 days before `until`. Widened to a whole hour.
    pub since: Option<String>,
    /// End (exclusive); default now.
    pub until: Option<String>,
    /// `hour`, `day` or `week`; default by the range's length.
    pub bucket: Option<String>,
}

/// The range a report query asks for, and the broker's now.
fn report_range(
    state: &AppState,
    query: Result<Query<ReportQuery>, QueryRejection>,
) -> Result<(crate::report::ReportRange, i64), ApiError> {
    let Query(q) =
        query.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, Some("query"), e.body_text()))?;
    let now = state.clock.now_ms();
    let range = crate::report::parse_range(
        q.since.as_deref(),
        q.until.as_deref(),
        q.bucket.as_deref(),
        now,
        state.limits.max_report_buckets,
    )
    .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, Some(e.field), e.message))?;
    Ok((range, now))
}

/// The share report over a time range: per group and tree node, target vs achieved share,
/// requests by outcome, pending and held, front/back, wait percentiles; per priority class the
/// same; the same per bucket; and the current usage windows (`diagnose`).
#[utoipa::path(get, path = "/v1/report", params(ReportQuery), responses(
    (status = 200, body = crate::report::Report),
    (status = 400, body = error::ErrorBody),
    (status = 401, body = error::ErrorBody), (status = 403, body = error::ErrorBody),
    (status = 503, body = error::ErrorBody),
))]
async fn report(
    State(state): State<AppState>,
    caller: Caller,
    query: Result<Query<ReportQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    caller.require(&[RoleKind::Reader, RoleKind::Operator], "read reports")?;
    let (range, now) = report_range(&state, query)?;
    Ok(Json(crate::report::read(&state.ledger, range, now).await?).into_response())
}

/// Prometheus metrics (OpenMetrics text): per group requests by state and bytes done
/// (counters), pending and held requests, usage and target share (gauges); ledger commit
/// latency and batch size and MSS call latency (histograms).
#[utoipa::path(get, path = "/metrics", responses(
    (status = 200, content_type = "application/openmetrics-text", body = String),
    (status = 401, body = error::ErrorBody), (status = 403, body = error::ErrorBody),
    (status = 503, body = error::ErrorBody),
))]
async fn metrics(State(state): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    caller.require(&[RoleKind::Reader, RoleKind::Operator], "read metrics")?;
    let figures = state.ledger.metric_figures(state.clock.now_ms()).await?;
    let text = state.metrics.encode(&figures.totals, &figures.shares);
    Ok((
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response())
}

/// The share report as an HTML page for people: the table, charts of share, bytes, pending
/// requests and waits over time, and the usage windows. Same parameters as `/v1/report`.
/// Browsers may log in with HTTP Basic: any user name, the token as the password.
#[utoipa::path(get, path = "/report", params(ReportQuery), responses(
    (status = 200, content_type = "text/html", body = String),
    (status = 400, body = error::ErrorBody),
    (status = 401, body = error::ErrorBody), (status = 403, body = error::ErrorBody),
    (status = 503, body = error::ErrorBody),
))]
async fn report_page(
    State(state): State<AppState>,
    caller: Caller,
    query: Result<Query<ReportQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    caller.require(&[RoleKind::Reader, RoleKind::Operator], "read reports")?;
    let (range, now) = report_range(&state, query)?;
    let report = crate::report::read(&state.ledger, range, now).await?;
    let html = crate::report::html::page(&report, now).map_err(|e| {
        tracing::error!(error = %e, "report page not rendered");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            None,
            "report page not rendered",
        )
    })?;
    Ok(axum::response::Html(html).into_response())
}

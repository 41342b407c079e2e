//! The HTTP API (axum, JSON, under `/v1`). Handlers parse and classify a request off the ledger
//! writer (so JSON and classification cost the writer nothing), then hand typed requests to the
//! ledger and answer 202 only after the commit.

pub mod error;
pub mod wire;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use tokio::sync::mpsc;

use crate::config::{GroupKind, InputLimits, PolicySettings};
use crate::domain::RequestState;
use crate::ledger::{CancelOutcome, Ledger, NewRequest};
use crate::policy::{self, RequestFields};
use error::ApiError;
use wire::{
    AcceptedBody, BatchBody, BatchResult, CancelBody, GroupBody, GroupsBody, PriorityClassBody,
    RequestBody, RequestInput,
};

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    pub ledger: Ledger,
    pub policy: Arc<PolicySettings>,
    pub limits: InputLimits,
    /// Ids whose cancellation the dispatcher must carry to the MSS.
    pub cancels: mpsc::UnboundedSender<i64>,
}

/// The API's routes.
pub fn router(state: AppState) -> Router {
    let body_limit = state.limits.max_body_bytes;
    Router::new()
        .route("/v1/requests", post(submit_one))
        .route("/v1/requests/batch", post(submit_batch))
        .route("/v1/requests/{id}", get(get_request).delete(cancel_request))
        .route("/v1/groups", get(groups))
        .route(
            "/healthz",
            get(|| async { Json(serde_json::json!({"status": "ok"})) }),
        )
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, None, "no such endpoint") })
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(state)
}

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
    })
}

async fn submit_one(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let bytes = json_bytes(&headers, body)?;
    let input = RequestInput::from_slice(&bytes, &state.limits)?;
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

async fn submit_batch(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let value = wire::parse_json(&json_bytes(&headers, body)?)?;
    let items = wire::parse_batch(value, &state.limits)?;
    let mut results: Vec<Option<BatchResult>> = Vec::with_capacity(items.len());
    let mut valid = Vec::new();
    for (i, raw) in items.iter().enumerate() {
        let prefix = format!("requests[{i}].");
        let parsed = RequestInput::parse(raw, &state.limits, &prefix)
            .and_then(|input| prepare(&state, input, &prefix));
        match parsed {
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

fn parse_id(raw: &str) -> Result<i64, ApiError> {
    match raw.parse::<i64>() {
        Ok(id) if id > 0 => Ok(id),
        _ => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            Some("id"),
            format!("`{raw}` is not a request id (a positive integer)"),
        )),
    }
}

async fn get_request(
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_id(&raw)?;
    match state.ledger.request(id).await? {
        Some(r) => Ok(Json(RequestBody::from(r)).into_response()),
        None => Err(ApiError::not_found(format!("no request {id}"))),
    }
}

async fn cancel_request(
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_id(&raw)?;
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

async fn groups(State(state): State<AppState>) -> Result<Response, ApiError> {
    let rows = state.ledger.groups().await?;
    let row = |path: &str| rows.iter().find(|r| r.path == path);
    let policy = &state.policy;
    let fair_total: u64 = policy
        .groups
        .iter()
        .filter(|g| matches!(g.kind, GroupKind::FairShare { .. }))
        .filter_map(|g| row(g.path.as_str()))
        .map(|r| r.usage)
        .sum();
    let mut body = GroupsBody {
        benefit: policy.benefit.name(),
        fair_share_usage: fair_total,
        groups: Vec::new(),
        priority_classes: Vec::new(),
    };
    for g in &policy.groups {
        let (usage, usage_bytes, pending) = row(g.path.as_str())
            .map(|r| (r.usage, r.usage_bytes, r.pending))
            .unwrap_or_default();
        match g.kind {
            GroupKind::Priority { mss_priority, .. } => {
                body.priority_classes.push(PriorityClassBody {
                    path: g.path.to_string(),
                    mss_priority,
                    usage,
                    usage_bytes,
                    pending,
                })
            }
            GroupKind::FairShare { share } => body.groups.push(GroupBody {
                path: g.path.to_string(),
                target_share: share.to_f64(),
                target_fraction: share.to_string(),
                usage,
                usage_bytes,
                usage_share: if fair_total == 0 {
                    0.0
                } else {
                    usage as f64 / fair_total as f64
                },
                pending,
            }),
        }
    }
    Ok(Json(body).into_response())
}

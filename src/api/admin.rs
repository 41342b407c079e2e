//! Operators' endpoints: reloading the configuration (`POST /v1/admin/reload`, as SIGHUP does)
//! and cancelling every unfinished request of one group (`POST /v1/admin/cancel-group`), the
//! step before a reload may remove that group.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::caller::Caller;
use super::error::{self, ApiError};
use super::schemas::StateBody;
use super::AppHandle;
use crate::auth::RoleKind;
use crate::ledger::CancelOutcome;
use crate::live_settings::Refusal;
use crate::shares::view::format_ms;

/// The configuration in force after a reload.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReloadBody {
    /// Where it was read from.
    pub origin: String,
    /// SHA-256 of the configuration file's bytes, lower-case hex.
    pub config_sha256: String,
    /// When it was loaded, RFC 3339 UTC, and the same in epoch milliseconds.
    pub loaded_at: String,
    pub loaded_at_ms: i64,
    /// The file's bytes differ from those of the configuration in force before.
    pub changed: bool,
}

/// Re-read the configuration file and put its live part in force (shares, targets, caps, the
/// ordering policy and its parameters, classification, rate and release limits). A file that
/// fails validation, changes what cannot change without a restart, or removes a group with
/// unfinished requests changes nothing: the answer names the key.
#[utoipa::path(post, path = "/v1/admin/reload", responses(
    (status = 200, body = ReloadBody),
    (status = 401, body = error::ErrorBody), (status = 403, body = error::ErrorBody),
    (status = 409, description = "a key that cannot change live, or a removed group with unfinished requests", body = error::ErrorBody),
    (status = 422, description = "the configuration is not valid", body = error::ErrorBody),
    (status = 503, body = error::ErrorBody),
))]
pub(super) async fn reload(
    State(state): State<AppHandle>,
    caller: Caller,
) -> Result<Json<ReloadBody>, ApiError> {
    caller.require(&[RoleKind::Operator], "reload the configuration")?;
    state.office()?;
    match state.reloader.reload("api").await {
        Ok(r) => Ok(Json(ReloadBody {
            origin: r.stamp.origin,
            config_sha256: r.stamp.sha256,
            loaded_at: format_ms(r.stamp.loaded_at_ms),
            loaded_at_ms: r.stamp.loaded_at_ms,
            changed: r.changed,
        })),
        Err(e) => {
            let status = match e.why {
                Refusal::Invalid => StatusCode::UNPROCESSABLE_ENTITY,
                Refusal::Fixed | Refusal::RemovedGroups => StatusCode::CONFLICT,
                Refusal::Failed => StatusCode::SERVICE_UNAVAILABLE,
            };
            Err(ApiError::new(status, Some(&e.key), e.message))
        }
    }
}

/// `POST /v1/admin/cancel-group` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelGroupRequest {
    /// The group's path, e.g. `analysis/higgs` (configured or not).
    pub group: String,
}

/// One request `cancel-group` cancelled.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct GroupCancelBody {
    pub id: i64,
    /// Its state before.
    pub previous_state: StateBody,
    /// `cancelled` (refunded now), its state at the MSS while the MSS is asked to drop it, or
    /// the final state it reached on its own before its turn.
    pub state: StateBody,
    /// The MSS is asked to drop it; a `cancelled` event settles and refunds it.
    pub at_mss: bool,
}

/// What `cancel-group` did: counts of every request, and the first ones by id.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CancelGroupBody {
    pub group: String,
    /// The group's unfinished requests when the cancel began: every one is counted below.
    pub total: usize,
    /// Cancelled and refunded now.
    pub cancelled: usize,
    /// At the MSS, asked to drop them.
    pub cancel_requested: usize,
    /// Ended on their own (done, failed, cancelled) before their turn: left as they were.
    pub already_final: usize,
    /// Ledger transactions the cancels took (a bounded number of requests each, so
    /// submissions are committed between them).
    pub transactions: usize,
    /// The first requests (at most `requests_listed_max`), in id order; the rest are only
    /// counted.
    pub requests: Vec<GroupCancelBody>,
    /// The most `requests` lists.
    pub requests_listed_max: usize,
}

/// The `group` of a `cancel-group` body, or a refusal naming the field as a request's would:
/// 400 for a body that is not JSON, 422 for one that is not an object, has a key other than
/// `group`, or a `group` missing or not a string.
fn group_asked(body: &[u8]) -> Result<String, ApiError> {
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| super::request::not_json(&e))?;
    let Some(object) = v.as_object() else {
        return Err(ApiError::field(
            "body",
            "must be a JSON object: {\"group\": \"PATH\"}",
        ));
    };
    if let Some(key) = object.keys().find(|k| *k != "group") {
        return Err(ApiError::field(
            key,
            format!("unknown field `{key}`; known fields: group"),
        ));
    }
    match object.get("group") {
        Some(serde_json::Value::String(_)) => {}
        None => return Err(ApiError::field("group", "is required")),
        Some(_) => return Err(ApiError::field("group", "must be a string (a group path)")),
    }
    let asked: CancelGroupRequest = serde_json::from_value(v)
        .map_err(|e| ApiError::field("group", format!("expected {{\"group\": \"PATH\"}}: {e}")))?;
    Ok(asked.group)
}

/// Cancel every unfinished request of a group, each as `DELETE /v1/requests/{id}` does: those
/// not yet at the MSS are cancelled and refunded now, those at the MSS are cancelled there
/// through the adapter. The requests unfinished when it begins are cancelled a bounded number
/// per ledger transaction, so submissions meanwhile are not held up; the answer counts them
/// and lists the first ones with their previous state.
#[utoipa::path(post, path = "/v1/admin/cancel-group", request_body = CancelGroupRequest, responses(
    (status = 200, body = CancelGroupBody),
    (status = 400, body = error::ErrorBody), (status = 401, body = error::ErrorBody),
    (status = 403, body = error::ErrorBody), (status = 404, body = error::ErrorBody),
    (status = 415, body = error::ErrorBody), (status = 422, body = error::ErrorBody),
    (status = 503, body = error::ErrorBody),
))]
pub(super) async fn cancel_group(
    State(state): State<AppHandle>,
    caller: Caller,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<CancelGroupBody>, ApiError> {
    caller.require(&[RoleKind::Operator], "cancel a group's requests")?;
    let office = state.office()?;
    let body = super::submit::json_bytes(&headers, body)?;
    let group = group_asked(&body)?.trim().to_string();
    if group.is_empty() || group.len() > state.limits.max_path_len {
        return Err(ApiError::field(
            "group",
            format!(
                "must be a group path of 1 to {} bytes",
                state.limits.max_path_len
            ),
        ));
    }
    // As a single cancel: the dispatcher carries each to the MSS (retried from the ledger's
    // flag if it has stopped).
    let cancels = office.cancels.clone();
    let at_mss = move |id| {
        let _ = cancels.send(id);
    };
    let done = office.ledger.cancel_group(group.clone(), at_mss).await?;
    super::still_in_office(&office)?;
    let configured = state.live.get().policy.group_by_path(&group).is_some();
    if done.total == 0 && !configured {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            Some("group"),
            format!("no group `{group}` is configured and none of its requests is unfinished"),
        ));
    }
    let requests = done.listed.iter().map(|c| {
        let (state_now, at_mss) = match c.outcome {
            CancelOutcome::Requested(s) => (s, true),
            CancelOutcome::AlreadyFinal(s) => (s, false),
            _ => (crate::domain::RequestState::Cancelled, false),
        };
        GroupCancelBody {
            id: c.id,
            previous_state: c.previous.into(),
            state: state_now.into(),
            at_mss,
        }
    });
    tracing::info!(group = %group, total = done.total, cancelled = done.cancelled,
        cancel_requested = done.cancel_requested, already_final = done.already_final,
        transactions = done.transactions, "cancelled the unfinished requests of a group");
    Ok(Json(CancelGroupBody {
        group,
        total: done.total,
        cancelled: done.cancelled,
        cancel_requested: done.cancel_requested,
        already_final: done.already_final,
        transactions: done.transactions,
        requests: requests.collect(),
        requests_listed_max: crate::ledger::CANCEL_LISTED,
    }))
}

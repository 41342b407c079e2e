//! One request by its id: `GET`, `DELETE` (cancel), `POST .../release` and an operator's
//! `POST .../resend` of an unsettled send.

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::caller::Caller;
use super::error::{self, ApiError};
use super::responses::{self, CancelBody, DriveReserveBody, RequestBody};
use super::schemas::PositionBasisBody;
use super::AppHandle;
use crate::auth::RoleKind;
use crate::domain::RequestState;
use crate::ledger::CancelOutcome;
use crate::office::Office;

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

/// The id in a request's path: one that is not even UTF-8 once percent-decoded is refused
/// naming `id`, as any other bad id.
fn id_of(raw: Result<Path<String>, PathRejection>) -> Result<i64, ApiError> {
    match raw {
        Ok(Path(raw)) => parse_id(&raw),
        Err(e) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            Some("id"),
            format!("not a request id (a positive integer): {}", e.body_text()),
        )),
    }
}

/// A request's state.
#[utoipa::path(get, path = "/v1/requests/{id}", params(("id" = i64, Path, description = "request id", minimum = 1)), responses(
    (status = 200, body = RequestBody),
    (status = 400, body = error::ErrorBody), (status = 401, body = error::ErrorBody),
    (status = 403, body = error::ErrorBody), (status = 404, body = error::ErrorBody),
    (status = 503, body = error::ErrorBody),
))]
pub(super) async fn get_request(
    State(state): State<AppHandle>,
    caller: Caller,
    raw: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    caller.require(&[RoleKind::Station, RoleKind::Operator], "read requests")?;
    let id = id_of(raw)?;
    let office = state.office()?;
    match office.ledger.request(id).await? {
        // Another station's request answers as if it did not exist: ids do not leak.
        Some(r) if caller.0.may_act_for(&r.station) => {
            let queued = r.state == crate::domain::RequestState::Queued;
            let rides_on = readable(&office, &caller, r.rides_on).await?;
            let mut body = RequestBody::from(r);
            body.rides_on = rides_on;
            if queued {
                // Its placement now (one placement, off the writer) and its position from the
                // latest ranking of the queue, never waiting for one (`ledger/rank.rs`).
                if let Some(q) = office.ledger.explain_queued(id).await? {
                    /// A queued request's explain: its live placement and its place in the
                    /// latest ranking, side by side in one object.
                    #[derive(serde::Serialize)]
                    struct Live<'a> {
                        #[serde(flatten)]
                        explain: &'a crate::ledger::stored_explain::Explanation,
                        position: Option<usize>,
                        waiting: Option<usize>,
                        ranked_at_ms: Option<i64>,
                    }
                    let live = Live {
                        explain: &q.explain,
                        position: q.position,
                        waiting: q.waiting,
                        ranked_at_ms: q.ranked_at_ms,
                    };
                    body.explain = Some(serde_json::to_value(&live).unwrap_or_default());
                    body.position_basis = PositionBasisBody::of(q.basis);
                    body.volume_wait = q.volume.map(Into::into);
                    body.drive_reserve = q.drive_reserve.map(|r| DriveReserveBody {
                        reserved_drives: r.reserved,
                        priority_waiting: r.priority_waiting,
                        until_ms: r.until_ms,
                        library: q.library.clone(),
                    });
                }
            }
            Ok(Json(body).into_response())
        }
        _ => Err(ApiError::not_found(format!("no request {id}"))),
    }
}

/// Request `id` (a rider's carrier), if `caller` may read it as `get_request` would: another
/// station's request id is not shown, since that station reads it as 404.
async fn readable(
    office: &Office,
    caller: &Caller,
    id: Option<i64>,
) -> Result<Option<i64>, ApiError> {
    let Some(id) = id else {
        return Ok(None);
    };
    Ok(match office.ledger.request(id).await? {
        Some(carrier) if caller.0.may_act_for(&carrier.station) => Some(id),
        _ => None,
    })
}

/// Cancel a request.
#[utoipa::path(delete, path = "/v1/requests/{id}", params(("id" = i64, Path, description = "request id", minimum = 1)), responses(
    (status = 200, description = "cancelled and refunded", body = CancelBody),
    (status = 202, description = "at the MSS, or perhaps there (its submission is on its way, or was not answered and waits to be resent): the MSS is asked to drop it", body = CancelBody),
    (status = 400, body = error::ErrorBody), (status = 401, body = error::ErrorBody),
    (status = 403, body = error::ErrorBody), (status = 404, body = error::ErrorBody),
    (status = 409, body = error::ErrorBody), (status = 429, body = error::ErrorBody),
    (status = 503, body = error::ErrorBody),
))]
pub(super) async fn cancel_request(
    State(state): State<AppHandle>,
    caller: Caller,
    raw: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    caller.require(&[RoleKind::Station, RoleKind::Operator], "cancel requests")?;
    let office = state.office()?;
    // A cancel takes a writer transaction and may call the MSS: it counts against the rate.
    caller.charge(&state, 1)?;
    let id = id_of(raw)?;
    match office.ledger.request(id).await? {
        Some(r) if caller.0.may_act_for(&r.station) => {}
        _ => return Err(ApiError::not_found(format!("no request {id}"))),
    }
    let outcome = office.ledger.cancel(id).await?;
    super::still_in_office(&office)?;
    match outcome {
        CancelOutcome::Cancelled => Ok(Json(CancelBody {
            id,
            state: RequestState::Cancelled.into(),
            cancel_requested: true,
        })
        .into_response()),
        CancelOutcome::Requested(current) => {
            // The dispatcher may have stopped; the ledger keeps the flag and it is retried then.
            let _ = office.cancels.send(id);
            Ok((
                StatusCode::ACCEPTED,
                Json(CancelBody {
                    id,
                    state: current.into(),
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
#[utoipa::path(post, path = "/v1/requests/{id}/release", params(("id" = i64, Path, description = "request id", minimum = 1)), responses(
    (status = 200, description = "the MSS released the disk copy", body = responses::ReleaseBody),
    (status = 400, body = error::ErrorBody), (status = 401, body = error::ErrorBody),
    (status = 403, body = error::ErrorBody), (status = 404, body = error::ErrorBody),
    (status = 409, body = error::ErrorBody), (status = 429, body = error::ErrorBody),
    (status = 502, body = error::ErrorBody), (status = 503, body = error::ErrorBody),
))]
pub(super) async fn release_request(
    State(state): State<AppHandle>,
    caller: Caller,
    raw: Result<Path<String>, PathRejection>,
) -> Result<Json<responses::ReleaseBody>, ApiError> {
    caller.require(
        &[RoleKind::Station, RoleKind::Operator],
        "release staged files",
    )?;
    let office = state.office()?;
    // A release calls the MSS: it counts against the station's rate.
    caller.charge(&state, 1)?;
    let id = id_of(raw)?;
    let r = match office.ledger.request(id).await? {
        Some(r) if caller.0.may_act_for(&r.station) => r,
        _ => return Err(ApiError::not_found(format!("no request {id}"))),
    };
    let conflict = |m: String| ApiError::new(StatusCode::CONFLICT, Some("id"), m);
    if !office.mss.capabilities().release {
        return Err(conflict(format!(
            "the {} adapter keeps no disk copies to release",
            office.mss.name()
        )));
    }
    if r.state != RequestState::Done || r.direction != mss_adapters::Direction::Read {
        return Err(conflict(format!(
            "request {id} is a {} {}: only a finished read has a disk copy to release",
            r.direction.as_str(),
            r.state.as_str()
        )));
    }
    match office.mss.release(&r.transfer_ref()).await {
        Ok(()) => Ok(Json(responses::ReleaseBody { id, released: true })),
        Err(mss_adapters::MssError::Rejected(m)) => Err(conflict(format!("the mss refused: {m}"))),
        Err(mss_adapters::MssError::Unavailable(m) | mss_adapters::MssError::Unreachable(m)) => {
            let mut e = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                format!("the mss cannot be reached: {m}"),
            );
            e.retry_after = Some(5);
            Err(e)
        }
        Err(mss_adapters::MssError::Deferred(m)) => {
            let mut e = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                format!("the mss cannot release it yet: {m}"),
            );
            e.retry_after = Some(30);
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

/// An operator's resolution of an unsettled request (`"unsettled": true`: a send an earlier
/// broker may or may not have made, which this MSS can neither be asked about nor
/// deduplicate): send it again, with the same key and attempt. The operator has looked at the
/// MSS and found it does not hold the transfer, or accepts a second one.
#[utoipa::path(post, path = "/v1/requests/{id}/resend", params(("id" = i64, Path, description = "request id", minimum = 1)), responses(
    (status = 200, description = "sent again, with the same key and attempt", body = responses::ResendBody),
    (status = 400, body = error::ErrorBody), (status = 401, body = error::ErrorBody),
    (status = 403, body = error::ErrorBody), (status = 404, body = error::ErrorBody),
    (status = 409, description = "the request is not unsettled", body = error::ErrorBody),
    (status = 503, body = error::ErrorBody),
))]
pub(super) async fn resend_request(
    State(state): State<AppHandle>,
    caller: Caller,
    raw: Result<Path<String>, PathRejection>,
) -> Result<Json<responses::ResendBody>, ApiError> {
    caller.require(&[RoleKind::Operator], "resend an unsettled request")?;
    let office = state.office()?;
    let id = id_of(raw)?;
    let Some(r) = office.ledger.request(id).await? else {
        return Err(ApiError::not_found(format!("no request {id}")));
    };
    let not_unsettled = || {
        ApiError::new(
            StatusCode::CONFLICT,
            Some("id"),
            format!(
                "request {id} is {} and not unsettled: only an unsettled send is resent",
                r.state.as_str()
            ),
        )
    };
    if !r.unsettled {
        return Err(not_unsettled());
    }
    if !office.ledger.resend_unsettled(id).await? {
        return Err(not_unsettled());
    }
    super::still_in_office(&office)?;
    tracing::info!(
        request_id = id,
        "an operator resolved an unsettled send: sent again"
    );
    Ok(Json(responses::ResendBody { id, resent: true }))
}

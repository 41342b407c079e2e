//! The one error type of the HTTP API. It becomes `{"error": "...", "field": "..."}` with a 4xx
//! or 5xx status; internal details are logged here once and never sent to the client.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use tracing::error;

use crate::ledger::LedgerError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub field: Option<String>,
    /// Seconds for a `Retry-After` header (429, 503).
    pub retry_after: Option<u64>,
    /// The `WWW-Authenticate` of a refused credential (RFC 6750's `error` and
    /// `error_description`); a 401 without one gets the plain challenge.
    pub challenge: Option<String>,
}

/// Every refusal: what is wrong, and the field (or header) at fault.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: String,
    pub field: Option<String>,
}

impl ApiError {
    pub fn new(status: StatusCode, field: Option<&str>, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            field: field.map(str::to_string),
            retry_after: None,
            challenge: None,
        }
    }

    /// A refused credential: 401 (`invalid_token`) or 403 (`insufficient_scope`), with a
    /// `WWW-Authenticate` naming the problem.
    pub fn refused_credential(status: StatusCode, message: impl Into<String>) -> ApiError {
        let message = message.into();
        let error = if status == StatusCode::FORBIDDEN {
            "insufficient_scope"
        } else {
            "invalid_token"
        };
        let description: String = message
            .chars()
            .map(|c| {
                if c == '"' || c == '\\' || c.is_control() {
                    '\''
                } else {
                    c
                }
            })
            .filter(char::is_ascii)
            .collect();
        let mut e = ApiError::new(status, Some("authorization"), message);
        e.challenge = Some(format!(
            "Bearer realm=\"mssbroker\", error=\"{error}\", error_description=\"{description}\""
        ));
        e
    }

    /// 401: no token, or one the broker does not know.
    pub fn unauthenticated() -> ApiError {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            Some("authorization"),
            "a known token is required (Authorization: Bearer TOKEN, or HTTP Basic with the token as the password)",
        )
    }

    /// 403: the token's role may not do this.
    pub fn forbidden(field: &str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, Some(field), message)
    }

    /// 429 with the seconds to wait.
    pub fn too_many(field: &str, message: impl Into<String>, retry_after: u64) -> ApiError {
        let mut e = ApiError::new(StatusCode::TOO_MANY_REQUESTS, Some(field), message);
        e.retry_after = Some(retry_after.max(1));
        e
    }

    /// 422: a field is missing, of the wrong type or out of bounds.
    pub fn field(field: &str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, Some(field), message)
    }

    /// The same refusal for a field inside a batch item: `prefix` (`requests[3].`) before it.
    pub fn prefixed(mut self, prefix: &str) -> ApiError {
        if let Some(f) = &self.field {
            self.field = Some(format!("{prefix}{f}"));
        }
        self
    }

    /// A refusal of a whole body, said of a batch item (`requests[3]`) when `prefix` is set.
    pub fn prefixed_body(mut self, prefix: &str) -> ApiError {
        if !prefix.is_empty() {
            self.field = Some(prefix.trim_end_matches('.').to_string());
        }
        self
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, Some("id"), message)
    }
}

/// The `Retry-After` of a submission refused by a queued-bytes cap: the backlog drains as the
/// MSS takes requests, which is minutes on tape, so a client asked to come back at once would
/// only be refused again.
pub const QUEUED_CAP_RETRY_AFTER_SECS: u64 = 60;

impl From<&crate::ledger::QueuedCapRefused> for ApiError {
    fn from(r: &crate::ledger::QueuedCapRefused) -> Self {
        ApiError::too_many(&r.field, r.message.clone(), QUEUED_CAP_RETRY_AFTER_SECS)
    }
}

impl From<LedgerError> for ApiError {
    fn from(e: LedgerError) -> Self {
        if let LedgerError::OverQueuedCap(r) = &e {
            return ApiError::from(r);
        }
        // Naming the read that holds the copy is `submit`'s, which knows the caller.
        if let LedgerError::OutputInUse(r) = &e {
            return ApiError::new(StatusCode::CONFLICT, Some(r.field), r.to_string());
        }
        error!(error = %e, "ledger error answered with 503");
        let mut e = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            None,
            // Not "nothing was changed": on PostgreSQL a connection lost during COMMIT leaves
            // the outcome unknown; a resubmission with the same key is answered either way.
            "the ledger could not confirm the commit; send it again (with the same \
             client_request_id, a request already committed is answered as it is, never made twice)",
        );
        e.retry_after = Some(1);
        e
    }
}

/// No term of office: 503 with `Retry-After`, saying this broker is a standby.
impl From<crate::office::Standby> for ApiError {
    fn from(s: crate::office::Standby) -> Self {
        let mut e = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, None, s.to_string());
        e.retry_after = Some(crate::office::STANDBY_RETRY_AFTER_SECS);
        e
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Json(ErrorBody {
            error: self.message,
            field: self.field,
        });
        let mut response = (self.status, body).into_response();
        let headers = response.headers_mut();
        if let Some(secs) = self.retry_after {
            headers.insert(header::RETRY_AFTER, secs.into());
        }
        if let Some(value) = self
            .challenge
            .and_then(|c| header::HeaderValue::from_str(&c).ok())
        {
            headers.insert(header::WWW_AUTHENTICATE, value);
        } else if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer, Basic realm=\"mssbroker\""),
            );
        }
        response
    }
}

/// Give a refusal made by axum itself (405 for a method a path does not take, 413 for a body
/// over the limit, 415, a path or query it could not read) the `{"error", "field"}` shape of
/// every other answer, keeping its status and headers (`Allow` of a 405). Answers that are
/// already JSON, and successes, pass unchanged.
pub async fn json_errors(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 4096).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let field = match status {
        StatusCode::METHOD_NOT_ALLOWED => Some("method"),
        StatusCode::PAYLOAD_TOO_LARGE => Some("body"),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => Some("content-type"),
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => Some("headers"),
        _ => None,
    };
    let reason = status
        .canonical_reason()
        .unwrap_or("refused")
        .to_lowercase();
    let message = match (status, text.trim()) {
        // axum adds the `Allow` header after this layer, so it is not read here.
        (StatusCode::METHOD_NOT_ALLOWED, _) => {
            "this path does not take this method; the Allow header lists those it takes".into()
        }
        (_, "") => reason,
        (_, t) => format!("{reason}: {t}"),
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.remove(header::CONTENT_TYPE);
    let fresh = ApiError::new(status, field, message).into_response();
    let (fresh_parts, body) = fresh.into_parts();
    parts.headers.extend(fresh_parts.headers);
    Response::from_parts(parts, body)
}

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
        }
    }

    /// 401: no token, or one the broker does not know.
    pub fn unauthenticated() -> ApiError {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            Some("authorization"),
            "a known bearer token is required (Authorization: Bearer TOKEN)",
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

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, Some("id"), message)
    }
}

impl From<LedgerError> for ApiError {
    fn from(e: LedgerError) -> Self {
        error!(error = %e, "ledger error answered with 503");
        let mut e = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            None,
            "the ledger could not commit; nothing was changed, try again",
        );
        e.retry_after = Some(1);
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
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer, Basic realm=\"mssbroker\""),
            );
        }
        response
    }
}

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
}

#[derive(Debug, Serialize)]
pub struct ErrorBody<'a> {
    pub error: &'a str,
    pub field: Option<&'a str>,
}

impl ApiError {
    pub fn new(status: StatusCode, field: Option<&str>, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            field: field.map(str::to_string),
        }
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
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            None,
            "the ledger could not commit; nothing was changed, try again",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Json(ErrorBody {
            error: &self.message,
            field: self.field.as_deref(),
        });
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            return (self.status, [(header::RETRY_AFTER, "1")], body).into_response();
        }
        (self.status, body).into_response()
    }
}

//! The memory all request bodies being read may take together. Each body is bounded by
//! `limits.max_body_bytes`, but with `server.max_connections` clients each sending one, that is
//! bound times connections (512 x 16 MB = 8 GB with the defaults). A request with a body first
//! takes its declared length (or `max_body_bytes` when it declares none: chunked) from a budget
//! of `limits.max_bodies_in_memory_bytes`, and gives it back with its answer; when the budget
//! stays spent for `WAIT`, the answer is `503 {"field": "body"}` with `Retry-After`. A body
//! declared longer than `max_body_bytes` is refused at once (413), before any of it is read:
//! taking the budget for it would let one client that sends a huge length and then nothing hold
//! every other body off until its read times out.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;

use super::error::ApiError;

/// How long a body waits for room before it is refused.
const WAIT: Duration = Duration::from_secs(2);
/// The budget's unit: permits are KiB, so a u32 count covers 4 TiB.
const UNIT: u64 = 1024;

/// Room for bodies in memory, in KiB.
#[derive(Clone)]
pub struct BodyBudget {
    room: Arc<Semaphore>,
    /// What a body that declares no length is taken to need (KiB).
    undeclared: u32,
    total: u32,
    /// `limits.max_body_bytes`.
    max_body: u64,
}

impl BodyBudget {
    pub fn new(total_bytes: usize, max_body_bytes: usize) -> BodyBudget {
        let total = kib(total_bytes as u64);
        BodyBudget {
            room: Arc::new(Semaphore::new(total as usize)),
            undeclared: kib(max_body_bytes as u64).min(total),
            total,
            max_body: max_body_bytes as u64,
        }
    }

    /// What a request with these headers takes: nothing without a body; `Err(declared)` for a
    /// body declared over `max_body_bytes`.
    fn need(&self, headers: &HeaderMap) -> Result<u32, u64> {
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        match declared {
            Some(0) => Ok(0),
            Some(n) if n > self.max_body => Err(n),
            Some(n) => Ok(kib(n).min(self.total)),
            None if headers.contains_key(header::TRANSFER_ENCODING) => Ok(self.undeclared),
            None => Ok(0),
        }
    }
}

fn kib(bytes: u64) -> u32 {
    u32::try_from(bytes.div_ceil(UNIT)).unwrap_or(u32::MAX)
}

/// The middleware: take the body's room, answer, give it back.
pub async fn bounded(State(budget): State<BodyBudget>, request: Request, next: Next) -> Response {
    let need = match budget.need(request.headers()) {
        Ok(need) => need,
        Err(declared) => return too_large(declared, budget.max_body),
    };
    if need == 0 {
        return next.run(request).await;
    }
    let taken = tokio::time::timeout(WAIT, budget.room.clone().acquire_many_owned(need)).await;
    let Ok(Ok(_room)) = taken else {
        return busy();
    };
    next.run(request).await
}

fn too_large(declared: u64, max: u64) -> Response {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        Some("body"),
        format!(
            "content-length {declared} is over the limit of {max} bytes (limits.max_body_bytes)"
        ),
    )
    .into_response()
}

fn busy() -> Response {
    let mut response = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        Some("body"),
        "too many request bodies are being read at once (limits.max_bodies_in_memory_bytes); \
         try again",
    )
    .into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(k.clone(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn a_body_takes_its_declared_length_or_the_body_limit() {
        let budget = BodyBudget::new(64 << 20, 16 << 20);
        let need = |pairs: &[(header::HeaderName, &str)]| budget.need(&headers(pairs));
        assert_eq!(need(&[]), Ok(0));
        assert_eq!(need(&[(header::CONTENT_LENGTH, "0")]), Ok(0));
        assert_eq!(need(&[(header::CONTENT_LENGTH, "1")]), Ok(1));
        assert_eq!(need(&[(header::CONTENT_LENGTH, "2049")]), Ok(3));
        assert_eq!(
            need(&[(header::TRANSFER_ENCODING, "chunked")]),
            Ok(16 << 10)
        );
        let limit = (16u64 << 20).to_string();
        assert_eq!(need(&[(header::CONTENT_LENGTH, &limit)]), Ok(16 << 10));
        let over = ((16u64 << 20) + 1).to_string();
        assert_eq!(
            need(&[(header::CONTENT_LENGTH, &over)]),
            Err((16 << 20) + 1)
        );
        let huge = need(&[(header::CONTENT_LENGTH, "99999999999999")]);
        assert_eq!(
            huge,
            Err(99_999_999_999_999),
            "refused, not given the budget"
        );
    }

    #[test]
    fn a_body_limit_over_the_budget_takes_at_most_the_budget() {
        let budget = BodyBudget::new(1 << 20, 16 << 20);
        let n = (4u64 << 20).to_string();
        assert_eq!(
            budget.need(&headers(&[(header::CONTENT_LENGTH, &n)])),
            Ok(1 << 10)
        );
    }
}

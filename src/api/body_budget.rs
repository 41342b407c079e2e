//! The memory all request bodies being read may take together. Each body is bounded by
//! `limits.max_body_bytes`, but with `server.max_connections` clients each sending one, that is
//! bound times connections (512 x 16 MB = 8 GB with the defaults). A request with a body first
//! takes its declared length (or `max_body_bytes` when it declares none: chunked) from a budget
//! of `limits.max_bodies_in_memory_bytes`, and gives it back with its answer; when the budget
//! stays spent for `WAIT`, the answer is `503 {"field": "body"}` with `Retry-After`.

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
}

impl BodyBudget {
    pub fn new(total_bytes: usize, max_body_bytes: usize) -> BodyBudget {
        let total = kib(total_bytes as u64);
        BodyBudget {
            room: Arc::new(Semaphore::new(total as usize)),
            undeclared: kib(max_body_bytes as u64).min(total),
            total,
        }
    }

    /// What a request with these headers takes: nothing without a body.
    fn need(&self, headers: &HeaderMap) -> u32 {
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        match declared {
            Some(0) => 0,
            // Over the budget is over max_body_bytes too: the body limit refuses it.
            Some(n) => kib(n).min(self.total),
            None if headers.contains_key(header::TRANSFER_ENCODING) => self.undeclared,
            None => 0,
        }
    }
}

fn kib(bytes: u64) -> u32 {
    u32::try_from(bytes.div_ceil(UNIT)).unwrap_or(u32::MAX)
}

/// The middleware: take the body's room, answer, give it back.
pub async fn bounded(State(budget): State<BodyBudget>, request: Request, next: Next) -> Response {
    let need = budget.need(request.headers());
    if need == 0 {
        return next.run(request).await;
    }
    let taken = tokio::time::timeout(WAIT, budget.room.clone().acquire_many_owned(need)).await;
    let Ok(Ok(_room)) = taken else {
        return busy();
    };
    next.run(request).await
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
        assert_eq!(budget.need(&headers(&[])), 0);
        assert_eq!(budget.need(&headers(&[(header::CONTENT_LENGTH, "0")])), 0);
        assert_eq!(budget.need(&headers(&[(header::CONTENT_LENGTH, "1")])), 1);
        assert_eq!(
            budget.need(&headers(&[(header::CONTENT_LENGTH, "2049")])),
            3
        );
        let chunked = headers(&[(header::TRANSFER_ENCODING, "chunked")]);
        assert_eq!(budget.need(&chunked), 16 << 10);
        let huge = headers(&[(header::CONTENT_LENGTH, "99999999999999")]);
        assert_eq!(
            budget.need(&huge),
            64 << 10,
            "never more than the whole budget"
        );
    }
}

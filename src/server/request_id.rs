//! A span per HTTP request (tower-http's `trace` and `request-id` layers): the request id is the
//! caller's `x-request-id` (printable ASCII, at most [`MAX_LEN`] bytes; anything else is
//! replaced) or a generated UUID, echoed in the response; the span (level INFO, so every line
//! logged while the request is handled names it) carries it with the method and the matched
//! route; the line logged when the answer leaves carries its status and latency (level DEBUG,
//! target `tower_http::trace::on_response`: one line per request is too many for a busy broker
//! by default; a 5xx answer is logged at ERROR by tower-http's `on_failure`, except 503: a
//! deliberate "not now" (`/readyz` not ready, load shed, the MSS unreachable), whose cause, if
//! any, its handler logs; a probe every few seconds must not fill the log with errors). The id
//! is also in scope (`request_scope::request_id`) for the work the request causes on
//! its task, so the ledger can carry it to the writer thread and log it there.

use axum::extract::{MatchedPath, Request};
use axum::http::HeaderName;
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use std::time::Duration;

use axum::http::StatusCode;
use tower_http::classify::ServerErrorsFailureClass;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use tracing::{Level, Span};

/// The header the id travels in, both ways.
pub const HEADER: HeaderName = HeaderName::from_static("x-request-id");
/// Longest caller-given id kept; a longer one is replaced by a generated id.
pub const MAX_LEN: usize = 128;

/// Wrap `router` (every route and the fallback) with the request-id and trace layers.
pub fn layer(router: Router) -> Router {
    let trace = TraceLayer::new_for_http()
        .make_span_with(|request: &Request| {
            let route = request
                .extensions()
                .get::<MatchedPath>()
                .map_or("(none)", |p| p.as_str());
            let id = request
                .headers()
                .get(&HEADER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            tracing::info_span!("http", x_request_id = %id, method = %request.method(), route)
        })
        .on_request(())
        .on_response(DefaultOnResponse::new().level(Level::DEBUG))
        .on_failure(on_failure);
    // Listed inner first: `Router::layer` wraps what is already there.
    router
        .layer(axum::middleware::from_fn(in_scope))
        .layer(trace)
        .layer(PropagateRequestIdLayer::new(HEADER))
        .layer(SetRequestIdLayer::new(HEADER, MakeRequestUuid))
        .layer(axum::middleware::from_fn(drop_unusable))
}

/// A failed answer: a 503 at DEBUG, any other at ERROR (tower-http's default).
fn on_failure(class: ServerErrorsFailureClass, latency: Duration, _span: &Span) {
    let ms = latency.as_millis() as u64;
    match class {
        ServerErrorsFailureClass::StatusCode(StatusCode::SERVICE_UNAVAILABLE) => {
            tracing::debug!(classification = %class, latency_ms = ms, "response failed")
        }
        _ => tracing::error!(classification = %class, latency_ms = ms, "response failed"),
    }
}

/// A caller's id that is not short printable ASCII is dropped, so a generated one replaces it.
async fn drop_unusable(mut request: Request, next: Next) -> Response {
    let usable = request.headers().get(&HEADER).is_none_or(|v| {
        let b = v.as_bytes();
        !b.is_empty() && b.len() <= MAX_LEN && b.iter().all(|c| c.is_ascii_graphic())
    });
    if !usable {
        request.headers_mut().remove(&HEADER);
    }
    next.run(request).await
}

/// Run the handler with the request's id in scope (see `request_scope::request_id`).
async fn in_scope(request: Request, next: Next) -> Response {
    let id = request
        .headers()
        .get(&HEADER)
        .and_then(|v| v.to_str().ok())
        .map(std::sync::Arc::<str>::from);
    match id {
        Some(id) => crate::request_scope::with_request_id(id, next.run(request)).await,
        None => next.run(request).await,
    }
}

//! The answers the simulator gives instead of its own when told to ([`BadAnswer`]): garbled,
//! stalled, a proxy's 404, an over-size body, a huge error body full of newlines. Bodies are
//! streamed, and the bytes actually sent are counted, so a test can tell how much a client read.
//!
//! The simulator's bad answers to submissions (`protocol::BadAnswer`: garbled, stalled, a proxy's
//! 404, an over-size body (streamed, bytes sent counted), a huge error body full of newlines),
//! given before or after queuing the transfers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream::{self, StreamExt};

use crate::protocol::{BadAnswer, ErrorBody};

/// Size of one chunk of an over-size body.
const CHUNK: usize = 64 * 1024;

/// The answer `bad` stands for; `sent` counts the body bytes that went out.
pub fn respond(bad: &BadAnswer, sent: Arc<AtomicU64>) -> Response {
    match bad {
        BadAnswer::Garbled => json_text(StatusCode::OK, "{\"results\": [{\"mss_id\": \u{0}garbled"),
        BadAnswer::Stalled => {
            let start = stream::once(async {
                Ok::<_, std::io::Error>(Bytes::from_static(b"{\"results\": ["))
            });
            let body = Body::from_stream(start.chain(stream::pending()));
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                body,
            )
                .into_response()
        }
        BadAnswer::ProxyNotFound => (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "text/html")],
            "<html><head><title>404 Not Found</title></head><body><center><h1>404 Not Found</h1>\
             </center><hr><center>nginx</center></body></html>\n",
        )
            .into_response(),
        BadAnswer::Oversized { bytes } => oversized(*bytes, sent),
        BadAnswer::ErrorBody { status, bytes } => {
            let status = StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_REQUEST);
            (
                status,
                Json(ErrorBody {
                    error: forging(*bytes),
                }),
            )
                .into_response()
        }
    }
}

fn json_text(status: StatusCode, text: &'static str) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], text).into_response()
}

/// `bytes` of JSON white space (no `Content-Length`), counted into `sent` as each chunk goes.
fn oversized(bytes: u64, sent: Arc<AtomicU64>) -> Response {
    let chunks = stream::unfold(bytes, move |left| {
        let sent = sent.clone();
        async move {
            if left == 0 {
                return None;
            }
            let n = left.min(CHUNK as u64);
            sent.fetch_add(n, Ordering::Relaxed);
            let chunk = Bytes::from(vec![b' '; n as usize]);
            Some((Ok::<_, std::io::Error>(chunk), left - n))
        }
    });
    let body = Body::from_stream(chunks);
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// A message of `bytes` bytes whose lines pretend to be the broker's own log lines.
pub fn forging(bytes: usize) -> String {
    let line = "\n2026-01-01T00:00:00.000000Z  INFO mssbroker: FORGED log line\r\x1b[2K";
    let mut text = String::from("refused");
    while text.len() < bytes {
        text.push_str(line);
    }
    text.truncate(bytes.max(1));
    text
}

//! Calibration for the benchmarks: axum parsing the same JSON body and answering 202, with no
//! database. The broker's HTTP figures are read against this floor measured on the same machine:
//!
//!     cargo run --release --example axum_floor -- 127.0.0.1:18080 &
//!     wrk -t2 -c64 -d10s -s bench/wrk-submit.lua --latency http://127.0.0.1:18080

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:18080".into());
    let app = Router::new().route(
        "/v1/requests",
        post(|body: Bytes| async move {
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let id = v["size_bytes"].as_u64().unwrap_or(0);
            (
                StatusCode::ACCEPTED,
                Json(serde_json::json!({"id": id, "state": "accepted"})),
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("axum floor on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await
}

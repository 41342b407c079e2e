//! The HTTP API (axum, JSON, under `/v1`). Handlers parse and classify a request off the ledger
//! writer (so JSON and classification cost the writer nothing), then hand typed requests to the
//! ledger and answer 202 only after the commit.
//!
//! The router, the OpenAPI document and the handlers' shared state (`api.rs`); the caller's
//! credential (an `Authorization` header, else the client certificate) and rate limit
//! (`caller.rs`); handlers by resource: `submit.rs` (`POST /v1/requests` and `/batch`; `prepare`
//! classifies, `mss_can_take` refuses what the adapter cannot take), `requests.rs` (one request by
//! id: `GET`, cancel, release through the adapter), `reads.rs` (`/healthz`, `/v1/mss`,
//! `/v1/groups`, `/v1/report`, `/report`, `/metrics`), `admin.rs` (`POST /v1/admin/reload` through
//! the `live_settings::Reload` trait, `POST /v1/admin/cancel-group`). `request.rs` is the one
//! definition of a request: `SubmitRequest` is the raw serde struct a body is read into, the
//! OpenAPI schema and what the CLI serialises; `validate` makes the typed `RequestInput`
//! (`check_text` is what every station string must be, `check_operand` what `file`, `local_file`
//! and `bfid` must be too); `request/given.rs` how each field takes a JSON value (the API's wording
//! of a wrong type); `request/read.rs` names a refused body's fault (`serde_path_to_error`);
//! `request/batch.rs` (`batch_items` reads a batch as `&RawValue` slices, counted while read).
//! `responses.rs`: the answers, built from ledger and adapter types; `schemas.rs`: the API's
//! mirrors of `domain::Class` and `RequestState` (`ClassBody`, `StateBody`). `ApiError` ->
//! `{"error", "field"}` (`error.rs`; the `json_errors` layer gives axum's own refusals that shape).
//! Each handler carries its `#[utoipa::path]`; `router_and_openapi` registers handlers through
//! utoipa-axum so the router and the OpenAPI document come from the same attributes.
//! `body_budget.rs`: the memory all bodies being read may take together
//! (`limits.max_bodies_in_memory_bytes`, a semaphore of KiB taken by declared length; 503 when it
//! stays spent). `InputLimits` is `domain::limits`'s.

mod admin;
mod body_budget;
mod caller;
pub mod error;
mod reads;
pub mod request;
mod requests;
pub mod responses;
pub mod schemas;
mod submit;

pub use crate::domain::limits::InputLimits;

use std::sync::Arc;

use crate::office::{Office, OfficeSlot};
use axum::extract::DefaultBodyLimit;
use axum::http::{header, StatusCode};
use axum::routing::get;
use axum::Router;
use error::ApiError;

/// What the handlers share: the server's parts for the process's life, and the term of office
/// in force (`office`), if any.
#[derive(Clone)]
pub struct AppState {
    /// The ledger, the MSS adapter, the dispatcher's cancels and readiness of the term in force;
    /// empty on a standby (writes and reads answer 503, see [`AppState::office`]).
    pub office: Arc<OfficeSlot>,
    /// The broker's clock: share figures are computed for its now.
    pub clock: Arc<dyn crate::clock::Clock>,
    /// In-process metrics, exposed with the ledger's figures at `/metrics`.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// What a reload may change: the policy classification uses, the station rate limits, the
    /// loaded configuration's stamp.
    pub live: Arc<crate::live_settings::LiveSettings>,
    /// Reloads the configuration (`POST /v1/admin/reload`).
    pub reloader: Arc<dyn crate::live_settings::Reload>,
    pub limits: InputLimits,
    /// The client CAs a forwarded client certificate is verified against (and the listener's
    /// TLS material), when `[server.tls]` is set.
    pub tls: Option<crate::tls::TlsSource>,
    /// Whose `X-Forwarded-For` and `X-SSL-Client-Cert` are believed (`[server]
    /// trusted_proxies`, behind a proxy).
    pub trusted_proxies: Arc<[crate::domain::server::IpNet]>,
    /// Refused credentials: logged once, rate-limited per address.
    pub auth_failures: Arc<crate::auth::failures::FailureGate>,
}

impl AppState {
    /// The term of office in force, or 503 "standby" with `Retry-After`.
    pub fn office(&self) -> Result<Arc<Office>, ApiError> {
        self.office.current().map_err(ApiError::from)
    }
}

/// A write's answer only while `office` still holds: a term that ended while the ledger
/// answered acknowledges nothing (503; a resubmission with the same `client_request_id` finds
/// what was committed).
pub fn still_in_office(office: &Office) -> Result<(), ApiError> {
    if office.holds() {
        return Ok(());
    }
    let mut e = ApiError::new(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        None,
        "this broker stopped leading before it could answer: the outcome is not known; \
         resubmit with the same client_request_id to the leader",
    );
    e.retry_after = Some(crate::office::STANDBY_RETRY_AFTER_SECS);
    Err(e)
}

/// The state as the handlers hold it: one `Arc`, so the clone axum makes per request (and per
/// extractor) is one counter, not one per field (the field-wise clone and drop were 5% of the
/// broker's CPU under single-request ingest).
pub type AppHandle = Arc<AppState>;

/// The API's routes and its OpenAPI document, built together from the handlers' `#[utoipa::path]`
/// attributes, so neither can drift from the other.
pub fn router_and_openapi(state: AppState) -> (Router, utoipa::openapi::OpenApi) {
    let body_limit = state.limits.max_body_bytes;
    let budget = body_budget::BodyBudget::new(state.limits.max_bodies_in_memory_bytes, body_limit);
    let (router, mut api) = utoipa_axum::router::OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(utoipa_axum::routes!(submit::submit_one))
        .routes(utoipa_axum::routes!(submit::submit_batch))
        .routes(utoipa_axum::routes!(
            requests::get_request,
            requests::cancel_request
        ))
        .routes(utoipa_axum::routes!(requests::release_request))
        .routes(utoipa_axum::routes!(requests::resend_request))
        .routes(utoipa_axum::routes!(reads::mss))
        .routes(utoipa_axum::routes!(reads::groups))
        .routes(utoipa_axum::routes!(reads::report))
        .routes(utoipa_axum::routes!(reads::metrics))
        .routes(utoipa_axum::routes!(reads::report_page))
        .routes(utoipa_axum::routes!(reads::healthz))
        .routes(utoipa_axum::routes!(reads::readyz))
        .routes(utoipa_axum::routes!(admin::reload))
        .routes(utoipa_axum::routes!(admin::cancel_group))
        .split_for_parts();
    api.info.version = env!("CARGO_PKG_VERSION").to_string();
    let document = Arc::new(api.to_json().unwrap_or_default());
    let router = router
        .route(
            "/v1/openapi.json",
            get(move || {
                let document = document.clone();
                async move {
                    (
                        [(header::CONTENT_TYPE, "application/json")],
                        (*document).clone(),
                    )
                }
            }),
        )
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, None, "no such endpoint") })
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn_with_state(
            budget,
            body_budget::bounded,
        ))
        .layer(axum::middleware::map_response(error::json_errors))
        .with_state(Arc::new(state));
    (router, api)
}

/// The API's routes.
pub fn router(state: AppState) -> Router {
    router_and_openapi(state).0
}

#[derive(utoipa::OpenApi)]
#[openapi(
    info(title = "mssbroker", description = "Fair-share broker for file-transfer requests in front of a tape mass storage system"),
    modifiers(&BearerAuth),
    security(("bearer" = []), ("basic" = [])),
    components(schemas(error::ErrorBody))
)]
struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, api: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = api.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        // Any user name, the token as the password: accepted wherever a bearer token is.
        components.add_security_scheme(
            "basic",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Basic).build()),
        );
    }
}

use utoipa::OpenApi as _;

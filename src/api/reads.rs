//! What readers look at: liveness and readiness, the MSS adapter, the share tree, the report (JSON and HTML)
//! and the metrics.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::caller::Caller;
use super::error::{self, ApiError};
use super::responses;
use super::{AppHandle, AppState};
use crate::auth::RoleKind;
use crate::report::range::BucketRule;
use crate::shares::view::{LoadedConfig, SharesView};

/// Liveness; needs no token.
#[utoipa::path(get, path = "/healthz", security(()), responses((status = 200, body = responses::Health)))]
pub(super) async fn healthz() -> Json<responses::Health> {
    Json(responses::Health {
        status: "ok".into(),
    })
}

/// Readiness; needs no token. 200 when this broker leads, the ledger writer is alive and
/// recent, the database file is the configured one and writable, and the MSS answered the
/// latest call; else 503 with what is wrong (with `standby` when it does not lead).
#[utoipa::path(get, path = "/readyz", security(()), responses(
    (status = 200, body = crate::readiness::ReadyBody),
    (status = 503, body = crate::readiness::ReadyBody),
))]
pub(super) async fn readyz(State(state): State<AppHandle>) -> Response {
    let body = match state.office.current() {
        Ok(office) => office.readiness.check(),
        Err(standby) => crate::readiness::ReadyBody::standby(standby.epoch, standby.to_string()),
    };
    let status = if body.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

/// The MSS adapter and what it can do.
#[utoipa::path(get, path = "/v1/mss", responses(
    (status = 200, body = responses::MssBody),
    (status = 401, body = error::ErrorBody), (status = 403, body = error::ErrorBody),
    (status = 503, body = error::ErrorBody),
))]
pub(super) async fn mss(
    State(state): State<AppHandle>,
    caller: Caller,
) -> Result<Json<responses::MssBody>, ApiError> {
    caller.require(
        &[RoleKind::Station, RoleKind::Reader, RoleKind::Operator],
        "read the mss capabilities",
    )?;
    let office = state.office()?;
    Ok(Json(
        responses::MssBody::new(
            office.mss.name(),
            &office.mss.capabilities(),
            office.mss.room(),
        )
        .cancel_reaches_mss(office.mss.cancel_reaches_mss()),
    ))
}

/// `GET /v1/groups` query.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct GroupsQuery {
    /// The instant to compute the figures for (RFC 3339 or epoch milliseconds); default now.
    pub at: Option<String>,
}

/// The share tree with every node's target, usage under the configured model, Fair Tree rank,
/// SAM class and cap state: the figures of `mssbroker shares`; and `config`, the loaded
/// configuration's SHA-256 and load time.
#[utoipa::path(get, path = "/v1/groups", params(GroupsQuery), responses(
    (status = 200, body = SharesView),
    (status = 400, body = error::ErrorBody),
    (status = 401, body = error::ErrorBody), (status = 403, body = error::ErrorBody),
    (status = 503, body = error::ErrorBody),
))]
pub(super) async fn groups(
    State(state): State<AppHandle>,
    caller: Caller,
    query: Result<Query<GroupsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    caller.require(
        &[RoleKind::Reader, RoleKind::Operator],
        "read group figures",
    )?;
    let bad = |m: String| ApiError::new(StatusCode::BAD_REQUEST, Some("at"), m);
    let query = query_of(query)?;
    let now = state.clock.now_ms();
    let at_ms = match query.at.as_deref() {
        None => now,
        Some(s) => crate::clock::parse_instant(s).map_err(bad)?,
    };
    // Under the reload gate: the figures and the stamp are of the same configuration.
    let (gate, live) = state.live.deciding().await;
    let mut view = state.office()?.ledger.shares(at_ms, now).await?;
    drop(gate);
    view.config = Some(LoadedConfig {
        origin: live.stamp.origin.clone(),
        sha256: live.stamp.sha256.clone(),
        loaded_at: crate::shares::view::format_ms(live.stamp.loaded_at_ms),
        loaded_at_ms: live.stamp.loaded_at_ms,
    });
    Ok(Json(view).into_response())
}

/// `GET /v1/report` query.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ReportQuery {
    /// Start (RFC 3339 or epoch ms); default 7 days before `until`, not before 1970. Widened to
    /// a whole hour.
    pub since: Option<String>,
    /// End (exclusive); default now.
    pub until: Option<String>,
    /// `hour`, `day` or `week`; default by the range's length: hour up to 2 days, day up to 90
    /// days, week beyond.
    pub bucket: Option<String>,
}

/// `GET /report` query: `GET /v1/report`'s, and whether to show a table per bucket.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ReportPageQuery {
    /// Start (RFC 3339 or epoch ms); default 7 days before `until`, not before 1970. Widened to
    /// a whole hour.
    pub since: Option<String>,
    /// End (exclusive); default now.
    pub until: Option<String>,
    /// `hour`, `day` or `week`; default hour up to 7 days, day up to 90 days, week beyond.
    pub bucket: Option<String>,
    /// `true` adds a table per bucket with activity (same columns as the totals); `false`
    /// (default) leaves them out. (The JSON report always carries every bucket in `series`.)
    pub buckets: Option<String>,
}

/// A query's parameters, or a 400 naming the parameter at fault (unknown or given twice), else
/// `query`.
fn query_of<T>(query: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    let Query(q) = query.map_err(|e| {
        let text = e.body_text();
        let field = parameter_named(&text).unwrap_or_else(|| "query".to_string());
        ApiError::new(StatusCode::BAD_REQUEST, Some(&field), text)
    })?;
    Ok(q)
}

/// The parameter serde names in an unknown- or duplicate-field refusal.
fn parameter_named(text: &str) -> Option<String> {
    ["unknown field `", "duplicate field `"]
        .iter()
        .find_map(|lead| {
            let rest = &text[text.find(lead)? + lead.len()..];
            let name = &rest[..rest.find('`')?];
            (!name.is_empty()).then(|| name.to_string())
        })
}

/// The range a report query asks for (default bucket by `rule`) and the broker's now.
fn report_range(
    state: &AppState,
    q: &ReportQuery,
    rule: BucketRule,
) -> Result<(crate::report::ReportRange, i64), ApiError> {
    let now = state.clock.now_ms();
    let range = crate::report::range::parse_range_for(
        rule,
        q.since.as_deref(),
        q.until.as_deref(),
        q.bucket.as_deref(),
        now,
        state.limits.max_report_buckets,
    )
    .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, Some(e.field), e.message))?;
    Ok((range, now))
}

/// The share report over a time range: per group and tree node, target vs achieved share,
/// requests by outcome, pending and held, front/back, wait percentiles; per priority class the
/// same; the same per bucket; and the current usage windows (`diagnose`).
#[utoipa::path(get, path = "/v1/report", params(ReportQuery), responses(
    (status = 200, body = crate::report::Report),
    (status = 400, body = error::ErrorBody),
    (status = 401, body = error::ErrorBody), (status = 403, body = error::ErrorBody),
    (status = 503, body = error::ErrorBody),
))]
pub(super) async fn report(
    State(state): State<AppHandle>,
    caller: Caller,
    query: Result<Query<ReportQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    caller.require(&[RoleKind::Reader, RoleKind::Operator], "read reports")?;
    let (range, now) = report_range(&state, &query_of(query)?, BucketRule::Table)?;
    Ok(Json(crate::report::read(&state.office()?.ledger, range, now).await?).into_response())
}

/// Prometheus metrics: OpenMetrics text to a client whose `Accept` asks for it (Prometheus
/// does), else Prometheus' text format 0.0.4 (curl, `promtool check metrics`): per group requests by state and bytes
/// done (counters), pending and held requests, usage and target share (gauges); ledger commit
/// latency and commands per commit and MSS call latency (histograms); waits from acceptance to
/// the first MSS start per group, from the ledger (histogram).
#[utoipa::path(get, path = "/metrics", responses(
    (status = 200, content(
        (String = "text/plain"),
        (String = "application/openmetrics-text"),
    )),
    (status = 401, body = error::ErrorBody), (status = 403, body = error::ErrorBody),
    (status = 503, body = error::ErrorBody),
))]
pub(super) async fn metrics(
    State(state): State<AppHandle>,
    caller: Caller,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    caller.require(&[RoleKind::Reader, RoleKind::Operator], "read metrics")?;
    let now_ms = state.clock.now_ms();
    let Ok(office) = state.office.current() else {
        // A standby has no ledger: its own metrics (the role among them) only.
        return Ok(exposition(&headers, state.metrics.encode_process()));
    };
    let figures = office.ledger.metric_figures(now_ms).await?;
    let (ledger, metrics) = (office.ledger.clone(), state.metrics.clone());
    // A task of its own: the first read after a start sums every hour, and a scraper that
    // times out meanwhile must not make the next scrape read them all again.
    let waits = tokio::spawn(async move { metrics.waits.read(&ledger, now_ms).await })
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                None,
                format!("reading the waits: {e}"),
            )
        })??;
    let text = state.metrics.encode(&figures, &waits);
    Ok(exposition(&headers, text))
}

/// `text` (OpenMetrics) as the `Accept` header asks for it.
fn exposition(headers: &HeaderMap, text: String) -> Response {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !crate::metrics::wants_openmetrics(accept) {
        let text = crate::metrics::prometheus_text(&text);
        let kind = "text/plain; version=0.0.4; charset=utf-8";
        return ([(header::CONTENT_TYPE, kind)], text).into_response();
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// The share report as an HTML page for people: the table, charts of share, bytes, pending
/// requests and waits over time, and the usage windows. Same parameters as `/v1/report`, but
/// without `bucket` a range up to 7 days is drawn by the hour; `buckets=true` adds a table per
/// bucket with activity.
/// Browsers may log in with HTTP Basic: any user name, the token as the password.
#[utoipa::path(get, path = "/report", params(ReportPageQuery), responses(
    (status = 200, content_type = "text/html", body = String),
    (status = 400, body = error::ErrorBody),
    (status = 401, body = error::ErrorBody), (status = 403, body = error::ErrorBody),
    (status = 503, body = error::ErrorBody),
))]
pub(super) async fn report_page(
    State(state): State<AppHandle>,
    caller: Caller,
    query: Result<Query<ReportPageQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    caller.require(&[RoleKind::Reader, RoleKind::Operator], "read reports")?;
    let q = query_of(query)?;
    let per_bucket = match q.buckets.as_deref() {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                Some("buckets"),
                format!("must be true or false, got `{other}`"),
            ))
        }
    };
    let range_query = ReportQuery {
        since: q.since,
        until: q.until,
        bucket: q.bucket,
    };
    let (range, now) = report_range(&state, &range_query, BucketRule::Chart)?;
    let report = crate::report::read(&state.office()?.ledger, range, now).await?;
    let html = crate::report::html::page(&report, now, per_bucket).map_err(|e| {
        tracing::error!(error = %e, "report page not rendered");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            None,
            "report page not rendered",
        )
    })?;
    Ok(axum::response::Html(html).into_response())
}

#[cfg(test)]
mod tests {
    use super::parameter_named;

    #[test]
    fn a_refused_query_names_its_parameter() {
        let unknown = "Failed to deserialize query string: unknown field `x`, expected `at`";
        assert_eq!(parameter_named(unknown).as_deref(), Some("x"));
        let twice = "Failed to deserialize query string: duplicate field `at`";
        assert_eq!(parameter_named(twice).as_deref(), Some("at"));
        assert_eq!(
            parameter_named("Failed to deserialize query string: invalid"),
            None
        );
        assert_eq!(parameter_named("unknown field ``"), None);
        assert_eq!(parameter_named("unknown field `open"), None);
    }
}

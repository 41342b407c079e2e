//! Who is calling: the token of a request, its role and, for a station, its rate limit.

use axum::http::header;

use super::error::ApiError;
use super::{AppState, Shared};
use crate::auth::{Principal, Role, RoleKind};

/// The authenticated caller of a request.
pub struct Caller(pub Principal);

impl axum::extract::FromRequestParts<Shared> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &Shared,
    ) -> Result<Self, Self::Rejection> {
        let live = state.live.get();
        let Some(tokens) = &live.tokens else {
            return Ok(Caller(Principal::anonymous_operator()));
        };
        let header = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let token = header.and_then(bearer_or_basic_token);
        match token.as_deref().and_then(|t| tokens.authenticate(t)) {
            Some(p) => Ok(Caller(p.clone())),
            None => Err(ApiError::unauthenticated()),
        }
    }
}

/// The token of an `Authorization` header: `Bearer TOKEN`, or `Basic` with the token as the
/// password (any user name), so a browser's login prompt can open the HTML report. Both are
/// accepted on every endpoint, with the same roles (README, Authentication).
fn bearer_or_basic_token(h: &str) -> Option<String> {
    use base64::Engine as _;
    if let Some(t) = h
        .strip_prefix("Bearer ")
        .or_else(|| h.strip_prefix("bearer "))
    {
        return Some(t.trim().to_string());
    }
    let encoded = h
        .strip_prefix("Basic ")
        .or_else(|| h.strip_prefix("basic "))?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (_, password) = text.split_once(':')?;
    Some(password.to_string())
}

impl Caller {
    /// 403 unless the caller has one of `roles`.
    pub(super) fn require(&self, roles: &[RoleKind], what: &str) -> Result<(), ApiError> {
        if roles.contains(&self.0.role.kind()) {
            return Ok(());
        }
        Err(ApiError::forbidden(
            "authorization",
            format!("a {} token may not {what}", self.0.role.name()),
        ))
    }

    /// Charge `n` requests to a station token's rate limit (other roles are not limited).
    pub(super) fn charge(&self, state: &AppState, n: usize) -> Result<(), ApiError> {
        if !matches!(self.0.role, Role::Station(_)) {
            return Ok(());
        }
        let cost = std::num::NonZeroU32::new(n.min(u32::MAX as usize) as u32)
            .unwrap_or(std::num::NonZeroU32::MIN);
        let live = state.live.get();
        match live.station_limits.check_key_n(&self.0.name, cost) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(not_until)) => {
                let now = governor::clock::Clock::now(&governor::clock::DefaultClock::default());
                let wait = not_until.wait_time_from(now);
                Err(ApiError::too_many(
                    "authorization",
                    format!(
                        "this station token is over its request rate; retry in {:.1} s",
                        wait.as_secs_f64()
                    ),
                    wait.as_secs_f64().ceil() as u64,
                ))
            }
            Err(_) => Err(ApiError::too_many(
                "requests",
                format!(
                    "a batch of {n} is more than this token's burst ({})",
                    live.station_rate.1
                ),
                1,
            )),
        }
    }

    /// 403 unless the caller may submit for `station`.
    pub(super) fn may_submit_for(&self, station: &str, field: &str) -> Result<(), ApiError> {
        if self.0.may_act_for(station) {
            return Ok(());
        }
        Err(ApiError::forbidden(
            field,
            format!("this token may not submit for station `{station}`"),
        ))
    }
}

//! Who is calling: the token of a request, its role and, for a station, its rate limit.

use std::net::IpAddr;

use axum::http::{header, StatusCode};

use super::error::ApiError;
use super::{AppHandle, AppState};
use crate::auth::jwt::{TokenRefused, TokenScope};
use crate::auth::{x509, Principal, Role, RoleKind};
use crate::domain::server::IpNet;
use crate::live_settings::Live;
use crate::tls::Peer;

/// The authenticated caller of a request.
pub struct Caller(pub Principal);

impl axum::extract::FromRequestParts<AppHandle> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &AppHandle,
    ) -> Result<Self, Self::Rejection> {
        let live = state.live.get();
        if !live.auth_on() {
            return Ok(Caller(Principal::anonymous_operator()));
        }
        let peer = parts.extensions.get::<Peer>();
        let ip = client_ip(peer, &parts.headers, &state.trusted_proxies);
        if let Some(wait) = state.auth_failures.blocked(ip) {
            return Err(too_many_failures(wait));
        }
        let header = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let attempt = match header.and_then(bearer_or_basic_token) {
            Some(token) => Some(by_token(&live, &token, state.clock.now_ms()).await),
            None => by_certificate(&live, peer, &parts.headers, state),
        };
        match attempt {
            Some(Ok(p)) => Ok(Caller(p)),
            None => Err(ApiError::unauthenticated()),
            Some(Err(refused)) => {
                let blocked = (refused.status != StatusCode::SERVICE_UNAVAILABLE)
                    .then(|| {
                        state.auth_failures.failed(
                            ip,
                            &refused.fingerprint,
                            refused.kind,
                            &refused.subject,
                            &refused.message,
                        )
                    })
                    .flatten();
                match blocked {
                    Some(wait) => Err(too_many_failures(wait)),
                    None if refused.status == StatusCode::SERVICE_UNAVAILABLE => {
                        let mut e =
                            ApiError::new(refused.status, Some("authorization"), refused.message);
                        e.retry_after = Some(5);
                        Err(e)
                    }
                    None if refused.plain => Err(ApiError::unauthenticated()),
                    None => Err(ApiError::refused_credential(
                        refused.status,
                        refused.message,
                    )),
                }
            }
        }
    }
}

/// A refused credential: the answer's status and text, and what the log may say of it.
struct Refused {
    status: StatusCode,
    message: String,
    /// What identifies the credential for "logged once": hashed before it is kept.
    fingerprint: Vec<u8>,
    kind: &'static str,
    /// What the log may name (a certificate's subject; never a token).
    subject: String,
    /// An unknown opaque token: the plain challenge (the token file's refusal as before).
    plain: bool,
}

/// The caller of a bearer token: the token file first, then, for a JWT, its issuer.
async fn by_token(live: &Live, token: &str, now_ms: i64) -> Result<Principal, Refused> {
    if let Some(p) = live.tokens.as_ref().and_then(|t| t.authenticate(token)) {
        return Ok(p.clone());
    }
    let refused = |status, message: String, kind| Refused {
        status,
        message,
        fingerprint: token.as_bytes().to_vec(),
        kind,
        subject: String::new(),
        plain: false,
    };
    if live.issuers.is_empty() || token.split('.').count() != 3 {
        let mut unknown = refused(StatusCode::UNAUTHORIZED, "unknown token".into(), "token");
        unknown.plain = true;
        return Err(unknown);
    }
    let now = u64::try_from(now_ms / 1000).unwrap_or(0);
    live.issuers.verify(token, now).await.map_err(|e| {
        let status = match e {
            TokenRefused::Invalid(_) => StatusCode::UNAUTHORIZED,
            TokenRefused::Forbidden(_) => StatusCode::FORBIDDEN,
            TokenRefused::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        };
        refused(status, e.to_string(), "jwt")
    })
}

/// The caller of a client certificate: the connection's own, or one a trusted proxy forwarded
/// (`X-SSL-Client-Cert`, URL-encoded PEM as nginx's `$ssl_client_escaped_cert`); `None`
/// without one.
fn by_certificate(
    live: &Live,
    peer: Option<&Peer>,
    headers: &axum::http::HeaderMap,
    state: &AppState,
) -> Option<Result<Principal, Refused>> {
    let forwarded = peer
        .filter(|p| trusted(p.addr.ip(), &state.trusted_proxies))
        .and_then(|_| headers.get(FORWARDED_CERT))
        .map(|v| forwarded_cert(v.as_bytes(), state));
    let cert = forwarded.or_else(|| peer.and_then(|p| p.cert.as_deref().cloned()))?;
    let refused = |status, message: String, subject: String| Refused {
        status,
        fingerprint: format!("{subject}\n{message}").into_bytes(),
        message,
        kind: "certificate",
        subject,
        plain: false,
    };
    Some(match cert {
        Ok(dn) => x509::principal_for(&live.x509, &dn).ok_or_else(|| {
            refused(
                StatusCode::FORBIDDEN,
                format!("certificate subject `{dn}` is not given a role by [[auth.x509]]"),
                dn.clone(),
            )
        }),
        Err(why) => Err(refused(StatusCode::UNAUTHORIZED, why, String::new())),
    })
}

/// The header a trusted proxy forwards the client's certificate in.
const FORWARDED_CERT: &str = "x-ssl-client-cert";

fn forwarded_cert(value: &[u8], state: &AppState) -> crate::tls::PeerCert {
    let pem: Vec<u8> = percent_encoding::percent_decode(value).collect();
    let trust = state.tls.as_ref().and_then(|t| t.current().clients.clone());
    match trust {
        Some(trust) => trust.verify_pem(&pem),
        None => Err(
            "a forwarded client certificate cannot be verified: server.tls.client_ca is not set"
                .into(),
        ),
    }
}

/// The client's address: the connection's, or, from a trusted proxy, the last address of its
/// `X-Forwarded-For` (the one the proxy itself added).
fn client_ip(peer: Option<&Peer>, headers: &axum::http::HeaderMap, proxies: &[IpNet]) -> IpAddr {
    let Some(peer) = peer else {
        return IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);
    };
    let ip = peer.addr.ip();
    if !trusted(ip, proxies) {
        return ip;
    }
    headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .next_back()
        .and_then(|v| v.rsplit(',').next())
        .and_then(|a| a.trim().parse::<IpAddr>().ok())
        .unwrap_or(ip)
}

fn trusted(ip: IpAddr, proxies: &[IpNet]) -> bool {
    proxies.iter().any(|n| n.contains(ip))
}

fn too_many_failures(wait: std::time::Duration) -> ApiError {
    ApiError::too_many(
        "authorization",
        format!(
            "too many refused credentials from this address; retry in {:.0} s",
            wait.as_secs_f64().ceil()
        ),
        wait.as_secs_f64().ceil() as u64,
    )
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

    /// 403 (naming the file) unless a scoped token's storage scopes cover `file` for the
    /// `direction` of the request: `storage.stage` for a read from tape, `storage.create` for a
    /// write.
    pub(super) fn may_transfer(
        &self,
        file: &str,
        direction: mss_adapters::Direction,
        field: &str,
    ) -> Result<(), ApiError> {
        let Some(scope) = &self.0.scope else {
            return Ok(());
        };
        let (paths, scope_name) = match direction {
            mss_adapters::Direction::Write => (&scope.create, "storage.create"),
            _ => (&scope.stage, "storage.stage"),
        };
        if TokenScope::covers(paths, file) {
            return Ok(());
        }
        let mut e = ApiError::refused_credential(
            StatusCode::FORBIDDEN,
            format!("`{file}` is outside the token's {scope_name} scope paths"),
        );
        e.field = Some(field.to_string());
        Err(e)
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

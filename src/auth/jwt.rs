//! WLCG JWT bearer tokens (WLCG Common JWT Profiles, version 1.0 of the document, with
//! `storage.stage` as its later revision defines it: staging only, not reading), verified
//! offline against the keys of the `[[auth.issuers]]` that issued them.
//!
//! - Keys: the issuer's `.well-known/openid-configuration` names its `jwks_uri`; the key set is
//!   fetched over HTTPS (verified against the issuer's `ca_file`, else the system roots),
//!   cached for [`KEYS_FRESH`], and fetched again when a token names a `kid` the cache does
//!   not hold; a fetch that still does not find it holds further ones back for
//!   [`UNKNOWN_KID_GAP`] (a stream of made-up `kid`s does not become a stream of fetches). Symmetric (`oct`) keys in a key set are ignored.
//! - Algorithms: RS256/384/512, PS256/384/512, ES256/384, EdDSA, and only the one the key's type
//!   allows; `alg: none` and HMAC are refused before any key is looked at.
//! - Times: `exp` (required), `nbf` and `iat` checked with [`SKEW_SECS`] of clock skew.
//! - `aud`: with `audience` set, the token's `aud` must name it or WLCG's "any" audience.
//! - Roles: `wlcg.groups` through the issuer's `groups` table (the strongest role wins:
//!   operator, mss, reader, station); `storage.stage:/path` and `storage.create:/path` scopes
//!   make the token a station's, limited to those paths (stage: requests to read a file from
//!   tape; create: requests to write one). The station is the `station_claim` claim (`sub` by
//!   default).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;
use tracing::{info, warn};

pub use crate::domain::auth::IssuerSettings;

use super::{Principal, Role, RoleKind};

/// How long fetched keys are used before they are fetched again.
pub const KEYS_FRESH: Duration = Duration::from_secs(3600);
/// Least time between two fetches caused by unknown `kid`s.
pub const UNKNOWN_KID_GAP: Duration = Duration::from_secs(30);
/// Clock skew allowed on `exp`, `nbf` and `iat`.
pub const SKEW_SECS: u64 = 60;
/// WLCG's audience meaning "any service".
pub const ANY_AUDIENCE: &str = "https://wlcg.cern.ch/jwt/v1/any";
/// How long a discovery or key fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// What a token's scopes allow: the paths under which it may stage and create files.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TokenScope {
    pub stage: Vec<String>,
    pub create: Vec<String>,
}

impl TokenScope {
    /// Whether `file` lies under one of `paths` (whole path segments: `/cms` covers `/cms/a`,
    /// not `/cmsx`).
    pub fn covers(paths: &[String], file: &str) -> bool {
        paths.iter().any(|p| {
            let p = p.trim_end_matches('/');
            p.is_empty()
                || file == p
                || file
                    .strip_prefix(p)
                    .is_some_and(|rest| rest.starts_with('/'))
        })
    }
}

/// Why a token was refused: the answer's text (never the token itself) and whether it is a
/// 403 (the token is good but does not allow this) rather than a 401.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenRefused {
    #[error("token refused: {0}")]
    Invalid(String),
    #[error("token refused: {0}")]
    Forbidden(String),
    /// The issuer's keys cannot be had: not the token's fault (503).
    #[error("the token's issuer cannot be reached for its keys: {0}")]
    Unavailable(String),
}

/// The configured issuers and their key caches.
pub struct Issuers {
    list: Vec<Issuer>,
}

struct Issuer {
    settings: IssuerSettings,
    keys: Arc<KeyCache>,
}

impl Issuers {
    /// The issuers of `settings`; a key cache of `before` is taken over for an issuer whose
    /// address and CA file did not change (a reload does not refetch every key set).
    pub fn new(settings: &[IssuerSettings], before: Option<&Issuers>) -> Result<Issuers, String> {
        let mut list = Vec::with_capacity(settings.len());
        for s in settings {
            let kept = before.and_then(|b| {
                b.list
                    .iter()
                    .find(|i| i.settings.iss == s.iss && i.settings.ca_file == s.ca_file)
            });
            let keys = match kept {
                Some(i) => i.keys.clone(),
                None => Arc::new(KeyCache::new(s)?),
            };
            list.push(Issuer {
                settings: s.clone(),
                keys,
            });
        }
        Ok(Issuers { list })
    }

    pub fn empty() -> Issuers {
        Issuers { list: Vec::new() }
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The caller a token belongs to, verified against its issuer's keys at `now` (epoch
    /// seconds).
    pub async fn verify(&self, token: &str, now: u64) -> Result<Principal, TokenRefused> {
        let invalid = |m: &str| TokenRefused::Invalid(m.to_string());
        let mut parts = token.split('.');
        let (Some(head), Some(body), Some(_), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(invalid("not a known token nor a JWT"));
        };
        let header = decode_part(head).ok_or_else(|| invalid("the JWT header is not JSON"))?;
        let alg_name = header.get("alg").and_then(Value::as_str).unwrap_or("");
        let alg = allowed_algorithm(alg_name)?;
        let claims = decode_part(body).ok_or_else(|| invalid("the JWT claims are not JSON"))?;
        let iss = claims.get("iss").and_then(Value::as_str).unwrap_or("");
        let issuer = (self.list.iter())
            .find(|i| i.settings.iss == iss)
            .ok_or_else(|| TokenRefused::Invalid(format!("unknown issuer `{}`", shown(iss))))?;
        let kid = header.get("kid").and_then(Value::as_str);
        let key = issuer.keys.key(kid, alg).await?;
        let mut validation = Validation::new(alg);
        validation.leeway = SKEW_SECS;
        validation.validate_nbf = true;
        validation.validate_aud = false;
        validation.set_issuer(&[iss]);
        validation.set_required_spec_claims(&["exp", "iss"]);
        let data = jsonwebtoken::decode::<Value>(token, &key, &validation).map_err(refusal)?;
        issuer.settings.principal_of(&data.claims, now)
    }
}

impl IssuerSettings {
    /// The checks jsonwebtoken does not make (`iat`, the audience), and the role.
    fn principal_of(&self, claims: &Value, now: u64) -> Result<Principal, TokenRefused> {
        let invalid = |m: String| TokenRefused::Invalid(m);
        if let Some(iat) = claims.get("iat").and_then(Value::as_u64) {
            if iat > now + SKEW_SECS {
                return Err(invalid("issued in the future (iat)".into()));
            }
        }
        if let Some(want) = &self.audience {
            let aud: Vec<&str> = match claims.get("aud") {
                Some(Value::String(s)) => vec![s.as_str()],
                Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            if !aud.iter().any(|a| a == want || *a == ANY_AUDIENCE) {
                return Err(invalid(format!("wrong audience: `{want}` is required")));
            }
        }
        let version = claims.get("wlcg.ver").and_then(Value::as_str).unwrap_or("");
        let groups: Vec<&str> = match claims.get("wlcg.groups") {
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let strongest = [
            RoleKind::Operator,
            RoleKind::Mss,
            RoleKind::Reader,
            RoleKind::Station,
        ]
        .into_iter()
        .find(|k| (self.groups.iter()).any(|(g, role)| role == k && groups.contains(&g.as_str())));
        let scope = scopes(claims.get("scope").and_then(Value::as_str).unwrap_or(""));
        let has_scope = !scope.stage.is_empty() || !scope.create.is_empty();
        let sub = claims.get("sub").and_then(Value::as_str).unwrap_or("?");
        let name = format!("jwt:{}:{}", self.iss, shown(sub));
        let station = || {
            claims
                .get(&self.station_claim)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .ok_or_else(|| {
                    TokenRefused::Forbidden(format!(
                        "a station token names its station in the `{}` claim",
                        self.station_claim
                    ))
                })
        };
        let (role, scope) = match strongest {
            Some(RoleKind::Operator) => (Role::Operator, None),
            Some(RoleKind::Mss) => (Role::Mss, None),
            Some(RoleKind::Reader) if !has_scope => (Role::Reader, None),
            Some(RoleKind::Station) if !has_scope => (Role::Station(station()?), None),
            _ if has_scope => (Role::Station(station()?), Some(Arc::new(scope))),
            _ => {
                return Err(TokenRefused::Forbidden(
                    "the token has no storage.stage or storage.create scope and no group \
                     of the issuer's groups table"
                        .into(),
                ))
            }
        };
        if !version.is_empty() && version != "1.0" {
            info!(wlcg_ver = %shown(version), "a token of another WLCG profile version; read as 1.0");
        }
        Ok(Principal { name, role, scope })
    }
}

/// The storage scopes of a `scope` claim; other scopes are ignored (`storage.read` lets a
/// client read files, which the broker does not serve: it does not stage for it).
fn scopes(claim: &str) -> TokenScope {
    let mut scope = TokenScope::default();
    for s in claim.split_ascii_whitespace() {
        if let Some(p) = s.strip_prefix("storage.stage:") {
            scope.stage.push(p.to_string());
        } else if let Some(p) = s.strip_prefix("storage.create:") {
            scope.create.push(p.to_string());
        }
    }
    scope
}

fn decode_part(part: &str) -> Option<Value> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The algorithm a token's header names, if it is an asymmetric one.
fn allowed_algorithm(name: &str) -> Result<Algorithm, TokenRefused> {
    let refused = |m: String| Err(TokenRefused::Invalid(m));
    match name {
        "RS256" => Ok(Algorithm::RS256),
        "RS384" => Ok(Algorithm::RS384),
        "RS512" => Ok(Algorithm::RS512),
        "PS256" => Ok(Algorithm::PS256),
        "PS384" => Ok(Algorithm::PS384),
        "PS512" => Ok(Algorithm::PS512),
        "ES256" => Ok(Algorithm::ES256),
        "ES384" => Ok(Algorithm::ES384),
        "EdDSA" => Ok(Algorithm::EdDSA),
        n if n.eq_ignore_ascii_case("none") => refused("`alg: none` is refused".into()),
        n if n.starts_with("HS") => refused(format!(
            "`{n}` (HMAC) is refused: only asymmetric signatures are accepted"
        )),
        n => refused(format!("algorithm `{}` is not accepted", shown(n))),
    }
}

/// jsonwebtoken's refusal as the answer says it.
fn refusal(e: jsonwebtoken::errors::Error) -> TokenRefused {
    use jsonwebtoken::errors::ErrorKind as K;
    let m = match e.kind() {
        K::ExpiredSignature => "expired (exp)".to_string(),
        K::ImmatureSignature => "not valid yet (nbf)".to_string(),
        K::InvalidSignature => "bad signature".to_string(),
        K::InvalidIssuer => "wrong issuer".to_string(),
        K::InvalidAlgorithm => "the algorithm does not match the issuer's key".to_string(),
        K::MissingRequiredClaim(c) => format!("the `{c}` claim is missing"),
        K::InvalidClaimFormat(c) => format!("the `{c}` claim is malformed"),
        other => format!("malformed token ({other:?})"),
    };
    TokenRefused::Invalid(m)
}

/// A claim value as it may be shown: printable and short.
fn shown(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_control())
        .take(200)
        .collect::<String>()
}

/// One issuer's keys, fetched through its discovery document.
struct KeyCache {
    iss: String,
    client: reqwest::Client,
    state: tokio::sync::Mutex<KeyState>,
}

#[derive(Default)]
struct KeyState {
    keys: HashMap<String, DecodingKey>,
    /// Keys without a `kid`.
    unnamed: Vec<DecodingKey>,
    fetched: Option<Instant>,
    /// The latest fetch an unknown `kid` caused.
    unknown_kid_fetch: Option<Instant>,
}

impl KeyCache {
    fn new(s: &IssuerSettings) -> Result<KeyCache, String> {
        let mut builder = reqwest::Client::builder().timeout(FETCH_TIMEOUT);
        if let Some(ca) = &s.ca_file {
            let pem = std::fs::read(ca).map_err(|e| format!("{}: {e}", ca.display()))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| format!("{}: {e}", ca.display()))?;
            builder = builder.tls_certs_only(certs);
        }
        let client = builder.build().map_err(|e| e.to_string())?;
        Ok(KeyCache {
            iss: s.iss.clone(),
            client,
            state: tokio::sync::Mutex::new(KeyState::default()),
        })
    }

    /// The key for `kid` (or the one key without a `kid`), fetching the set when stale or, rate
    /// limited, when `kid` is unknown.
    async fn key(&self, kid: Option<&str>, alg: Algorithm) -> Result<DecodingKey, TokenRefused> {
        let mut state = self.state.lock().await;
        let stale = state.fetched.is_none_or(|t| t.elapsed() >= KEYS_FRESH);
        if stale {
            self.fetch(&mut state).await?;
        }
        if let Some(k) = find(&state, kid, alg) {
            return Ok(k);
        }
        let may_refetch = !stale
            && state
                .unknown_kid_fetch
                .is_none_or(|t| t.elapsed() >= UNKNOWN_KID_GAP);
        if may_refetch {
            self.fetch(&mut state).await?;
            if let Some(k) = find(&state, kid, alg) {
                info!(iss = %self.iss, "the issuer's keys were rotated: a new key is in use");
                return Ok(k);
            }
            // Only a fetch that did not find the key holds the next one back: a rotation is
            // picked up at once, a made-up kid costs one fetch per gap.
            state.unknown_kid_fetch = Some(Instant::now());
        }
        Err(TokenRefused::Invalid(match kid {
            Some(kid) => format!("unknown key id (kid `{}`) for this issuer", shown(kid)),
            None => "no key id (kid) and no key of the issuer fits".to_string(),
        }))
    }

    async fn fetch(&self, state: &mut KeyState) -> Result<(), TokenRefused> {
        let unavailable = |m: String| {
            warn!(iss = %self.iss, error = %m, "cannot fetch the issuer's keys");
            TokenRefused::Unavailable(m)
        };
        let discovery = format!(
            "{}/.well-known/openid-configuration",
            self.iss.trim_end_matches('/')
        );
        let doc: Value = self.get_json(&discovery).await.map_err(unavailable)?;
        let jwks_uri = doc
            .get("jwks_uri")
            .and_then(Value::as_str)
            .ok_or_else(|| unavailable(format!("{discovery} names no jwks_uri")))?;
        let set: Value = self.get_json(jwks_uri).await.map_err(unavailable)?;
        let set: JwkSet = serde_json::from_value(set)
            .map_err(|e| unavailable(format!("{jwks_uri}: not a JWK set: {e}")))?;
        let (mut keys, mut unnamed) = (HashMap::new(), Vec::new());
        for jwk in &set.keys {
            if matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_)) {
                continue;
            }
            let Ok(key) = DecodingKey::from_jwk(jwk) else {
                continue;
            };
            match &jwk.common.key_id {
                Some(kid) => {
                    keys.insert(kid.clone(), key);
                }
                None => unnamed.push(key),
            }
        }
        state.keys = keys;
        state.unnamed = unnamed;
        state.fetched = Some(Instant::now());
        info!(iss = %self.iss, keys = state.keys.len() + state.unnamed.len(), "issuer keys fetched");
        Ok(())
    }

    async fn get_json(&self, url: &str) -> Result<Value, String> {
        let resp = (self.client.get(url).send().await).map_err(|e| format!("{url}: {e}"))?;
        if !resp.status().is_success() {
            return Err(format!("{url}: HTTP {}", resp.status()));
        }
        resp.json().await.map_err(|e| format!("{url}: {e}"))
    }
}

fn find(state: &KeyState, kid: Option<&str>, alg: Algorithm) -> Option<DecodingKey> {
    match kid {
        Some(kid) => state.keys.get(kid).cloned(),
        None => (state.unnamed.iter())
            .find(|k| k.family() == alg.family())
            .cloned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_paths_cover_whole_segments() {
        let p = vec!["/cms/data".to_string()];
        assert!(TokenScope::covers(&p, "/cms/data/a.root"));
        assert!(TokenScope::covers(&p, "/cms/data"));
        assert!(!TokenScope::covers(&p, "/cms/database/a"));
        assert!(!TokenScope::covers(&p, "/atlas/a"));
        assert!(TokenScope::covers(&["/".to_string()], "/any/thing"));
        let s = scopes("openid storage.stage:/cms storage.read:/ storage.create:/cms/out");
        assert_eq!(s.stage, vec!["/cms"]);
        assert_eq!(s.create, vec!["/cms/out"]);
    }

    #[test]
    fn none_and_hmac_are_refused_by_name() {
        for alg in ["none", "NONE", "HS256", "HS512"] {
            let e = allowed_algorithm(alg).unwrap_err().to_string();
            assert!(e.to_lowercase().contains(&alg.to_lowercase()), "{e}");
        }
        assert_eq!(allowed_algorithm("ES256").unwrap(), Algorithm::ES256);
    }
}

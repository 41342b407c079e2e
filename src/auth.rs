//! Bearer tokens and roles. The token file holds SHA-256 hashes, never tokens; a presented token
//! is hashed and compared with every entry in constant time, so neither the file nor the timing
//! of a refusal gives a token away.
//!
//! Roles: `station` (bound to one station: submits for it, reads and cancels its requests),
//! `mss` (posts MSS events), `reader` (groups, reports, metrics), `operator` (everything).
//!
//! Besides the token file, a caller may be a client certificate (`x509`: its subject mapped by
//! `[[auth.x509]]`) or a WLCG JWT (`jwt`: verified against `[[auth.issuers]]`); `failures`
//! answers, logs and rate-limits the refusals of all three.
//!
//! The token file (SHA-256 hashes, roles), constant-time lookup, `Principal`. The roles and the
//! `[[auth.x509]]`/`[[auth.issuers]]` rules are `domain::auth`'s (config builds them), re-exported. The demo file is
//! embedded too. A token's `role` is parsed once into `Role` (a station role carries its station);
//! `RoleKind` is the role without its data. `api::Caller` is the extractor that authenticates each
//! request; each handler states the roles it allows as `RoleKind`s, so a misspelt role does not
//! compile. `auth/x509.rs`: `[[auth.x509]]`, a verified client certificate's subject DN (RFC 4514
//! or grid form) to a role, RFC 3820 proxies refused; `auth/jwt.rs`: `[[auth.issuers]]`, WLCG JWTs
//! verified offline (discovery and JWKS cached an hour, an unknown `kid` refetched, asymmetric
//! algorithms only, `exp`/`nbf`/`iat` with 60 s of skew, WLCG profile 1.0 scopes and
//! `wlcg.groups`); `auth/failures.rs`: a refused credential logged once by its hash, an address
//! rate-limited after a burst of failures.

pub mod failures;
pub mod jwt;
pub mod x509;

pub use crate::domain::auth::{role_of, AuthSettings, Role, RoleKind};

use std::fmt;
use std::path::Path;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The demo token file shipped for local use, embedded so the embedded config works anywhere
/// (copied by build.rs, as [`crate::config::EMBEDDED`] is).
pub const EMBEDDED_DEMO_TOKENS: &str = include_str!(concat!(env!("OUT_DIR"), "/demo-tokens.toml"));

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The token's name in the file (for logs and per-token rate limits).
    pub name: String,
    pub role: Role,
    /// A WLCG token's storage scopes: the paths its station may stage and create files under
    /// (`None`: no path limit).
    pub scope: Option<std::sync::Arc<jwt::TokenScope>>,
}

impl Principal {
    /// The caller when authentication is off: may do everything.
    pub fn anonymous_operator() -> Principal {
        Principal {
            name: "anonymous".into(),
            role: Role::Operator,
            scope: None,
        }
    }

    /// Whether this caller may act on requests of `station`.
    pub fn may_act_for(&self, station: &str) -> bool {
        match &self.role {
            Role::Operator => true,
            Role::Station(own) => own == station,
            _ => false,
        }
    }
}

/// Why a token file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("cannot read token file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("token file {origin}: {message}")]
    Invalid { origin: String, message: String },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    /// True for a file of publicly known tokens (the shipped demo).
    #[serde(default)]
    demo: bool,
    #[serde(default)]
    tokens: Vec<RawToken>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToken {
    name: String,
    sha256: String,
    role: String,
    #[serde(default)]
    station: Option<String>,
}

/// The loaded token table.
pub struct TokenTable {
    entries: Vec<([u8; 32], Principal)>,
    /// The tokens are public (the demo file): never to be served beyond loopback.
    pub demo: bool,
}

impl fmt::Debug for TokenTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenTable")
            .field("tokens", &self.entries.len())
            .field("demo", &self.demo)
            .finish()
    }
}

impl TokenTable {
    /// Read a token file; the shipped demo file's name falls back to its embedded copy.
    pub fn load(path: &Path) -> Result<TokenTable, TokenFileError> {
        match std::fs::read_to_string(path) {
            Ok(text) => TokenTable::parse(&text, &path.display().to_string()),
            Err(_) if path.file_name().is_some_and(|n| n == "demo-tokens.toml") => {
                TokenTable::parse(EMBEDDED_DEMO_TOKENS, "embedded config/demo-tokens.toml")
            }
            Err(source) => Err(TokenFileError::Read {
                path: path.display().to_string(),
                source,
            }),
        }
    }

    pub fn parse(text: &str, origin: &str) -> Result<TokenTable, TokenFileError> {
        let invalid = |message: String| TokenFileError::Invalid {
            origin: origin.to_string(),
            message,
        };
        let raw: RawFile = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let mut entries = Vec::with_capacity(raw.tokens.len());
        for (i, t) in raw.tokens.into_iter().enumerate() {
            let key = format!("tokens[{i}]");
            let hash = parse_hex32(&t.sha256).ok_or_else(|| {
                invalid(format!(
                    "{key}.sha256: must be 64 hex digits (the SHA-256 of the token)"
                ))
            })?;
            let kind = RoleKind::parse(&t.role).ok_or_else(|| {
                invalid(format!(
                    "{key}.role: `{}` is not one of station, mss, reader, operator",
                    t.role
                ))
            })?;
            let role = match (kind, t.station) {
                (RoleKind::Station, Some(s)) if !s.is_empty() => Role::Station(s),
                (RoleKind::Station, _) => {
                    return Err(invalid(format!(
                        "{key}.station: a station token names its station"
                    )))
                }
                (_, Some(_)) => {
                    return Err(invalid(format!(
                        "{key}.station: only station tokens name a station"
                    )))
                }
                (RoleKind::Mss, None) => Role::Mss,
                (RoleKind::Reader, None) => Role::Reader,
                (RoleKind::Operator, None) => Role::Operator,
            };
            if entries.iter().any(|(h, _)| *h == hash) {
                return Err(invalid(format!("{key}: the same token is listed twice")));
            }
            entries.push((
                hash,
                Principal {
                    name: t.name,
                    role,
                    scope: None,
                },
            ));
        }
        Ok(TokenTable {
            entries,
            demo: raw.demo,
        })
    }

    /// The caller a bearer token belongs to. Every entry is compared, in constant time.
    pub fn authenticate(&self, token: &str) -> Option<&Principal> {
        let presented: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for (hash, principal) in &self.entries {
            if bool::from(hash.ct_eq(&presented)) {
                found = Some(principal);
            }
        }
        found
    }
}

/// The SHA-256 of a token, as the token file writes it.
pub fn sha256_hex(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn parse_hex32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_file_parses_and_authenticates_its_tokens() {
        let t = TokenTable::parse(EMBEDDED_DEMO_TOKENS, "demo").unwrap();
        assert!(t.demo);
        let p = t.authenticate("demo-station-fnal-cms").unwrap();
        assert_eq!(p.role, Role::Station("fnal-cms".into()));
        assert_eq!(
            t.authenticate("demo-operator").unwrap().role,
            Role::Operator
        );
        assert!(t.authenticate("demo-operator ").is_none());
        assert!(t.authenticate("").is_none());
    }

    #[test]
    fn refusals_name_the_entry() {
        let h = sha256_hex("x");
        let bad = |body: &str| TokenTable::parse(body, "t").unwrap_err().to_string();
        assert!(
            bad("[[tokens]]\nname = \"a\"\nsha256 = \"zz\"\nrole = \"reader\"")
                .contains("tokens[0].sha256")
        );
        assert!(bad(&format!(
            "[[tokens]]\nname = \"a\"\nsha256 = \"{h}\"\nrole = \"station\""
        ))
        .contains("tokens[0].station"));
        assert!(bad(&format!(
            "[[tokens]]\nname = \"a\"\nsha256 = \"{h}\"\nrole = \"king\""
        ))
        .contains("tokens[0].role"));
        let twice = format!("[[tokens]]\nname = \"a\"\nsha256 = \"{h}\"\nrole = \"reader\"\n[[tokens]]\nname = \"b\"\nsha256 = \"{h}\"\nrole = \"mss\"");
        assert!(bad(&twice).contains("twice"));
    }

    #[test]
    fn each_role_parses_from_its_own_name_and_nothing_else_does() {
        for kind in RoleKind::ALL {
            assert_eq!(RoleKind::parse(kind.name()), Some(kind));
        }
        assert_eq!(RoleKind::parse("Operator"), None);
        assert_eq!(RoleKind::parse("operater"), None);
        assert_eq!(Role::Station("s".into()).kind(), RoleKind::Station);
        let h = sha256_hex("y");
        let err = TokenTable::parse(
            &format!("[[tokens]]\nname = \"a\"\nsha256 = \"{h}\"\nrole = \"operater\""),
            "t",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("tokens[0].role") && err.contains("operater"),
            "{err}"
        );
    }

    #[test]
    fn sha256_matches_a_known_vector() {
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}

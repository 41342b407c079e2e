//! Stand-ins of the real MSS interfaces, for tests: servers that answer like FTS3 and the WLCG
//! Tape REST API, check what they receive against what the real ones accept, and record every
//! call. The stand-in `encp` is a script (`adapters/tests/stand-ins/encp`); [`encp`] finds it
//! and reads what its runs recorded. Compiled only with the crate's `standin` feature, which the
//! tests of this crate and of the broker turn on as a dev-dependency: never in the product.
//!
//! Stand-ins of the real interfaces for tests, compiled only with the crate's `standin` feature
//! (off by default; see "Dependencies and why"): `fts3.rs` and `tape_rest.rs` (axum servers that
//! check every body against what the real ones accept, apply their semantics and record every call)
//! and `encp.rs` (where the stand-in script `adapters/tests/stand-ins/encp` is, and its run
//! records). The FTS3 stand-in derives `vos` from the credential (a token's from
//! `set_token_groups`) and serves `/whoami`, answers 419 by `set_delegation`, refuses a destination
//! a file not ended holds under `set_check_duplicates` (FTS3's `dest_surl_uuid`), lets `/hold/`
//! jobs run by `release_held`, applies `retry` 0 as its server default and shows staging failures
//! with `recoverable` null.

pub mod encp;
pub mod events;
pub mod fts3;
pub mod tape_rest;

use std::collections::HashMap;
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use serde_json::Value;

pub use events::EventReader;
pub use fts3::Fts3Standin;
pub use tape_rest::TapeRestStandin;

/// How long stand-in transfers take: queued, then active, then done.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub queued: Duration,
    pub active: Duration,
}

impl Default for Plan {
    fn default() -> Self {
        Plan {
            queued: Duration::from_millis(150),
            active: Duration::from_millis(150),
        }
    }
}

/// One call a stand-in received.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub method: String,
    pub path: String,
    pub query: HashMap<String, String>,
    pub authorization: Option<String>,
    pub body: Option<Value>,
}

impl Call {
    pub(crate) fn new(
        method: &str,
        path: String,
        query: HashMap<String, String>,
        headers: &HeaderMap,
        body: Option<Value>,
    ) -> Call {
        Call {
            method: method.to_string(),
            path,
            query,
            authorization: headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
            body,
        }
    }
}

/// How a caller authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Caller {
    /// A bearer token.
    Token,
    /// No token: taken as authenticated by its TLS client certificate.
    Certificate,
}

/// What every stand-in does before it answers: record the call, refuse while down (503),
/// check the bearer token when one is required (401).
#[derive(Debug, Default)]
pub(crate) struct Desk {
    pub token: Option<String>,
    pub calls: Vec<Call>,
    pub down: bool,
}

impl Desk {
    pub fn new(token: Option<&str>) -> Desk {
        Desk {
            token: token.map(str::to_string),
            ..Desk::default()
        }
    }

    pub fn admit(&mut self, call: Call) -> Result<Caller, (StatusCode, String)> {
        let authorization = call.authorization.clone();
        self.calls.push(call);
        if self.down {
            return Err((StatusCode::SERVICE_UNAVAILABLE, "stand-in is down".into()));
        }
        match (&self.token, authorization) {
            (Some(want), Some(got)) if got == format!("Bearer {want}") => Ok(Caller::Token),
            (Some(_), _) => Err((StatusCode::UNAUTHORIZED, "invalid or missing token".into())),
            (None, Some(_)) => Ok(Caller::Token),
            (None, None) => Ok(Caller::Certificate),
        }
    }
}

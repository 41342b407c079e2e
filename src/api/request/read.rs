//! Reading a body into a [`SubmitRequest`]: one serde pass for a well-formed body; for a refused
//! one, the refusal is said as the API always said it: a syntax error is the body's, a key
//! given twice is named, and any other fault names its field (found by reading the body again
//! with `serde_path_to_error`, so the pass over good bodies tracks no path).

use std::borrow::Cow;

use axum::http::StatusCode;
use serde::de::{IgnoredAny, MapAccess, Visitor};

use super::{SubmitRequest, FIELDS};
use crate::api::error::ApiError;

/// Read one request's JSON text; `prefix` is put before field names (`requests[3].`).
pub fn submit_request(bytes: &[u8], prefix: &str) -> Result<SubmitRequest, ApiError> {
    serde_json::from_slice::<SubmitRequest>(bytes).map_err(|_| refusal(bytes, prefix))
}

/// Why `bytes` is not a [`SubmitRequest`], in the order the API reports it.
fn refusal(bytes: &[u8], prefix: &str) -> ApiError {
    if let Err(e) = serde_json::from_slice::<IgnoredAny>(bytes) {
        return not_json(&e).prefixed_body(prefix);
    }
    if let Some(key) = first_repeated_key(bytes) {
        return ApiError::field(
            &format!("{prefix}{key}"),
            format!("`{key}` is given more than once"),
        );
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let Err(e) = serde_path_to_error::deserialize::<_, SubmitRequest>(&mut de) else {
        // Read well the second time: what is left after the object is the fault.
        return match de.end() {
            Err(e) => not_json(&e).prefixed_body(prefix),
            Ok(()) => ApiError::field("body", "must be a JSON object").prefixed_body(prefix),
        };
    };
    let key = e.path().iter().next().and_then(|segment| match segment {
        serde_path_to_error::Segment::Map { key } => Some(key.clone()),
        _ => None,
    });
    match key {
        // A fault of the body itself: not an object.
        None => ApiError::field("body", "must be a JSON object").prefixed_body(prefix),
        Some(key) if !FIELDS.contains(&key.as_str()) => ApiError::field(
            &format!("{prefix}{key}"),
            format!("unknown field `{key}`; known fields: {}", FIELDS.join(", ")),
        ),
        Some(key) => ApiError::field(&format!("{prefix}{key}"), message(e.inner())),
    }
}

/// A field's refusal as its deserializer worded it, without serde_json's position.
fn message(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let position = format!(" at line {} column {}", e.line(), e.column());
    match text.strip_suffix(&position) {
        Some(message) => message.to_string(),
        None => text,
    }
}

/// Syntax errors are the body's fault, not a field's.
pub fn not_json(e: &serde_json::Error) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        Some("body"),
        format!("body is not valid JSON: {e}"),
    )
}

/// The first key given twice at the top level of a JSON object, if any (`None` for anything
/// that is not an object).
fn first_repeated_key(bytes: &[u8]) -> Option<String> {
    struct Scan;
    impl<'de> Visitor<'de> for Scan {
        type Value = Option<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<String>, A::Error> {
            // Read to the end even after a repeat: the deserializer refuses an object left open.
            let mut seen = std::collections::HashSet::new();
            let mut repeated = None;
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                map.next_value::<IgnoredAny>()?;
                if repeated.is_none() && !seen.insert(key.clone()) {
                    repeated = Some(key.into_owned());
                }
            }
            Ok(repeated)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    serde::Deserializer::deserialize_map(&mut de, Scan)
        .ok()
        .flatten()
}

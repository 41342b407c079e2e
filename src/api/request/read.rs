//! Reading a body into a [`SubmitRequest`]: one serde pass for a well-formed body. A refused
//! body is looked at again to name its fault as the API always has: a syntax error is the
//! body's; then a key given twice (a known field, or one of the first 64 other keys); a body
//! that is not an object; an unknown field (the first by name; one pass in bounded memory,
//! whatever the number of keys); then the first field, in [`FIELDS`] order, of the wrong JSON type, missing or out
//! of bounds, so a body with several faults is always answered with the same one.

use std::borrow::Cow;
use std::collections::BTreeMap;

use axum::http::StatusCode;
use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::{RequestInput, SubmitRequest, FIELDS};
use crate::api::error::ApiError;
use crate::api::InputLimits;

/// Read and validate one request's JSON text; `prefix` is put before field names
/// (`requests[3].`).
pub fn request_input(
    bytes: &[u8],
    limits: &InputLimits,
    prefix: &str,
) -> Result<RequestInput, ApiError> {
    // serde's derived struct reading also takes a JSON array, field by field: only an object
    // is a request.
    let object = bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    match serde_json::from_slice::<SubmitRequest>(bytes) {
        Ok(raw) if object => raw.validate(limits).map_err(|e| e.prefixed(prefix)),
        _ => Err(refusal(bytes, limits, prefix)),
    }
}

/// Why `bytes` is not a request, in the order the API reports faults.
fn refusal(bytes: &[u8], limits: &InputLimits, prefix: &str) -> ApiError {
    if let Err(e) = serde_json::from_slice::<IgnoredAny>(bytes) {
        return not_json(&e).prefixed_body(prefix);
    }
    // Skipping a string does not check its UTF-8: a body that is JSON in every other way.
    if let Err(e) = std::str::from_utf8(bytes) {
        return ApiError::new(
            StatusCode::BAD_REQUEST,
            Some("body"),
            format!(
                "body is not valid UTF-8: invalid byte at offset {}",
                e.valid_up_to()
            ),
        )
        .prefixed_body(prefix);
    }
    let not_object = || ApiError::field("body", "must be a JSON object").prefixed_body(prefix);
    let Some(keys) = scan_keys(bytes) else {
        return not_object();
    };
    if let Some(key) = keys.repeated {
        return ApiError::field(
            &format!("{prefix}{key}"),
            format!("`{key}` is given more than once"),
        );
    }
    if let Some(key) = keys.first_unknown {
        return ApiError::field(
            &format!("{prefix}{key}"),
            format!("unknown field `{key}`; known fields: {}", FIELDS.join(", ")),
        );
    }
    // Every key is a known field, once: at most `FIELDS.len()` of them.
    let Ok(given) = serde_json::from_slice::<BTreeMap<Cow<'_, str>, &RawValue>>(bytes) else {
        return not_object();
    };
    // The first field of the wrong JSON type, unless a field before it is missing or out of
    // bounds: that one is named, as validation goes in field order.
    let mut before: BTreeMap<&str, &RawValue> = BTreeMap::new();
    for (i, field) in FIELDS.into_iter().enumerate() {
        let Some(raw) = given.get(field) else {
            continue;
        };
        if let Err(wrong_type) = read(&BTreeMap::from([(field, *raw)])) {
            let earlier = read(&before)
                .ok()
                .and_then(|r| r.validate(limits).err())
                .filter(|e| position(e) < i);
            return earlier.unwrap_or(wrong_type).prefixed(prefix);
        }
        before.insert(field, raw);
    }
    not_object()
}

/// Read the given fields as a request; a refusal names the field and keeps the message of the
/// field's deserializer.
fn read(fields: &BTreeMap<&str, &RawValue>) -> Result<SubmitRequest, ApiError> {
    let text = serde_json::to_vec(fields).map_err(|e| not_json(&e))?;
    let mut de = serde_json::Deserializer::from_slice(&text);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let field = e.path().to_string();
        ApiError::field(&field, message(e.inner()))
    })
}

/// Where a refused field comes in [`FIELDS`] (past the end for anything else).
fn position(e: &ApiError) -> usize {
    let field = e.field.as_deref().unwrap_or_default();
    FIELDS
        .iter()
        .position(|f| *f == field)
        .unwrap_or(FIELDS.len())
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

/// Unknown keys tracked for a repeat, at most: a body of a million keys costs a scan, not a
/// set of a million strings (a repeated known field is always found).
const TRACKED_KEYS: usize = 64;

/// What the keys at the top level of a JSON object say about it.
#[derive(Default)]
struct Keys {
    /// The first key given twice (among known fields and the first [`TRACKED_KEYS`] others).
    repeated: Option<String>,
    /// The first key, by name, that is no field of a request.
    first_unknown: Option<String>,
}

/// One pass over a JSON object's keys in bounded memory (`None` for anything that is not an
/// object).
fn scan_keys(bytes: &[u8]) -> Option<Keys> {
    struct Scan;
    impl<'de> Visitor<'de> for Scan {
        type Value = Keys;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Keys, A::Error> {
            // Read to the end even after a repeat: the deserializer refuses an object left open.
            let mut seen = std::collections::HashSet::new();
            let mut keys = Keys::default();
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                map.next_value::<IgnoredAny>()?;
                let known = FIELDS.contains(&key.as_ref());
                let first = keys
                    .first_unknown
                    .as_deref()
                    .is_none_or(|u| key.as_ref() < u);
                if !known && first {
                    keys.first_unknown = Some(key.to_string());
                }
                if keys.repeated.is_none() {
                    if seen.contains(&key) {
                        keys.repeated = Some(key.into_owned());
                    } else if known || seen.len() < TRACKED_KEYS {
                        seen.insert(key);
                    }
                }
            }
            Ok(keys)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    serde::Deserializer::deserialize_map(&mut de, Scan).ok()
}

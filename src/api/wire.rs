//! The JSON wire types of the API, and the parsing of request bodies into typed input. Only this
//! module knows the JSON shapes. Parsing walks the JSON object field by field so every refusal
//! names the field and what is wrong with it.

use std::borrow::Cow;

use mss_adapters::Direction;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::error::ApiError;
use crate::config::InputLimits;
use crate::domain::{Class, RequestState};
use crate::ledger::{Accepted, RequestRecord};
use crate::policy::multifactor::Qos;

/// A request body, parsed: every field present, of its type and within bounds.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestInput {
    pub client_request_id: String,
    pub station: String,
    pub user: String,
    pub file: String,
    pub size_bytes: u64,
    pub access_mode: String,
    pub physics_group: String,
    pub volume: Option<String>,
    pub direction: Direction,
    /// The MSS library the transfer needs (the held release mode limits each library).
    pub library: Option<String>,
    pub qos: Option<Qos>,
    /// The submitter's own factor in [0, 1]: it can only lower the request's priority.
    pub user_factor: Option<f64>,
    /// The station-side copy: where a read puts the file, what a write stores.
    pub local_file: Option<String>,
    /// Enstore's bit-file id of the file to read.
    pub bfid: Option<String>,
}

const FIELDS: [&str; 14] = [
    "client_request_id",
    "station",
    "user",
    "file",
    "size_bytes",
    "access_mode",
    "physics_group",
    "volume",
    "direction",
    "library",
    "qos",
    "user_factor",
    "local_file",
    "bfid",
];

/// Parse raw bytes as a JSON value; syntax errors are the body's fault, not a field's.
pub fn parse_json(bytes: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| {
        ApiError::new(
            axum::http::StatusCode::BAD_REQUEST,
            Some("body"),
            format!("body is not valid JSON: {e}"),
        )
    })
}

/// The shape of a well-formed request, borrowed from the body. Valid bodies are read through
/// this in one pass; anything it refuses is parsed again field by field to say what is wrong.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Fast<'a> {
    #[serde(borrow)]
    client_request_id: Cow<'a, str>,
    #[serde(borrow)]
    station: Cow<'a, str>,
    #[serde(borrow)]
    user: Cow<'a, str>,
    #[serde(borrow)]
    file: Cow<'a, str>,
    size_bytes: u64,
    #[serde(borrow)]
    access_mode: Cow<'a, str>,
    #[serde(borrow)]
    physics_group: Cow<'a, str>,
    #[serde(borrow, default)]
    volume: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    direction: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    library: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    qos: Option<Cow<'a, str>>,
    #[serde(default)]
    user_factor: Option<f64>,
    #[serde(borrow, default)]
    local_file: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    bfid: Option<Cow<'a, str>>,
}

impl RequestInput {
    /// Parse a request body: one pass for a good body, a field-by-field walk to explain a bad one.
    pub fn from_slice(bytes: &[u8], limits: &InputLimits) -> Result<RequestInput, ApiError> {
        RequestInput::from_slice_at(bytes, limits, "")
    }

    /// Parse one request's JSON text; `prefix` is put before field names (`requests[3].`). The
    /// one-pass reader refuses a repeated key; the walk then names it (a `Value` keeps only the
    /// last of two equal keys, so it is looked for in the text first).
    pub fn from_slice_at(
        bytes: &[u8],
        limits: &InputLimits,
        prefix: &str,
    ) -> Result<RequestInput, ApiError> {
        match serde_json::from_slice::<Fast<'_>>(bytes) {
            Ok(fast) => RequestInput::from_fast(fast, limits)
                .map_err(|e| e.prefixed(prefix))?
                .checked(prefix),
            Err(_) => {
                let value = parse_json(bytes).map_err(|e| e.prefixed_body(prefix))?;
                if let Some(key) = first_repeated_key(bytes) {
                    return Err(ApiError::field(
                        &format!("{prefix}{key}"),
                        format!("`{key}` is given more than once"),
                    ));
                }
                RequestInput::parse(&value, limits, prefix)
            }
        }
    }

    /// Checks across fields, after every field was parsed.
    fn checked(self, prefix: &str) -> Result<RequestInput, ApiError> {
        if self.bfid.is_some() && self.direction == Direction::Write {
            return Err(ApiError::field(
                &format!("{prefix}bfid"),
                "only a read names a bfid (a write has none yet)",
            ));
        }
        Ok(self)
    }

    fn from_fast(f: Fast<'_>, limits: &InputLimits) -> Result<RequestInput, ApiError> {
        let n = limits.max_string_len;
        let text = |field: &str, v: Cow<'_, str>, max: usize| -> Result<String, ApiError> {
            check_value(field, &v, max).map_err(|m| ApiError::field(field, m))?;
            Ok(v.into_owned())
        };
        let size = |v: u64| match v {
            0 => Err(ApiError::field("size_bytes", "must be greater than 0")),
            v if v > limits.max_size_bytes => Err(ApiError::field(
                "size_bytes",
                format!("may be at most {}", limits.max_size_bytes),
            )),
            v => Ok(v),
        };
        // Fields are checked in the same order as `parse`, so both name the same first problem.
        Ok(RequestInput {
            client_request_id: text("client_request_id", f.client_request_id, n)?,
            station: text("station", f.station, n)?,
            user: text("user", f.user, n)?,
            file: text("file", f.file, limits.max_path_len)?,
            size_bytes: size(f.size_bytes)?,
            access_mode: text("access_mode", f.access_mode, n)?,
            physics_group: text("physics_group", f.physics_group, n)?,
            volume: f.volume.map(|v| text("volume", v, n)).transpose()?,
            direction: match f.direction.as_deref().map(Direction::parse) {
                None => Direction::Read,
                Some(Some(d)) => d,
                Some(None) => {
                    return Err(ApiError::field(
                        "direction",
                        "must be \"read\" or \"write\"",
                    ))
                }
            },
            library: f.library.map(|v| text("library", v, n)).transpose()?,
            qos: f
                .qos
                .map(|q| Qos::parse(&q).ok_or_else(|| ApiError::field("qos", QOS_VALUES)))
                .transpose()?,
            user_factor: f
                .user_factor
                .map(|u| user_factor(u).map_err(|m| ApiError::field("user_factor", m)))
                .transpose()?,
            local_file: f
                .local_file
                .map(|v| text("local_file", v, limits.max_path_len))
                .transpose()?,
            bfid: f.bfid.map(|v| text("bfid", v, n)).transpose()?,
        })
    }

    /// Parse one request object. `prefix` is put before field names (`requests[3].`).
    pub fn parse(
        value: &Value,
        limits: &InputLimits,
        prefix: &str,
    ) -> Result<RequestInput, ApiError> {
        let name = |f: &str| format!("{prefix}{f}");
        let Value::Object(obj) = value else {
            let field = if prefix.is_empty() {
                "body".to_string()
            } else {
                prefix.trim_end_matches('.').to_string()
            };
            return Err(ApiError::field(&field, "must be a JSON object"));
        };
        if let Some(unknown) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            return Err(ApiError::field(
                &name(unknown),
                format!(
                    "unknown field `{unknown}`; known fields: {}",
                    FIELDS.join(", ")
                ),
            ));
        }
        let text = |f: &str, max: usize| required_text(obj, f, prefix, max);
        let n = limits.max_string_len;
        RequestInput {
            client_request_id: text("client_request_id", n)?,
            station: text("station", n)?,
            user: text("user", n)?,
            file: text("file", limits.max_path_len)?,
            size_bytes: size(obj, prefix, limits.max_size_bytes)?,
            access_mode: text("access_mode", n)?,
            physics_group: text("physics_group", n)?,
            volume: match obj.get("volume") {
                None | Some(Value::Null) => None,
                Some(_) => Some(text("volume", n)?),
            },
            direction: match obj.get("direction") {
                None | Some(Value::Null) => Direction::Read,
                Some(v) => v.as_str().and_then(Direction::parse).ok_or_else(|| {
                    ApiError::field(&name("direction"), "must be \"read\" or \"write\"")
                })?,
            },
            library: match obj.get("library") {
                None | Some(Value::Null) => None,
                Some(_) => Some(text("library", n)?),
            },
            qos: match obj.get("qos") {
                None | Some(Value::Null) => None,
                Some(v) => Some(
                    v.as_str()
                        .and_then(Qos::parse)
                        .ok_or_else(|| ApiError::field(&name("qos"), QOS_VALUES))?,
                ),
            },
            user_factor: match obj.get("user_factor") {
                None | Some(Value::Null) => None,
                Some(Value::Number(x)) => Some(
                    user_factor(x.as_f64().unwrap_or(f64::NAN))
                        .map_err(|m| ApiError::field(&name("user_factor"), m))?,
                ),
                Some(other) => {
                    return Err(ApiError::field(
                        &name("user_factor"),
                        format!("must be a number, got {}", kind(other)),
                    ))
                }
            },
            local_file: match obj.get("local_file") {
                None | Some(Value::Null) => None,
                Some(_) => Some(text("local_file", limits.max_path_len)?),
            },
            bfid: match obj.get("bfid") {
                None | Some(Value::Null) => None,
                Some(_) => Some(text("bfid", n)?),
            },
        }
        .checked(prefix)
    }
}

const QOS_VALUES: &str = "must be \"expedite\", \"normal\" or \"standby\"";

fn user_factor(u: f64) -> Result<f64, String> {
    if (0.0..=1.0).contains(&u) {
        Ok(u)
    } else {
        Err(format!(
            "must be a number from 0 to 1 (it can only lower the priority), got {u}"
        ))
    }
}

/// The fields that end up as operands of an MSS command line (encp's `SRC DEST`,
/// `--get-bfid BFID`): they may not look like an option or climb out of a directory.
const OPERANDS: [&str; 3] = ["file", "local_file", "bfid"];

/// Check a text field's value (`key` without prefix); the error is the message, the caller
/// names the field.
fn check_value(key: &str, value: &str, max: usize) -> Result<(), String> {
    check_text(value, max)?;
    if OPERANDS.contains(&key) {
        check_operand(value)?;
    }
    Ok(())
}

/// Every station-given string: not blank, not too long, and nothing that hides or reorders
/// text in a log line or a table: control characters, Unicode format characters (Cf: bidi
/// overrides such as U+202E, zero-width characters) and line or paragraph separators (Zl, Zp).
fn check_text(value: &str, max: usize) -> Result<(), String> {
    if value.is_empty() {
        return Err("may not be empty".into());
    }
    if value.len() > max && value.chars().count() > max {
        return Err(format!("may be at most {max} characters"));
    }
    if value.chars().all(char::is_whitespace) {
        return Err("may not be blank".into());
    }
    if value.chars().any(char::is_control) {
        return Err("may not contain control characters".into());
    }
    if let Some(c) = value.chars().find(|c| crate::hidden_text::is_hiding(*c)) {
        return Err(format!(
            "may not contain U+{:04X} (Unicode format characters and line or paragraph \
             separators are refused)",
            c as u32
        ));
    }
    Ok(())
}

/// A path or id handed to the MSS as a command-line operand: no leading `-` (an option to
/// encp), no `.` or `..` segment, and not a directory (a trailing `/`).
fn check_operand(value: &str) -> Result<(), String> {
    if value.starts_with('-') {
        return Err("may not start with `-` (it would be read as an option)".into());
    }
    if value.split('/').any(|seg| seg == "." || seg == "..") {
        return Err("may not have `.` or `..` segments".into());
    }
    if value.ends_with('/') {
        return Err("must name a file, not a directory (it ends with `/`)".into());
    }
    Ok(())
}

/// The first key given twice at the top level of a JSON object, if any (`None` for anything
/// that is not an object).
fn first_repeated_key(bytes: &[u8]) -> Option<String> {
    struct Scan;
    impl<'de> serde::de::Visitor<'de> for Scan {
        type Value = Option<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Option<String>, A::Error> {
            // Read to the end even after a repeat: the deserializer refuses an object left open.
            let mut seen = std::collections::HashSet::new();
            let mut repeated = None;
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                map.next_value::<serde::de::IgnoredAny>()?;
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

fn required_text(
    obj: &Map<String, Value>,
    key: &str,
    prefix: &str,
    max: usize,
) -> Result<String, ApiError> {
    let field = || format!("{prefix}{key}");
    let value = match obj.get(key) {
        None | Some(Value::Null) => return Err(ApiError::field(&field(), "is required")),
        Some(Value::String(s)) => s,
        Some(other) => {
            return Err(ApiError::field(
                &field(),
                format!("must be a string, got {}", kind(other)),
            ))
        }
    };
    check_value(key, value, max).map_err(|m| ApiError::field(&field(), m))?;
    Ok(value.clone())
}

fn size(obj: &Map<String, Value>, prefix: &str, max: u64) -> Result<u64, ApiError> {
    let field = &format!("{prefix}size_bytes");
    match obj.get("size_bytes") {
        None | Some(Value::Null) => Err(ApiError::field(field, "is required")),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(0) => Err(ApiError::field(field, "must be greater than 0")),
            Some(v) if v > max => Err(ApiError::field(field, format!("may be at most {max}"))),
            Some(v) => Ok(v),
            None if n.is_i64() => Err(ApiError::field(field, "must be greater than 0")),
            None => Err(ApiError::field(field, "must be a whole number of bytes")),
        },
        Some(other) => Err(ApiError::field(
            field,
            format!("must be an integer, got {}", kind(other)),
        )),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Read a batch body, `{"requests": [...]}`, without building a tree of it: each item stays a
/// slice of the body, parsed one by one later, and reading stops with a 413 at the first item
/// past `limits.max_batch`. Memory is the body plus two words per item, where a `Value` tree of
/// a 16 MB body took more than 200 MB.
pub fn batch_items<'a>(
    bytes: &'a [u8],
    limits: &InputLimits,
) -> Result<Vec<&'a RawValue>, ApiError> {
    use serde::de::DeserializeSeed as _;
    let mut refusal = None;
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let read = BatchSeed {
        max: limits.max_batch,
        refusal: &mut refusal,
    }
    .deserialize(&mut de)
    .and_then(|items| de.end().map(|()| items));
    match read {
        Ok(items) => Ok(items),
        Err(e) if e.is_data() => Err(refusal.unwrap_or_else(|| {
            ApiError::field("body", "must be a JSON object with a `requests` array")
        })),
        Err(e) => Err(ApiError::new(
            axum::http::StatusCode::BAD_REQUEST,
            Some("body"),
            format!("body is not valid JSON: {e}"),
        )),
    }
}

/// The batch object; a refusal is left in `refusal` and the read stopped with a data error.
struct BatchSeed<'s> {
    max: usize,
    refusal: &'s mut Option<ApiError>,
}

impl<'de> serde::de::DeserializeSeed<'de> for BatchSeed<'_> {
    type Value = Vec<&'de RawValue>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for BatchSeed<'_> {
    type Value = Vec<&'de RawValue>;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object with a `requests` array")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        use serde::de::Error as _;
        let mut items: Option<Vec<&'de RawValue>> = None;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            let refuse = |e: ApiError| (Some(e), A::Error::custom("refused"));
            let (refusal, error) = match key.as_ref() {
                "requests" if items.is_some() => refuse(ApiError::field(
                    "requests",
                    "`requests` is given more than once",
                )),
                "requests" => {
                    let seed = ItemsSeed {
                        max: self.max,
                        refusal: &mut *self.refusal,
                    };
                    match map.next_value_seed(seed) {
                        Ok(read) => {
                            items = Some(read);
                            continue;
                        }
                        Err(e) if self.refusal.is_some() => (None, e),
                        // A type error is the field's fault; a syntax error stays one.
                        Err(e) => (
                            Some(ApiError::field(
                                "requests",
                                format!("must be an array of request objects ({e})"),
                            )),
                            e,
                        ),
                    }
                }
                unknown => refuse(ApiError::field(
                    unknown,
                    format!("unknown field `{unknown}`; the batch body has only `requests`"),
                )),
            };
            if refusal.is_some() {
                *self.refusal = refusal;
            }
            return Err(error);
        }
        let mut refuse = |e: ApiError| {
            *self.refusal = Some(e);
            Err(A::Error::custom("refused"))
        };
        match items {
            None => refuse(ApiError::field("requests", "is required")),
            Some(v) if v.is_empty() => refuse(ApiError::field("requests", "may not be empty")),
            Some(v) => Ok(v),
        }
    }
}

/// The `requests` array: counted while it is read, each item kept as its slice of the body.
struct ItemsSeed<'s> {
    max: usize,
    refusal: &'s mut Option<ApiError>,
}

impl<'de> serde::de::DeserializeSeed<'de> for ItemsSeed<'_> {
    type Value = Vec<&'de RawValue>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for ItemsSeed<'_> {
    type Value = Vec<&'de RawValue>;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an array")
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        *self.refusal = Some(ApiError::field("requests", "is required"));
        Err(E::custom("refused"))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<&'de RawValue>()? {
            if items.len() == self.max {
                *self.refusal = Some(ApiError::new(
                    axum::http::StatusCode::PAYLOAD_TOO_LARGE,
                    Some("requests"),
                    format!("at most {} requests per batch, got more", self.max),
                ));
                return Err(serde::de::Error::custom("refused"));
            }
            items.push(item);
        }
        Ok(items)
    }
}

/// A request body (documentation of what `RequestInput` parses).
#[derive(Debug, utoipa::ToSchema)]
#[allow(dead_code)]
pub struct SubmitRequest {
    /// The station's own id for the request: the same station and id again is a replay.
    client_request_id: String,
    station: String,
    user: String,
    /// Path of the file to stage or store.
    file: String,
    #[schema(minimum = 1)]
    size_bytes: u64,
    access_mode: String,
    physics_group: String,
    /// Tape label, if known.
    volume: Option<String>,
    /// `read` (default) or `write`.
    direction: Option<String>,
    /// The MSS library the transfer needs; the held release mode keeps each library's
    /// outstanding transfers under its limit.
    library: Option<String>,
    /// `expedite`, `normal` or `standby` (the multifactor policy's QoS factor); default: the
    /// access mode's, from the configuration.
    qos: Option<String>,
    /// The submitter's factor in [0, 1] (multifactor): 1 (default) leaves the priority as it
    /// is, lower values lower it.
    #[schema(minimum = 0, maximum = 1)]
    user_factor: Option<f64>,
    /// The station-side copy: where a read puts the file (a path for the encp adapter, a URL
    /// for FTS3), or the file a write stores. Required where the configured MSS adapter needs
    /// it (see `GET /v1/mss`).
    local_file: Option<String>,
    /// Enstore's bit-file id of the file to read (encp `--get-bfid`); reads only.
    bfid: Option<String>,
}

/// A batch body.
#[derive(Debug, utoipa::ToSchema)]
#[allow(dead_code)]
pub struct SubmitBatch {
    requests: Vec<SubmitRequest>,
}

/// `GET /healthz`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Health {
    pub status: String,
}

/// The answer to an accepted (or replayed) request.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AcceptedBody {
    pub id: i64,
    pub group: String,
    pub class: Class,
    pub mss_priority: i64,
    pub state: RequestState,
    pub duplicate: bool,
    /// Why the request is held (state `held`): a feasibility cap of its group is reached. Its
    /// class and MSS priority are decided when it is released.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_reason: Option<String>,
}

impl From<Accepted> for AcceptedBody {
    fn from(a: Accepted) -> Self {
        AcceptedBody {
            id: a.id,
            group: a.group,
            class: a.class,
            mss_priority: a.mss_priority,
            state: a.state,
            duplicate: a.duplicate,
            held_reason: a.held_reason,
        }
    }
}

/// A 422: a refused request, or a batch none of whose items was accepted.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum Unprocessable {
    Refused(super::error::ErrorBody),
    Batch(BatchBody),
}

/// One result of a batch: accepted, or refused with the field at fault.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum BatchResult {
    Accepted(AcceptedBody),
    Refused {
        error: String,
        field: Option<String>,
    },
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BatchBody {
    pub results: Vec<BatchResult>,
    pub accepted: usize,
    pub refused: usize,
}

/// `GET /v1/requests/{id}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RequestBody {
    pub id: i64,
    pub client_request_id: String,
    pub station: String,
    pub user: String,
    pub file: String,
    pub size_bytes: u64,
    pub access_mode: String,
    pub physics_group: String,
    pub volume: Option<String>,
    #[schema(value_type = String)]
    pub direction: Direction,
    pub group: String,
    pub class: Class,
    pub mss_priority: i64,
    pub state: RequestState,
    pub attempt: u32,
    pub mss_id: Option<String>,
    pub bytes_done: u64,
    pub charged: u64,
    pub cancel_requested: bool,
    pub last_error: Option<String>,
    /// Why the request is held (state `held`), or was when it was cancelled while held.
    pub held_reason: Option<String>,
    pub created_ms: i64,
    pub submitted_ms: Option<i64>,
    pub started_ms: Option<i64>,
    pub finished_ms: Option<i64>,
    /// The MSS library ('' the default one).
    pub library: String,
    pub qos: Option<String>,
    pub user_factor: Option<f64>,
    /// Why the request has its place: the policy (`sam`, `fair_tree`, `multifactor`, `fbsng`),
    /// the release mode, the MSS priority, how long it had waited, the starvation bound if it
    /// decided, and the policy's own figures in `detail` (SAM's usage and share with the
    /// request, Fair Tree's rank, multifactor's factors and weighted values, FBSNG's queue
    /// priorities). Computed now for a `queued` request, with its `position` (1-based) in its
    /// library's release order and how many are `waiting` as of `ranked_at_ms`: taken from the
    /// latest ranking of the whole queue (reused for at least 1 s; an estimate, since every
    /// release changes usage); as decided (or last re-prioritised) otherwise; absent while
    /// `held`.
    #[schema(value_type = Option<Object>)]
    pub explain: Option<Value>,
    pub local_file: Option<String>,
    pub bfid: Option<String>,
}

impl From<RequestRecord> for RequestBody {
    fn from(r: RequestRecord) -> Self {
        RequestBody {
            id: r.id,
            client_request_id: r.client_request_id,
            station: r.station,
            user: r.user,
            file: r.file,
            size_bytes: r.size_bytes,
            access_mode: r.access_mode,
            physics_group: r.physics_group,
            volume: r.volume,
            direction: r.direction,
            group: r.group,
            class: r.class,
            mss_priority: r.mss_priority,
            state: r.state,
            attempt: r.attempt,
            mss_id: r.mss_id,
            bytes_done: r.bytes_done,
            charged: r.charged,
            cancel_requested: r.cancel_requested,
            last_error: r.last_error,
            held_reason: r.held_reason,
            created_ms: r.created_ms,
            submitted_ms: r.submitted_ms,
            started_ms: r.started_ms,
            finished_ms: r.finished_ms,
            library: r.library,
            qos: r.qos,
            user_factor: r.user_factor,
            explain: r.explain.and_then(|e| serde_json::to_value(e.explain).ok()),
            local_file: r.local_file,
            bfid: r.bfid,
        }
    }
}

/// `POST /v1/requests/{id}/release`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReleaseBody {
    pub id: i64,
    pub released: bool,
}

/// `GET /v1/mss`: the adapter and its capabilities.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct MssBody {
    pub adapter: String,
    /// `none` (the MSS takes no priority: held release mode), `direct` (the broker's priority,
    /// within `min..max`) or `bands` (mapped onto the MSS's levels).
    pub priority: String,
    pub min_priority: Option<i64>,
    pub max_priority: Option<i64>,
    /// For `bands`: broker priorities from `from` up get the MSS's `level`.
    pub bands: Vec<BandBody>,
    pub reprioritize: bool,
    pub cancel: bool,
    /// Whether a cancel reaches the MSS's queue (false: the broker stops its side only, as an
    /// encp run stopped without `mss.encp.cancel_command` leaves its ticket queued).
    pub cancel_reaches_mss: bool,
    pub release: bool,
    pub writes: bool,
    pub bfid: bool,
    pub reads_need_local_file: bool,
    pub writes_need_local_file: bool,
    /// Most transfers outstanding at once (`null`: no limit).
    pub max_outstanding: Option<usize>,
    /// Transfers it may take now (`null`: no limit).
    pub room: Option<usize>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BandBody {
    pub from: i64,
    pub level: i64,
}

impl MssBody {
    pub fn new(adapter: &str, c: &mss_adapters::Capabilities, room: Option<usize>) -> MssBody {
        use mss_adapters::PriorityScale;
        let (kind, min, max, bands) = match &c.priority {
            PriorityScale::None => ("none", None, None, Vec::new()),
            PriorityScale::Direct { min, max } => ("direct", Some(*min), Some(*max), Vec::new()),
            PriorityScale::Bands(b) => (
                "bands",
                None,
                None,
                b.iter()
                    .map(|b| BandBody {
                        from: b.from,
                        level: b.level,
                    })
                    .collect(),
            ),
        };
        MssBody {
            adapter: adapter.to_string(),
            priority: kind.to_string(),
            min_priority: min,
            max_priority: max,
            bands,
            reprioritize: c.reprioritize,
            cancel: c.cancel,
            cancel_reaches_mss: c.cancel,
            release: c.release,
            writes: c.writes,
            bfid: c.bfid,
            reads_need_local_file: c.reads_need_local_file,
            writes_need_local_file: c.writes_need_local_file,
            max_outstanding: c.max_outstanding,
            room,
        }
    }

    /// Whether the adapter's cancel reaches the MSS (`MssAdapter::cancel_reaches_mss`).
    pub fn cancel_reaches_mss(mut self, reaches: bool) -> MssBody {
        self.cancel_reaches_mss = self.cancel && reaches;
        self
    }
}

/// `DELETE /v1/requests/{id}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CancelBody {
    pub id: i64,
    pub state: RequestState,
    pub cancel_requested: bool,
}

/// `GET /v1/groups`.
#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn limits() -> InputLimits {
        InputLimits {
            station_rate_per_sec: 100,
            station_burst: 100,
            max_body_bytes: 1 << 20,
            max_batch: 10,
            max_size_bytes: 1 << 40,
            max_string_len: 16,
            max_path_len: 64,
            max_report_buckets: 100,
            max_bodies_in_memory_bytes: 1 << 24,
        }
    }

    fn good() -> Value {
        json!({"client_request_id": "c1", "station": "s", "user": "u", "file": "/f",
               "size_bytes": 10, "access_mode": "mc", "physics_group": "top"})
    }

    fn field_of(v: Value) -> String {
        RequestInput::parse(&v, &limits(), "")
            .unwrap_err()
            .field
            .unwrap()
    }

    #[test]
    fn parses_a_good_request() {
        let r = RequestInput::parse(&good(), &limits(), "").unwrap();
        assert_eq!(r.size_bytes, 10);
        assert_eq!(r.direction, Direction::Read);
        assert_eq!(r.volume, None);
    }

    #[test]
    fn every_refusal_names_its_field() {
        let with = |k: &str, v: Value| {
            let mut g = good();
            g[k] = v;
            g
        };
        let without = |k: &str| {
            let mut g = good();
            g.as_object_mut().unwrap().remove(k);
            g
        };
        assert_eq!(field_of(without("station")), "station");
        assert_eq!(field_of(with("size_bytes", json!(0))), "size_bytes");
        assert_eq!(field_of(with("size_bytes", json!(-5))), "size_bytes");
        assert_eq!(field_of(with("size_bytes", json!(1.5))), "size_bytes");
        assert_eq!(field_of(with("size_bytes", json!("10"))), "size_bytes");
        assert_eq!(
            field_of(with("size_bytes", json!(1u64 << 41))),
            "size_bytes"
        );
        assert_eq!(field_of(with("user", json!(""))), "user");
        assert_eq!(field_of(with("user", json!("a\u{7}b"))), "user");
        assert_eq!(field_of(with("user", json!("x".repeat(17)))), "user");
        assert_eq!(field_of(with("file", json!(7))), "file");
        assert_eq!(field_of(with("direction", json!("sideways"))), "direction");
        assert_eq!(field_of(with("bogus", json!(1))), "bogus");
        let e = RequestInput::parse(&good(), &limits(), "requests[2].");
        assert!(e.is_ok());
        let e =
            RequestInput::parse(&with("user", json!(null)), &limits(), "requests[2].").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("requests[2].user"));
    }

    fn batch(v: Value) -> Result<usize, ApiError> {
        batch_items(&serde_json::to_vec(&v).unwrap(), &limits()).map(|items| items.len())
    }

    #[test]
    fn batch_bounds() {
        assert_eq!(batch(json!({"requests": [good(), 1]})).unwrap(), 2);
        assert!(batch(json!({"requests": []})).is_err());
        let many = json!({"requests": vec![good(); 11]});
        assert_eq!(batch(many).unwrap_err().status.as_u16(), 413);
        let field = |v: Value| batch(v).unwrap_err().field.unwrap();
        assert_eq!(field(json!({"requests": 1})), "requests");
        assert_eq!(field(json!({"requests": {"a": 1}})), "requests");
        assert_eq!(field(json!({"requests": null})), "requests");
        assert_eq!(field(json!({})), "requests");
        assert_eq!(field(json!({"x": []})), "x");
        assert_eq!(field(json!([good()])), "body");
        let e = batch_items(b"{\"requests\": [{}, ", &limits()).unwrap_err();
        assert_eq!((e.status.as_u16(), e.field.as_deref()), (400, Some("body")));
        let twice = br#"{"requests": [{}], "requests": [{}]}"#;
        let e = batch_items(twice, &limits()).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("requests"));
    }

    #[test]
    fn the_batch_is_counted_while_it_is_read() {
        // The 11th item is refused before the rest of the body is even looked at: what
        // follows it is not valid JSON, and the answer is still the 413.
        let mut body = br#"{"requests": ["#.to_vec();
        body.extend(b"{},".repeat(11));
        body.extend(b"!!! not json");
        let e = batch_items(&body, &limits()).unwrap_err();
        assert_eq!(
            (e.status.as_u16(), e.field.as_deref()),
            (413, Some("requests"))
        );
    }

    #[test]
    fn a_repeated_key_is_refused_by_both_passes() {
        let body = br#"{"client_request_id": "c1", "station": "s", "user": "u", "file": "/f",
            "size_bytes": 10, "access_mode": "mc", "physics_group": "top", "user": "v"}"#;
        let e = RequestInput::from_slice(body, &limits()).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("user"));
        let e = RequestInput::from_slice_at(body, &limits(), "requests[4].").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("requests[4].user"));
    }

    #[test]
    fn hidden_characters_and_blank_names_are_refused() {
        let with = |k: &str, v: &str| {
            let mut g = good();
            g[k] = json!(v);
            g
        };
        for (k, v) in [
            ("user", "   "),
            ("user", "\u{3000}"),
            ("station", "a\u{2028}b"),
            ("station", "a\u{2029}b"),
            ("physics_group", "top\u{202e}"),
            ("client_request_id", "c\u{200b}1"),
            ("user", "\u{feff}u"),
            ("file", "/f\u{202e}"),
        ] {
            assert_eq!(field_of(with(k, v)), k, "{k} = {v:?}");
            let bytes = serde_json::to_vec(&with(k, v)).unwrap();
            let e = RequestInput::from_slice(&bytes, &limits()).unwrap_err();
            assert_eq!(e.field.as_deref(), Some(k), "{k} = {v:?}");
        }
        // Letters of any script are names.
        assert!(RequestInput::parse(&with("user", "Łukasz Müller"), &limits(), "").is_ok());
    }

    #[test]
    fn operands_cannot_be_options_or_climb_out() {
        for (k, v) in [
            ("file", "--library=EVIL"),
            ("file", "--get-bfid"),
            ("file", "-"),
            ("file", "/pnfs/cms/x/.."),
            ("file", "/pnfs/./x"),
            ("file", "/"),
            ("file", "/pnfs/cms/"),
            ("local_file", "-o"),
            ("local_file", "/data/stage/../etc/f"),
            ("bfid", "--verbose"),
            ("bfid", ".."),
        ] {
            let mut g = good();
            g[k] = json!(v);
            assert_eq!(field_of(g.clone()), k, "{k} = {v:?}");
            let bytes = serde_json::to_vec(&g).unwrap();
            let e = RequestInput::from_slice(&bytes, &limits()).unwrap_err();
            assert_eq!(e.field.as_deref(), Some(k), "{k} = {v:?}");
        }
        let mut g = good();
        g["file"] = json!("/pnfs/cms/a-b/.hidden/x..y");
        assert!(RequestInput::parse(&g, &limits(), "").is_ok());
    }

    proptest! {
        /// Arbitrary bytes never panic the parser and every refusal names a field.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            match parse_json(&bytes) {
                Err(e) => prop_assert_eq!(e.field.as_deref(), Some("body")),
                Ok(v) => {
                    if let Err(e) = RequestInput::parse(&v, &limits(), "") {
                        prop_assert!(e.field.is_some());
                    }
                }
            }
        }

        /// The one-pass reader and the field-by-field walk agree on every body: the same request,
        /// or a refusal of the same field.
        #[test]
        fn fast_and_careful_parsers_agree(
            mutations in proptest::collection::vec((0usize..10, prop_oneof![
                Just(None), Just(Some(Value::Null)), any::<bool>().prop_map(|b| Some(Value::Bool(b))),
                (0u64..1 << 42).prop_map(|i| Some(json!(i))), any::<i64>().prop_map(|i| Some(json!(i))),
                "[a-z/]{0,20}".prop_map(|s| Some(Value::String(s))), ".{0,20}".prop_map(|s| Some(Value::String(s))),
                Just(Some(json!("read"))), Just(Some(json!("write"))), Just(Some(json!(2.5))),
            ]), 0..4),
        ) {
            let mut v = good();
            let obj = v.as_object_mut().unwrap();
            for (i, value) in mutations {
                let key = FIELDS.get(i).copied().unwrap_or("extra");
                match value {
                    None => { obj.remove(key); }
                    Some(x) => { obj.insert(key.to_string(), x); }
                }
            }
            let bytes = serde_json::to_vec(&v).unwrap();
            let fast = RequestInput::from_slice(&bytes, &limits());
            let careful = RequestInput::parse(&parse_json(&bytes).unwrap(), &limits(), "");
            match (fast, careful) {
                (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
                (Err(a), Err(b)) => prop_assert_eq!(a.field, b.field),
                (a, b) => prop_assert!(false, "fast {:?} vs careful {:?}", a, b),
            }
        }

        /// Arbitrary JSON objects with the right keys but random values never panic.
        #[test]
        fn arbitrary_values_never_panic(
            values in proptest::collection::vec(prop_oneof![
                Just(Value::Null), any::<bool>().prop_map(Value::Bool), any::<i64>().prop_map(|i| json!(i)),
                any::<f64>().prop_map(|f| json!(f)), ".{0,20}".prop_map(Value::String),
            ], 9)
        ) {
            let obj: Map<String, Value> = FIELDS.iter().map(|f| f.to_string()).zip(values).collect();
            if let Err(e) = RequestInput::parse(&Value::Object(obj), &limits(), "") {
                prop_assert!(FIELDS.contains(&e.field.as_deref().unwrap_or("")));
            }
        }
    }
}

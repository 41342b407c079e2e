//! The one definition of a request on the wire: [`SubmitRequest`] is what a body is read into
//! (serde), what the OpenAPI document shows (utoipa) and what the CLI sends (serialised).
//! [`SubmitRequest::validate`] turns it into the typed [`RequestInput`]: every field present, of
//! its type and within the configured bounds, every refusal naming its field.

use mss_adapters::Direction;
use serde::{Deserialize, Serialize};

use super::error::ApiError;
use crate::api::InputLimits;
use crate::ledger::RequestExtras;
use crate::policy::multifactor::Qos;

mod batch;
mod given;
mod read;
pub(super) use read::not_json;
#[cfg(test)]
mod tests;

pub use batch::batch_items;

// A request body as given: the raw JSON shape, of the JSON types it takes, nothing validated.
// A required field is an `Option` here so its absence is refused by name (`is required`).
// The doc comments below are the OpenAPI document's descriptions.
/// A request body.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    /// The station's own id for the request: the same station and id again is a replay.
    #[serde(default, deserialize_with = "given::text")]
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = String, required = true, min_length = 1)]
    pub client_request_id: Option<String>,
    #[serde(default, deserialize_with = "given::text")]
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = String, required = true, min_length = 1)]
    pub station: Option<String>,
    #[serde(default, deserialize_with = "given::text")]
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = String, required = true, min_length = 1)]
    pub user: Option<String>,
    /// Absolute path of the file to stage or store, in the MSS namespace.
    #[serde(default, deserialize_with = "given::text")]
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = String, required = true, min_length = 1, pattern = "^/")]
    pub file: Option<String>,
    #[serde(default, deserialize_with = "given::size")]
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = u64, required = true, minimum = 1)]
    pub size_bytes: Option<u64>,
    #[serde(default, deserialize_with = "given::text")]
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = String, required = true, min_length = 1)]
    pub access_mode: Option<String>,
    #[serde(default, deserialize_with = "given::text")]
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = String, required = true, min_length = 1)]
    pub physics_group: Option<String>,
    /// Tape label, if known.
    #[serde(default, deserialize_with = "given::text")]
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1)]
    pub volume: Option<String>,
    /// `read` (default) or `write`.
    #[serde(default, deserialize_with = "given::direction")]
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<super::schemas::DirectionBody>)]
    pub direction: Option<String>,
    /// The MSS library the transfer needs; the held release mode keeps each library's
    /// outstanding transfers under its limit.
    #[serde(default, deserialize_with = "given::text")]
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1)]
    pub library: Option<String>,
    /// `expedite`, `normal` or `standby` (the multifactor policy's QoS factor); default: the
    /// access mode's, from the configuration.
    #[serde(default, deserialize_with = "given::qos")]
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<super::schemas::QosBody>)]
    pub qos: Option<String>,
    /// The submitter's factor in [0, 1] (multifactor): 1 (default) leaves the priority as it
    /// is, lower values lower it.
    #[serde(default, deserialize_with = "given::number")]
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 1)]
    pub user_factor: Option<f64>,
    /// The station-side copy: where a read puts the file (a path for the encp adapter, a URL
    /// for FTS3), or the file a write stores. Required where the configured MSS adapter needs
    /// it (see `GET /v1/mss`).
    #[serde(default, deserialize_with = "given::text")]
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1)]
    pub local_file: Option<String>,
    /// Enstore's bit-file id of the file to read (encp `--get-bfid`); reads only.
    #[serde(default, deserialize_with = "given::text")]
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1)]
    pub bfid: Option<String>,
    /// Where the file lies on its volume as its file sequence number on the tape (Enstore's
    /// location cookie's file number, CTA's fSeq; 1 = the first data file), if known: the MSS
    /// reads a volume's files in this order.
    #[serde(default, deserialize_with = "given::position")]
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 9223372036854775807_i64)]
    pub position: Option<u64>,
    /// Where the file starts on its volume in bytes from the first data byte (CTA's catalogue
    /// knows it beside the fSeq), if known; reads only. It may be given with `position`: the
    /// offset is where the drive goes, the sequence number stays the file's number.
    #[serde(default, deserialize_with = "given::offset_bytes")]
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 1_000_000_000_000_000_i64)]
    pub offset_bytes: Option<u64>,
}

// The items are read one by one ([`batch_items`]), each as a [`SubmitRequest`].
/// A batch body.
#[derive(Debug, utoipa::ToSchema)]
pub struct SubmitBatch {
    pub requests: Vec<SubmitRequest>,
}

/// A request body, validated: every field present, of its type and within bounds. It is the
/// ledger's own record of a request's fields, what `NewRequest` holds.
pub use crate::ledger::RequestInput;

pub use crate::domain::MAX_OFFSET_BYTES;

/// The fields of [`SubmitRequest`], in the order they are validated.
pub const FIELDS: [&str; 16] = [
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
    "position",
    "offset_bytes",
];

const QOS_VALUES: &str = "must be \"expedite\", \"normal\" or \"standby\"";
const DIRECTION_VALUES: &str = "must be \"read\" or \"write\"";

impl RequestInput {
    /// Read and validate a request body.
    pub fn from_slice(bytes: &[u8], limits: &InputLimits) -> Result<RequestInput, ApiError> {
        RequestInput::from_slice_at(bytes, limits, "")
    }

    /// Read and validate one request's JSON text; `prefix` is put before field names
    /// (`requests[3].`).
    pub fn from_slice_at(
        bytes: &[u8],
        limits: &InputLimits,
        prefix: &str,
    ) -> Result<RequestInput, ApiError> {
        read::request_input(bytes, limits, prefix)
    }
}

impl SubmitRequest {
    /// The typed request, or the first field (in [`FIELDS`] order) that is missing or out of
    /// bounds. Field names carry no prefix; the caller adds one.
    pub fn validate(self, limits: &InputLimits) -> Result<RequestInput, ApiError> {
        let n = limits.max_string_len;
        let text = |field: &str, v: Option<String>, max: usize| match v {
            None => Err(ApiError::field(field, "is required")),
            Some(v) => optional_text(field, Some(v), max).map(|v| v.unwrap_or_default()),
        };
        // Built in [`FIELDS`] order (a struct's fields are evaluated as written): the first
        // refusal is that of the first field at fault.
        let input = RequestInput {
            client_request_id: text("client_request_id", self.client_request_id, n)?,
            station: text("station", self.station, n)?,
            user: text("user", self.user, n)?,
            file: text("file", self.file, limits.max_path_len)?,
            size_bytes: size(self.size_bytes, limits.max_size_bytes)?,
            access_mode: text("access_mode", self.access_mode, n)?,
            physics_group: text("physics_group", self.physics_group, n)?,
            volume: optional_text("volume", self.volume, n)?,
            direction: match self.direction.as_deref() {
                None => Direction::Read,
                Some(d) => Direction::parse(d)
                    .ok_or_else(|| ApiError::field("direction", DIRECTION_VALUES))?,
            },
            extras: RequestExtras {
                // '' is the default library: the check above refuses an empty name.
                library: optional_text("library", self.library, n)?.unwrap_or_default(),
                qos: self
                    .qos
                    .map(|q| Qos::parse(&q).ok_or_else(|| ApiError::field("qos", QOS_VALUES)))
                    .transpose()?,
                user_factor: self
                    .user_factor
                    .map(|u| user_factor(u).map_err(|m| ApiError::field("user_factor", m)))
                    .transpose()?,
                local_file: optional_text("local_file", self.local_file, limits.max_path_len)?,
                bfid: optional_text("bfid", self.bfid, n)?,
                position: self.position.map(position).transpose()?,
                offset_bytes: self.offset_bytes.map(offset_bytes).transpose()?,
            },
        };
        // Checks across fields, after every field was validated.
        if input.extras.bfid.is_some() && input.direction == Direction::Write {
            return Err(ApiError::field(
                "bfid",
                "only a read names a bfid (a write has none yet)",
            ));
        }
        if input.extras.offset_bytes.is_some() && input.direction == Direction::Write {
            return Err(ApiError::field(
                "offset_bytes",
                "only a read names an offset (a write goes to the volume's end of data)",
            ));
        }
        Ok(input)
    }
}

fn optional_text(field: &str, v: Option<String>, max: usize) -> Result<Option<String>, ApiError> {
    if let Some(v) = &v {
        check_value(field, v, max).map_err(|m| ApiError::field(field, m))?;
    }
    Ok(v)
}

fn size(v: Option<u64>, max: u64) -> Result<u64, ApiError> {
    match v {
        None => Err(ApiError::field("size_bytes", "is required")),
        Some(0) => Err(ApiError::field("size_bytes", "must be greater than 0")),
        Some(v) if v > max => Err(ApiError::field(
            "size_bytes",
            format!("may be at most {max}"),
        )),
        Some(v) => Ok(v),
    }
}

/// A position is stored as a SQLite INTEGER, so at most `i64::MAX`.
fn position(p: u64) -> Result<u64, ApiError> {
    if i64::try_from(p).is_ok() {
        Ok(p)
    } else {
        Err(ApiError::field(
            "position",
            format!("may be at most {}", i64::MAX),
        ))
    }
}

/// A byte offset on a volume: at most [`MAX_OFFSET_BYTES`].
fn offset_bytes(o: u64) -> Result<u64, ApiError> {
    if o <= MAX_OFFSET_BYTES {
        Ok(o)
    } else {
        Err(ApiError::field(
            "offset_bytes",
            format!("may be at most {MAX_OFFSET_BYTES} (1 PB), got {o}"),
        ))
    }
}

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
    if key == "file" && !value.starts_with('/') {
        // encp would resolve it against the broker's directory, FTS3 would make a URL without
        // a path of it, and Tape REST refuses it: the MSS namespace has only absolute paths.
        return Err("must be an absolute path in the MSS namespace (start with `/`)".into());
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
    // ASCII has no format or separator characters (Cf, Zl, Zp start above U+007F); skipping
    // the Unicode table lookup for it was 10% of the broker's CPU under batch ingest.
    let hiding = |c: &char| !c.is_ascii() && crate::hidden_text::is_hiding(*c);
    if let Some(c) = value.chars().find(hiding) {
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

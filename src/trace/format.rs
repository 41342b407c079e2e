//! The trace format: JSON lines, one request each (docs/traces.md). Reading is strict: unknown
//! fields, missing fields, a negative or decreasing `t` and a zero `size_bytes` are refused,
//! naming the line and the field. `volume`, `position` and `offset_bytes` may be left out, as a
//! request may leave them out: the line is then a request without them (`simulate::arrivals`).

use std::io::{BufRead, Write};

use serde::{Deserialize, Serialize};

use super::TraceError;
use crate::domain::MAX_OFFSET_BYTES;

/// A request's direction: `read` (a recall from tape, the default, not written out) or
/// `write` (the data-taking stream).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    #[default]
    Read,
    Write,
}

impl Direction {
    fn is_read(&self) -> bool {
        *self == Direction::Read
    }
}

/// One request of a trace, in the order its fields are written: [`TraceRecord`] (owned, what
/// a trace is read into) and `RecordRef` (borrowed, what the generator and the export write
/// without allocating per record) are this one shape over two kinds of text, so they serialise
/// alike by construction.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record<S> {
    /// Seconds from the trace start, >= 0, non-decreasing along the trace.
    pub t: f64,
    pub client_request_id: S,
    pub station: S,
    pub user: S,
    pub file: S,
    /// Tape label; absent for a request that named none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<S>,
    /// Where the file is on its volume: the tape's file sequence number (the generator's, from
    /// 1); absent for a request that gave none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<u64>,
    /// Where the file starts on its volume, in bytes from the first data byte (reads only, at
    /// most 1 PB); absent for a request that gave none. The library model places the file here,
    /// whatever `position` says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset_bytes: Option<u64>,
    /// > 0.
    pub size_bytes: u64,
    pub access_mode: S,
    pub physics_group: S,
    /// Optional, `read` when absent.
    #[serde(default, skip_serializing_if = "Direction::is_read")]
    pub direction: Direction,
    /// Seconds from the trace start when the client cancelled the request, at or after `t`;
    /// absent for a request never cancelled (the format's second version: a first-version
    /// trace has no such field and reads as before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled_t: Option<f64>,
}

/// One request of a trace, as read.
pub type TraceRecord = Record<String>;

/// A record with borrowed strings: what the generator and the export write.
pub(crate) type RecordRef<'a> = Record<&'a str>;

impl TraceRecord {
    pub(crate) fn as_ref(&self) -> RecordRef<'_> {
        RecordRef {
            t: self.t,
            client_request_id: &self.client_request_id,
            station: &self.station,
            user: &self.user,
            file: &self.file,
            volume: self.volume.as_deref(),
            position: self.position,
            offset_bytes: self.offset_bytes,
            size_bytes: self.size_bytes,
            access_mode: &self.access_mode,
            physics_group: &self.physics_group,
            direction: self.direction,
            cancelled_t: self.cancelled_t,
        }
    }
}

/// Writes one record as one line (`buf` is scratch space, reused across calls).
pub(crate) fn write_ref(
    record: &RecordRef<'_>,
    buf: &mut Vec<u8>,
    out: &mut impl Write,
) -> Result<(), TraceError> {
    buf.clear();
    serde_json::to_writer(&mut *buf, record).map_err(|e| TraceError::Io(e.into()))?;
    buf.push(b'\n');
    out.write_all(buf)?;
    Ok(())
}

/// Writes one record as one JSON line.
pub fn write_record(record: &TraceRecord, out: &mut impl Write) -> Result<(), TraceError> {
    write_ref(&record.as_ref(), &mut Vec::with_capacity(256), out)
}

/// Reads a whole trace. Blank lines are skipped; line numbers count from 1.
pub fn read_trace(input: impl BufRead) -> Result<Vec<TraceRecord>, TraceError> {
    let mut records = Vec::new();
    let mut last_t = 0.0_f64;
    for (i, line) in input.lines().enumerate() {
        let line_no = i + 1;
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let record = parse_line(&line, line_no)?;
        if record.t < last_t {
            return Err(TraceError::Invalid {
                line: line_no,
                field: "t".into(),
                message: format!("{} is before the previous record's {last_t}", record.t),
            });
        }
        last_t = record.t;
        records.push(record);
    }
    Ok(records)
}

fn parse_line(line: &str, line_no: usize) -> Result<TraceRecord, TraceError> {
    let refuse = |field: String, message: String| TraceError::Invalid {
        line: line_no,
        field,
        message,
    };
    let mut de = serde_json::Deserializer::from_str(line);
    let record: TraceRecord = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let message = e.into_inner().to_string();
        let field = if path == "." {
            named_in(&message).unwrap_or_else(|| "(record)".into())
        } else {
            path
        };
        refuse(field, message)
    })?;
    de.end()
        .map_err(|e| refuse("(record)".into(), e.to_string()))?;
    if !(0.0..=MAX_T_SECS).contains(&record.t) {
        return Err(refuse(
            "t".into(),
            format!("{} is not a time from 0 to {MAX_T_SECS:e} s", record.t),
        ));
    }
    if !(1..=MAX_SIZE_BYTES).contains(&record.size_bytes) {
        return Err(refuse(
            "size_bytes".into(),
            format!("must be from 1 to {MAX_SIZE_BYTES} (1 PB)"),
        ));
    }
    offset(&record).map_err(|m| refuse("offset_bytes".into(), m.into()))?;
    if let Some(c) = record.cancelled_t {
        if !(record.t..=MAX_T_SECS).contains(&c) {
            return Err(refuse(
                "cancelled_t".into(),
                format!(
                    "{c} is not a time from the record's t ({}) to {MAX_T_SECS:e} s",
                    record.t
                ),
            ));
        }
    }
    // As `POST /v1/requests` refuses a blank string: a request without a volume leaves it out.
    if record
        .volume
        .as_deref()
        .is_some_and(|v| v.trim().is_empty())
    {
        return Err(refuse(
            "volume".into(),
            "is blank: leave `volume` out for a request that names none".into(),
        ));
    }
    Ok(record)
}

/// As `POST /v1/requests` checks `offset_bytes`: at most 1 PB, and on a read only (a write goes
/// to the volume's end of data).
fn offset(record: &TraceRecord) -> Result<(), &'static str> {
    match record.offset_bytes {
        Some(o) if o > MAX_OFFSET_BYTES => Err("may be at most 1000000000000000 (1 PB)"),
        Some(_) if record.direction == Direction::Write => {
            Err("only a read names an offset (a write goes to the volume's end of data)")
        }
        _ => Ok(()),
    }
}

/// The latest `t` a trace may hold: about 31.7 years, so the simulator's microsecond clock and
/// the library model's sums of drive times stay far inside their integers.
pub const MAX_T_SECS: f64 = 1e9;

/// The largest file a trace may hold, 1 PB (a third of a year at 100 MB/s): a larger size
/// would have the simulator step through its transfer a re-prioritisation tick at a time.
pub const MAX_SIZE_BYTES: u64 = 1_000_000_000_000_000;

/// The field serde names in backticks ("unknown field `x`", "missing field `t`").
fn named_in(message: &str) -> Option<String> {
    let start = message.find('`')? + 1;
    let len = message[start..].find('`')?;
    Some(message[start..start + len].to_string())
}

#[cfg(test)]
mod tests;

//! The `requests` columns of a whole record, in one list: the INSERT of a new request and the
//! SELECT of a record ([`super::read::RequestRecord`]) are both made from it. Adding a column is
//! one line here (its name and, if a new request sets it, the value it gets), its field in
//! `RequestRecord` (read by name) and its migration in `schema.rs`.

use std::sync::OnceLock;

use super::db::Value;

use super::NewRequest;
use crate::domain::{Class, RequestState};

/// A new request's row, as the writer decided it.
pub(super) struct NewRow<'a> {
    pub item: &'a NewRequest,
    pub group_path: &'a str,
    pub class: Class,
    pub mss_priority: i64,
    /// Benefit and bytes charged now (0 while held or queued).
    pub charged: i64,
    pub charged_bytes: i64,
    pub state: RequestState,
    pub created_ms: i64,
    pub charged_ms: Option<i64>,
    pub held_reason: Option<&'a str>,
    pub slots: u32,
    /// The stored explanation (JSON), when decided.
    pub explain: Option<&'a str>,
    /// The request whose transfer it rides on (state `riding`).
    pub rides_on: Option<i64>,
}

/// How a new request fills a column (`None`: the column's default; the writer sets it later).
type Fill = Option<for<'a, 'b> fn(&'b NewRow<'a>) -> Value<'a>>;

macro_rules! fill {
    (|$r:ident| $e:expr) => {
        Some(|$r| Value::from($e))
    };
}

/// [`fill!`] for a value that may be NULL.
macro_rules! fill_null {
    (|$r:ident| $e:expr) => {
        Some(|$r| $e.map_or(Value::Null, Value::from))
    };
}

/// Every column of a request record, in order.
const COLUMNS: &[(&str, Fill)] = &[
    ("id", None),
    ("station", fill!(|r| r.item.station.as_str())),
    (
        "client_request_id",
        fill!(|r| r.item.client_request_id.as_str()),
    ),
    ("user_name", fill!(|r| r.item.user.as_str())),
    ("file", fill!(|r| r.item.file.as_str())),
    ("size_bytes", fill!(|r| r.item.size_bytes as i64)),
    ("access_mode", fill!(|r| r.item.access_mode.as_str())),
    ("physics_group", fill!(|r| r.item.physics_group.as_str())),
    ("volume", fill_null!(|r| r.item.volume.as_deref())),
    ("direction", fill!(|r| r.item.direction.as_str())),
    ("group_path", fill!(|r| r.group_path)),
    ("class", fill!(|r| r.class.as_str())),
    ("mss_priority", fill!(|r| r.mss_priority)),
    ("charged", fill!(|r| r.charged)),
    ("charged_bytes", fill!(|r| r.charged_bytes)),
    ("state", fill!(|r| r.state.as_str())),
    ("attempt", None),
    ("mss_id", None),
    ("bytes_done", None),
    ("cancel_requested", None),
    ("last_error", None),
    ("created_ms", fill!(|r| r.created_ms)),
    ("submitted_ms", None),
    ("started_ms", None),
    ("finished_ms", None),
    ("charged_ms", fill_null!(|r| r.charged_ms)),
    ("held_reason", fill_null!(|r| r.held_reason)),
    ("library", fill!(|r| r.item.extras.library.as_str())),
    ("slots", fill!(|r| i64::from(r.slots))),
    ("qos", fill_null!(|r| r.item.extras.qos.map(|q| q.as_str()))),
    ("user_factor", fill_null!(|r| r.item.extras.user_factor)),
    ("explain", fill_null!(|r| r.explain)),
    (
        "local_file",
        fill_null!(|r| r.item.extras.local_file.as_deref()),
    ),
    ("bfid", fill_null!(|r| r.item.extras.bfid.as_deref())),
    (
        "position",
        fill_null!(|r| r.item.extras.position.and_then(|p| i64::try_from(p).ok())),
    ),
    ("rides_on", fill_null!(|r| r.rides_on)),
    ("volume_source", None),
    // Read for `RequestRecord::unsettled` (`unsettled.rs`); the writer sets it.
    ("next_attempt_ms", None),
    (
        "offset_bytes",
        fill_null!(|r| r
            .item
            .extras
            .offset_bytes
            .and_then(|o| i64::try_from(o).ok())),
    ),
];

/// The columns a record SELECT reads (`SELECT {record_columns()} FROM requests ...`).
pub(super) fn record_columns() -> &'static str {
    static SQL: OnceLock<String> = OnceLock::new();
    SQL.get_or_init(|| {
        COLUMNS
            .iter()
            .map(|(name, _)| *name)
            .collect::<Vec<_>>()
            .join(", ")
    })
}

/// The INSERT of a new request; its parameters are [`NewRow::values`], in order.
pub(super) fn insert_sql() -> &'static str {
    static SQL: OnceLock<String> = OnceLock::new();
    SQL.get_or_init(|| {
        let names: Vec<&str> = (COLUMNS.iter())
            .filter(|(_, fill)| fill.is_some())
            .map(|(name, _)| *name)
            .collect();
        let values: Vec<String> = (1..=names.len()).map(|i| format!("?{i}")).collect();
        format!(
            "INSERT INTO requests ({}) VALUES ({})",
            names.join(", "),
            values.join(", ")
        )
    })
}

impl<'a> NewRow<'a> {
    /// The INSERT's parameters, in [`insert_sql`]'s order.
    pub fn values(&self) -> impl Iterator<Item = Value<'a>> + '_ {
        COLUMNS
            .iter()
            .filter_map(move |(_, fill)| fill.map(|f| f(self)))
    }
}

//! One group commit of new requests, written the ways the PostgreSQL port could write it, and
//! the way the SQLite ledger writes it: for the measurement in `examples/pg_ingest.rs`
//! (docs/ha.md, "The ingest form on PostgreSQL"), before the port commits to a form.
//!
//! The rows are those of the accept path (`writer/accept.rs`, `writer/idempotency.rs`): per
//! request a `requests` row (the columns of `columns::insert_sql`, the statement SQLite runs)
//! and an `idempotency` row; per group the counters `writer/state.rs` and `aggregates.rs`
//! upsert (`groups`, `usage_windows`, `report_hours`). Everything in one transaction,
//! committed before the call returns.
//!
//! The PostgreSQL forms:
//! - [`Form::PerRow`]: the ledger's statements as they are (`?N` rewritten), prepared once,
//!   `INSERT ... RETURNING id` and the idempotency INSERT per request: two round trips each;
//! - [`Form::Unnest`]: the group's ids reserved from the identity's sequence in one round trip,
//!   then one statement inserting every request and idempotency row from arrays
//!   (`INSERT ... SELECT FROM unnest($1::bigint[], $2::text[], ...)`);
//! - [`Form::Copy`]: the ids reserved the same way, then `COPY ... FROM STDIN (FORMAT binary)`
//!   for each of the two tables.

use std::error::Error;

use bytes::BytesMut;
use postgres::binary_copy::BinaryCopyInWriter;
use postgres::types::{to_sql_checked, IsNull, ToSql, Type};
use postgres::{Client, Statement, Transaction};
use rusqlite::types::ToSqlOutput;

use super::placeholders;
use crate::ledger::columns;
use crate::ledger::wide::Wide;

/// How a group is written on PostgreSQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    PerRow,
    Unnest,
    Copy,
}

impl Form {
    pub const ALL: [Form; 3] = [Form::PerRow, Form::Unnest, Form::Copy];

    pub fn name(self) -> &'static str {
        match self {
            Form::PerRow => "one INSERT per row (prepared)",
            Form::Unnest => "INSERT ... SELECT FROM unnest(arrays)",
            Form::Copy => "COPY (binary)",
        }
    }
}

/// A column's value, bound alike on both backends.
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    Text(Option<&'a str>),
    Int(Option<i64>),
    Real(Option<f64>),
}

/// A column's PostgreSQL type (and its array's, for `unnest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Int,
    Real,
}

impl Kind {
    fn pg(self) -> (Type, &'static str) {
        match self {
            Kind::Text => (Type::TEXT, "text[]"),
            Kind::Int => (Type::INT8, "bigint[]"),
            Kind::Real => (Type::FLOAT8, "double precision[]"),
        }
    }
}

/// A new request's row: what the accept path writes for it.
#[derive(Debug, Clone)]
pub struct Row {
    pub station: String,
    pub client_request_id: String,
    pub user: String,
    pub file: String,
    pub size_bytes: i64,
    pub group_path: String,
    pub created_ms: i64,
    pub explain: String,
    pub fingerprint: i64,
}

type Column = (&'static str, Kind, for<'a> fn(&'a Row) -> Value<'a>);

/// The columns a new request sets, in `columns::insert_sql`'s order (a test holds them equal),
/// as an accepted, decided request of the `accepted` state sets them.
const COLUMNS: &[Column] = &[
    ("station", Kind::Text, |r| Value::Text(Some(&r.station))),
    ("client_request_id", Kind::Text, |r| {
        Value::Text(Some(&r.client_request_id))
    }),
    ("user_name", Kind::Text, |r| Value::Text(Some(&r.user))),
    ("file", Kind::Text, |r| Value::Text(Some(&r.file))),
    ("size_bytes", Kind::Int, |r| Value::Int(Some(r.size_bytes))),
    ("access_mode", Kind::Text, |_| Value::Text(Some("read"))),
    ("physics_group", Kind::Text, |_| Value::Text(Some("raw"))),
    ("volume", Kind::Text, |_| Value::Text(None)),
    ("direction", Kind::Text, |_| Value::Text(Some("read"))),
    ("group_path", Kind::Text, |r| {
        Value::Text(Some(&r.group_path))
    }),
    ("class", Kind::Text, |_| Value::Text(Some("front"))),
    ("mss_priority", Kind::Int, |_| Value::Int(Some(30))),
    ("charged", Kind::Int, |r| {
        Value::Int(Some(r.size_bytes >> 20))
    }),
    ("charged_bytes", Kind::Int, |r| {
        Value::Int(Some(r.size_bytes))
    }),
    ("state", Kind::Text, |_| Value::Text(Some("accepted"))),
    ("created_ms", Kind::Int, |r| Value::Int(Some(r.created_ms))),
    ("charged_ms", Kind::Int, |r| Value::Int(Some(r.created_ms))),
    ("held_reason", Kind::Text, |_| Value::Text(None)),
    ("library", Kind::Text, |_| Value::Text(Some(""))),
    ("slots", Kind::Int, |_| Value::Int(Some(1))),
    ("qos", Kind::Text, |_| Value::Text(None)),
    ("user_factor", Kind::Real, |_| Value::Real(None)),
    ("explain", Kind::Text, |r| Value::Text(Some(&r.explain))),
    ("local_file", Kind::Text, |_| Value::Text(None)),
    ("bfid", Kind::Text, |_| Value::Text(None)),
    ("position", Kind::Int, |_| Value::Int(None)),
    ("rides_on", Kind::Int, |_| Value::Int(None)),
    ("offset_bytes", Kind::Int, |_| Value::Int(None)),
];

impl Row {
    /// Request `i` of a run: distinct keys, sizes and file names of realistic length.
    pub fn sample(i: u64, now_ms: i64) -> Row {
        let client_request_id = format!("req-{i:012}");
        let station = format!("station-{}", i % 8);
        Row {
            fingerprint: fingerprint_of(&station, &client_request_id),
            file: format!("/pnfs/fs/usr/exp/raw/run{:06}/file-{i:08}.root", i / 1000),
            user: format!("user{}", i % 50),
            size_bytes: 1_000_000_000 + (i as i64 % 1000) * 1_000_000,
            group_path: "/exp/raw".to_string(),
            created_ms: now_ms,
            explain: format!(
                "{{\"class\":\"front\",\"mss_priority\":30,\"share\":0.25,\"usage\":{i},\
                 \"deficit\":0.125,\"rank\":{},\"why\":\"under its share\"}}",
                i % 97
            ),
            station,
            client_request_id,
        }
    }

    fn values(&self) -> impl Iterator<Item = Value<'_>> {
        COLUMNS.iter().map(move |(_, _, get)| get(self))
    }
}

/// A stand-in for the accept path's fingerprint (a private hash of the writer's): distinct
/// and spread like it, which is all the rows need here.
fn fingerprint_of(station: &str, client_request_id: &str) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in station
        .bytes()
        .chain([0xff])
        .chain(client_request_id.bytes())
    {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h as i64
}

/// A SQLite ledger as the writer opens it (`ledger::schema::open_writer`: the schema, WAL,
/// `synchronous=FULL`, the wide functions).
pub fn open_sqlite(
    path: &std::path::Path,
) -> Result<rusqlite::Connection, crate::ledger::LedgerError> {
    crate::ledger::schema::open_writer(path)
}

impl rusqlite::ToSql for Value<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        match self {
            Value::Text(v) => rusqlite::ToSql::to_sql(v),
            Value::Int(v) => rusqlite::ToSql::to_sql(v),
            Value::Real(v) => rusqlite::ToSql::to_sql(v),
        }
    }
}

impl ToSql for Value<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        match self {
            Value::Text(v) => ToSql::to_sql(v, ty, out),
            Value::Int(v) => ToSql::to_sql(v, ty, out),
            Value::Real(v) => ToSql::to_sql(v, ty, out),
        }
    }

    fn accepts(ty: &Type) -> bool {
        <&str as ToSql>::accepts(ty) || i64::accepts(ty) || f64::accepts(ty)
    }

    to_sql_checked!();
}

/// What a group adds to its group's counters (one group per run here).
fn totals(rows: &[Row]) -> (Wide, Wide, i64) {
    let usage = rows.iter().map(|r| i128::from(r.size_bytes >> 20)).sum();
    let bytes = rows.iter().map(|r| i128::from(r.size_bytes)).sum();
    (Wide(usage), Wide(bytes), rows.len() as i64)
}

/// The group counters' upserts (as `writer/state.rs` and `aggregates.rs` write them).
const GROUPS: &str = "INSERT INTO groups(path, usage, usage_bytes, pending, held) \
     VALUES (?1, ?2, ?3, ?4, ?5) \
     ON CONFLICT(path) DO UPDATE SET usage = wide_add(groups.usage, excluded.usage), \
     usage_bytes = wide_add(groups.usage_bytes, excluded.usage_bytes), \
     pending = groups.pending + excluded.pending, held = groups.held + excluded.held";
const WINDOWS: &str = "INSERT INTO usage_windows(path, \"window\", usage) VALUES (?1, ?2, ?3) \
     ON CONFLICT(path, \"window\") DO UPDATE SET \
     usage = wide_add(usage_windows.usage, excluded.usage)";
const HOURS: &str = "INSERT INTO report_hours (path, hour, accepted, front) \
     VALUES (?1, ?2, ?3, ?3) ON CONFLICT(path, hour) DO UPDATE SET \
     accepted = report_hours.accepted + excluded.accepted, \
     front = report_hours.front + excluded.front";
const IDEMPOTENCY: &str = "INSERT INTO idempotency (id, fingerprint) VALUES (?1, ?2)";

/// The hour and the usage window of `now_ms` (an hour's window, as a figure).
fn hour(now_ms: i64) -> i64 {
    now_ms / 3_600_000
}

/// Write `rows` as one group commit on the SQLite ledger (a connection of
/// `ledger::schema::open_writer`: its settings, WAL and `synchronous=FULL`), as the writer
/// does; the new ids.
pub fn sqlite_group(conn: &mut rusqlite::Connection, rows: &[Row]) -> rusqlite::Result<Vec<i64>> {
    let tx = conn.transaction()?;
    let mut ids = Vec::with_capacity(rows.len());
    {
        let mut insert = tx.prepare_cached(columns::insert_sql())?;
        let mut idem = tx.prepare_cached(IDEMPOTENCY)?;
        for r in rows {
            insert.execute(rusqlite::params_from_iter(r.values()))?;
            let id = tx.last_insert_rowid();
            idem.execute(rusqlite::params![id, r.fingerprint])?;
            ids.push(id);
        }
        let (usage, bytes, n) = totals(rows);
        let (path, now) = (group_of(rows), now_of(rows));
        tx.prepare_cached(GROUPS)?
            .execute(rusqlite::params![path, usage, bytes, n, 0])?;
        tx.prepare_cached(WINDOWS)?
            .execute(rusqlite::params![path, hour(now), usage])?;
        tx.prepare_cached(HOURS)?
            .execute(rusqlite::params![path, hour(now), n])?;
    }
    tx.commit()?;
    Ok(ids)
}

fn group_of(rows: &[Row]) -> &str {
    rows.first().map_or("/", |r| r.group_path.as_str())
}

fn now_of(rows: &[Row]) -> i64 {
    rows.first().map_or(0, |r| r.created_ms)
}

/// Why a form could not be prepared or run.
#[derive(Debug, thiserror::Error)]
pub enum FormError {
    #[error(transparent)]
    Sql(#[from] placeholders::PlaceholderError),
    #[error(transparent)]
    Database(#[from] postgres::Error),
}

/// The statements of every form, prepared once on a connection.
pub struct Prepared {
    insert_returning: Statement,
    idempotency: Statement,
    reserve: Statement,
    unnest: Statement,
    groups: Statement,
    windows: Statement,
    hours: Statement,
}

/// The columns of `insert_sql`, as it names them.
pub fn insert_sql_columns() -> Vec<&'static str> {
    let sql = columns::insert_sql();
    let start = sql.find('(').map_or(0, |i| i + 1);
    let end = sql.find(')').unwrap_or(sql.len());
    sql[start..end].split(", ").collect()
}

fn unnest_sql() -> String {
    let names: Vec<&str> = COLUMNS.iter().map(|(name, _, _)| *name).collect();
    let arrays: Vec<String> = (COLUMNS.iter().enumerate())
        .map(|(i, (_, kind, _))| format!("${}::{}", i + 2, kind.pg().1))
        .collect();
    let fingerprints = COLUMNS.len() + 2;
    format!(
        "WITH r AS (INSERT INTO requests (id, {}) SELECT * FROM unnest($1::bigint[], {})) \
         INSERT INTO idempotency (id, fingerprint) \
         SELECT * FROM unnest($1::bigint[], ${fingerprints}::bigint[])",
        names.join(", "),
        arrays.join(", ")
    )
}

fn copy_requests_sql() -> String {
    let names: Vec<&str> = COLUMNS.iter().map(|(name, _, _)| *name).collect();
    format!(
        "COPY requests (id, {}) FROM STDIN (FORMAT binary)",
        names.join(", ")
    )
}

impl Prepared {
    pub fn new(client: &mut Client) -> Result<Prepared, FormError> {
        let mut prepare = |sql: &str| -> Result<Statement, FormError> {
            Ok(client.prepare(&placeholders::rewrite(sql)?)?)
        };
        Ok(Prepared {
            insert_returning: prepare(&format!("{} RETURNING id", columns::insert_sql()))?,
            idempotency: prepare(IDEMPOTENCY)?,
            reserve: prepare(
                "SELECT nextval(pg_get_serial_sequence('requests', 'id')) \
                 FROM generate_series(1, ?1::bigint)",
            )?,
            unnest: prepare(&unnest_sql())?,
            groups: prepare(GROUPS)?,
            windows: prepare(WINDOWS)?,
            hours: prepare(HOURS)?,
        })
    }
}

/// Write `rows` as one group commit on PostgreSQL in `form`; the new ids.
pub fn pg_group(
    client: &mut Client,
    prepared: &Prepared,
    form: Form,
    rows: &[Row],
) -> Result<Vec<i64>, FormError> {
    let mut tx = client.transaction()?;
    let ids = match form {
        Form::PerRow => per_row(&mut tx, prepared, rows)?,
        Form::Unnest => unnest(&mut tx, prepared, rows)?,
        Form::Copy => copy(&mut tx, prepared, rows)?,
    };
    let (usage, bytes, n) = totals(rows);
    let (path, now) = (group_of(rows), now_of(rows));
    tx.execute(&prepared.groups, &[&path, &usage, &bytes, &n, &0i64])?;
    tx.execute(&prepared.windows, &[&path, &hour(now), &usage])?;
    tx.execute(&prepared.hours, &[&path, &hour(now), &n])?;
    tx.commit()?;
    Ok(ids)
}

fn per_row(tx: &mut Transaction<'_>, p: &Prepared, rows: &[Row]) -> Result<Vec<i64>, FormError> {
    let mut ids = Vec::with_capacity(rows.len());
    for r in rows {
        let values: Vec<Value<'_>> = r.values().collect();
        let refs: Vec<&(dyn ToSql + Sync)> =
            values.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
        let id: i64 = tx.query_one(&p.insert_returning, &refs)?.try_get(0)?;
        tx.execute(&p.idempotency, &[&id, &r.fingerprint])?;
        ids.push(id);
    }
    Ok(ids)
}

/// The next `n` ids of `requests`' identity, in one round trip.
fn reserve(tx: &mut Transaction<'_>, p: &Prepared, n: usize) -> Result<Vec<i64>, FormError> {
    let rows = tx.query(&p.reserve, &[&(n as i64)])?;
    Ok(rows
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()?)
}

fn unnest(tx: &mut Transaction<'_>, p: &Prepared, rows: &[Row]) -> Result<Vec<i64>, FormError> {
    let ids = reserve(tx, p, rows.len())?;
    let arrays: Vec<Vec<Value<'_>>> = (0..COLUMNS.len())
        .map(|c| rows.iter().map(|r| (COLUMNS[c].2)(r)).collect())
        .collect();
    let fingerprints: Vec<i64> = rows.iter().map(|r| r.fingerprint).collect();
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&ids];
    params.extend(arrays.iter().map(|a| a as &(dyn ToSql + Sync)));
    params.push(&fingerprints);
    tx.execute(&p.unnest, &params)?;
    Ok(ids)
}

fn copy(tx: &mut Transaction<'_>, p: &Prepared, rows: &[Row]) -> Result<Vec<i64>, FormError> {
    let ids = reserve(tx, p, rows.len())?;
    let mut types = vec![Type::INT8];
    types.extend(COLUMNS.iter().map(|(_, kind, _)| kind.pg().0));
    let mut requests = BinaryCopyInWriter::new(tx.copy_in(&copy_requests_sql())?, &types);
    for (r, id) in rows.iter().zip(&ids) {
        let values: Vec<Value<'_>> = r.values().collect();
        let mut refs: Vec<&(dyn ToSql + Sync)> = vec![id];
        refs.extend(values.iter().map(|v| v as &(dyn ToSql + Sync)));
        requests.write(&refs)?;
    }
    requests.finish()?;
    let idem_sql = "COPY idempotency (id, fingerprint) FROM STDIN (FORMAT binary)";
    let mut idem = BinaryCopyInWriter::new(tx.copy_in(idem_sql)?, &[Type::INT8, Type::INT8]);
    for (r, id) in rows.iter().zip(&ids) {
        idem.write(&[id, &r.fingerprint])?;
    }
    idem.finish()?;
    Ok(ids)
}

#[cfg(test)]
mod tests {
    /// Against a real server.
    mod cluster;

    use super::*;

    #[test]
    fn the_columns_are_the_ledgers_insert_in_its_order() {
        let ours: Vec<&str> = COLUMNS.iter().map(|(name, _, _)| *name).collect();
        assert_eq!(ours, insert_sql_columns());
    }
}

//! The ledger's requests in arrival order, read-only, for `mssbroker trace export`: one row at
//! a time into a caller's function, so a week of a busy site never sits in memory.
//!
//! Arrival order is id order: the writer gives ids in commit order and stamps `created_ms` with
//! its clock at that commit, so the two agree unless the wall clock stepped back. Walking the
//! rowid needs no sort and no index; `--since`/`--until` filter on `created_ms` along the way.

use mss_adapters::Direction;

use super::db::{params, DbError, DbResult, Row};
use super::history::LedgerReader;
use super::read::stored_direction;
use super::LedgerError;

/// What a trace keeps of one stored request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportedRequest {
    pub id: i64,
    /// When the broker accepted it (ms since 1970).
    pub created_ms: i64,
    pub station: String,
    pub client_request_id: String,
    pub user: String,
    pub file: String,
    /// The volume the request named, if any, and the position on it the request gave.
    pub volume: Option<String>,
    pub position: Option<u64>,
    /// Where the file starts on the volume in bytes, as the request gave it.
    pub offset_bytes: Option<u64>,
    pub size_bytes: u64,
    pub access_mode: String,
    pub physics_group: String,
    pub direction: Direction,
    /// When it was cancelled (its end, ms since 1970), if it was.
    pub cancelled_ms: Option<i64>,
}

/// The export's query; `{offset}` is the `offset_bytes` column, or NULL in a database older
/// than schema 12 (a reader migrates nothing).
const EXPORT_SQL: &str = "SELECT id, created_ms, station, client_request_id, user_name, file, \
     volume, size_bytes, access_mode, physics_group, direction, position, {offset}, \
     CASE WHEN state = 'cancelled' THEN finished_ms END FROM requests \
     WHERE created_ms >= ?1 AND created_ms < ?2 ORDER BY id";

impl LedgerReader {
    /// Calls `each` with every request accepted in `[since_ms, until_ms)` (either bound open
    /// when `None`), in arrival (id) order, one row at a time; stops at its first error.
    /// Returns how many it was given.
    pub fn for_each_request<E: From<LedgerError>>(
        &self,
        since_ms: Option<i64>,
        until_ms: Option<i64>,
        mut each: impl FnMut(&ExportedRequest) -> Result<(), E>,
    ) -> Result<u64, E> {
        let storage = |e: DbError| E::from(LedgerError::from(e));
        let db = self.conn.db();
        let has_offset = db.has_column("requests", "offset_bytes").map_err(storage)?;
        let offset = if has_offset { "offset_bytes" } else { "NULL" };
        let sql = EXPORT_SQL.replace("{offset}", offset);
        let since = since_ms.unwrap_or(i64::MIN);
        let until = until_ms.unwrap_or(i64::MAX);
        let mut n = 0;
        let walked = db.for_each(&sql, params![since, until], |row| {
            let request = exported(row)?;
            each(&request).map_err(Stop::Each)?;
            n += 1;
            Ok(())
        });
        match walked {
            Ok(()) => Ok(n),
            Err(Stop::Db(e)) => Err(storage(e)),
            Err(Stop::Each(e)) => Err(e),
        }
    }
}

/// Why the walk stopped: the database, or the caller's function.
enum Stop<E> {
    Db(DbError),
    Each(E),
}

impl<E> From<DbError> for Stop<E> {
    fn from(e: DbError) -> Self {
        Stop::Db(e)
    }
}

fn exported(row: &Row<'_>) -> DbResult<ExportedRequest> {
    let direction: String = row.get(10)?;
    Ok(ExportedRequest {
        id: row.get(0)?,
        created_ms: row.get(1)?,
        station: row.get(2)?,
        client_request_id: row.get(3)?,
        user: row.get(4)?,
        file: row.get(5)?,
        volume: row.get(6)?,
        size_bytes: row.get::<i64>(7)?.max(0) as u64,
        access_mode: row.get(8)?,
        physics_group: row.get(9)?,
        direction: stored_direction(10, &direction)?,
        position: super::read::stored_position(11, row.get(11)?)?,
        offset_bytes: super::read::stored_offset(12, row.get(12)?)?,
        cancelled_ms: row.get(13)?,
    })
}

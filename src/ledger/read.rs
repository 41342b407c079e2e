//! Read-only queries, on a small pool of connections used from blocking threads.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::db::{params, Db, DbConn, DbError, DbResult, Row};
use mss_adapters::{Direction, EventCursor, TransferRef};

use super::mss_key::MssKeys;
use super::postgres::connect;
use super::stored_explain::StoredExplain;
use super::wide::Wide;
use super::LedgerError;
use super::{columns, schema};
use crate::database_url::DatabaseUrl;
use crate::domain::{Class, RequestState};

pub(super) struct ReadPool {
    source: Source,
    idle: Mutex<Vec<DbConn>>,
}

/// Idle connections kept for reuse.
const MAX_IDLE: usize = 8;

/// Where the pool's connections come from.
enum Source {
    /// The SQLite file, opened read-only (WAL: reads beside the writer).
    File(PathBuf),
    /// The PostgreSQL database: a connection of the ledger's own (`postgres::connect`).
    Postgres(Box<DatabaseUrl>),
}

impl ReadPool {
    pub fn new(path: &Path) -> ReadPool {
        ReadPool::from(Source::File(path.to_path_buf()))
    }

    /// A pool of connections to the PostgreSQL ledger at `url`.
    pub fn postgres(url: &DatabaseUrl) -> ReadPool {
        ReadPool::from(Source::Postgres(Box::new(url.clone())))
    }

    fn from(source: Source) -> ReadPool {
        ReadPool {
            source,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// A new connection from the source.
    fn open(&self) -> DbResult<DbConn> {
        match &self.source {
            Source::File(path) => Ok(DbConn::from_sqlite(schema::open_reader(path)?)),
            Source::Postgres(url) => connect::connect(url)
                .map(DbConn::from_postgres)
                .map_err(|e| DbError::Connect(e.to_string())),
        }
    }

    /// Run `f` on a pooled connection in a blocking thread.
    pub async fn run<T, F>(self: &std::sync::Arc<Self>, f: F) -> Result<T, LedgerError>
    where
        T: Send + 'static,
        F: FnOnce(&Db<'_>) -> DbResult<T> + Send + 'static,
    {
        let pool = self.clone();
        tokio::task::spawn_blocking(move || {
            let conn = match pool.take() {
                Some(c) => c,
                None => pool.open()?,
            };
            let out = f(&conn.db());
            pool.give_back(conn);
            Ok(out?)
        })
        .await
        .map_err(|_| LedgerError::Closed)?
    }

    /// A connection of its own, not pooled (a reload's snapshot, held while it is prepared).
    pub fn fresh(&self) -> DbResult<DbConn> {
        self.open()
    }

    fn take(&self) -> Option<DbConn> {
        self.idle.lock().ok()?.pop()
    }

    /// Keep `conn` for the next read, unless it has ended (PostgreSQL: the server restarted or
    /// ended the session): a new one is opened then, rather than the next read failing too.
    fn give_back(&self, conn: DbConn) {
        if conn.is_closed() {
            return;
        }
        if let Ok(mut idle) = self.idle.lock() {
            if idle.len() < MAX_IDLE {
                idle.push(conn);
            }
        }
    }
}

impl Drop for ReadPool {
    /// A PostgreSQL client owns a runtime, which may not be dropped on an async thread (where
    /// the last `Ledger` handle often goes): its idle connections are closed on a thread of
    /// their own.
    fn drop(&mut self) {
        if let Source::Postgres(_) = self.source {
            let idle = std::mem::take(self.idle.get_mut().unwrap_or_else(|e| e.into_inner()));
            if !idle.is_empty() {
                let _ = std::thread::Builder::new()
                    .name("ledger-reads-close".into())
                    .spawn(move || drop(idle));
            }
        }
    }
}

/// A request as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRecord {
    pub id: i64,
    pub station: String,
    pub client_request_id: String,
    pub user: String,
    pub file: String,
    pub size_bytes: u64,
    pub access_mode: String,
    pub physics_group: String,
    pub volume: Option<String>,
    pub direction: Direction,
    pub group: String,
    pub class: Class,
    pub mss_priority: i64,
    pub charged: u64,
    pub state: RequestState,
    pub attempt: u32,
    pub mss_id: Option<String>,
    pub bytes_done: u64,
    pub cancel_requested: bool,
    pub last_error: Option<String>,
    pub held_reason: Option<String>,
    pub created_ms: i64,
    pub submitted_ms: Option<i64>,
    pub started_ms: Option<i64>,
    pub finished_ms: Option<i64>,
    pub library: String,
    pub qos: Option<crate::policy::multifactor::Qos>,
    pub user_factor: Option<f64>,
    /// The stored explanation of its placement.
    pub explain: Option<StoredExplain>,
    pub local_file: Option<String>,
    pub bfid: Option<String>,
    /// The file's position on its volume, if the request gave one or a lookup found it.
    pub position: Option<u64>,
    /// The request whose MSS transfer it rides on (a coalesced duplicate read).
    pub rides_on: Option<i64>,
    /// Where `volume` and `position` came from when the station gave no volume: the lookup's
    /// name (`enstore-layer4`, `command`), `failed`, or `None` (not looked up).
    pub volume_source: Option<String>,
    /// Where the file starts on its volume in bytes, if the request gave it.
    pub offset_bytes: Option<u64>,
    /// The key its transfers carry at the MSS (`ledger::mss_key`).
    pub mss_key: String,
    /// A send an earlier broker marked and may or may not have made, which this MSS cannot
    /// settle: held for an operator, never sent again by itself (`ledger::unsettled`).
    pub unsettled: bool,
}

impl RequestRecord {
    /// The request as the MSS adapter names its current attempt.
    pub fn transfer_ref(&self) -> TransferRef {
        TransferRef {
            key: self.mss_key.clone(),
            attempt: self.attempt,
            mss_id: self.mss_id.clone(),
            file: self.file.clone(),
            size_bytes: self.size_bytes,
        }
    }
}

fn bad_column(i: usize, what: &str) -> DbError {
    DbError::column(i, format!("unknown {what}"))
}

pub(super) fn stored_direction(i: usize, s: &str) -> DbResult<Direction> {
    Direction::parse(s).ok_or_else(|| bad_column(i, "direction"))
}

/// A stored state; an unknown value is a corrupt row, reported as an error.
pub(super) fn parse_state(i: usize, s: &str) -> DbResult<RequestState> {
    RequestState::parse(s).ok_or_else(|| bad_column(i, "state"))
}

/// A stored position (written only from a `u64` at most `i64::MAX`): a negative one is a
/// corrupt row, reported as an error.
pub(super) fn stored_position(i: usize, p: Option<i64>) -> DbResult<Option<u64>> {
    p.map(|p| u64::try_from(p).map_err(|_| bad_column(i, "position")))
        .transpose()
}

/// A stored byte offset (written only from a `u64` at most 1 PB): a negative one is a corrupt
/// row, reported as an error.
pub(super) fn stored_offset(i: usize, o: Option<i64>) -> DbResult<Option<u64>> {
    o.map(|o| u64::try_from(o).map_err(|_| bad_column(i, "offset_bytes")))
        .transpose()
}

/// A stored QoS; an unknown value is a corrupt row, reported as an error.
pub(super) fn stored_qos(i: usize, s: &str) -> DbResult<crate::policy::multifactor::Qos> {
    crate::policy::multifactor::Qos::parse(s).ok_or_else(|| bad_column(i, "qos"))
}

/// A stored class; an unknown value is a corrupt row, reported as an error.
pub(super) fn parse_class(i: usize, s: &str) -> DbResult<Class> {
    Class::parse(s).ok_or_else(|| bad_column(i, "class"))
}

/// A record's stored explanation; one that does not read is a corrupt row.
fn stored_explain(row: &Row<'_>) -> DbResult<Option<StoredExplain>> {
    let Some(text) = row.get::<Option<String>>("explain")? else {
        return Ok(None);
    };
    StoredExplain::parse(&text)
        .map(Some)
        .map_err(|e| DbError::column(row.index_of("explain").unwrap_or(0), e.to_string()))
}

/// A whole record, read by column name from a SELECT of [`columns::record_columns`].
fn record(row: &Row<'_>) -> DbResult<RequestRecord> {
    let text =
        |name: &str| -> DbResult<(usize, String)> { Ok((row.index_of(name)?, row.get(name)?)) };
    let (i, direction) = text("direction")?;
    let direction = stored_direction(i, &direction)?;
    let (i, class) = text("class")?;
    let class = parse_class(i, &class)?;
    let (i, state) = text("state")?;
    let state = parse_state(i, &state)?;
    Ok(RequestRecord {
        id: row.get("id")?,
        station: row.get("station")?,
        client_request_id: row.get("client_request_id")?,
        user: row.get("user_name")?,
        file: row.get("file")?,
        size_bytes: row.get::<i64>("size_bytes")? as u64,
        access_mode: row.get("access_mode")?,
        physics_group: row.get("physics_group")?,
        volume: row.get("volume")?,
        direction,
        group: row.get("group_path")?,
        class,
        mss_priority: row.get("mss_priority")?,
        charged: row.get::<i64>("charged")? as u64,
        state,
        attempt: row.get::<u32>("attempt")?,
        mss_id: row.get("mss_id")?,
        bytes_done: row.get::<i64>("bytes_done")? as u64,
        cancel_requested: row.get::<bool>("cancel_requested")?,
        last_error: row.get("last_error")?,
        created_ms: row.get("created_ms")?,
        submitted_ms: row.get("submitted_ms")?,
        started_ms: row.get("started_ms")?,
        finished_ms: row.get("finished_ms")?,
        held_reason: row.get("held_reason")?,
        library: row.get("library")?,
        qos: row
            .get::<Option<String>>("qos")?
            .map(|q| stored_qos(row.index_of("qos")?, &q))
            .transpose()?,
        user_factor: row.get("user_factor")?,
        explain: stored_explain(row)?,
        local_file: row.get("local_file")?,
        bfid: row.get("bfid")?,
        position: stored_position(row.index_of("position")?, row.get("position")?)?,
        rides_on: row.get("rides_on")?,
        volume_source: row.get("volume_source")?,
        offset_bytes: stored_offset(row.index_of("offset_bytes")?, row.get("offset_bytes")?)?,
        // Set by the reader, which knows the incarnations.
        mss_key: String::new(),
        unsettled: state == RequestState::Accepted
            && row.get::<i64>("next_attempt_ms")? == super::unsettled::UNSETTLED_MS,
    })
}

pub(super) fn request(c: &Db<'_>, keys: &MssKeys, id: i64) -> DbResult<Option<RequestRecord>> {
    let mut found = c.query_opt(record_by_id(), params![id], record)?;
    if let Some(r) = &mut found {
        r.mss_key = keys.key(r.id);
    }
    Ok(found)
}

/// `SELECT {record columns} FROM requests WHERE id = ?1`, made once.
fn record_by_id() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| {
        format!(
            "SELECT {} FROM requests WHERE id = ?1",
            columns::record_columns()
        )
    })
}

/// What the dispatcher needs to submit one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToSubmit {
    pub id: i64,
    /// Its MSS key (`ledger::mss_key`).
    pub key: String,
    pub attempt: u32,
    pub file: String,
    pub size_bytes: u64,
    pub mss_priority: i64,
    pub volume: Option<String>,
    pub group: String,
    pub direction: Direction,
    pub local_file: Option<String>,
    pub bfid: Option<String>,
    /// The file's position on its volume, if the request gave one or a lookup found it.
    pub position: Option<u64>,
    /// Where the file starts on its volume in bytes, if the request gave it.
    pub offset_bytes: Option<u64>,
    /// Its number in a `volumes` batch (consecutive within a batch, in position order).
    pub release_seq: Option<i64>,
}

pub(super) fn to_submit(
    c: &Db<'_>,
    keys: &MssKeys,
    after_id: i64,
    now_ms: i64,
    limit: usize,
) -> DbResult<Vec<ToSubmit>> {
    c.query_rows(
        "SELECT id, attempt, file, size_bytes, mss_priority, volume, group_path, direction, \
         local_file, bfid, position, release_seq, offset_bytes FROM requests WHERE state = 'accepted' AND id > ?1 AND next_attempt_ms <= ?2 \
         ORDER BY mss_priority DESC, release_seq, id LIMIT ?3",
        params![after_id, now_ms, limit],
        |row| {
            let direction: String = row.get(7)?;
            let id = row.get(0)?;
            Ok(ToSubmit {
                id,
                key: keys.key(id),
                attempt: row.get(1)?,
                file: row.get(2)?,
                size_bytes: row.get::<i64>(3)? as u64,
                mss_priority: row.get(4)?,
                volume: row.get(5)?,
                group: row.get(6)?,
                direction: stored_direction(7, &direction)?,
                local_file: row.get(8)?,
                bfid: row.get(9)?,
                position: stored_position(10, row.get(10)?)?,
                release_seq: row.get(11)?,
                offset_bytes: stored_offset(12, row.get(12)?)?,
            })
        },
    )
}

pub(super) fn next_retry_ms(c: &Db<'_>) -> DbResult<Option<i64>> {
    c.query_one(
        "SELECT MIN(next_attempt_ms) FROM requests WHERE state = 'accepted'",
        params![],
        |r| r.get(0),
    )
}

/// A request at the MSS, as the adapter names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlight {
    pub id: i64,
    pub attempt: u32,
    pub transfer: TransferRef,
}

const IN_FLIGHT_COLUMNS: &str = "id, attempt, mss_id, file, size_bytes";

fn in_flight_row(keys: &MssKeys, r: &Row<'_>) -> DbResult<InFlight> {
    let id: i64 = r.get(0)?;
    let attempt: u32 = r.get(1)?;
    Ok(InFlight {
        id,
        attempt,
        transfer: TransferRef {
            key: keys.key(id),
            attempt,
            mss_id: r.get(2)?,
            file: r.get(3)?,
            size_bytes: r.get::<i64>(4)?.max(0) as u64,
        },
    })
}

pub(super) fn in_flight(c: &Db<'_>, keys: &MssKeys) -> DbResult<Vec<InFlight>> {
    c.query_rows(
        &format!(
            "SELECT {IN_FLIGHT_COLUMNS} FROM requests WHERE state IN ('submitted', 'running') \
             ORDER BY id"
        ),
        params![],
        |r| in_flight_row(keys, r),
    )
}

/// In-flight requests the MSS has said nothing of since `before_ms` (no event, no status).
pub(super) fn stale(
    c: &Db<'_>,
    keys: &MssKeys,
    before_ms: i64,
    limit: usize,
) -> DbResult<Vec<InFlight>> {
    c.query_rows(
        &format!(
            "SELECT {IN_FLIGHT_COLUMNS} FROM requests WHERE state IN ('submitted', 'running') \
             AND COALESCE(checked_ms, started_ms, submitted_ms, created_ms) <= ?1 ORDER BY id LIMIT ?2"
        ),
        params![before_ms, limit],
        |r| in_flight_row(keys, r),
    )
}

pub(super) fn cancelling(c: &Db<'_>, keys: &MssKeys) -> DbResult<Vec<InFlight>> {
    c.query_rows(
        &format!("SELECT {IN_FLIGHT_COLUMNS} FROM requests WHERE {CANCELLING} ORDER BY id"),
        params![],
        |r| in_flight_row(keys, r),
    )
}

/// Requests whose cancel is asked for and that have not ended (`requests_cancelling`).
pub(super) fn cancel_pending(c: &Db<'_>) -> DbResult<Vec<i64>> {
    c.query_rows(
        "SELECT id FROM requests WHERE cancel_requested = 1 \
         AND state IN ('accepted', 'submitted', 'running') ORDER BY id",
        params![],
        |r| r.get(0),
    )
}

/// Request `id`, if its cancel is one to carry to the MSS now (as [`cancelling`] lists them).
pub(super) fn cancelling_one(c: &Db<'_>, keys: &MssKeys, id: i64) -> DbResult<Option<InFlight>> {
    c.query_opt(
        &format!("SELECT {IN_FLIGHT_COLUMNS} FROM requests WHERE id = ?1 AND {CANCELLING}"),
        params![id],
        |r| in_flight_row(keys, r),
    )
}

/// A request whose cancel goes to the MSS: asked for, at the MSS, and no rider waiting on its
/// transfer (a carrier's riders take its result instead).
const CANCELLING: &str = "cancel_requested = 1 AND state IN ('submitted', 'running') \
     AND NOT EXISTS (SELECT 1 FROM requests AS r WHERE r.rides_on = requests.id \
     AND r.state = 'riding')";

/// A group's maintained figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRow {
    pub path: String,
    pub usage: u128,
    pub usage_bytes: u128,
    pub pending: u64,
}

pub(super) fn groups(c: &Db<'_>) -> DbResult<Vec<GroupRow>> {
    c.query_rows(
        "SELECT path, usage, usage_bytes, pending FROM groups ORDER BY path",
        params![],
        |r| {
            Ok(GroupRow {
                path: r.get(0)?,
                usage: r.get::<Wide>(1)?.0.max(0) as u128,
                usage_bytes: r.get::<Wide>(2)?.0.max(0) as u128,
                pending: r.get::<i64>(3)?.max(0) as u64,
            })
        },
    )
}

pub(super) fn event_cursor(c: &Db<'_>) -> DbResult<EventCursor> {
    let get = |key: &str| -> DbResult<Option<String>> {
        c.query_opt("SELECT value FROM meta WHERE key = ?1", params![key], |r| {
            r.get(0)
        })
    };
    Ok(EventCursor {
        epoch: get("mss_event_epoch")?.unwrap_or_default(),
        after: get("mss_event_after")?
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    })
}

pub(super) fn state_counts(c: &Db<'_>) -> DbResult<Vec<(RequestState, u64)>> {
    c.query_rows(
        "SELECT state, COUNT(*) FROM requests GROUP BY state",
        params![],
        |r| {
            let s: String = r.get(0)?;
            Ok((parse_state(0, &s)?, r.get::<i64>(1)? as u64))
        },
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::ReadPool;
    use crate::ledger::db::params;
    use crate::ledger::db::tests::testdb::{Backend, TestDb};

    /// The session of the pool's connection, read through the pool.
    async fn session(pool: &Arc<ReadPool>) -> Result<i64, crate::ledger::LedgerError> {
        pool.run(|db| db.query_one("SELECT pg_backend_pid()", params![], |r| r.get(0)))
            .await
    }

    /// End session `pid` from another connection of `test`'s database; returns once it is
    /// gone. Blocking (PostgreSQL's blocking client).
    fn end_session(test: &TestDb, pid: i64) {
        let admin = test.connect();
        let db = admin.db();
        let ended = db.query_one("SELECT pg_terminate_backend(?1::int)", params![pid], |r| {
            r.get::<bool>(0)
        });
        assert!(ended.expect("terminated"));
        let deadline = Instant::now() + Duration::from_secs(10);
        let gone = "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = ?1::int)";
        while !db
            .query_one(gone, params![pid], |r| r.get::<bool>(0))
            .expect("read")
        {
            assert!(Instant::now() < deadline, "the session was never ended");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A pooled PostgreSQL connection the server has ended fails the read that finds it so,
    /// and only that one: it is not kept, and the next read runs on a new connection.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_pooled_connection_the_server_ended_is_not_kept() {
        let test = tokio::task::block_in_place(|| TestDb::new(Backend::Postgres));
        let pool = Arc::new(ReadPool::postgres(test.url().expect("a url")));
        let pid = session(&pool).await.expect("a read");
        tokio::task::block_in_place(|| end_session(&test, pid));
        assert!(session(&pool).await.is_err(), "the ended connection's read");
        let again = session(&pool).await.expect("a read on a new connection");
        assert_ne!(again, pid);
        tokio::task::block_in_place(|| drop((pool, test)));
    }
}

//! The SQLite schema and connection settings.
//!
//! Request ids are the table's integer rowid: sequential, so inserts append to the b-tree
//! (random UUID keys measured ~8x slower here). No index on the request table is keyed by
//! anything but the id, for the same reason. `groups` holds the maintained per-group
//! aggregates (usage, bytes, pending), updated in the same transaction as the requests, so no
//! read ever sums history.
//!
//! Sums a client's input can drive past `i64` (`groups.usage`, `groups.usage_bytes`,
//! `usage_windows.usage`, `report_hours.bytes_done` and `benefit_done`) are TEXT columns holding
//! the exact decimal of an `i128` ([`Wide`], in `wide.rs`): SQLite's INTEGER is `i64`, and a
//! larger integer (or integer-looking text in an INTEGER column) silently becomes a REAL. They
//! are added with the SQL functions `wide_add` and `wide_sum`, never `+` or `SUM()`.
//!
//! The schema is versioned by `PRAGMA user_version`: 1 is `SCHEMA` (reached from an unversioned
//! database by the column and wide-column migrations below), later changes are the numbered
//! `STEPS`, each applied once in the writer's opening transaction; a database newer than
//! `LATEST` is refused.

use std::path::Path;

use rusqlite::{Connection, OptionalExtension};

use super::wide::{self, Wide};
use super::LedgerError;

pub(super) const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS requests (
    id                INTEGER PRIMARY KEY,
    station           TEXT    NOT NULL,
    client_request_id TEXT    NOT NULL,
    user_name         TEXT    NOT NULL,
    file              TEXT    NOT NULL,
    size_bytes        INTEGER NOT NULL,
    access_mode       TEXT    NOT NULL,
    physics_group     TEXT    NOT NULL,
    volume            TEXT,
    direction         TEXT    NOT NULL,
    group_path        TEXT    NOT NULL,
    class             TEXT    NOT NULL,
    mss_priority      INTEGER NOT NULL,
    -- benefit and bytes currently charged to the group: the estimate, then the actual, then 0
    -- after a refund
    charged           INTEGER NOT NULL,
    charged_bytes     INTEGER NOT NULL,
    state             TEXT    NOT NULL,
    attempt           INTEGER NOT NULL DEFAULT 1,
    mss_id            TEXT,
    bytes_done        INTEGER NOT NULL DEFAULT 0,
    cancel_requested  INTEGER NOT NULL DEFAULT 0,
    last_error        TEXT,
    created_ms        INTEGER NOT NULL,
    submitted_ms      INTEGER,
    started_ms        INTEGER,
    finished_ms       INTEGER,
    next_attempt_ms   INTEGER NOT NULL DEFAULT 0,
    -- last time the MSS confirmed an in-flight request by a status query
    checked_ms        INTEGER,
    -- the date of the current charge (usage decays and windows count from it): the decision,
    -- then the completion; NULL while held (nothing charged)
    charged_ms        INTEGER,
    -- why a request was held (kept after a cancellation; cleared when released)
    held_reason       TEXT,
    -- when a held request was released (decided and charged)
    released_ms       INTEGER,
    -- the MSS library it needs ('' the default); the held release mode limits each library
    library           TEXT    NOT NULL DEFAULT '',
    -- slots of the library's limit it takes while outstanding (release.slot_bytes)
    slots             INTEGER NOT NULL DEFAULT 1,
    -- what the request asked for: QoS (expedite, normal, standby) and its factor in [0, 1]
    qos               TEXT,
    user_factor       REAL,
    -- FBSNG section priority: later requests of its group released while it waited
    passed            INTEGER NOT NULL DEFAULT 0,
    -- why it has its place (JSON, written with each decision or re-prioritisation)
    explain           TEXT,
    -- the station-side copy (where a read goes, what a write stores) and Enstore's bfid
    local_file        TEXT,
    bfid              TEXT
);
-- Idempotency: a 64-bit fingerprint of (station, client_request_id) per request, appended in id
-- order. The writer loads it into memory at start and checks replays there, confirming a hit
-- against the stored row. A UNIQUE index on (station, client_request_id) would do the same but
-- inserts at scattered positions: it halved insert throughput here. (Since version 10 it holds
-- unfinished requests only: a finished one's moves to `idempotency_finished`.)
CREATE TABLE IF NOT EXISTS idempotency (
    id          INTEGER PRIMARY KEY,
    fingerprint INTEGER NOT NULL
);
-- Ready requests by MSS priority, then decision order: data taking is always submitted before
-- any fair-share request waiting beside it.
DROP INDEX IF EXISTS requests_to_submit;
CREATE INDEX IF NOT EXISTS requests_ready ON requests(mss_priority DESC, id) WHERE state = 'accepted';
CREATE INDEX IF NOT EXISTS requests_in_flight ON requests(id)
    WHERE state IN ('submitted', 'running');
CREATE INDEX IF NOT EXISTS requests_cancelling ON requests(id)
    WHERE cancel_requested = 1 AND state IN ('submitted', 'running');
CREATE INDEX IF NOT EXISTS requests_held ON requests(group_path, id) WHERE state = 'held';
CREATE INDEX IF NOT EXISTS requests_queued ON requests(id) WHERE state = 'queued';
-- Per group (usage and usage_bytes: wide decimals, see Wide): cumulative benefit and bytes charged, requests not final and held, and the
-- half-life accumulator S (usage at time t is S * 2^(-(t - t0)/H), t0 in meta).
CREATE TABLE IF NOT EXISTS groups (
    path        TEXT PRIMARY KEY,
    usage       TEXT    NOT NULL DEFAULT '0',
    usage_bytes TEXT    NOT NULL DEFAULT '0',
    pending     INTEGER NOT NULL DEFAULT 0,
    held        INTEGER NOT NULL DEFAULT 0,
    decayed     REAL    NOT NULL DEFAULT 0,
    -- FBSNG queue priority (NULL: never started from, so at its qp_min)
    queue_priority INTEGER
) WITHOUT ROWID;
-- Benefit charged per group per usage window (windows model), kept for history.
CREATE TABLE IF NOT EXISTS usage_windows (
    path   TEXT    NOT NULL,
    window INTEGER NOT NULL,
    usage  TEXT    NOT NULL,
    PRIMARY KEY (path, window)
) WITHOUT ROWID;
-- Report aggregates per group per hour (see ledger/aggregates.rs), and the wait-time histogram.
CREATE TABLE IF NOT EXISTS report_hours (
    path                  TEXT    NOT NULL,
    hour                  INTEGER NOT NULL,
    accepted              INTEGER NOT NULL DEFAULT 0,
    held                  INTEGER NOT NULL DEFAULT 0,
    released              INTEGER NOT NULL DEFAULT 0,
    held_cancelled        INTEGER NOT NULL DEFAULT 0,
    front                 INTEGER NOT NULL DEFAULT 0,
    back                  INTEGER NOT NULL DEFAULT 0,
    priority              INTEGER NOT NULL DEFAULT 0,
    started               INTEGER NOT NULL DEFAULT 0,
    wait_ms_sum           INTEGER NOT NULL DEFAULT 0,
    done                  INTEGER NOT NULL DEFAULT 0,
    failed                INTEGER NOT NULL DEFAULT 0,
    cancelled             INTEGER NOT NULL DEFAULT 0,
    bytes_done            TEXT    NOT NULL DEFAULT '0',
    benefit_done          TEXT    NOT NULL DEFAULT '0',
    started_over_priority INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (path, hour)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS report_waits (
    path  TEXT    NOT NULL,
    hour  INTEGER NOT NULL,
    bin   INTEGER NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (path, hour, bin)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
"#;

fn configure(conn: &Connection) -> rusqlite::Result<()> {
    wide::register(conn)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // FULL: a commit is on disk before the writer answers, so a 202 survives power loss.
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(())
}

/// A later schema change: takes the database from the version before it to its own.
type Step = fn(&Connection) -> rusqlite::Result<()>;

/// Numbered schema changes after version 1 (`SCHEMA`): `STEPS[0]` is version 2, and so on.
/// Append a step for a change; never edit a shipped one (databases already carry it).
const STEPS: &[Step] = &[
    version_2, version_3, version_4, version_5, version_6, version_7, version_8, version_9,
    version_10, version_11, version_12,
];

/// Version 2: a request's position on its volume (issue 15), NULL when not given.
fn version_2(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch("ALTER TABLE requests ADD COLUMN position INTEGER")
}

/// Version 3 (issue 16, the `volumes` release mode): `release_seq`, the order a request was
/// released in a volume's batch (NULL otherwise): the submit loop reads ready requests by MSS
/// priority, then this sequence, so a batch reaches the MSS together and in tape-position order
/// (the index replaces `requests_ready`, which it extends); `release_led`, 1 when its group's
/// choice mounted the volume (the group whose `max_volumes` counts it after a restart); and the queued requests per library
/// and volume (covering a volume's bytes, files and ages) and per library and group (each
/// group's oldest), for a waiting request's explain.
fn version_3(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "ALTER TABLE requests ADD COLUMN release_seq INTEGER;
         ALTER TABLE requests ADD COLUMN release_led INTEGER;
         DROP INDEX IF EXISTS requests_ready;
         CREATE INDEX requests_ready_batched ON requests(mss_priority DESC, release_seq, id)
             WHERE state = 'accepted';
         CREATE INDEX requests_queued_volume
             ON requests(library, volume, group_path, size_bytes, created_ms)
             WHERE state = 'queued';
         CREATE INDEX requests_queued_group ON requests(library, group_path, id)
             WHERE state = 'queued';",
    )
}

/// Version 4 (issue 16, duplicate reads coalesce): `rides_on`, the request whose MSS transfer
/// a `riding` request waits on (NULL otherwise), and the riders by carrier, for the carrier's
/// settlement. (A new read finds its carrier in the writer's memory, `coalesce::Carriers`.)
fn version_4(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "ALTER TABLE requests ADD COLUMN rides_on INTEGER;
         CREATE INDEX requests_riding ON requests(rides_on) WHERE state = 'riding';",
    )
}

/// Version 5: the requests of a group and hour that rode on another request's transfer
/// (coalesced), for the report and `/metrics`; 0 for the hours before.
fn version_5(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch("ALTER TABLE report_hours ADD COLUMN coalesced INTEGER NOT NULL DEFAULT 0;")
}

/// Version 6: no table changes. Stored explains are written in version 2 of their format
/// (`ledger::stored_explain`, positional), which the builds of version 5 cannot read: this step
/// makes them refuse the database rather than fail on each such row.
fn version_6(_conn: &Connection) -> rusqlite::Result<()> {
    Ok(())
}

/// Version 7: `release_lead`, on every request released in a volume's batch, the path of the
/// group whose `[targets] max_volumes` counts that volume's flight (the group whose choice
/// mounted it), so a restart counts the flight against that group even after its own requests
/// have ended and only riders of other groups still read the volume. (`release_led`, which it
/// makes derivable, is written no more; rows of older builds are still read by it.)
fn version_7(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch("ALTER TABLE requests ADD COLUMN release_lead TEXT;")
}

/// Version 8: `sent_attempt`, the attempt being sent to the MSS or sent without a readable
/// answer: set before a submission goes out, so the MSS may hold the request while it is still
/// `accepted` (cleared when the submission could not reach the MSS; outgrown when the attempt
/// moves on). A cancel of such a request goes to the MSS instead of ending it at once. The index
/// of cancels to carry to the MSS takes the requests so flagged while they wait (`accepted`) too.
fn version_8(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "ALTER TABLE requests ADD COLUMN sent_attempt INTEGER;
         DROP INDEX IF EXISTS requests_cancelling;
         CREATE INDEX requests_cancelling ON requests(id)
             WHERE cancel_requested = 1 AND state IN ('accepted', 'submitted', 'running');",
    )
}

/// Version 9 (issue 37, a restored backup must not reuse MSS keys): `incarnations`, one row per
/// start of the writer (the first request id it may create and the nonce of its requests' MSS
/// keys, `ledger::mss_key`), and `unknown_keys`, what the MSS reported of keys this ledger did
/// not issue (bounded: `mss_key::MAX_UNKNOWN_KEYS`). Requests made before keep their bare id as
/// their key.
fn version_9(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TABLE incarnations (
             first_id   INTEGER PRIMARY KEY,
             nonce      TEXT    NOT NULL,
             started_ms INTEGER NOT NULL
         );
         CREATE TABLE unknown_keys (
             key        TEXT    PRIMARY KEY,
             first_ms   INTEGER NOT NULL,
             last_ms    INTEGER NOT NULL,
             events     INTEGER NOT NULL,
             last_event TEXT    NOT NULL
         ) WITHOUT ROWID;",
    )
}

/// Version 10 (issue 37, memory that follows unfinished requests): `idempotency_finished`, the fingerprints of finished requests (done, failed,
/// cancelled) keyed by fingerprint, so the writer keeps only unfinished requests' fingerprints in
/// memory (`idempotency`, which now holds only those) and looks a miss up here: a replay of a
/// request finished years ago is still answered as a duplicate, and memory no longer grows with
/// every request ever accepted. A request's fingerprint moves here when it becomes final (the
/// settle path, paced by the tape, not by ingest, so the index's scattered inserts stay off the
/// ingest path). The rows of requests already final move now, in fingerprint order.
fn version_10(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TABLE idempotency_finished (
             fingerprint INTEGER NOT NULL,
             id          INTEGER NOT NULL,
             PRIMARY KEY (fingerprint, id)
         ) WITHOUT ROWID;
         INSERT INTO idempotency_finished (fingerprint, id)
             SELECT i.fingerprint, i.id FROM idempotency i JOIN requests r ON r.id = i.id
             WHERE r.state IN ('done', 'failed', 'cancelled')
             ORDER BY i.fingerprint, i.id;
         DELETE FROM idempotency WHERE id IN (SELECT id FROM idempotency_finished);",
    )
}

/// Version 11 (issue 38, where a file lies when the station does not say): `volume_source`,
/// NULL while a request without a volume has not been looked up (and for every request with a
/// station's volume), the lookup's name (`enstore-layer4`, `command`) when it found the volume
/// and position it stored in `volume` and `position`, `failed` when it found none.
/// `requests_unlocated` lists the queued requests a lookup has still to answer, so the locator
/// reads them without walking the queue.
fn version_11(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "ALTER TABLE requests ADD COLUMN volume_source TEXT;
         CREATE INDEX requests_unlocated ON requests(id)
             WHERE state = 'queued' AND volume IS NULL AND volume_source IS NULL;",
    )
}

/// Version 12 (issue 38, a byte offset from the station to the tape): `offset_bytes`, where the
/// file starts on its volume in bytes as the station gave it (NULL when not given, and for
/// every request before): told apart from `position`, the file sequence number, by its column,
/// never by its size. The volume lookup never writes it.
fn version_12(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch("ALTER TABLE requests ADD COLUMN offset_bytes INTEGER;")
}

/// The schema version this binary writes (`PRAGMA user_version`); a database at a higher one
/// is refused.
pub const LATEST: i64 = 1 + STEPS.len() as i64;

/// The writer's connection: schema created or migrated to `LATEST`, WAL on.
pub fn open_writer(path: &Path) -> Result<Connection, LedgerError> {
    let open_err = |message: String| LedgerError::Open {
        path: path.to_path_buf(),
        message,
    };
    super::ensure_parent(path).map_err(|e| open_err(e.to_string()))?;
    let mut conn = Connection::open(path).map_err(|e| open_err(e.to_string()))?;
    // Before anything is written (WAL included): a newer build's database is left as it is.
    check_version(&conn, path)?;
    configure(&conn).map_err(|e| open_err(e.to_string()))?;
    create(&mut conn, path)?;
    Ok(conn)
}

/// The database's schema version (0: created by a build before versions, or new).
fn version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
}

/// Refuse a database whose version is newer than this binary knows.
pub(super) fn check_version(conn: &Connection, path: &Path) -> Result<i64, LedgerError> {
    let found = version(conn).map_err(|e| LedgerError::Open {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    if found > LATEST {
        return Err(LedgerError::SchemaTooNew {
            path: path.to_path_buf(),
            found,
            known: LATEST,
        });
    }
    Ok(found)
}

/// Bring the schema to `LATEST` in one transaction: an unversioned database (new, or an older
/// build's) to version 1, then each later step once.
fn create(conn: &mut Connection, path: &Path) -> Result<(), LedgerError> {
    let open_err = |e: rusqlite::Error| LedgerError::Open {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let tx = conn.transaction().map_err(open_err)?;
    let from = check_version(&tx, path)?;
    upgrade(&tx, from).map_err(open_err)?;
    tx.commit().map_err(open_err)
}

fn upgrade(conn: &Connection, from: i64) -> rusqlite::Result<()> {
    if from == LATEST {
        return Ok(());
    }
    if from == 0 {
        version_1(conn)?;
    }
    for (number, step) in (2..).zip(STEPS) {
        if number > from {
            step(conn)?;
        }
    }
    conn.pragma_update(None, "user_version", LATEST)
}

/// Version 1: `SCHEMA`, an older build's database first given its added columns and its wide
/// columns re-declared (a new one is created whole).
fn version_1(conn: &Connection) -> rusqlite::Result<()> {
    migrate(conn)?;
    let narrow = set_aside_narrow(conn)?;
    conn.execute_batch(SCHEMA)?;
    copy_widened(conn, &narrow)
}

/// Columns added after the first schema, for unversioned databases created before them (part of
/// version 1: a later column is a step in `STEPS`).
const ADDED_COLUMNS: &[(&str, &str, &str)] = &[
    ("requests", "charged_ms", "INTEGER"),
    ("requests", "held_reason", "TEXT"),
    ("requests", "released_ms", "INTEGER"),
    ("groups", "held", "INTEGER NOT NULL DEFAULT 0"),
    ("groups", "decayed", "REAL NOT NULL DEFAULT 0"),
    ("requests", "library", "TEXT NOT NULL DEFAULT ''"),
    ("requests", "slots", "INTEGER NOT NULL DEFAULT 1"),
    ("requests", "qos", "TEXT"),
    ("requests", "user_factor", "REAL"),
    ("requests", "passed", "INTEGER NOT NULL DEFAULT 0"),
    ("requests", "explain", "TEXT"),
    ("groups", "queue_priority", "INTEGER"),
    ("requests", "local_file", "TEXT"),
    ("requests", "bfid", "TEXT"),
];

fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    for (table, column, decl) in ADDED_COLUMNS {
        let exists: bool = conn.query_row(
            "SELECT COUNT(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [table],
            |r| r.get(0),
        )?;
        if !exists {
            continue; // created whole by SCHEMA
        }
        let has: bool = conn.query_row(
            &format!("SELECT COUNT(*) > 0 FROM pragma_table_info('{table}') WHERE name = ?1"),
            [column],
            |r| r.get(0),
        )?;
        if !has {
            conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {decl}"))?;
        }
    }
    Ok(())
}

/// Columns that hold wide sums, per table (TEXT since the overflow fix; INTEGER before).
const WIDE_COLUMNS: &[(&str, &[&str])] = &[
    ("groups", &["usage", "usage_bytes"]),
    ("usage_windows", &["usage"]),
    ("report_hours", &["bytes_done", "benefit_done"]),
];

/// Suffix of a table set aside while its wide columns are re-declared.
const NARROW: &str = "_narrow";

/// Rename every table whose wide columns are still declared INTEGER (SQLite cannot change a
/// column's type in place), so SCHEMA creates it anew; returns the tables renamed.
fn set_aside_narrow(conn: &Connection) -> rusqlite::Result<Vec<&'static str>> {
    let mut out = Vec::new();
    for (table, columns) in WIDE_COLUMNS {
        let declared: Option<String> = conn
            .query_row(
                &format!("SELECT type FROM pragma_table_info('{table}') WHERE name = ?1"),
                [columns[0]],
                |r| r.get(0),
            )
            .optional()?;
        if declared.is_some_and(|t| !t.eq_ignore_ascii_case("TEXT")) {
            conn.execute_batch(&format!("ALTER TABLE {table} RENAME TO {table}{NARROW}"))?;
            out.push(*table);
        }
    }
    Ok(out)
}

/// Copy the rows of the tables set aside into their new shape, the wide columns as exact
/// decimals (a REAL, left by the overflow this replaces, as its nearest integer), and drop them.
/// Sums that had overflowed are recomputed exactly from the request rows where they can be:
/// `groups` at once, `usage_windows` by the next load (its model is forgotten, so it is
/// rebuilt); `report_hours` keeps the nearest integer.
fn copy_widened(conn: &Connection, tables: &[&str]) -> rusqlite::Result<()> {
    for table in tables {
        let wide = WIDE_COLUMNS
            .iter()
            .find(|(t, _)| t == table)
            .map_or(&[][..], |(_, c)| *c);
        let old = format!("{table}{NARROW}");
        let overflowed = has_reals(conn, &old, wide)?;
        let columns: Vec<String> = conn
            .prepare(&format!("SELECT name FROM pragma_table_info('{old}')"))?
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        let values: Vec<String> = columns
            .iter()
            .map(|c| {
                if wide.contains(&c.as_str()) {
                    format!(
                        "CASE typeof({c}) WHEN 'real' THEN printf('%.0f', {c}) \
                         ELSE CAST({c} AS TEXT) END"
                    )
                } else {
                    c.clone()
                }
            })
            .collect();
        conn.execute_batch(&format!(
            "INSERT INTO {table} ({}) SELECT {} FROM {old}; DROP TABLE {old};",
            columns.join(", "),
            values.join(", ")
        ))?;
        match *table {
            "groups" if overflowed => recount_groups(conn)?,
            "usage_windows" if overflowed => {
                conn.execute("DELETE FROM meta WHERE key = 'usage_model'", [])?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Whether a wide column of `table` holds a REAL: a sum that overflowed i64.
fn has_reals(conn: &Connection, table: &str, wide: &[&str]) -> rusqlite::Result<bool> {
    if wide.is_empty() {
        return Ok(false);
    }
    let any = wide
        .iter()
        .map(|c| format!("typeof({c}) = 'real'"))
        .collect::<Vec<_>>()
        .join(" OR ");
    conn.query_row(
        &format!("SELECT EXISTS (SELECT 1 FROM {table} WHERE {any})"),
        [],
        |r| r.get(0),
    )
}

/// Every group's usage and bytes, exactly, from the request rows (`groups.usage` is the sum of
/// `requests.charged`, `usage_bytes` of `charged_bytes`).
fn recount_groups(conn: &Connection) -> rusqlite::Result<()> {
    let mut sums: std::collections::BTreeMap<String, (i128, i128)> = Default::default();
    let mut stmt = conn.prepare("SELECT group_path, charged, charged_bytes FROM requests")?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let e = sums.entry(r.get(0)?).or_default();
        e.0 += i128::from(r.get::<_, i64>(1)?);
        e.1 += i128::from(r.get::<_, i64>(2)?);
    }
    conn.execute("UPDATE groups SET usage = '0', usage_bytes = '0'", [])?;
    let mut upsert = conn.prepare(
        "INSERT INTO groups(path, usage, usage_bytes) VALUES (?1, ?2, ?3) \
         ON CONFLICT(path) DO UPDATE SET usage = excluded.usage, usage_bytes = excluded.usage_bytes",
    )?;
    for (path, (usage, bytes)) in sums {
        upsert.execute(rusqlite::params![path, Wide(usage), Wide(bytes)])?;
    }
    Ok(())
}

/// The database's identity: a random id made once, when the database is created (on either
/// backend: `meta` has `key` as its primary key on both).
pub fn instance(conn: &super::db::Db<'_>) -> super::db::DbResult<String> {
    use super::db::params;
    use sha2::{Digest, Sha256};
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let seed = format!("{now}-{}-{:p}", std::process::id(), &now);
    let digest = Sha256::digest(seed.as_bytes());
    let fresh: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    conn.execute(
        "INSERT INTO meta(key, value) VALUES ('instance', ?1) ON CONFLICT(key) DO NOTHING",
        params![fresh],
    )?;
    conn.query_one(
        "SELECT value FROM meta WHERE key = 'instance'",
        params![],
        |r| r.get::<String>(0),
    )
}

/// A read connection (the version is checked by its openers, `open_read_only` and the writer).
pub fn open_reader(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    wide::register(&conn)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    conn.set_prepared_statement_cache_capacity(32);
    Ok(conn)
}

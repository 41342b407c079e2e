//! The ledger: SQLite (or PostgreSQL, `[database] url`: docs/ha.md), the broker's source of
//! truth and the only module that writes SQL.
//!
//! One writer thread owns the write connection. Callers send it commands over a channel; it takes
//! whatever is waiting (up to `commit_batch_max`) and runs it as one transaction, so many
//! requests share one fsync (group commit). A caller's answer is sent only after the commit: a
//! 202 is never sent for a request that is not on disk. The writer also keeps every group's usage
//! in memory, so a decision costs a comparison, not a query; on start it is loaded from the
//! `groups` table, which is kept in the same transactions as the requests, so a restart changes
//! no decision.
//!
//! Reads (request lookups, the dispatcher's queue, group figures) use a small pool of read-only
//! connections; WAL lets them run beside the writer.
//!
//! The only module that writes SQL, through `db.rs` (`DbConn`, `Db`, `Tx`: the layer every
//! statement runs through instead of rusqlite, one SQL dialect with `?N` placeholders, typed row
//! reads; over SQLite or PostgreSQL (`db/pg.rs`), a spelling that differs per backend a
//! `spelled!` fragment of `db/dialect.rs`, its escape hatch `Db::sqlite()` for the SQLite-only
//! files: schema, backup, restore, wide; docs/ha.md, steps 3 and 4). On PostgreSQL there is no
//! lock file (the leadership lock excludes a second writer) and every write transaction first
//! fences on the term's epoch (`writer/fence.rs`: a stale one rolls the group back and stops
//! the writer). `candidate.rs` (`read_candidate`, a
//! request row as the ordering sees it, for the writer and the questions off it). `schema.rs` (tables, pragmas, the schema version in `PRAGMA
//! user_version`: 1 is `SCHEMA`, reached from an unversioned file by the column migrations, later
//! changes numbered `STEPS`; a newer file refused with `SchemaTooNew`; the database's random
//! `instance` id in `meta`; INTEGER sum columns migrated to TEXT by re-creating their tables, sums
//! that had already overflowed into REAL recomputed from the request rows, `report_hours`
//! excepted), `wide.rs` (`Wide`: an `i128` stored as a TEXT decimal; the SQL functions `wide_add`
//! and `wide_sum`, registered on every connection), `aggregates.rs` (`report_hours` /
//! `report_waits` deltas per transaction), `backup.rs` (`mssbroker backup`: SQLite's online backup
//! from a read-only connection, no lock file, one read transaction across paced steps;
//! `<to>.partial`, fsync, hard link, never overwrites), `restore.rs` (`mssbroker restore`: under
//! the lock, the backup copied to `<db>.restoring`, the replaced file kept with its WAL as
//! `<db>.replaced-<time>`, renamed in), `mss_key.rs` (every start an incarnation `(first id,
//! nonce)`; a request's MSS key `"{id}.{nonce}"`; `owner` maps an event's key back,
//! `record_unknown` keeps the rest in `unknown_keys`, listed by `mssbroker unknown-keys`),
//! `writer/` (the writer thread, every state transition: `writer.rs` the loop, gathering, the group
//! commit; `command.rs` the write-only `Command`, applied and answered; `state.rs` `WriterState`,
//! the memory, with `checkpoint`/`keep`/`rollback` (small figures and the volume queue's sticky
//! volumes copied, the queue, the idempotency map, the queued-bytes tallies and the carriers
//! journalled), and `Txn`, one transaction's context and deltas; `accept.rs`; `settle.rs`
//! (submitted, rejected, unsent, lost, MSS events, cancel, `finalize`); `sends.rs` (`mark_sending`,
//! the mark before a send; `deferred`, a send the MSS answered "not yet"); `release.rs` (held and
//! queued releases); `volumes.rs` (the `volumes` release mode: batches from the `VolumeQueue` at
//! the end of every transaction, each request charged to its own group at the batch's one priority
//! and numbered in position order in `release_seq`, the flight's leading group in `release_lead`;
//! `load_volume_queue` from the queued and in-flight rows, at start, at reload and after a
//! rollback; a rollback, and a reload that stays in the volumes mode (regrouped by path), give back
//! what the rows do not hold, `VolumeQueue::memory`; docs/volumes-live.md); `coalesce.rs`
//! (duplicate reads ride on a queued or in-flight read of the same file, found through `Carriers`,
//! a hint map in `WriterState` of every read that may carry each file, oldest first, confirmed
//! against the row; state `riding`; they settle with their carrier in the same transaction;
//! docs/coalescing.md); `idempotency.rs` (unfinished requests' fingerprints in memory, a finished
//! one's in `idempotency_finished` on disk behind a fixed-size Bloom filter, so memory follows what
//! is unfinished); `queued.rs` (queued-bytes caps per (station, user) `Owner`: every unfinished
//! request counts, riders too; Maui's percent cap against the total before the request);
//! `outputs.rs` (`ReadOutput`: one station-side copy per unfinished read, `Refused`); `load.rs`
//! (start-up: the memory rebuilt from the rows); `reload.rs` and `rows.rs` (a reload prepared off
//! the writer from the rows an SQLite update hook marked, put in force between two commits);
//! `removed.rs` (unfinished requests of groups a configuration leaves out, refused at start and
//! reload; `cancel_group`)), `group_cancel.rs` (`cancel --group` in chunks of 200 per transaction,
//! a bounded answer), `reload.rs` (the `Ledger`'s reload calls), `volume_wait.rs` (explain's
//! `VolumeWait` for a request waiting in the `volumes` mode, off the writer by index lookups),
//! `live.rs` (questions off the writer: explain's placement, rank inputs, re-prioritisation, on the
//! read pool against the usage and queue priorities the writer publishes after each commit),
//! `columns.rs` (the one column list of a request record: the INSERT and the record SELECT),
//! `stored_explain.rs` (`StoredExplain`, the versioned stored explain: version 1 named fields, as
//! the API shows them; version 2, written since 2026-11-26, the same figures by position,
//! `stored_explain/packed.rs`), `usage.rs` (loading the `UsageBook` from the aggregates, rebuilding
//! them from request rows when the usage model changed), `read.rs` (read pool and queries),
//! `history.rs` (share view, `ReportRows`, metric figures; `LedgerReader`, a database opened
//! read-only for the CLI and benchmarks), `export.rs` (`LedgerReader::for_each_request`: requests
//! in id order, filtered on `created_ms`, one row at a time into a callback, for `trace export`),
//! `rank.rs` (explain's positions: the latest `Ranking` of the held queue, built on a blocking
//! thread from a read snapshot of the `queued` rows and the published `RankInputs`, reused for
//! max(1 s, 4x its build time), single-flight; an explain never waits for one: a request queued
//! after it gets an estimate from the ranking's sample, `position_basis` says which; `serve` ranks
//! once at start in the background), `types.rs` (`RequestInput`, the request's own fields once,
//! which the API fills; `NewRequest`, it beside group and benefit; the answers, `LedgerOptions`,
//! `CommitObserver`), `ledger.rs` (the `Ledger` handle: opening, the writer thread), `commands.rs`
//! (its methods that record: one writer `Command` each, answered after the commit), `questions.rs`
//! (its methods answered off the writer, on the read pool), `lock.rs` (`DbLock`: `<db>.lock`
//! flock'd with the holder's PID, taken by `Ledger::open` before the database opens, released when
//! the writer thread ends), `identity.rs` (`DbFile`: the opened file's device and inode, checked
//! against the path before every COMMIT), `tests.rs`.

/// Whether a broker may run on the PostgreSQL ledger (`[database] url`): `serve` refuses the
/// key while this is false. True since the broker passes end to end there (the writer, the
/// fence, the read pool, `serve --db postgresql://…` with the simulator: tests/api/postgres.rs,
/// and the failover rounds, tests/api/failover.rs; docs/ha.md, steps 4 and 7).
pub const POSTGRES_LEDGER_COMPLETE: bool = true;

pub mod aggregates;
pub mod backup;
mod candidate;
mod columns;
mod commands;
mod db;
mod export;
mod group_cancel;
mod history;
pub mod identity;
mod live;
mod located;
pub mod lock;
pub mod mss_key;
pub mod postgres;
mod questions;
mod rank;
mod read;
mod reload;
pub mod restore;
mod schema;
pub mod stored_explain;
mod types;
mod unsettled;
mod usage;
mod volume_wait;
mod wide;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::{mpsc, Notify};

use crate::clock::Clock;
use crate::domain::PolicySettings;

pub use export::ExportedRequest;
pub use group_cancel::{GroupCancelled, CANCEL_CHUNK, CANCEL_LISTED};
pub use history::{LedgerReader, MetricFigures, ReportFigures, ReportRows, WaitRow};
pub use located::{VolumeFound, LOOKUP_FAILED};
pub use read::{GroupRow, InFlight, RequestRecord, ToSubmit};
pub use types::{
    Accepted, AfterSubmit, CancelOutcome, CommitObserver, LedgerOptions, NewPriority, NewRequest,
    NoObserver, OutputInUse, PositionBasis, QueuedCapRefused, QueuedExplain, QueuedPlacement,
    RankInputs, Refused, RequestExtras, RequestInput, SubmittedTransfer,
};
pub use unsettled::UNSETTLED_MS;
pub use volume_wait::VolumeWait;
use writer::Command;
pub use writer::{GroupCancel, PreparedReload, RemovedGroup, RemovedGroups};

/// Why the ledger could not do something.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// SQLite failed (busy, disk full, I/O): nothing of the command was committed.
    #[error("database error: {0}")]
    Storage(String),
    /// The writer has stopped (shutdown or a fatal error).
    #[error("the ledger writer is not running")]
    Closed,
    #[error("cannot open the database at {path}: {message}")]
    Open { path: PathBuf, message: String },
    /// The database was written by a newer build (its `user_version` is past this binary's).
    #[error(
        "the database {path} has schema version {found}, newer than this build knows ({known}): \
         open it with a newer mssbroker"
    )]
    SchemaTooNew {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    /// The configuration leaves out groups that still have unfinished requests (at start or at
    /// a reload): they would be orphaned.
    #[error("{0}")]
    RemovedGroups(RemovedGroups),
    /// A request would pass a queued-bytes cap: nothing was recorded (see [`Ledger::accept`]).
    #[error("{0}")]
    OverQueuedCap(QueuedCapRefused),
    /// A read would write a station-side copy another unfinished read writes: nothing was
    /// recorded (see [`Ledger::accept`]).
    #[error("{0}")]
    OutputInUse(OutputInUse),
    /// Another process writes this database (its lock file is locked).
    #[error("the database {path} is in use by another broker (pid {holder}; lock file {lock})")]
    Locked {
        path: PathBuf,
        lock: PathBuf,
        holder: String,
    },
}

impl From<db::DbError> for LedgerError {
    fn from(e: db::DbError) -> Self {
        LedgerError::Storage(e.to_string())
    }
}

/// The database's instance id, recorded on its first open in a write transaction of the term
/// (fenced on PostgreSQL, as every write of the writer).
fn record_instance(conn: &mut db::DbConn, options: &LedgerOptions) -> db::DbResult<String> {
    let fence_epoch = options.url.as_ref().map(|_| options.epoch);
    let tx = writer::write_transaction(conn, fence_epoch)?;
    let instance = schema::instance(&tx)?;
    tx.commit()?;
    Ok(instance)
}

/// A handle to the ledger; cheap to clone.
#[derive(Clone)]
pub struct Ledger {
    tx: mpsc::Sender<Command>,
    reads: Arc<read::ReadPool>,
    /// Notified after a commit that made requests ready to submit.
    ready: Arc<Notify>,
    /// Notified after requests without a volume were accepted (the locator's wake-up).
    unlocated: Arc<Notify>,
    instance: Arc<str>,
    /// Every request's MSS key (`mss_key`): fixed once the writer has started.
    keys: Arc<mss_key::MssKeys>,
    /// The latest ranking of the held queue, for explain's positions.
    ranker: Arc<rank::Ranker>,
    clock: Arc<dyn Clock>,
    /// The writer's memory as of its latest commit, for questions answered off the writer.
    published: Arc<live::Published>,
    /// When the writer last committed or ticked.
    heartbeat: Arc<writer::Heartbeat>,
}

impl Ledger {
    /// Open (creating if needed) the database, load usage, and start the writer thread.
    pub fn open(
        options: &LedgerOptions,
        policy: Arc<PolicySettings>,
        clock: Arc<dyn Clock>,
    ) -> Result<(Ledger, std::thread::JoinHandle<()>), LedgerError> {
        let (lock, mut conn, reads) = open_backend(options)?;
        let instance = record_instance(&mut conn, options).map_err(|e| LedgerError::Open {
            path: options.shown(),
            message: e.to_string(),
        })?;
        let ready = Arc::new(Notify::new());
        let (tx, rx) = mpsc::channel(options.commit_batch_max.max(64));
        let published = Arc::new(live::Published::new(policy.clone()));
        let state = writer::Writer::load(
            conn,
            policy.clone(),
            clock.clone(),
            options,
            (ready.clone(), published.clone()),
        )?;
        let keys = state.keys();
        let heartbeat = Arc::new(writer::Heartbeat::new());
        let beats = heartbeat.clone();
        let handle = std::thread::Builder::new()
            .name("ledger-writer".into())
            .spawn(move || {
                state.run(rx, beats);
                // Released only once the writer (and its connection) is done.
                drop(lock);
            })
            .map_err(|e| LedgerError::Open {
                path: options.shown(),
                message: format!("cannot start the writer thread: {e}"),
            })?;
        let reads = Arc::new(reads);
        Ok((
            Ledger {
                tx,
                reads,
                ready,
                unlocated: Arc::new(Notify::new()),
                instance: instance.into(),
                keys,
                ranker: Arc::new(rank::Ranker::new(options.metrics.clone())),
                clock,
                published,
                heartbeat,
            },
            handle,
        ))
    }

    /// The policy the writer decides with now (a reload changes it between two commits).
    pub fn policy(&self) -> Arc<PolicySettings> {
        self.published.policy()
    }

    /// This database's random identity, made when it was created: names the broker's
    /// transfers at an MSS (FTS3 submission ids), so a wiped database never reuses them.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The key request `id`'s transfers carry at the MSS (`mss_key`).
    pub fn mss_key(&self, id: i64) -> String {
        self.keys.key(id)
    }

    /// Time since the writer last committed a group or answered a tick.
    pub fn writer_heartbeat_age(&self) -> std::time::Duration {
        self.heartbeat.age()
    }

    /// Wait for requests without a volume to be accepted (the volume locator).
    pub fn unlocated_accepted(&self) -> &Arc<Notify> {
        &self.unlocated
    }

    /// Wait for a commit that made requests ready to submit.
    pub fn ready(&self) -> &Arc<Notify> {
        &self.ready
    }
}

/// The writer's connection and the read pool on the backend `options` name, with the lock file
/// the SQLite ledger takes before its file is opened (a second writer must not even migrate
/// it). PostgreSQL has no lock file: the leadership lock is the exclusion, and every write
/// transaction is fenced at the term's epoch.
fn open_backend(
    options: &LedgerOptions,
) -> Result<(Option<lock::DbLock>, db::DbConn, read::ReadPool), LedgerError> {
    match &options.url {
        Some(url) => Ok((None, postgres::open(url)?, read::ReadPool::postgres(url))),
        None => {
            let lock = lock::DbLock::acquire(&options.path)?;
            let conn = schema::open_writer(&options.path)?;
            Ok((
                Some(lock),
                db::DbConn::from_sqlite(conn),
                read::ReadPool::new(&options.path),
            ))
        }
    }
}

/// Create the parent directory of a database path.
pub fn ensure_parent(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => std::fs::create_dir_all(p),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests;

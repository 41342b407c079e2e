//! The ledger: SQLite, the broker's source of truth and the only module that writes SQL.
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
//! The only module that writes SQL. `schema.rs` (tables, pragmas, the schema version in `PRAGMA
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
//! commit and the write-only `Command`; `state.rs` `WriterState`, the memory, with
//! `checkpoint`/`keep`/`rollback` (small figures and the volume queue's sticky volumes copied, the
//! queue, the idempotency map, the queued-bytes tallies and the carriers journalled), and `Txn`,
//! one transaction's context and deltas; `accept.rs`; `settle.rs` (submitted, rejected, unsent,
//! lost, MSS events, cancel, `finalize`); `sends.rs` (`mark_sending`, the mark before a send;
//! `deferred`, a send the MSS answered "not yet"); `release.rs` (held and queued releases);
//! `volumes.rs` (the `volumes` release mode: batches from the `VolumeQueue` at the end of every
//! transaction, each request charged to its own group at the batch's one priority and numbered in
//! position order in `release_seq`, the flight's leading group in `release_lead`;
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
//! once at start in the background), `types.rs` (`NewRequest`, the answers, `LedgerOptions`,
//! `CommitObserver`), `ledger.rs` (the `Ledger` handle), `lock.rs` (`DbLock`: `<db>.lock` flock'd with
//! the holder's PID, taken by `Ledger::open` before the database opens, released when the writer
//! thread ends), `identity.rs` (`DbFile`: the opened file's device and inode, checked against the
//! path before every COMMIT), `tests.rs`.

pub mod aggregates;
pub mod backup;
mod columns;
mod export;
mod group_cancel;
mod history;
pub mod identity;
mod live;
mod located;
pub mod lock;
pub mod mss_key;
pub mod postgres;
mod rank;
mod read;
mod reload;
pub mod restore;
mod schema;
pub mod stored_explain;
mod types;
mod usage;
mod volume_wait;
mod wide;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use mss_adapters::{EventCursor, MssEvent};
use tokio::sync::{mpsc, oneshot, Notify};

use crate::clock::Clock;
use crate::domain::{PolicySettings, RequestState};
use crate::shares::view::SharesView;

pub use export::ExportedRequest;
pub use group_cancel::{GroupCancelled, CANCEL_CHUNK, CANCEL_LISTED};
pub use history::{LedgerReader, MetricFigures, ReportFigures, ReportRows, WaitRow};
pub use located::{VolumeFound, LOOKUP_FAILED};
pub use read::{GroupRow, InFlight, RequestRecord, ToSubmit};
pub use types::{
    Accepted, AfterSubmit, CancelOutcome, CommitObserver, LedgerOptions, NewPriority, NewRequest,
    NoObserver, OutputInUse, PositionBasis, QueuedCapRefused, QueuedExplain, QueuedPlacement,
    RankInputs, Refused, RequestExtras, SubmittedTransfer,
};
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

impl From<rusqlite::Error> for LedgerError {
    fn from(e: rusqlite::Error) -> Self {
        LedgerError::Storage(e.to_string())
    }
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
        // Before the database is opened: a second writer must not even migrate it.
        let lock = lock::DbLock::acquire(&options.path)?;
        let conn = schema::open_writer(&options.path)?;
        let instance = schema::instance(&conn).map_err(|e| LedgerError::Open {
            path: options.path.clone(),
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
                path: options.path.clone(),
                message: format!("cannot start the writer thread: {e}"),
            })?;
        let reads = Arc::new(read::ReadPool::new(&options.path));
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

    /// An empty command: answered by the writer when it is alive (keeps its heartbeat).
    pub async fn tick(&self) -> Result<(), LedgerError> {
        self.call(|reply| Command::Tick { reply }).await
    }

    /// Wait for requests without a volume to be accepted (the volume locator).
    pub fn unlocated_accepted(&self) -> &Arc<Notify> {
        &self.unlocated
    }

    /// Wait for a commit that made requests ready to submit.
    pub fn ready(&self) -> &Arc<Notify> {
        &self.ready
    }

    async fn call<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, LedgerError>>) -> Command,
    ) -> Result<T, LedgerError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(make(reply))
            .await
            .map_err(|_| LedgerError::Closed)?;
        rx.await.map_err(|_| LedgerError::Closed)?
    }

    /// Decide, charge and commit new requests; answers come back in order, after the commit.
    /// Record new requests. One refused on arrival makes the answer
    /// [`LedgerError::OverQueuedCap`] or [`LedgerError::OutputInUse`] (the items before and
    /// after it are still recorded): for one request at a time, or where nothing can be
    /// refused; a batch uses [`Ledger::accept_each`].
    pub async fn accept(&self, items: Vec<NewRequest>) -> Result<Vec<Accepted>, LedgerError> {
        (self.accept_each(items).await?.into_iter())
            .map(|r| {
                r.map_err(|refused| match refused {
                    Refused::QueuedCap(r) => LedgerError::OverQueuedCap(r),
                    Refused::OutputInUse(r) => LedgerError::OutputInUse(r),
                })
            })
            .collect()
    }

    /// Record new requests, answering each: accepted, or refused on arrival (a queued-bytes
    /// cap; a station-side copy another unfinished read writes), checked item by item in
    /// order, so the earlier items of the same call count.
    pub async fn accept_each(
        &self,
        items: Vec<NewRequest>,
    ) -> Result<Vec<Result<Accepted, Refused>>, LedgerError> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let request_id = crate::request_scope::request_id();
        let without_volume = (items.iter()).any(|i| i.volume.as_deref().is_none_or(str::is_empty));
        let answers = self
            .call(|reply| Command::Accept {
                items,
                request_id,
                reply,
            })
            .await;
        if without_volume && answers.is_ok() {
            self.unlocated.notify_one();
        }
        answers
    }

    /// Record that the MSS took these transfers.
    pub async fn submitted(
        &self,
        items: Vec<SubmittedTransfer>,
    ) -> Result<Vec<AfterSubmit>, LedgerError> {
        self.call(|reply| Command::Submitted { items, reply }).await
    }

    /// Record again what the MSS took when recording it first failed to commit (a full disk, an
    /// I/O error). A request a cancel took as at the MSS meanwhile (`submitted`, never sent
    /// again) has only this answer to name its transfer and hand its cancel on; one still
    /// `accepted` at that attempt is sent again (the MSS answers a duplicate) and is left to
    /// that answer: `None`.
    pub async fn submitted_late(
        &self,
        items: Vec<SubmittedTransfer>,
    ) -> Result<Vec<Option<AfterSubmit>>, LedgerError> {
        self.call(|reply| Command::SubmittedLate { items, reply })
            .await
    }

    /// These submissions, (id, attempt), are about to be sent: from the commit on the MSS may
    /// hold them, and a cancel goes there. Returns the ids to send, in order (those still
    /// `accepted` at that attempt), each with whether it is its attempt's first send.
    pub async fn mark_sending(
        &self,
        items: Vec<(i64, u32)>,
    ) -> Result<Vec<(i64, bool)>, LedgerError> {
        self.call(|reply| Command::Sending { items, reply }).await
    }

    /// These first sends, (id, attempt), could not connect to the MSS (nothing reached it): a
    /// cancel of them is final at once again, and one asked for meanwhile ends them now.
    pub async fn mark_unsent(&self, items: Vec<(i64, u32)>) -> Result<(), LedgerError> {
        self.call(|reply| Command::Unsent { items, reply }).await
    }

    /// The MSS deferred these sends, (id, attempt): it made nothing and will take them later
    /// (FTS3: their destination is held by a transfer not ended). They stay `accepted` at the
    /// same attempt and are not sent again before `until_ms`.
    pub async fn deferred(
        &self,
        items: Vec<(i64, u32)>,
        until_ms: i64,
        reason: String,
    ) -> Result<(), LedgerError> {
        self.call(|reply| Command::Deferred {
            items,
            until_ms,
            reason,
            reply,
        })
        .await
    }

    /// The MSS refused a submission for good: fail the request and refund it.
    pub async fn rejected(&self, id: i64, attempt: u32, reason: String) -> Result<(), LedgerError> {
        self.call(|reply| Command::Rejected {
            id,
            attempt,
            reason,
            reply,
        })
        .await
    }

    /// Apply MSS events and move the event cursor, in one transaction. Returns how many events
    /// changed a request (duplicates and stale events change nothing).
    pub async fn apply_events(
        &self,
        events: Vec<MssEvent>,
        cursor: EventCursor,
    ) -> Result<usize, LedgerError> {
        self.call(|reply| Command::Events {
            events,
            cursor: Some(cursor),
            reply,
        })
        .await
    }

    /// Apply events learnt from status queries; the stored event cursor is left as it is.
    pub async fn apply_status_events(&self, events: Vec<MssEvent>) -> Result<usize, LedgerError> {
        self.call(|reply| Command::Events {
            events,
            cursor: None,
            reply,
        })
        .await
    }

    /// The MSS confirmed these in-flight requests are still queued or running.
    pub async fn confirm_in_flight(&self, ids: Vec<i64>) -> Result<(), LedgerError> {
        self.call(|reply| Command::Checked { ids, reply }).await
    }

    /// In-flight requests the MSS has said nothing of since `before_ms`.
    pub async fn stale(&self, before_ms: i64, limit: usize) -> Result<Vec<InFlight>, LedgerError> {
        let keys = self.keys.clone();
        self.reads
            .run(move |c| read::stale(c, &keys, before_ms, limit))
            .await
    }

    /// The MSS no longer knows this attempt (it lost its queue): submit the request again as a
    /// new attempt, keeping its charge. Returns whether the request was in flight.
    pub async fn resubmit_lost(
        &self,
        id: i64,
        attempt: u32,
        reason: String,
    ) -> Result<bool, LedgerError> {
        self.call(|reply| Command::Lost {
            id,
            attempt,
            reason,
            reply,
        })
        .await
    }

    /// Requests at the MSS (submitted or running).
    pub async fn in_flight(&self) -> Result<Vec<InFlight>, LedgerError> {
        let keys = self.keys.clone();
        self.reads.run(move |c| read::in_flight(c, &keys)).await
    }

    /// Release held requests whose groups are now under their feasibility caps. Returns how
    /// many were released.
    pub async fn release_held(&self) -> Result<usize, LedgerError> {
        self.call(|reply| Command::Release { reply }).await
    }

    /// The live placement of a queued request (`None` when it is not queued) and its place in
    /// the latest ranking of the queue (see `rank`): one placement on the read pool, and the
    /// position from the latest ranking, or estimated against it for a request queued after
    /// it. Never waits for a ranking: one that is due is made in the background.
    pub async fn explain_queued(&self, id: i64) -> Result<Option<QueuedExplain>, LedgerError> {
        let before = self.memory()?;
        let published = self.published.clone();
        let now = self.clock.now_ms();
        let answer = self
            .reads
            .run(move |c| {
                let (tx, memory) = published.snapshot(c)?;
                let memory = memory.unwrap_or(before);
                let live = live::explain_queued(&tx, &memory, id, now)?;
                Ok(live.map(|l| {
                    let waiting = memory.waiting(&l.library);
                    (l, waiting)
                }))
            })
            .await?;
        let Some((live, waiting)) = answer else {
            return Ok(None);
        };
        if live.volume.is_some() {
            // The volumes mode releases a volume at a time: its figures say where the request
            // stands, not a ranking of single requests.
            return Ok(Some(QueuedExplain {
                explain: live.explain,
                position: None,
                waiting: None,
                ranked_at_ms: None,
                basis: PositionBasis::Volumes,
                volume: live.volume,
                library: live.library,
                drive_reserve: live.drive_reserve,
            }));
        }
        let ranked = self.ranked_place(id, &live.library, &live.key);
        let (position, waiting) = match (ranked.basis, ranked.place) {
            (PositionBasis::Ranking, Some(p)) => (Some(p.position), Some(p.waiting)),
            // Counted now: requests queued after the ranking are waiting too.
            (_, Some(p)) => (Some(p.position.min(waiting.max(1))), Some(waiting.max(1))),
            (_, None) => (None, Some(waiting.max(1))),
        };
        Ok(Some(QueuedExplain {
            explain: live.explain,
            position,
            waiting,
            ranked_at_ms: ranked.at_ms,
            basis: ranked.basis,
            volume: None,
            library: live.library,
            drive_reserve: live.drive_reserve,
        }))
    }

    /// Rank the held queue now (off the writer, on the read pool), for explain's positions:
    /// `serve` starts one at start so the first explains after a restart find a ranking.
    /// Returns the requests ranked.
    pub async fn rank_queue(&self) -> Result<usize, LedgerError> {
        self.rank_now().await
    }

    /// Requests at the MSS (not yet running) whose priority the policy now puts elsewhere, at
    /// most `max`.
    pub async fn reprioritise(&self, max: usize) -> Result<Vec<NewPriority>, LedgerError> {
        let before = self.memory()?;
        let published = self.published.clone();
        let now = self.clock.now_ms();
        let keys = self.keys.clone();
        self.reads
            .run(move |c| {
                // The rows and the memory of one commit: a request committed after the memory
                // was taken would otherwise be placed without its group's charge.
                let (tx, memory) = published.snapshot(c)?;
                live::reprioritise(&tx, &memory.unwrap_or(before), &keys, max, now)
            })
            .await
    }

    /// The writer's memory as of its latest commit.
    fn memory(&self) -> Result<Arc<live::Memory>, LedgerError> {
        self.published.latest().ok_or(LedgerError::Closed)
    }

    /// Usage and queue priorities now, and the policy they are indexed by, for a ranking built
    /// off the writer.
    fn rank_inputs(&self) -> Result<(RankInputs, Arc<PolicySettings>), LedgerError> {
        let memory = self.memory()?;
        Ok((
            memory.rank_inputs(self.clock.now_ms()),
            memory.policy.clone(),
        ))
    }

    /// Record priorities the MSS has taken.
    pub async fn reprioritised(&self, items: Vec<NewPriority>) -> Result<usize, LedgerError> {
        self.call(|reply| Command::Reprioritised { items, reply })
            .await
    }

    /// Tests: what the writer's memory holds that its rows do not say (empty: nothing).
    #[cfg(test)]
    pub async fn audit(&self) -> Result<Vec<String>, LedgerError> {
        self.call(|reply| Command::Audit { reply }).await
    }

    pub async fn cancel(&self, id: i64) -> Result<CancelOutcome, LedgerError> {
        let request_id = crate::request_scope::request_id();
        self.call(|reply| Command::Cancel {
            id,
            request_id,
            reply,
        })
        .await
    }

    pub async fn request(&self, id: i64) -> Result<Option<RequestRecord>, LedgerError> {
        let keys = self.keys.clone();
        self.reads.run(move |c| read::request(c, &keys, id)).await
    }

    /// Requests ready to submit (state accepted, retry time reached): highest MSS priority
    /// first, then in release order (the `volumes` mode numbers a volume's batch in
    /// tape-position order, so it is read together and in that order), then in decision order.
    pub async fn to_submit(
        &self,
        after_id: i64,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<ToSubmit>, LedgerError> {
        let keys = self.keys.clone();
        self.reads
            .run(move |c| read::to_submit(c, &keys, after_id, now_ms, limit))
            .await
    }

    /// When the earliest waiting retry becomes due, if any.
    pub async fn next_retry_ms(&self) -> Result<Option<i64>, LedgerError> {
        self.reads.run(read::next_retry_ms).await
    }

    /// Requests whose cancellation has been asked for and that have not ended: at the MSS, or
    /// waiting to be resent after an answer that could not be read.
    pub async fn cancel_pending(&self) -> Result<Vec<i64>, LedgerError> {
        self.reads.run(read::cancel_pending).await
    }

    /// Requests at the MSS whose cancellation has been asked for.
    pub async fn cancelling(&self) -> Result<Vec<InFlight>, LedgerError> {
        let keys = self.keys.clone();
        self.reads.run(move |c| read::cancelling(c, &keys)).await
    }

    /// Request `id`, if its cancel is one to carry to the MSS now (as `cancelling` lists them).
    pub async fn cancelling_one(&self, id: i64) -> Result<Option<InFlight>, LedgerError> {
        let keys = self.keys.clone();
        self.reads
            .run(move |c| read::cancelling_one(c, &keys, id))
            .await
    }

    pub async fn groups(&self) -> Result<Vec<GroupRow>, LedgerError> {
        self.reads.run(read::groups).await
    }

    /// The ledger's figures now, for the Prometheus exposition (`metrics` encodes them).
    pub async fn metric_figures(&self, now_ms: i64) -> Result<MetricFigures, LedgerError> {
        let policy = self.policy();
        self.reads
            .run(move |c| history::metric_figures(c, &policy, now_ms))
            .await
    }

    /// The wait histograms' rows from hour `since_hour` on, those before `seal_hour` summed
    /// apart from the later ones, for the Prometheus exposition.
    pub async fn metric_waits(
        &self,
        since_hour: i64,
        seal_hour: i64,
    ) -> Result<Vec<WaitRow>, LedgerError> {
        self.reads
            .run(move |c| history::wait_rows_since(c, since_hour, seal_hour))
            .await
    }

    /// A report's inputs: the aggregates over `hours` (hour numbers, end exclusive) and the
    /// share view at `diagnose_at_ms` (`report` builds the report from them).
    pub async fn report_figures(
        &self,
        hours: std::ops::Range<i64>,
        diagnose_at_ms: i64,
        now_ms: i64,
    ) -> Result<ReportFigures, LedgerError> {
        let policy = self.policy();
        self.reads
            .run(move |c| history::report_figures(c, &policy, hours, diagnose_at_ms, now_ms))
            .await
    }

    /// The share view at `at_ms`, from the committed aggregates (`now_ms`: the present; an
    /// earlier `at_ms` is replayed from the requests).
    pub async fn shares(&self, at_ms: i64, now_ms: i64) -> Result<SharesView, LedgerError> {
        let policy = self.policy();
        self.reads
            .run(move |c| history::read_shares(c, &policy, at_ms, now_ms))
            .await
    }

    pub async fn event_cursor(&self) -> Result<EventCursor, LedgerError> {
        self.reads.run(read::event_cursor).await
    }

    /// Number of requests in each state.
    pub async fn state_counts(&self) -> Result<Vec<(RequestState, u64)>, LedgerError> {
        self.reads.run(read::state_counts).await
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

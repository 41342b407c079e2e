//! The writer thread: the one owner of the write connection. It takes every command waiting on
//! its channel, applies them in one transaction (group commit), and answers only after COMMIT.
//! If anything fails, the whole group is rolled back, the writer's memory goes back to its
//! checkpoint ([`state::WriterState`]), and every caller gets the error: no partial state, no
//! answer for anything not on disk.
//!
//! `writer.rs`: the loop, gathering and the group commit; `command.rs`: the commands, how each is
//! applied in a transaction and the answers held until the commit; `state.rs`: the memory, its
//! checkpoint and the per-transaction context [`state::Txn`]; `accept.rs`, `settle.rs` (MSS outcomes and
//! the terminal charge), `sends.rs` (a send's marks), `release.rs` (holding and releasing),
//! `idempotency.rs` (replays), `outputs.rs` (one station-side copy per unfinished read),
//! `load.rs` (start-up), `rows.rs` (the memory per request row), `reload.rs` (a reload
//! prepared off the writer).

mod accept;
mod coalesce;
mod command;
mod fence;
mod idempotency;
mod load;
mod located;
mod noted;
mod outputs;
mod queued;
mod release;
mod reload;
mod removed;
mod reserve;
mod rows;
mod sends;
mod settle;
mod state;
mod volumes;

use std::sync::Arc;

use tokio::sync::{mpsc, Notify};
use tracing::{debug, error};

use command::{log_committed, Reply, Traced};
pub(in crate::ledger) use command::{Admitted, Command};
pub(super) use fence::write_transaction;
pub use reload::PreparedReload;
pub(super) use reload::{Step, Ticket};
pub(super) use removed::unfinished_of;
pub use removed::{GroupCancel, RemovedGroup, RemovedGroups};

use super::aggregates::ReportDeltas;
use super::columns;
use super::db::{params, DbConn, DbResult};
use super::live::Published;
use super::stored_explain::StoredExplain;

use super::mss_key::MssKeys;
use super::usage;
use crate::clock::Clock;
use crate::domain::{PolicySettings, RetrySettings};
use crate::policy::order::Placement;
use state::{Deltas, Txn, WriterState};

pub(super) struct Writer {
    conn: DbConn,
    /// This ledger's MSS keys, this start's incarnation included (`ledger::mss_key`).
    keys: Arc<MssKeys>,
    policy: Arc<PolicySettings>,
    clock: Arc<dyn Clock>,
    state: WriterState,
    batch_max: usize,
    retry: RetrySettings,
    ready: Arc<Notify>,
    /// Where the memory read off the writer is published after every commit.
    published: Arc<Published>,
    metrics: Arc<dyn super::CommitObserver>,
    /// The database file as opened: checked before every COMMIT (see `ledger::identity`).
    /// `None` on PostgreSQL: no file.
    file: Option<super::identity::DbFile>,
    /// The term's epoch every write transaction is fenced at (PostgreSQL; `None` on SQLite,
    /// whose lock file is the exclusion).
    fence_epoch: Option<i64>,
    /// A transaction was fenced: this writer takes no more groups (its thread ends).
    fenced: bool,
    /// The volume queue could not be reloaded after a rollback: tried again before the next
    /// transaction, so a batch the rollback undid does not hold its volume's slot for ever.
    volumes_stale: bool,
    /// A reload being prepared off the writer (`reload.rs`).
    reloads: reload::Reloads,
}

impl Writer {
    /// This ledger's MSS keys (fixed for the life of the writer).
    pub fn keys(&self) -> Arc<MssKeys> {
        self.keys.clone()
    }

    /// The SQLite file is still the one opened (nothing to check on PostgreSQL).
    fn check_file(&self) -> Result<(), super::db::DbError> {
        check_file(self.file.as_ref())
    }
}

/// `file` (SQLite's, as opened) is still the file at its path; `None` (PostgreSQL): nothing.
fn check_file(file: Option<&super::identity::DbFile>) -> Result<(), super::db::DbError> {
    file.map_or(Ok(()), |f| f.check())
}

/// Longest the writer waits for more commands before committing what it has.
const GATHER_MAX_WAIT: std::time::Duration = std::time::Duration::from_micros(300);
/// How often it looks while waiting.
const GATHER_POLL: std::time::Duration = std::time::Duration::from_micros(50);

/// The explanation stored with a decision (the ledger's own format, see `stored_explain`).
pub(super) fn explain_text(p: &Placement) -> Option<String> {
    Some(StoredExplain::from(&p.explain).to_text())
}

/// When the writer last committed a group, or answered one with nothing to write: readiness
/// (`/readyz`) wants it recent, which the ledger's tick timer keeps true while the writer lives.
pub struct Heartbeat {
    origin: std::time::Instant,
    /// Milliseconds after `origin`.
    last_ms: std::sync::atomic::AtomicU64,
}

impl Heartbeat {
    pub fn new() -> Heartbeat {
        Heartbeat {
            origin: std::time::Instant::now(),
            last_ms: Default::default(),
        }
    }

    fn beat(&self) {
        let ms = self.origin.elapsed().as_millis() as u64;
        self.last_ms.store(ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// Time since the last beat.
    pub fn age(&self) -> std::time::Duration {
        let last = self.last_ms.load(std::sync::atomic::Ordering::Relaxed);
        (self.origin.elapsed()).saturating_sub(std::time::Duration::from_millis(last))
    }
}

impl Writer {
    /// Serve commands until every sender is gone, beating `heartbeat` after every group
    /// committed or answered without a transaction.
    pub fn run(mut self, mut rx: mpsc::Receiver<Command>, heartbeat: Arc<Heartbeat>) {
        heartbeat.beat();
        let mut last = 0usize;
        while let Some(first) = rx.blocking_recv() {
            let commands = self.gather(first, &mut rx, last);
            last = commands.len();
            if self.commit_gathered(commands) {
                heartbeat.beat();
            }
            if self.fenced {
                // Another broker leads: every later command would be refused alike. Its
                // callers find the writer closed; the heartbeat stops (`/readyz`).
                error!("ledger writer fenced: another broker leads; taking no more commands");
                break;
            }
            if self.conn.is_closed() {
                // PostgreSQL ended the connection (a restart, a terminated session): every
                // later group would fail alike, and a writer never reconnects and carries on
                // (docs/ha.md). Its thread's end ends the term, which resigns its epoch.
                error!(
                    "ledger writer's connection to the database is lost; taking no more commands"
                );
                break;
            }
        }
        debug!("ledger writer stopped");
    }

    /// Commit `commands` as one group, unless a reload is among them: then what came before it
    /// is committed under the old policy, the reload runs, and what came after is committed
    /// under the new one. A commit never sees half of each. A chunk of `cancel --group` is
    /// committed in a group of its own, after what came before it: a submission waiting
    /// behind one chunk is then answered before the next, not committed with it. True when the
    /// writer answered (the heartbeat `/readyz` reads).
    fn commit_gathered(&mut self, commands: Vec<Command>) -> bool {
        self.forget_abandoned_reload();
        let mut group = Vec::with_capacity(commands.len());
        let mut answered = false;
        for command in commands {
            match command {
                Command::Reload(step) => {
                    if !group.is_empty() {
                        answered |= self.commit_group(std::mem::take(&mut group));
                    }
                    answered |= self.reload_step(step);
                }
                #[cfg(test)]
                Command::Audit { reply } => {
                    if !group.is_empty() {
                        answered |= self.commit_group(std::mem::take(&mut group));
                    }
                    let _ = reply.send(self.audit());
                }
                chunk @ Command::CancelListed { .. } => {
                    if !group.is_empty() {
                        answered |= self.commit_group(std::mem::take(&mut group));
                    }
                    answered |= self.commit_group(vec![chunk]);
                }
                other => group.push(other),
            }
        }
        if !group.is_empty() {
            answered |= self.commit_group(group);
        }
        answered
    }

    /// Take what is waiting. Under load, callers answered by the last commit send again within
    /// microseconds; a commit costs about the same whether it carries 20 requests or 200 (one
    /// fsync, the same hot pages), so wait briefly for about as many as last time before
    /// committing. A lone request (last commit carried one) never waits.
    fn gather(
        &self,
        first: Command,
        rx: &mut mpsc::Receiver<Command>,
        last: usize,
    ) -> Vec<Command> {
        let mut commands = vec![first];
        let target = last.min(self.batch_max);
        let deadline = std::time::Instant::now() + GATHER_MAX_WAIT;
        loop {
            while commands.len() < self.batch_max {
                match rx.try_recv() {
                    Ok(c) => commands.push(c),
                    Err(_) => break,
                }
            }
            let enough = commands.len() * 4 >= target * 3;
            if target <= 1 || enough || std::time::Instant::now() >= deadline {
                return commands;
            }
            std::thread::sleep(GATHER_POLL);
        }
    }

    /// The release timer's commands when nothing is held, and ticks: answered without a
    /// transaction (and without counting a commit that wrote nothing). Returns whether it
    /// answered them.
    fn idle_release(&self, commands: &mut Vec<Command>) -> bool {
        let nothing_waiting = self.state.nothing_waiting(self.clock.now_ms());
        let idle = (commands.iter()).all(|c| match c {
            Command::Release { .. } => nothing_waiting,
            Command::Tick { .. } => true,
            _ => false,
        });
        if idle {
            for c in commands.drain(..) {
                match c {
                    Command::Release { reply } => drop(reply.send(Ok(0))),
                    Command::Tick { reply } => drop(reply.send(Ok(()))),
                    _ => {}
                }
            }
        }
        idle
    }

    /// Apply and commit `commands`; returns whether they were committed (or needed no
    /// transaction).
    fn commit_group(&mut self, mut commands: Vec<Command>) -> bool {
        if self.volumes_stale {
            self.reload_volumes();
        }
        if self.idle_release(&mut commands) {
            return true;
        }
        let traced: Vec<Traced> = commands.iter().map(Command::traced).collect();
        let started = std::time::Instant::now();
        let count = commands.len();
        self.state.checkpoint();
        let mut replies = Vec::with_capacity(count);
        // Questions answered off the writer wait at this gate while a transaction is open, so
        // none reads this commit's rows with the memory of the one before (see `live`).
        let published = self.published.clone();
        let gate = published.gate();
        let trips = self.conn.db().round_trips();
        let (outcome, ready, unknown_keys) = self.transact(commands, &mut replies);
        let elapsed = started.elapsed();
        let trips = trips.zip(self.conn.db().round_trips()).map(|(a, b)| b - a);
        debug!(
            commands = count,
            micros = elapsed.as_micros() as u64,
            ok = outcome.is_ok(),
            "group commit"
        );
        match outcome {
            Ok(()) => {
                // Only a group on disk is a commit: a rolled-back one is logged below.
                self.metrics.committed(elapsed.as_secs_f64(), count);
                if let Some(trips) = trips {
                    self.metrics.round_trips(trips);
                }
                if unknown_keys > 0 {
                    self.metrics.unknown_key_events(unknown_keys);
                }
                self.state.keep();
                self.published.publish(
                    &self.policy,
                    (&self.state.usage, &self.state.queues),
                    (&self.state.queue, self.state.priority_demand()),
                );
                drop(gate);
                for (reply, traced) in replies.iter().zip(&traced) {
                    log_committed(reply, traced);
                }
                replies.into_iter().for_each(Reply::ok);
                if ready {
                    self.ready.notify_one();
                }
                true
            }
            Err(e) => {
                let ids: Vec<&str> = traced.iter().flatten().map(|(id, _)| &**id).collect();
                error!(error = %e, commands = replies.len(), x_request_ids = ?ids,
                    "ledger transaction rolled back");
                self.metrics.rolled_back(count);
                if self.state.rollback() {
                    self.reload_volumes();
                }
                drop(gate);
                let message = e.to_string();
                replies.into_iter().for_each(|r| r.err(&message));
                false
            }
        }
    }

    /// The volume queue from the committed rows, after a rollback that changed it in a way its
    /// journal cannot undo (a batch released, a request ended). If even reading fails, it is
    /// tried again before the next transaction.
    fn reload_volumes(&mut self) {
        match volumes::load_volume_queue(&self.conn.db(), &self.policy, self.clock.now_ms()) {
            Ok(v) => {
                self.state.reload_volumes(v);
                self.volumes_stale = false;
            }
            Err(e) => {
                self.volumes_stale = true;
                error!(error = %e, "cannot reload the volume queue after a rollback; trying again before the next transaction");
            }
        }
    }

    /// Apply `commands` in one transaction and commit it; the replies go to `replies` (up to
    /// the first failing command). Returns the outcome, whether a request became ready and how
    /// many MSS events named keys this ledger did not issue.
    fn transact(
        &mut self,
        commands: Vec<Command>,
        replies: &mut Vec<Reply>,
    ) -> (DbResult<()>, bool, u64) {
        let now = self.clock.now_ms();
        let rebase = self.state.usage.rebase(now);
        self.state.usage.roll(now);
        // The fence first in every write transaction on PostgreSQL: a group of a deposed
        // leader is rolled back, every caller answered with the error (never a 202).
        let tx = match fence::write_transaction(&mut self.conn, self.fence_epoch) {
            Ok(tx) => tx,
            Err(e) => {
                self.fenced = matches!(e, super::db::DbError::Fenced(_));
                return (Err(e), false, 0);
            }
        };
        // The group's new requests get their ids in one round trip where ids are given before
        // the rows are written (PostgreSQL; nothing on SQLite).
        let new = command::new_requests(&commands);
        if new > 0 {
            if let Err(e) = tx.reserve_ids(columns::insert_sql(), new) {
                return (Err(e), false, 0);
            }
        }
        let mut txn = Txn {
            tx: &tx,
            keys: &self.keys,
            policy: &self.policy,
            retry: &self.retry,
            st: &mut self.state,
            now,
            deltas: Deltas::default(),
            report: ReportDeltas::default(),
            ready: false,
            unknown_keys: 0,
            changed: noted::Changed::new(self.reloads.noting()),
        };
        let outcome = (|| {
            if let Some(factor) = rebase {
                txn.tx
                    .execute("UPDATE groups SET decayed = decayed * ?1", params![factor])?;
                usage::store_model(txn.tx, txn.policy, &txn.st.usage)?;
            }
            for command in commands {
                let (reply, result) = txn.apply(command);
                replies.push(reply);
                result?;
            }
            txn.release_queued()?;
            txn.flush_deltas()?;
            txn.report.flush(txn.tx)
        })();
        let (ready, unknown_keys) = (txn.ready, txn.unknown_keys);
        let changed = txn.changed.into_ids();
        let outcome = outcome
            .and_then(|()| check_file(self.file.as_ref()))
            .and_then(|()| tx.commit());
        if outcome.is_ok() {
            self.reloads.committed(changed);
        }
        (outcome, ready, unknown_keys)
    }
}

//! The writer thread: the one owner of the write connection. It takes every command waiting on
//! its channel, applies them in one transaction (group commit), and answers only after COMMIT.
//! If anything fails, the whole group is rolled back, the writer's memory goes back to its
//! checkpoint ([`state::WriterState`]), and every caller gets the error: no partial state, no
//! answer for anything not on disk.
//!
//! `mod.rs`: the loop, gathering and the group commit; `state.rs`: the memory, its checkpoint
//! and the per-transaction context [`state::Txn`]; `accept.rs`, `settle.rs` (MSS outcomes and
//! the terminal charge), `release.rs` (holding and releasing), `idempotency.rs` (replays),
//! `load.rs` (start-up).

mod accept;
mod idempotency;
mod load;
mod queued;
mod release;
mod settle;
mod state;

use std::sync::Arc;

use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot, Notify};
use tracing::{debug, error};

pub(super) use release::{read_candidate, CANDIDATE_COLUMNS};

use super::aggregates::ReportDeltas;
use super::live::Published;
use super::stored_explain::StoredExplain;
use mss_adapters::{EventCursor, MssEvent};

use super::{usage, Accepted, AfterSubmit, CancelOutcome, LedgerError, QueuedCapRefused};
use super::{NewPriority, NewRequest, SubmittedTransfer};
use crate::clock::Clock;
use crate::domain::{PolicySettings, RetrySettings};
use crate::policy::order::Placement;
use state::{Deltas, Txn, WriterState};

pub(super) struct Writer {
    conn: Connection,
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
    file: super::identity::DbFile,
}

/// Longest the writer waits for more commands before committing what it has.
const GATHER_MAX_WAIT: std::time::Duration = std::time::Duration::from_micros(300);
/// How often it looks while waiting.
const GATHER_POLL: std::time::Duration = std::time::Duration::from_micros(50);

/// The explanation stored with a decision (the ledger's own format, see `stored_explain`).
pub(super) fn explain_text(p: &Placement) -> Option<String> {
    Some(StoredExplain::from(&p.explain).to_text())
}

/// What the writer is asked to do: every command writes (questions are answered off the
/// writer, see `ledger::live`).
pub(in crate::ledger) enum Command {
    Accept {
        items: Vec<NewRequest>,
        reply: oneshot::Sender<Result<Vec<Admitted>, LedgerError>>,
    },
    Submitted {
        items: Vec<SubmittedTransfer>,
        reply: oneshot::Sender<Result<Vec<AfterSubmit>, LedgerError>>,
    },
    Rejected {
        id: i64,
        attempt: u32,
        reason: String,
        reply: oneshot::Sender<Result<(), LedgerError>>,
    },
    Lost {
        id: i64,
        attempt: u32,
        reason: String,
        reply: oneshot::Sender<Result<bool, LedgerError>>,
    },
    Events {
        events: Vec<MssEvent>,
        /// The cursor to store with them; `None` for events that did not come from the log.
        cursor: Option<EventCursor>,
        reply: oneshot::Sender<Result<usize, LedgerError>>,
    },
    Checked {
        ids: Vec<i64>,
        reply: oneshot::Sender<Result<(), LedgerError>>,
    },
    Cancel {
        id: i64,
        reply: oneshot::Sender<Result<CancelOutcome, LedgerError>>,
    },
    Release {
        reply: oneshot::Sender<Result<usize, LedgerError>>,
    },
    Reprioritised {
        items: Vec<NewPriority>,
        reply: oneshot::Sender<Result<usize, LedgerError>>,
    },
}

/// One new request's answer: recorded, or refused by a queued-bytes cap.
pub(in crate::ledger) type Admitted = Result<Accepted, QueuedCapRefused>;

/// A caller's answer, held until the transaction's fate is known.
enum Reply {
    Accept(
        oneshot::Sender<Result<Vec<Admitted>, LedgerError>>,
        Vec<Admitted>,
    ),
    Submitted(
        oneshot::Sender<Result<Vec<AfterSubmit>, LedgerError>>,
        Vec<AfterSubmit>,
    ),
    Done(oneshot::Sender<Result<(), LedgerError>>),
    Lost(oneshot::Sender<Result<bool, LedgerError>>, bool),
    Count(oneshot::Sender<Result<usize, LedgerError>>, usize),
    Cancel(
        oneshot::Sender<Result<CancelOutcome, LedgerError>>,
        CancelOutcome,
    ),
}

impl Reply {
    // A caller that went away (client disconnected) needs no answer: send errors are ignored.
    fn ok(self) {
        let _ = match self {
            Reply::Accept(tx, v) => tx.send(Ok(v)).map_err(drop),
            Reply::Submitted(tx, v) => tx.send(Ok(v)).map_err(drop),
            Reply::Done(tx) => tx.send(Ok(())).map_err(drop),
            Reply::Lost(tx, v) => tx.send(Ok(v)).map_err(drop),
            Reply::Count(tx, v) => tx.send(Ok(v)).map_err(drop),
            Reply::Cancel(tx, v) => tx.send(Ok(v)).map_err(drop),
        };
    }

    fn err(self, message: &str) {
        let e = || LedgerError::Storage(message.to_string());
        let _ = match self {
            Reply::Accept(tx, _) => tx.send(Err(e())).map_err(drop),
            Reply::Submitted(tx, _) => tx.send(Err(e())).map_err(drop),
            Reply::Done(tx) => tx.send(Err(e())).map_err(drop),
            Reply::Lost(tx, _) => tx.send(Err(e())).map_err(drop),
            Reply::Count(tx, _) => tx.send(Err(e())).map_err(drop),
            Reply::Cancel(tx, _) => tx.send(Err(e())).map_err(drop),
        };
    }
}

/// A result and the reply it makes (with a stand-in answer when it failed: the reply then
/// carries the transaction's error).
fn reply<T, R>(
    result: rusqlite::Result<T>,
    failed: T,
    make: impl FnOnce(T) -> R,
) -> (R, rusqlite::Result<()>) {
    match result {
        Ok(v) => (make(v), Ok(())),
        Err(e) => (make(failed), Err(e)),
    }
}

impl Txn<'_, '_> {
    /// Apply one command inside the transaction. The reply carries the answer to send on commit.
    fn apply(&mut self, command: Command) -> (Reply, rusqlite::Result<()>) {
        match command {
            Command::Accept { items, reply } => {
                let mut out = Vec::with_capacity(items.len());
                let r = (items.iter()).try_for_each(|i| self.accept_one(i).map(|a| out.push(a)));
                (Reply::Accept(reply, out), r)
            }
            Command::Submitted { items, reply } => {
                let mut out = Vec::with_capacity(items.len());
                let r = (items.iter()).try_for_each(|i| self.submitted_one(i).map(|a| out.push(a)));
                (Reply::Submitted(reply, out), r)
            }
            Command::Rejected {
                id,
                attempt,
                reason,
                reply,
            } => (Reply::Done(reply), self.rejected(id, attempt, &reason)),
            Command::Lost {
                id,
                attempt,
                reason,
                reply: tx,
            } => reply(self.lost(id, attempt, &reason), false, |v| {
                Reply::Lost(tx, v)
            }),
            Command::Events {
                events,
                cursor,
                reply,
            } => {
                let mut changed = 0;
                let r = (events.iter())
                    .try_for_each(|e| self.apply_event(e).map(|c| changed += usize::from(c)))
                    .and_then(|()| cursor.as_ref().map_or(Ok(()), |c| self.store_cursor(c)));
                (Reply::Count(reply, changed), r)
            }
            Command::Checked { ids, reply } => (Reply::Done(reply), self.checked(&ids)),
            Command::Reprioritised { items, reply: tx } => {
                reply(self.reprioritised(&items), 0, |n| Reply::Count(tx, n))
            }
            Command::Release { reply: tx } => {
                reply(self.release_held(), 0, |n| Reply::Count(tx, n))
            }
            Command::Cancel { id, reply: tx } => {
                reply(self.cancel(id), CancelOutcome::NotFound, |o| {
                    Reply::Cancel(tx, o)
                })
            }
        }
    }
}

impl Writer {
    /// Serve commands until every sender is gone.
    pub fn run(mut self, mut rx: mpsc::Receiver<Command>) {
        let mut last = 0usize;
        while let Some(first) = rx.blocking_recv() {
            let commands = self.gather(first, &mut rx, last);
            last = commands.len();
            self.commit_group(commands);
        }
        debug!("ledger writer stopped");
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

    /// The release timer's commands when nothing is held: answered without a transaction (and
    /// without counting a commit that wrote nothing). Returns whether it answered them.
    fn idle_release(&self, commands: &mut Vec<Command>) -> bool {
        let idle = self.state.nothing_waiting()
            && (commands.iter()).all(|c| matches!(c, Command::Release { .. }));
        if idle {
            for c in commands.drain(..) {
                if let Command::Release { reply } = c {
                    let _ = reply.send(Ok(0));
                }
            }
        }
        idle
    }

    fn commit_group(&mut self, mut commands: Vec<Command>) {
        if self.idle_release(&mut commands) {
            return;
        }
        let started = std::time::Instant::now();
        let count = commands.len();
        self.state.checkpoint();
        let mut replies = Vec::with_capacity(count);
        // Questions answered off the writer wait at this gate while a transaction is open, so
        // none reads this commit's rows with the memory of the one before (see `live`).
        let published = self.published.clone();
        let gate = published.gate();
        let (outcome, ready) = self.transact(commands, &mut replies);
        let elapsed = started.elapsed();
        self.metrics.committed(elapsed.as_secs_f64(), count);
        debug!(
            commands = count,
            micros = elapsed.as_micros() as u64,
            "group commit"
        );
        match outcome {
            Ok(()) => {
                self.state.keep();
                self.published
                    .publish(&self.state.usage, &self.state.queues);
                drop(gate);
                replies.into_iter().for_each(Reply::ok);
                if ready {
                    self.ready.notify_one();
                }
            }
            Err(e) => {
                error!(error = %e, commands = replies.len(), "ledger transaction rolled back");
                self.state.rollback();
                drop(gate);
                let message = e.to_string();
                replies.into_iter().for_each(|r| r.err(&message));
            }
        }
    }

    /// Apply `commands` in one transaction and commit it; the replies go to `replies` (up to
    /// the first failing command). Returns the outcome and whether a request became ready.
    fn transact(
        &mut self,
        commands: Vec<Command>,
        replies: &mut Vec<Reply>,
    ) -> (rusqlite::Result<()>, bool) {
        let now = self.clock.now_ms();
        let rebase = self.state.usage.rebase(now);
        self.state.usage.roll(now);
        let tx = match self.conn.transaction() {
            Ok(tx) => tx,
            Err(e) => return (Err(e), false),
        };
        let mut txn = Txn {
            tx: &tx,
            policy: &self.policy,
            retry: &self.retry,
            st: &mut self.state,
            now,
            deltas: Deltas::default(),
            report: ReportDeltas::default(),
            ready: false,
        };
        let outcome = (|| {
            if let Some(factor) = rebase {
                txn.tx
                    .execute("UPDATE groups SET decayed = decayed * ?1", [factor])?;
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
        let ready = txn.ready;
        let outcome = outcome
            .and_then(|()| self.file.check())
            .and_then(|()| tx.commit());
        (outcome, ready)
    }
}

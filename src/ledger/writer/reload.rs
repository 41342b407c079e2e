//! A reload of the policy in two steps, so that its cost does not fall on the writer (and on
//! every submission waiting behind it) in proportion to the requests waiting in the broker:
//!
//! 1. **Snapshot** (`Command::ReloadSnapshot`, on the writer, between two commits): a read
//!    transaction is opened on a connection of its own, and from then on the writer notes the id
//!    of every request row its statements insert or change (each statement notes its own rows,
//!    `noted.rs`; a debug build's install checks that none was missed).
//! 2. **Prepare** (off the writer, on a blocking thread): everything of the new memory that grows
//!    with the rows ([`RowState`]: the held queue, the volume queue's waiting requests, the
//!    queued-bytes tallies, the slots outstanding, the carriers) is read from the snapshot for
//!    the new policy, and a group left out with unfinished requests refuses the reload there.
//!    Submissions go on meanwhile, under the old policy.
//! 3. **Install** (`Command::Reload`, on the writer, between two commits, while the API's gate
//!    keeps new classifications out): each row noted since the snapshot is read twice, as the
//!    snapshot has it and as it is now, and its part moved from one to the other; the per-group
//!    figures (usage, held counts, queue priorities), the volumes in flight and the new groups'
//!    rows are read and written in one transaction, which is committed only once all of it
//!    succeeded (a row noted in a group left out refuses the reload here, writing nothing). The
//!    writer's work is what changed during the preparation, not the queue.
//!
//! The noting stops when the reload is installed or its preparation is dropped (the writer sees
//! its ticket gone); past `noted::MAX_NOTED` rows it gives up, and the install then reads everything
//! on the writer as a start does (correct, only slower). A change of the usage model still
//! rebuilds the usage aggregates from every request on the writer, as a start does.

use std::collections::HashSet;
use std::sync::{Arc, Weak};

use tokio::sync::oneshot;
use tracing::{info, warn};

use super::idempotency::Idempotency;
use super::load::{add_groups, finish_state, load_state, refuse_removed_groups};
use super::noted::Noted;
use super::rows::{Row, RowState};
use super::volumes;
use super::Writer;
use crate::domain::PolicySettings;
use crate::ledger::db::{DbConn, DbError, DbResult, Tx};
use crate::ledger::LedgerError;

/// The writer's part in reloads: what it keeps while one is being prepared, and the number of
/// the latest snapshot (an install must be of it).
#[derive(Default)]
pub(super) struct Reloads {
    noting: Option<Noting>,
    generation: u64,
}

/// What the writer keeps while a reload is being prepared: the rows changed since its snapshot.
struct Noting {
    generation: u64,
    rows: Noted,
    /// Held by the preparation: gone, the reload was abandoned.
    ticket: Weak<Ticket>,
}

impl Reloads {
    /// Whether a reload is being prepared: the transactions note the rows they change.
    pub fn noting(&self) -> bool {
        self.noting.is_some()
    }

    /// A transaction committed, changing the `requests` rows `ids`.
    pub fn committed(&mut self, ids: Vec<i64>) {
        if let Some(n) = &mut self.noting {
            n.rows.add(ids);
        }
    }
}

/// A preparation's claim on the writer's noting.
#[derive(Debug)]
pub struct Ticket;

/// A reload read off the writer, to install ([`crate::ledger::Ledger::install_reload`]).
pub struct PreparedReload {
    policy: Arc<PolicySettings>,
    generation: u64,
    /// The snapshot the rows were read from, its read transaction still open.
    snapshot: DbConn,
    rows: Option<Box<RowState>>,
    /// Dropped with the preparation: the writer then stops noting.
    _ticket: Arc<Ticket>,
}

impl PreparedReload {
    /// Step 2: the rows' part of the memory for `policy`, from `snapshot` (refused when
    /// `policy` leaves out a group with unfinished requests). Blocking: run off the writer.
    pub(in crate::ledger) fn read(
        policy: Arc<PolicySettings>,
        (generation, snapshot, ticket): (u64, DbConn, Arc<Ticket>),
    ) -> Result<PreparedReload, LedgerError> {
        refuse_removed_groups(&snapshot.db(), &policy)?;
        let started = std::time::Instant::now();
        let rows = RowState::read(&snapshot.db(), &policy)?;
        info!(
            millis = started.elapsed().as_millis() as u64,
            queued = rows.queue.len() + rows.volumes.len(),
            "reload: the new policy's queues read off the writer"
        );
        Ok(PreparedReload {
            policy,
            generation,
            snapshot,
            rows: Some(Box::new(rows)),
            _ticket: ticket,
        })
    }
}

/// A reload's step, which the writer runs between two commits.
pub(in crate::ledger) enum Step {
    /// Step 1: open `snapshot`'s read transaction and note the rows changed from now on.
    Snapshot {
        snapshot: DbConn,
        ticket: Weak<Ticket>,
        reply: oneshot::Sender<Result<(u64, DbConn), LedgerError>>,
    },
    /// Step 3: put a prepared reload in force.
    Install {
        prepared: Box<PreparedReload>,
        reply: oneshot::Sender<Result<(), LedgerError>>,
    },
}

impl Step {
    /// Answer that the step cannot run (`why`).
    pub(super) fn refuse(self, why: &str) {
        let e = || LedgerError::Storage(why.to_string());
        let _ = match self {
            Step::Snapshot { reply, .. } => reply.send(Err(e())).map_err(drop),
            Step::Install { reply, .. } => reply.send(Err(e())).map_err(drop),
        };
    }
}

impl Writer {
    /// Run `step` and answer it; whether it succeeded (the writer's heartbeat).
    pub(super) fn reload_step(&mut self, step: Step) -> bool {
        match step {
            Step::Snapshot {
                snapshot,
                ticket,
                reply,
            } => {
                let outcome = self.reload_snapshot(snapshot, ticket);
                let ok = outcome.is_ok();
                let _ = reply.send(outcome);
                ok
            }
            Step::Install { prepared, reply } => {
                let outcome = self.install_reload(*prepared);
                let ok = outcome.is_ok();
                let _ = reply.send(outcome);
                ok
            }
        }
    }

    /// Step 1: open `snapshot`'s read transaction here, between two commits, and note every
    /// request row changed from now on (a reload prepared earlier and not installed is
    /// forgotten).
    fn reload_snapshot(
        &mut self,
        snapshot: DbConn,
        ticket: Weak<Ticket>,
    ) -> Result<(u64, DbConn), LedgerError> {
        self.stop_noting();
        // The read transaction stays open on the connection handed to the preparation, not in
        // a `Tx` borrowing it; its snapshot is fixed here, between two commits (SQLite's
        // BEGIN, PostgreSQL's REPEATABLE READ READ ONLY).
        snapshot.hold_snapshot()?;
        self.reloads.generation += 1;
        self.reloads.noting = Some(Noting {
            generation: self.reloads.generation,
            rows: Noted::default(),
            ticket,
        });
        Ok((self.reloads.generation, snapshot))
    }

    /// A write transaction of this term (`fence::write_transaction`); a fenced one leaves the
    /// writer fenced: it takes no more commands.
    fn write_transaction(&mut self) -> DbResult<Tx<'_>> {
        let tx = super::fence::write_transaction(&mut self.conn, self.fence_epoch);
        if let Err(DbError::Fenced(_)) = &tx {
            self.fenced = true;
        }
        tx
    }

    /// Stop noting rows (a reload installed, refused or abandoned).
    fn stop_noting(&mut self) {
        self.reloads.noting = None;
    }

    /// Stop noting for a reload whose preparation was dropped (its caller went away).
    pub(super) fn forget_abandoned_reload(&mut self) {
        let abandoned =
            (self.reloads.noting.as_ref()).is_some_and(|n| n.ticket.strong_count() == 0);
        if abandoned {
            info!("a reload being prepared was abandoned; the writer stops noting changed rows");
            self.stop_noting();
        }
    }

    /// Step 3: decide with the prepared policy from the next commit on, between two commits.
    /// Refused, changing nothing, when the policy leaves out a group with unfinished requests
    /// or the memory cannot be read.
    fn install_reload(&mut self, mut p: PreparedReload) -> Result<(), LedgerError> {
        let noted = match self.reloads.noting.take() {
            Some(n) if n.generation == p.generation => n.rows.take(),
            _ => None,
        };
        let (Some(noted), Some(rows)) = (noted, p.rows.take()) else {
            warn!("the rows changed while the reload was prepared could not all be noted: reading them all on the writer");
            return self.reload_from_rows(p.policy);
        };
        // Nothing is written to a file that is no longer the database (as before a commit).
        self.check_file()?;
        let started = std::time::Instant::now();
        let count = noted.len();
        let state = self.caught_up(&p, *rows, noted)?;
        info!(
            caught_up = count,
            millis = started.elapsed().as_millis() as u64,
            "reload: rows changed while it was prepared brought up to date on the writer"
        );
        self.put_in_force(p.policy, state);
        Ok(())
    }

    /// The new memory: `rows` (as the snapshot had them) brought up to date with the rows
    /// `noted` since, and the rest read now, in one transaction that also writes the new groups'
    /// rows (and usage aggregates rebuilt for a new usage model), committed last.
    fn caught_up(
        &mut self,
        p: &PreparedReload,
        mut rows: RowState,
        noted: HashSet<i64>,
    ) -> Result<super::state::WriterState, LedgerError> {
        let policy = &*p.policy;
        let now = self.clock.now_ms();
        let tx = self.write_transaction()?;
        // A statement that changed a row without noting it would leave the row's part of the
        // memory as the snapshot had it: found here in tests, before anything is written.
        #[cfg(debug_assertions)]
        {
            let missed = super::noted::unnoted(&p.snapshot.db(), &tx, &noted)?;
            assert!(
                missed.is_empty(),
                "requests rows changed while a reload was prepared, not noted by the writer: {missed:?}"
            );
        }
        add_groups(&tx, policy)?;
        // Into the volumes mode: what the previous mode sent counts as volumes in flight.
        volumes::enter_mode(&tx, policy)?;
        let mut outside = false;
        for id in noted {
            let was = Row::read(&p.snapshot.db(), policy, id)?;
            let is = Row::read(&tx, policy, id)?;
            outside |= is.as_ref().is_some_and(|r| r.unfinished_outside(policy));
            rows.replace(policy, was.as_ref(), is.as_ref());
        }
        // A request committed since the snapshot in a group this policy leaves out: refused
        // now, after the groups' rows were written, which the rollback takes back.
        if outside {
            refuse_removed_groups(&tx, policy)?;
        }
        let state = finish_state(&tx, policy, now, rows, Idempotency::default())?;
        tx.commit()?;
        Ok(state)
    }

    /// Decide with `policy` from the next commit on, its memory read here from the rows as
    /// start-up reads it (everything on the writer: what the two-step reload avoids).
    pub(super) fn reload_from_rows(
        &mut self,
        policy: Arc<PolicySettings>,
    ) -> Result<(), LedgerError> {
        refuse_removed_groups(&self.conn.db(), &policy)?;
        self.check_file()?;
        let now = self.clock.now_ms();
        let tx = self.write_transaction()?;
        let state = load_state(tx, &policy, now, Idempotency::default())?;
        self.put_in_force(policy, state);
        Ok(())
    }

    /// Swap in `state` (read for `policy`, idempotency map aside) and publish it.
    fn put_in_force(&mut self, policy: Arc<PolicySettings>, mut state: super::state::WriterState) {
        // Keyed by request id and fingerprint, not by group: carried over as they are (the
        // adapter, which decides the station-side copies, is not reloaded).
        state.idempotency = std::mem::take(&mut self.state.idempotency);
        state.outputs = std::mem::take(&mut self.state.outputs);
        // What the volume queue's rows do not hold (volumes that ended within `sticky_secs`,
        // the size of each flight's last batch), kept as a rollback keeps it: else every
        // reload, a token rotation's too, would unmount the volumes the sticky rule keeps.
        if self.policy.order.volumes() && policy.order.volumes() {
            let (old, new) = (&self.policy, &policy);
            let regroup =
                |g: crate::domain::GroupId| new.group_by_path(old.groups.get(g.0)?.path.as_str());
            state
                .volumes
                .restore(self.state.volumes.memory().regroup(regroup));
        }
        let _gate = self.published.gate();
        self.state = state;
        self.policy = policy;
        self.published.publish(
            &self.policy,
            (&self.state.usage, &self.state.queues),
            (&self.state.queue, self.state.priority_demand()),
        );
        info!(
            groups = self.policy.groups.len(),
            "ledger writer reloaded its policy"
        );
    }
}

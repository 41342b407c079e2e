//! Terms of office (issue 42, step 5): a `leadership::Role` watch drives them. On `Leader {
//! epoch }` a term opens the ledger as at start (the writer's start is a new incarnation),
//! builds the MSS adapter gated on the term, starts the dispatcher's loops and the writer's tick,
//! then publishes the office. On `Standby` or `Lost` it ends: **first** the office is withdrawn
//! (`OfficeSlot::withdraw`: no write is acknowledged from that instant, and the term's adapter
//! starts no MSS call), **then** the dispatcher's loops are aborted and awaited, then the writer
//! ends once the last ledger handle is gone. A later `Leader` is a new term at its epoch; a
//! `Leader` at another epoch without a `Lost` between ends the old term first.
//!
//! With no leadership configured the role is [`sole_leader`]: `Leader { epoch: 1 }` for the
//! process's life, its first term opened while the broker is built (so a ledger that cannot be
//! opened stops the start, as before). A role watch whose sender is dropped (its source ended)
//! is taken as `Standby` for good.
//!
//! A term that cannot open (its ledger will not load, its adapter will not build) leaves the
//! broker a standby and, when leadership is contended, resigns the epoch through the
//! [`Leadership`]'s `Resigner`, so another broker takes office instead of this one winning and
//! failing again.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tracing::{error, info, warn};

use super::StartupError;
use crate::clock::Clock;
use crate::config::Settings;
use crate::dispatcher::Dispatcher;
use crate::leadership::{Resigner, Role};
use crate::ledger::identity::DbFile;
use crate::ledger::{Ledger, LedgerOptions};
use crate::live_settings::LiveSettings;
use crate::metrics::Metrics;
use crate::office::mss_gate::{Gated, InOffice};
use crate::office::{Office, OfficeSlot};
use crate::readiness::Readiness;

/// The role of a broker with no leadership configured: the leader at epoch 1, for good (one
/// sender for the process, kept for its life and never sent on).
pub fn sole_leader() -> watch::Receiver<Role> {
    static SOLE: std::sync::OnceLock<watch::Sender<Role>> = std::sync::OnceLock::new();
    SOLE.get_or_init(|| watch::channel(Role::Leader { epoch: 1 }).0)
        .subscribe()
}

/// What drives the terms: the role as it changes, and (when leadership is contended) what gives
/// up an epoch whose term cannot open. A bare role watch is one with nothing to resign to.
pub struct Leadership {
    pub role: watch::Receiver<Role>,
    pub resigner: Option<Resigner>,
}

impl From<watch::Receiver<Role>> for Leadership {
    fn from(role: watch::Receiver<Role>) -> Self {
        Leadership {
            role,
            resigner: None,
        }
    }
}

/// What every term is built from: the process's parts.
pub(super) struct TermContext {
    pub settings: Settings,
    pub live: Arc<LiveSettings>,
    pub clock: Arc<dyn Clock>,
    pub metrics: Arc<Metrics>,
    /// The URL the HTTP adapter talks to (the embedded simulator's when it runs).
    pub http_url: String,
    /// Gives up an epoch whose term cannot open (None: leadership is not contended).
    pub resigner: Option<Resigner>,
}

/// An opened term, not yet started.
pub(super) struct Term {
    office: Arc<Office>,
    dispatcher: Dispatcher,
    cancels: mpsc::UnboundedReceiver<i64>,
    writer: std::thread::JoinHandle<()>,
}

/// A started term: its office published, its loops running.
pub(super) struct Running {
    office: Arc<Office>,
    tasks: JoinSet<()>,
    writer: std::thread::JoinHandle<()>,
}

/// The database file readiness checks (its identity and that it is writable): none on
/// PostgreSQL, where a lost server shows as the writer's failed statements and its stale
/// heartbeat.
fn db_file(options: &LedgerOptions) -> Result<Option<(PathBuf, DbFile)>, StartupError> {
    match options.url {
        Some(_) => Ok(None),
        None => Ok(Some((options.path.clone(), DbFile::of(&options.path)?))),
    }
}

impl TermContext {
    /// Open a term at `epoch`: the ledger (with the policy in force), the gated adapter, the
    /// dispatcher and readiness. Blocking (the ledger opens its file and loads its state).
    pub fn open(&self, epoch: i64) -> Result<Term, StartupError> {
        let options = super::ledger_options(&self.settings, self.metrics.clone(), epoch);
        let policy = self.live.get().policy.clone();
        let (ledger, writer) = Ledger::open(&options, policy, self.clock.clone())?;
        let term = InOffice::new();
        let inner = super::build_adapter(&self.settings, ledger.instance(), &self.http_url)?;
        let mss: Arc<dyn mss_adapters::MssAdapter> = Arc::new(Gated::new(inner, term.clone()));
        let (cancel_tx, cancels) = mpsc::unbounded_channel();
        let dispatcher = Dispatcher::new(
            ledger.clone(),
            mss.clone(),
            self.settings.mss.clone(),
            self.live.clone(),
            self.clock.clone(),
            self.metrics.clone(),
        );
        let readiness = Readiness::new(ledger.clone(), db_file(&options)?, dispatcher.last_call());
        let office = Office::new(epoch, ledger, mss, cancel_tx, readiness, term);
        Ok(Term {
            office: Arc::new(office),
            dispatcher,
            cancels,
            writer,
        })
    }
}

impl Term {
    /// Start the term's loops, then publish its office.
    pub(super) fn start(self, ctx: &TermContext, slot: &OfficeSlot) -> Running {
        let mut tasks = JoinSet::new();
        let ledger = self.office.ledger.clone();
        self.dispatcher.spawn(self.cancels, &mut tasks);
        tasks.spawn(crate::readiness::tick_loop(ledger.clone()));
        if !ctx.settings.policy.order.volumes() {
            tasks.spawn(super::rank_queue(ledger));
        }
        let epoch = self.office.epoch;
        ctx.metrics.took_office(epoch);
        slot.publish(self.office.clone());
        info!(epoch, "leading: this broker's term of office has started");
        Running {
            office: self.office,
            tasks,
            writer: self.writer,
        }
    }
}

impl Term {
    /// Give up a term opened but never started (its role changed while it opened): nothing
    /// was published and no loop ran; the writer ends with the last ledger handle, joined.
    async fn abandon(self) {
        let Term {
            office,
            dispatcher,
            cancels,
            writer,
        } = self;
        drop((office, dispatcher, cancels));
        let _ = tokio::task::spawn_blocking(move || writer.join()).await;
    }
}

impl Running {
    /// End the term: withdraw the office (no acknowledgement, no MSS call from here on), stop
    /// the loops, then wait for the writer, which ends with the last ledger handle.
    async fn end(self, ctx: &TermContext, slot: &OfficeSlot) {
        let epoch = self.office.epoch;
        slot.withdraw();
        let mut tasks = self.tasks;
        tasks.shutdown().await;
        drop(self.office);
        let writer = self.writer;
        let _ = tokio::task::spawn_blocking(move || writer.join()).await;
        ctx.metrics.left_office();
        info!(
            epoch,
            "the term of office has ended: its dispatcher and writer have stopped"
        );
    }
}

/// How often a contended term looks whether its writer's thread has ended.
const WRITER_CHECK: std::time::Duration = std::time::Duration::from_millis(100);

/// Terms as `role` says, starting with `running` (the first term, started before the server
/// serves its first request), until `stop` completes; then the term in force ends.
///
/// Where leadership is contended, a term whose writer stops (fenced, or its PostgreSQL
/// connection lost: it never reconnects and carries on) ends there and resigns its epoch, so
/// that a standby takes office rather than this broker leading with no writer; the next term
/// comes with the next `Leader`.
pub(super) async fn hold(
    ctx: Arc<TermContext>,
    slot: Arc<OfficeSlot>,
    mut role: watch::Receiver<Role>,
    mut running: Option<Running>,
    mut stop: oneshot::Receiver<()>,
) {
    // A role whose source has ended (a `Contender` gone) is no longer known: standing by.
    let mut ended = false;
    // Whether to follow the role: not after a term was given up, until the role changes.
    let mut follow_role = true;
    loop {
        if follow_role {
            let now = if ended {
                Role::Standby
            } else {
                *role.borrow_and_update()
            };
            slot.saw(now);
            running = follow(&ctx, &slot, now, running, &role).await;
        }
        follow_role = true;
        if ended {
            let _ = (&mut stop).await;
            break;
        }
        tokio::select! {
            changed = role.changed() => ended = changed.is_err(),
            _ = &mut stop => break,
            epoch = writer_stopped(&ctx, running.as_ref()) => {
                error!(epoch, "the ledger writer has stopped: ending the term of office");
                if let Some(r) = running.take() {
                    r.end(&ctx, &slot).await;
                }
                ctx.resign(epoch);
                follow_role = false;
            }
        }
        if ended {
            error!("the leadership role's source has ended: standing by until a restart");
        }
    }
    if let Some(r) = running {
        r.end(&ctx, &slot).await;
    }
}

/// Completes with the term's epoch once the writer of `running` has ended, where leadership
/// is contended (with none, the sole leader keeps its term as before: nothing to hand over to).
async fn writer_stopped(ctx: &TermContext, running: Option<&Running>) -> i64 {
    let Some(r) = running.filter(|_| ctx.resigner.is_some()) else {
        return std::future::pending().await;
    };
    while !r.writer.is_finished() {
        tokio::time::sleep(WRITER_CHECK).await;
    }
    r.office.epoch
}

/// The term in force once `role` is followed from `running`.
async fn follow(
    ctx: &Arc<TermContext>,
    slot: &OfficeSlot,
    role: Role,
    running: Option<Running>,
    current: &watch::Receiver<Role>,
) -> Option<Running> {
    let leading = role.leading();
    let running = match running {
        Some(r) if leading != Some(r.office.epoch) => {
            r.end(ctx, slot).await;
            warn!(
                ?role,
                "standby: /readyz and writes answer 503 until this broker leads again"
            );
            None
        }
        other => other,
    };
    match (leading, running) {
        (Some(epoch), None) => {
            let opening = ctx.clone();
            match tokio::task::spawn_blocking(move || opening.open(epoch)).await {
                // Opening takes a while (the ledger loads its state): a leadership lost
                // meanwhile must not start loops or publish an office at a stale epoch. (The
                // loop then follows the new role, which it has not yet seen.)
                Ok(Ok(term)) if current.borrow().leading() != Some(epoch) => {
                    warn!(
                        epoch,
                        "the leadership was lost while the term opened: not taking office"
                    );
                    term.abandon().await;
                    None
                }
                Ok(Ok(term)) => Some(term.start(ctx, slot)),
                Ok(Err(e)) => {
                    error!(epoch, error = %e, "cannot take office; staying a standby");
                    ctx.resign(epoch);
                    None
                }
                Err(e) => {
                    error!(epoch, error = %e, "opening the term failed; staying a standby");
                    ctx.resign(epoch);
                    None
                }
            }
        }
        (_, running) => running,
    }
}

impl TermContext {
    /// Give up `epoch`, whose term could not open, where leadership is contended.
    fn resign(&self, epoch: i64) {
        if let Some(r) = &self.resigner {
            warn!(
                epoch,
                "resigning the leadership: another broker may take office"
            );
            r.resign(epoch);
        }
    }
}

#[cfg(test)]
mod tests;

//! Which broker leads (issue 42, active/passive on PostgreSQL): every broker on a database runs
//! a [`Contender`], which holds a dedicated connection and tries the session advisory lock
//! [`LOCK_KEY`] (`pg_try_advisory_lock`) every `contend_every`. The one that gets it takes
//! office in the same session: it increments the leader epoch in the one-row table `leader`
//! (holder, advertised URL, since) and keeps the lock for as long as that session lives, with a
//! heartbeat on it. The others stay standbys and keep trying.
//!
//! The moment the leader's connection ends or a heartbeat fails (an error, a lost lock, another
//! epoch, or no answer within `heartbeat_timeout`), its [`Role`] becomes `Lost`: the broker
//! stops acknowledging and sending to the MSS at once. It never carries on as leader: it drops
//! that session and contends again like any standby, and should it win it leads at a new epoch
//! (its state loaded from the database anew).
//!
//! A leader that cannot open its term (its ledger will not load, its adapter will not build)
//! **resigns** ([`Resigner::resign`]): its session ends, so the lock is free at once, and it
//! waits `Timing::after_resigning` before contending again, so that a standby that can serve
//! wins meanwhile instead of the same broker taking office and failing in a loop.
//!
//! A lost leader may still have a write transaction in flight. [`fence`] closes that gap: every
//! write transaction calls it first; it reads the epoch `FOR SHARE` and refuses with
//! [`FenceError::Fenced`] when it is not the caller's, so the transaction aborts. The row lock
//! also orders the two brokers: a new leader's increment waits for the old one's fenced
//! transactions still open, and every transaction of the old epoch that fences after it sees
//! the new epoch and commits nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_postgres::{Client, GenericClient};

use crate::database_url::{BeyondLoopback, DatabaseUrl};

mod office;

#[cfg(test)]
pub(crate) use office::CREATE as LEADER_TABLE;
pub use office::{fence, FenceError};

/// The session advisory lock whose holder leads: the bytes of "mssbrokr" as a big-endian
/// `i64`, 7886774239119764338 (`pg_locks` shows it as classid 1836282722, objid 1919904626,
/// objsubid 1). Other software on the same database must not use this key.
pub const LOCK_KEY: i64 = i64::from_be_bytes(*b"mssbrokr");

/// What this broker is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Not leading, and never has in this process: contending.
    Standby,
    /// Leading at this epoch: may acknowledge and send to the MSS; every write fences on it.
    Leader { epoch: i64 },
    /// Led at this epoch and lost it: must stop acknowledging and sending; contending again
    /// (a win is a `Leader` at a higher epoch).
    Lost { epoch: i64 },
}

impl Role {
    /// The epoch to fence writes on, while leading.
    pub fn leading(&self) -> Option<i64> {
        match self {
            Role::Leader { epoch } => Some(*epoch),
            Role::Standby | Role::Lost { .. } => None,
        }
    }
}

/// Who contends: the name written as `holder` (host and process, say) and the URL a standby
/// may point clients to.
#[derive(Debug, Clone)]
pub struct Identity {
    pub holder: String,
    pub advertised_url: String,
}

/// How often a contender tries for the lock and beats its heart, how long a heartbeat may
/// take before the leader gives up, and how long a leader that resigned stands aside.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub contend_every: Duration,
    pub heartbeat_every: Duration,
    pub heartbeat_timeout: Duration,
    pub after_resigning: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            contend_every: Duration::from_secs(1),
            heartbeat_every: Duration::from_secs(1),
            heartbeat_timeout: Duration::from_secs(3),
            // Ten tries of a standby: it wins first unless it cannot connect either.
            after_resigning: Duration::from_secs(10),
        }
    }
}

/// A running contender; dropped, it stops and its session ends (releasing the lock).
pub struct Contender {
    role: watch::Receiver<Role>,
    resigner: Resigner,
    refusals: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

/// Gives up the leadership won at an epoch (see the module's doc): what a term that cannot
/// open calls. Cloneable; a resignation of an epoch no longer held is ignored.
#[derive(Debug, Clone)]
pub struct Resigner(mpsc::UnboundedSender<i64>);

impl Resigner {
    /// A resigner and the receiving end a contender (or a test) reads.
    pub fn channel() -> (Resigner, mpsc::UnboundedReceiver<i64>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Resigner(tx), rx)
    }

    /// Give up the leadership held at `epoch`.
    pub fn resign(&self, epoch: i64) {
        // The contender gone: nothing is held any more.
        let _ = self.0.send(epoch);
    }
}

impl Contender {
    /// Start contending for `url`'s leadership (on the current tokio runtime); a host beyond
    /// loopback is refused before any connection, as the ledger's is (no TLS yet).
    pub fn start(
        url: DatabaseUrl,
        identity: Identity,
        timing: Timing,
    ) -> Result<Contender, BeyondLoopback> {
        url.only_loopback()?;
        let (tx, role) = watch::channel(Role::Standby);
        let (resigner, resignations) = Resigner::channel();
        let refusals = Arc::new(AtomicU64::new(0));
        let run = Run {
            url,
            identity,
            timing,
            role: tx,
            resignations,
            refusals: Arc::clone(&refusals),
        };
        Ok(Contender {
            role,
            resigner,
            refusals,
            task: tokio::spawn(run.contend()),
        })
    }

    /// The role as it changes (Standby, Leader, Lost, Leader ...).
    pub fn role(&self) -> watch::Receiver<Role> {
        self.role.clone()
    }

    /// What gives up the leadership this contender wins (for the terms it drives).
    pub fn resigner(&self) -> Resigner {
        self.resigner.clone()
    }

    /// How many times the lock was found held by another (for tests and metrics).
    pub fn refusals(&self) -> u64 {
        self.refusals.load(Ordering::Relaxed)
    }
}

impl Drop for Contender {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The contender's task and what it reports through.
struct Run {
    url: DatabaseUrl,
    identity: Identity,
    timing: Timing,
    role: watch::Sender<Role>,
    resignations: mpsc::UnboundedReceiver<i64>,
    refusals: Arc<AtomicU64>,
}

/// Why a leader's hold ended.
enum Ended {
    /// The session failed: why.
    Lost(&'static str),
    /// The leader resigned its epoch.
    Resigned,
}

/// A connection and the task that drives it (finished: the connection has ended).
struct Session {
    client: Client,
    driver: JoinHandle<()>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

impl Run {
    async fn contend(mut self) {
        loop {
            let mut pause = self.timing.contend_every;
            if let Some(mut session) = self.connect().await {
                if let Some(epoch) = self.win(&mut session).await {
                    self.role.send_replace(Role::Leader { epoch });
                    match self.hold(&mut session, epoch).await {
                        Ended::Lost(why) => {
                            tracing::warn!(epoch, why, "leadership lost: standing by");
                        }
                        Ended::Resigned => {
                            tracing::warn!(
                                epoch,
                                "leadership resigned: this broker could not take office; \
                                 standing aside for another"
                            );
                            pause = self.timing.after_resigning;
                        }
                    }
                    self.role.send_replace(Role::Lost { epoch });
                }
                // The session ends here (dropped): a lost leader never carries on in it.
            }
            tokio::time::sleep(pause).await;
        }
    }

    async fn connect(&self) -> Option<Session> {
        match self.url.connect_async().await {
            Ok((client, driver)) => Some(Session { client, driver }),
            Err(e) => {
                tracing::debug!(url = %self.url, error = %e, "leadership: cannot connect");
                None
            }
        }
    }

    /// Try for the lock until it is ours (then take office: the new epoch) or the session
    /// fails (None).
    async fn win(&self, session: &mut Session) -> Option<i64> {
        loop {
            let tried = tokio::select! {
                _ = &mut session.driver => return None,
                r = office::try_lock(&session.client) => r,
            };
            match tried {
                Ok(true) => break,
                Ok(false) => {
                    self.refusals.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    tracing::debug!(error = %e, "leadership: trying the lock failed");
                    return None;
                }
            }
            tokio::select! {
                _ = &mut session.driver => return None,
                _ = tokio::time::sleep(self.timing.contend_every) => {}
            }
        }
        match office::take(&session.client, &self.identity).await {
            Ok(epoch) => {
                tracing::info!(epoch, holder = %self.identity.holder, "leadership taken");
                Some(epoch)
            }
            Err(e) => {
                tracing::warn!(error = %e, "leadership: taking office failed");
                None
            }
        }
    }

    /// Beat the heart until the session fails or the leader resigns `epoch`.
    async fn hold(&mut self, session: &mut Session, epoch: i64) -> Ended {
        let mut beat = tokio::time::interval(self.timing.heartbeat_every);
        loop {
            tokio::select! {
                _ = &mut session.driver => return Ended::Lost("the connection ended"),
                resigned = self.resignations.recv() => match resigned {
                    Some(e) if e == epoch => return Ended::Resigned,
                    // An earlier epoch's: nothing to give up. (None cannot come: the
                    // `Contender` keeps a sender, and dropping it aborts this task.)
                    Some(_) | None => continue,
                },
                _ = beat.tick() => {}
            }
            let check = office::heartbeat(&session.client, epoch);
            match tokio::time::timeout(self.timing.heartbeat_timeout, check).await {
                Ok(Ok(())) => {}
                Ok(Err(why)) => return Ended::Lost(why),
                Err(_) => return Ended::Lost("the heartbeat went unanswered"),
            }
        }
    }
}

/// The current leader as recorded (epoch, holder, advertised URL), if any broker has led.
pub async fn current(
    client: &impl GenericClient,
) -> Result<Option<(i64, String, String)>, tokio_postgres::Error> {
    office::current(client).await
}

#[cfg(test)]
mod tests;

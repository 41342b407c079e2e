//! A reload of the policy through the ledger: prepared off the writer from a snapshot, then
//! installed between two commits (see `writer/reload.rs`).

use std::sync::Arc;

use super::writer::{Command, PreparedReload, Step, Ticket};
use super::{Ledger, LedgerError};
use crate::domain::PolicySettings;

impl Ledger {
    /// Decide with `policy` from the next commit on: [`Ledger::prepare_reload`], then
    /// [`Ledger::install_reload`]. Refused, changing nothing, with `RemovedGroups` when it
    /// leaves out a group with unfinished requests.
    pub async fn reload(&self, policy: Arc<PolicySettings>) -> Result<(), LedgerError> {
        let prepared = self.prepare_reload(policy).await?;
        self.install_reload(prepared).await
    }

    /// Read the memory `policy` needs per request row off the writer, from a snapshot the
    /// writer takes between two commits (see `writer/reload.rs`): the writer goes on committing
    /// meanwhile, under the policy in force. Refused, changing nothing, when `policy` leaves out
    /// a group with unfinished requests.
    pub async fn prepare_reload(
        &self,
        policy: Arc<PolicySettings>,
    ) -> Result<PreparedReload, LedgerError> {
        let reads = self.reads.clone();
        let snapshot = tokio::task::spawn_blocking(move || reads.fresh())
            .await
            .map_err(|_| LedgerError::Closed)??;
        let ticket = Arc::new(Ticket);
        let claim = Arc::downgrade(&ticket);
        let (generation, snapshot) = self
            .call(|reply| {
                Command::Reload(Step::Snapshot {
                    snapshot,
                    ticket: claim,
                    reply,
                })
            })
            .await?;
        tokio::task::spawn_blocking(move || {
            PreparedReload::read(policy, (generation, snapshot, ticket))
        })
        .await
        .map_err(|_| LedgerError::Closed)?
    }

    /// Put a prepared reload in force from the next commit on: the writer brings it up to date
    /// with the rows committed since its snapshot (their number, not the queue's, is its cost).
    /// Refused, changing nothing, when a request committed meanwhile is in a group it leaves
    /// out, or the rows cannot be read.
    pub async fn install_reload(&self, prepared: PreparedReload) -> Result<(), LedgerError> {
        self.call(|reply| {
            Command::Reload(Step::Install {
                prepared: Box::new(prepared),
                reply,
            })
        })
        .await
    }
}

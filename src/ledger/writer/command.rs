//! The writer's commands and their answers: what a caller asks the writer to do ([`Command`],
//! every one of them writes), how each is applied inside the group's transaction
//! (`Txn::apply`), and the answer held until the transaction's fate is known ([`Reply`]: sent
//! on commit, replaced by the error on rollback), with the line logged for a committed command
//! of an HTTP request.

use std::sync::Arc;

use mss_adapters::{EventCursor, MssEvent};
use tokio::sync::oneshot;
use tracing::debug;

use super::reload;
use super::state::Txn;
use super::GroupCancel;
use crate::ledger::db::DbResult;
use crate::ledger::{
    Accepted, AfterSubmit, CancelOutcome, LedgerError, NewPriority, NewRequest, SubmittedTransfer,
};

/// What the writer is asked to do: every command writes (questions are answered off the
/// writer, see `ledger::live`).
pub(in crate::ledger) enum Command {
    Accept {
        items: Vec<NewRequest>,
        /// The HTTP request's id, logged with what the writer did for it.
        request_id: Option<Arc<str>>,
        reply: oneshot::Sender<Result<Vec<Admitted>, LedgerError>>,
    },
    Submitted {
        items: Vec<SubmittedTransfer>,
        reply: oneshot::Sender<Result<Vec<AfterSubmit>, LedgerError>>,
    },
    /// Answers whose first recording did not commit (`Ledger::submitted_late`).
    SubmittedLate {
        items: Vec<SubmittedTransfer>,
        reply: oneshot::Sender<Result<Vec<Option<AfterSubmit>>, LedgerError>>,
    },
    Rejected {
        id: i64,
        attempt: u32,
        reason: String,
        reply: oneshot::Sender<Result<(), LedgerError>>,
    },
    /// Submissions about to be sent: (id, attempt).
    Sending {
        items: Vec<(i64, u32)>,
        reply: oneshot::Sender<Result<Vec<(i64, bool)>, LedgerError>>,
    },
    /// First sends that could not connect to the MSS: (id, attempt).
    Unsent {
        items: Vec<(i64, u32)>,
        reply: oneshot::Sender<Result<(), LedgerError>>,
    },
    /// Sends the MSS deferred: (id, attempt), not sent again before `until_ms`.
    Deferred {
        items: Vec<(i64, u32)>,
        until_ms: i64,
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
        request_id: Option<Arc<str>>,
        reply: oneshot::Sender<Result<CancelOutcome, LedgerError>>,
    },
    Release {
        reply: oneshot::Sender<Result<usize, LedgerError>>,
    },
    Reprioritised {
        items: Vec<NewPriority>,
        reply: oneshot::Sender<Result<usize, LedgerError>>,
    },
    /// Lookups' answers: where requests without a volume lie (`Ledger::located`).
    Located {
        items: Vec<crate::ledger::VolumeFound>,
        reply: oneshot::Sender<Result<usize, LedgerError>>,
    },
    /// An operator's resend of an unsettled request (`ledger::unsettled`).
    ResendUnsettled {
        id: i64,
        reply: oneshot::Sender<Result<usize, LedgerError>>,
    },
    /// Cancel these requests of a group (one chunk of `cancel --group`).
    CancelListed {
        ids: Vec<i64>,
        reply: oneshot::Sender<Result<Vec<GroupCancel>, LedgerError>>,
    },
    /// A reload's step (its snapshot, its install): run between two commits, never in one
    /// (see `reload`).
    Reload(reload::Step),
    /// Tests: what the writer's memory holds that the rows do not say (empty: nothing).
    #[cfg(test)]
    Audit {
        reply: oneshot::Sender<Result<Vec<String>, LedgerError>>,
    },
    /// Nothing to do: keeps the writer's heartbeat when there is no traffic.
    Tick {
        reply: oneshot::Sender<Result<(), LedgerError>>,
    },
}

impl Command {
    /// The HTTP request this command works for, if it came from one (and the request it
    /// cancels).
    pub(super) fn traced(&self) -> Traced {
        match self {
            Command::Accept { request_id, .. } => request_id.clone().map(|r| (r, None)),
            Command::Cancel { request_id, id, .. } => request_id.clone().map(|r| (r, Some(*id))),
            _ => None,
        }
    }
}

/// How many new requests `commands` carry (each may become a row of `requests`).
pub(super) fn new_requests(commands: &[Command]) -> usize {
    (commands.iter())
        .map(|c| match c {
            Command::Accept { items, .. } => items.len(),
            _ => 0,
        })
        .sum()
}

/// One new request's answer: recorded, or refused on arrival.
pub(in crate::ledger) type Admitted = Result<Accepted, crate::ledger::Refused>;

/// A caller's answer, held until the transaction's fate is known.
pub(super) enum Reply {
    Accept(
        oneshot::Sender<Result<Vec<Admitted>, LedgerError>>,
        Vec<Admitted>,
    ),
    Submitted(
        oneshot::Sender<Result<Vec<AfterSubmit>, LedgerError>>,
        Vec<AfterSubmit>,
    ),
    Late(
        oneshot::Sender<Result<Vec<Option<AfterSubmit>>, LedgerError>>,
        Vec<Option<AfterSubmit>>,
    ),
    Done(oneshot::Sender<Result<(), LedgerError>>),
    Lost(oneshot::Sender<Result<bool, LedgerError>>, bool),
    Marked(
        oneshot::Sender<Result<Vec<(i64, bool)>, LedgerError>>,
        Vec<(i64, bool)>,
    ),
    Count(oneshot::Sender<Result<usize, LedgerError>>, usize),
    Cancel(
        oneshot::Sender<Result<CancelOutcome, LedgerError>>,
        CancelOutcome,
    ),
    Group(
        oneshot::Sender<Result<Vec<GroupCancel>, LedgerError>>,
        Vec<GroupCancel>,
    ),
    /// Answered already.
    Sent,
}

impl Reply {
    // A caller that went away (client disconnected) needs no answer: send errors are ignored.
    pub(super) fn ok(self) {
        let _ = match self {
            Reply::Accept(tx, v) => tx.send(Ok(v)).map_err(drop),
            Reply::Submitted(tx, v) => tx.send(Ok(v)).map_err(drop),
            Reply::Late(tx, v) => tx.send(Ok(v)).map_err(drop),
            Reply::Done(tx) => tx.send(Ok(())).map_err(drop),
            Reply::Lost(tx, v) => tx.send(Ok(v)).map_err(drop),
            Reply::Marked(tx, v) => tx.send(Ok(v)).map_err(drop),
            Reply::Count(tx, v) => tx.send(Ok(v)).map_err(drop),
            Reply::Cancel(tx, v) => tx.send(Ok(v)).map_err(drop),
            Reply::Group(tx, v) => tx.send(Ok(v)).map_err(drop),
            Reply::Sent => Ok(()),
        };
    }

    pub(super) fn err(self, message: &str) {
        let e = || LedgerError::Storage(message.to_string());
        let _ = match self {
            Reply::Accept(tx, _) => tx.send(Err(e())).map_err(drop),
            Reply::Submitted(tx, _) => tx.send(Err(e())).map_err(drop),
            Reply::Late(tx, _) => tx.send(Err(e())).map_err(drop),
            Reply::Done(tx) => tx.send(Err(e())).map_err(drop),
            Reply::Lost(tx, _) => tx.send(Err(e())).map_err(drop),
            Reply::Marked(tx, _) => tx.send(Err(e())).map_err(drop),
            Reply::Count(tx, _) => tx.send(Err(e())).map_err(drop),
            Reply::Cancel(tx, _) => tx.send(Err(e())).map_err(drop),
            Reply::Group(tx, _) => tx.send(Err(e())).map_err(drop),
            Reply::Sent => Ok(()),
        };
    }
}

/// A result and the reply it makes (with a stand-in answer when it failed: the reply then
/// carries the transaction's error).
fn reply<T, R>(result: DbResult<T>, failed: T, make: impl FnOnce(T) -> R) -> (R, DbResult<()>) {
    match result {
        Ok(v) => (make(v), Ok(())),
        Err(e) => (make(failed), Err(e)),
    }
}

impl Txn<'_, '_> {
    /// Apply one command inside the transaction. The reply carries the answer to send on commit.
    pub(super) fn apply(&mut self, command: Command) -> (Reply, DbResult<()>) {
        match command {
            Command::Accept { items, reply, .. } => {
                let (out, r) = self.each_in_turn(&items, Txn::accept_one);
                (Reply::Accept(reply, out), r)
            }
            Command::Submitted { items, reply } => {
                let (out, r) = self.submitted(&items);
                (Reply::Submitted(reply, out), r)
            }
            Command::SubmittedLate { items, reply } => {
                let (out, r) = self.each_in_turn(&items, Txn::submitted_late_one);
                (Reply::Late(reply, out), r)
            }
            Command::Rejected {
                id,
                attempt,
                reason,
                reply,
            } => (Reply::Done(reply), self.rejected(id, attempt, &reason)),
            Command::Sending { items, reply: tx } => {
                reply(self.mark_sending(&items), Vec::new(), |v| {
                    Reply::Marked(tx, v)
                })
            }
            Command::Unsent { items, reply } => (Reply::Done(reply), self.mark_unsent(&items)),
            Command::Deferred {
                items,
                until_ms,
                reason,
                reply,
            } => (Reply::Done(reply), self.deferred(&items, until_ms, &reason)),
            Command::Lost {
                id,
                attempt,
                reason,
                reply: tx,
            } => reply(self.resubmit_lost(id, attempt, &reason), false, |v| {
                Reply::Lost(tx, v)
            }),
            Command::Events {
                events,
                cursor,
                reply,
            } => {
                let (changed, r) = self.apply_events_then_cursor(&events, cursor.as_ref());
                (Reply::Count(reply, changed), r)
            }
            Command::Checked { ids, reply } => (Reply::Done(reply), self.confirm_in_flight(&ids)),
            Command::Located { items, reply: tx } => {
                reply(self.located(&items), 0, |n| Reply::Count(tx, n))
            }
            Command::Reprioritised { items, reply: tx } => {
                reply(self.reprioritised(&items), 0, |n| Reply::Count(tx, n))
            }
            Command::Release { reply: tx } => {
                reply(self.release_held(), 0, |n| Reply::Count(tx, n))
            }
            Command::ResendUnsettled { id, reply } => self.resend_unsettled(id, reply),
            Command::Tick { reply } => (Reply::Done(reply), Ok(())),
            Command::Cancel { id, reply: tx, .. } => {
                reply(self.cancel(id), CancelOutcome::NotFound, |o| {
                    Reply::Cancel(tx, o)
                })
            }
            Command::CancelListed { ids, reply: tx } => {
                reply(self.cancel_listed(&ids), Vec::new(), |v| {
                    Reply::Group(tx, v)
                })
            }
            #[cfg(test)]
            Command::Audit { reply } => refuse_audit_inside_a_transaction(reply),
            // `run` takes reloads out of a group before it is applied; one here is refused.
            Command::Reload(step) => {
                step.refuse("a reload cannot run inside a transaction");
                (Reply::Sent, Ok(()))
            }
        }
    }
}

impl Txn<'_, '_> {
    /// An operator's resend of unsettled request `id` (`ledger::unsettled::resend`).
    fn resend_unsettled(
        &mut self,
        id: i64,
        tx: oneshot::Sender<Result<usize, LedgerError>>,
    ) -> (Reply, DbResult<()>) {
        self.note(id);
        let resent = crate::ledger::unsettled::resend(self.tx, id, self.now);
        reply(resent, 0, |n| Reply::Count(tx, n))
    }

    /// Apply `one` to each item in turn, keeping each answer, up to the first failure (which
    /// fails the transaction).
    fn each_in_turn<I, T>(
        &mut self,
        items: &[I],
        mut one: impl FnMut(&mut Self, &I) -> DbResult<T>,
    ) -> (Vec<T>, DbResult<()>) {
        let mut out = Vec::with_capacity(items.len());
        let r = items
            .iter()
            .try_for_each(|i| one(self, i).map(|a| out.push(a)));
        (out, r)
    }

    /// Apply MSS events, then store the event cursor they came with (if any): how many changed
    /// a request.
    fn apply_events_then_cursor(
        &mut self,
        events: &[MssEvent],
        cursor: Option<&EventCursor>,
    ) -> (usize, DbResult<()>) {
        let mut changed = 0;
        let r = (events.iter())
            .try_for_each(|e| self.apply_event(e).map(|c| changed += usize::from(c)))
            .and_then(|()| cursor.map_or(Ok(()), |c| self.store_cursor(c)));
        (changed, r)
    }
}

/// `run` takes audits out of a group before it is applied; one here is refused.
#[cfg(test)]
fn refuse_audit_inside_a_transaction(
    reply: oneshot::Sender<Result<Vec<String>, LedgerError>>,
) -> (Reply, DbResult<()>) {
    let why = "an audit cannot run inside a transaction".to_string();
    let _ = reply.send(Err(LedgerError::Storage(why)));
    (Reply::Sent, Ok(()))
}

/// A command's HTTP request id, and the broker's id of the request it cancels.
pub(super) type Traced = Option<(Arc<str>, Option<i64>)>;

/// The writer's line for a committed command of an HTTP request: its id and the broker's ids of
/// the requests it created or cancelled (the dispatcher's lines name those).
pub(super) fn log_committed(reply: &Reply, traced: &Traced) {
    let Some((x_request_id, cancelled)) = traced else {
        return;
    };
    match reply {
        Reply::Accept(_, accepted) => {
            let ids: Vec<i64> = accepted.iter().flatten().map(|a| a.id).collect();
            debug!(x_request_id = %x_request_id, request_ids = ?ids, "requests committed");
        }
        Reply::Cancel(_, outcome) => {
            debug!(x_request_id = %x_request_id, request_id = cancelled, ?outcome,
                "cancellation committed")
        }
        _ => {}
    }
}

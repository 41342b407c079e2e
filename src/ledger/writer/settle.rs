//! What happens to a request after it is decided: the MSS took it, refused it, lost it, started,
//! finished or failed it (its events), a caller cancelled it; and the terminal step that settles
//! its charge ([`Txn::finalize`], `settle/finalize.rs`).

use mss_adapters::{EventCursor, EventKind, MssEvent};
use tracing::warn;

use super::coalesce::Carriers;
use super::state::Txn;
use crate::domain::{Class, RequestState};
use std::collections::{HashMap, HashSet};

use crate::ledger::db::{params, spelled, DbError, DbResult, Row, Spelled};
use crate::ledger::mss_key::{self, KeyOwner};
use crate::ledger::read::{parse_class, parse_state};
use crate::ledger::{AfterSubmit, CancelOutcome, NewPriority, SubmittedTransfer};
use crate::policy::transition::{after_failure, final_failure, AfterFailure, CarrierEnd};

mod finalize;

/// The columns finalising needs.
pub(super) struct Charged {
    state: RequestState,
    attempt: u32,
    group: String,
    access_mode: String,
    charged: i64,
    charged_bytes: i64,
    charged_ms: i64,
    class: Class,
    created_ms: i64,
    started_ms: Option<i64>,
    library: String,
    slots: u32,
    /// A station or operator asked to cancel it while it was at the MSS.
    cancel_requested: bool,
    /// What the queued-bytes tallies count it by.
    station: String,
    user: String,
    size_bytes: u64,
    /// Its key in the carrier map, if it is a read (`coalesce::Carriers`).
    carrier_key: Option<u64>,
    /// The MSS may hold its current attempt: it is being sent, or was sent without a readable
    /// answer (`sent_attempt`).
    maybe_at_mss: bool,
}

/// The columns of [`Charged`], in its order, to the one whose spelling differs between the
/// backends (whether the attempt was sent: `sent_attempt` is NULL until a send, so the
/// comparison is null-safe).
macro_rules! charged_columns {
    () => {
        "SELECT state, attempt, group_path, access_mode, charged, charged_bytes, \
         COALESCE(charged_ms, created_ms), class, created_ms, started_ms, library, \
         slots, cancel_requested, user_name, size_bytes, direction = 'read', file, \
         local_file, station, "
    };
}

/// What settling request `?1` reads of it (`Charged`).
const LOAD_CHARGED: Spelled = spelled!(
    (charged_columns!()),
    [is "sent_attempt", "attempt"],
    " FROM requests WHERE id = ?1",
);

/// What settling the requests of a list (`?1`) reads of each, and its id (column 20).
const LOAD_CHARGED_LIST: Spelled = spelled!(
    (charged_columns!()),
    [is "sent_attempt", "attempt"],
    ", id FROM requests WHERE ",
    [in_ids "id", "?1"],
);

impl Charged {
    /// Whether it waits on another request's transfer (a coalesced duplicate).
    pub(super) fn riding(&self) -> bool {
        self.state == RequestState::Riding
    }

    /// Whether it holds slots at the MSS (released and not finished).
    fn outstanding(&self) -> bool {
        matches!(
            self.state,
            RequestState::Accepted | RequestState::Submitted | RequestState::Running
        )
    }
}

/// What is stored of an error text (often the MSS's): a few hundred characters at most (room
/// for an adapter's message around the MSS text it already clipped).
pub(super) fn clip_error(text: &str) -> std::borrow::Cow<'_, str> {
    mss_adapters::answer::clip(text, 500)
}

/// A row of [`charged_columns`] as [`Charged`].
fn charged(r: &Row<'_>) -> DbResult<Charged> {
    Ok(Charged {
        state: parse_state(0, &r.get::<String>(0)?)?,
        attempt: r.get::<i64>(1)? as u32,
        group: r.get(2)?,
        access_mode: r.get(3)?,
        charged: r.get(4)?,
        charged_bytes: r.get(5)?,
        charged_ms: r.get(6)?,
        class: parse_class(7, &r.get::<String>(7)?)?,
        created_ms: r.get(8)?,
        started_ms: r.get(9)?,
        library: r.get(10)?,
        slots: r.get::<i64>(11)?.clamp(0, i64::from(u32::MAX)) as u32,
        cancel_requested: r.get::<i64>(12)? != 0,
        user: r.get(13)?,
        size_bytes: r.get::<i64>(14)?.max(0) as u64,
        carrier_key: (r.get::<bool>(15)?)
            .then(|| {
                Ok::<_, DbError>(Carriers::key(
                    &r.get::<String>(16)?,
                    r.get::<Option<String>>(17)?.as_deref(),
                ))
            })
            .transpose()?,
        station: r.get(18)?,
        maybe_at_mss: r.get(19)?,
    })
}

impl Txn<'_, '_> {
    /// `row` moves to `to`: the queued-bytes tallies follow.
    fn tally(&mut self, row: &Charged, to: RequestState) {
        let owner = super::queued::Owner {
            station: &row.station,
            user: &row.user,
        };
        let key = (row.group.as_str(), owner, row.size_bytes);
        self.queued_moved(key, Some(row.state), to);
    }

    pub(super) fn load_charged(&self, id: i64) -> DbResult<Option<Charged>> {
        (self.tx).query_opt(self.tx.dialect().pick(&LOAD_CHARGED), params![id], charged)
    }

    /// [`Txn::load_charged`] of every request of `ids` there is, in one statement, by id.
    pub(super) fn load_charged_list(&self, ids: &[i64]) -> DbResult<HashMap<i64, Charged>> {
        let ids = ids.to_vec();
        let sql = self.tx.dialect().pick(&LOAD_CHARGED_LIST);
        (self
            .tx
            .query_rows(sql, params![ids], |r| Ok((r.get(20)?, charged(r)?))))
        .map(|rows| rows.into_iter().collect())
    }

    /// A rider takes over its carrier's place: ready for the MSS as a request of its own.
    pub(super) fn took_transfer(&mut self, row: &Charged) {
        self.moved(row.class, Some(row.state), RequestState::Accepted);
        self.tally(row, RequestState::Accepted);
        self.occupy(&row.library, row.slots, true);
        self.ready = true;
    }

    /// A rider takes over its carrier's place in the broker's queue.
    pub(super) fn joined_queue(&mut self, row: &Charged) {
        self.tally(row, RequestState::Queued);
    }

    /// The MSS took these: [`Txn::submitted_one`] of each in turn, their rows read in one
    /// statement first (each answer changes only its own request's row).
    pub fn submitted(&mut self, items: &[SubmittedTransfer]) -> (Vec<AfterSubmit>, DbResult<()>) {
        let ids: Vec<i64> = items.iter().map(|i| i.id).collect();
        let mut rows = match self.load_charged_list(&ids) {
            Ok(rows) => rows,
            Err(e) => return (Vec::new(), Err(e)),
        };
        let mut seen = HashSet::with_capacity(items.len());
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            // A second answer for one request reads its row as the first left it.
            let again = !seen.insert(item.id);
            let row = match rows.remove(&item.id) {
                None if again => self.load_charged(item.id),
                row => Ok(row),
            };
            match row.and_then(|row| self.submitted_row(item, row)) {
                Ok(after) => out.push(after),
                Err(e) => return (out, Err(e)),
            }
        }
        (out, Ok(()))
    }

    pub fn submitted_one(&mut self, item: &SubmittedTransfer) -> DbResult<AfterSubmit> {
        let row = self.load_charged(item.id)?;
        self.submitted_row(item, row)
    }

    /// [`Txn::submitted_one`] given what [`Txn::load_charged`] read of its request.
    fn submitted_row(
        &mut self,
        item: &SubmittedTransfer,
        row: Option<Charged>,
    ) -> DbResult<AfterSubmit> {
        let Some(row) = row else {
            return Ok(AfterSubmit::Recorded);
        };
        if row.attempt != item.attempt {
            return Ok(AfterSubmit::Recorded);
        }
        let new_state = match row.state {
            RequestState::Accepted => RequestState::Submitted,
            other => other,
        };
        // checked_ms: this attempt's news (submitted_ms stays the first attempt's, for the
        // reports), so the stale sweep counts a retry's silence from its own submission.
        self.note(item.id);
        self.tx.update(
            "UPDATE requests SET state = ?2, mss_id = COALESCE(mss_id, ?3), \
             submitted_ms = COALESCE(submitted_ms, ?4), checked_ms = ?4 WHERE id = ?1",
            params![item.id, new_state.as_str(), item.mss_id, self.now],
        )?;
        self.moved(row.class, Some(row.state), new_state);
        self.tally(&row, new_state);
        Ok(if row.state == RequestState::Cancelled {
            AfterSubmit::CancelAtMss
        } else if row.cancel_requested {
            AfterSubmit::CancelRequested
        } else {
            AfterSubmit::Recorded
        })
    }

    /// An answer whose first recording did not commit ([`crate::ledger::Ledger::submitted_late`]):
    /// recorded as then, unless its request is still `accepted` at that attempt, which is sent
    /// again and recorded from that answer (`None`).
    pub fn submitted_late_one(
        &mut self,
        item: &SubmittedTransfer,
    ) -> DbResult<Option<AfterSubmit>> {
        let resent = self
            .load_charged(item.id)?
            .is_some_and(|row| row.attempt == item.attempt && row.state == RequestState::Accepted);
        if resent {
            return Ok(None);
        }
        self.submitted_one(item).map(Some)
    }

    pub fn rejected(&mut self, id: i64, attempt: u32, reason: &str) -> DbResult<()> {
        let Some(row) = self.load_charged(id)? else {
            return Ok(());
        };
        if row.attempt != attempt {
            return Ok(());
        }
        match row.state {
            RequestState::Accepted => {
                self.finalize(id, &row, RequestState::Failed, None, Some(reason))
            }
            // Cancelled while this send was out (`cancel_maybe_at_mss`): the MSS took nothing.
            RequestState::Submitted if self.cancelled_unnamed(id, &row)? => {
                self.finalize(id, &row, RequestState::Cancelled, None, Some(reason))
            }
            _ => Ok(()),
        }
    }

    /// Whether `row` is a request cancelled while the MSS might hold it and never named by
    /// an MSS answer (`cancel_maybe_at_mss`): what the MSS says of its send settles it.
    fn cancelled_unnamed(&self, id: i64, row: &Charged) -> DbResult<bool> {
        if !(row.cancel_requested && row.maybe_at_mss) {
            return Ok(false);
        }
        self.tx.query_one(
            "SELECT mss_id IS NULL FROM requests WHERE id = ?1",
            params![id],
            |r| r.get(0),
        )
    }

    /// These first sends of their attempts could not connect to the MSS: nothing reached it.
    /// The mark goes (a cancel is final at once again); one whose cancel was asked for while it
    /// was being sent (`cancel_maybe_at_mss`, no MSS id) ends cancelled now.
    pub fn mark_unsent(&mut self, items: &[(i64, u32)]) -> DbResult<()> {
        for &(id, attempt) in items {
            let Some(row) = self.load_charged(id)? else {
                continue;
            };
            if row.attempt != attempt || !row.maybe_at_mss {
                continue;
            }
            match row.state {
                RequestState::Accepted => {
                    self.note(id);
                    self.tx.execute(
                        "UPDATE requests SET sent_attempt = NULL WHERE id = ?1",
                        params![id],
                    )?;
                }
                RequestState::Submitted if self.cancelled_unnamed(id, &row)? => {
                    self.finalize(id, &row, RequestState::Cancelled, None, None)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The MSS lost an in-flight attempt: back to `accepted` as the next attempt, at once.
    pub fn resubmit_lost(&mut self, id: i64, attempt: u32, reason: &str) -> DbResult<bool> {
        let Some(row) = self.load_charged(id)? else {
            return Ok(false);
        };
        let in_flight = row.attempt == attempt
            && matches!(row.state, RequestState::Submitted | RequestState::Running);
        if !in_flight {
            return Ok(false);
        }
        if row.cancel_requested {
            // Cancelled while at the MSS, which lost it: nothing is left to cancel or resend.
            self.finalize(id, &row, RequestState::Cancelled, None, None)?;
            return Ok(true);
        }
        self.moved(row.class, Some(row.state), RequestState::Accepted);
        self.tally(&row, RequestState::Accepted);
        self.note(id);
        self.tx.execute(
            "UPDATE requests SET state = 'accepted', attempt = attempt + 1, mss_id = NULL, \
             next_attempt_ms = ?2, last_error = ?3 WHERE id = ?1",
            params![id, self.now, reason],
        )?;
        self.ready = true;
        self.carrier_ended(id, CarrierEnd::Retried)?;
        Ok(true)
    }

    /// Apply one MSS event. Events of another attempt, of unknown requests, or of requests
    /// already final change nothing, so a duplicated or replayed event is harmless. Returns
    /// whether it changed the request.
    pub fn apply_event(&mut self, event: &MssEvent) -> DbResult<bool> {
        let KeyOwner::Ours(id) = self.keys.owner(&event.key) else {
            self.unknown_key(event)?;
            return Ok(false);
        };
        let Some(row) = self.load_charged(id)? else {
            // A key of this ledger's latest incarnation beyond its last request: not one it
            // made (its requests are committed before they are sent).
            self.unknown_key(event)?;
            return Ok(false);
        };
        if row.attempt != event.attempt
            || row.state.is_terminal()
            || matches!(
                row.state,
                RequestState::Held | RequestState::Queued | RequestState::Riding
            )
        {
            return Ok(false);
        }
        match &event.kind {
            EventKind::Started => return self.started(id, &row),
            // Its caller cancelled while riders waited on the transfer (so the MSS was not
            // asked to cancel it): the riders take the result, the carrier is refunded.
            EventKind::Done { bytes } if row.cancel_requested && self.has_riders(id)? => {
                self.carrier_ended(id, CarrierEnd::Done(*bytes))?;
                self.finalize(id, &row, RequestState::Cancelled, None, None)?;
            }
            EventKind::Done { bytes } => {
                self.finalize(id, &row, RequestState::Done, Some(*bytes), None)?;
            }
            // Its caller cancelled while riders waited (so the MSS was not asked to cancel it),
            // and the transfer failed for good: the riders take that result (they fail), the
            // carrier is refunded. Resending the riders would ask the MSS again for a file it
            // just failed. (With attempts left, the arm below passes the transfer to a rider.)
            EventKind::Failed { reason, retryable }
                if row.cancel_requested
                    && self.after_failure(&row, *retryable) == AfterFailure::Final
                    && self.has_riders(id)? =>
            {
                let why = final_failure(self.retry, row.attempt, reason);
                self.carrier_ended(id, CarrierEnd::Failed(&why))?;
                self.finalize(id, &row, RequestState::Cancelled, None, None)?;
            }
            // A cancel was asked while it was at the MSS, which answers with a failure (EOS
            // lists a cancelled file with an error, not a cancelled state): cancelled, never
            // resent.
            EventKind::Failed { .. } if row.cancel_requested => {
                self.finalize(id, &row, RequestState::Cancelled, None, None)?;
            }
            EventKind::Failed { reason, retryable } => {
                self.failed(id, &row, reason, *retryable)?;
            }
            EventKind::Cancelled => {
                self.finalize(id, &row, RequestState::Cancelled, None, None)?;
            }
        }
        Ok(true)
    }

    /// An event for a key this ledger did not issue: a transfer of a request it lost (a backup
    /// restored after the request was acknowledged), or another broker's. Kept in
    /// `unknown_keys`, logged the first time, counted; never applied to a request.
    fn unknown_key(&mut self, event: &MssEvent) -> DbResult<()> {
        let what = match &event.kind {
            EventKind::Started => "started",
            EventKind::Done { .. } => "done",
            EventKind::Failed { .. } => "failed",
            EventKind::Cancelled => "cancelled",
        };
        let what = format!("{what} (attempt {})", event.attempt);
        let key = mss_adapters::answer::clip(&event.key, mss_adapters::answer::MAX_MESSAGE_CHARS);
        if mss_key::record_unknown(self.tx, &key, &what, self.now)? {
            warn!(mss_key = %key, event = %what, "the mss reports a transfer this ledger did not \
                                                  issue (a request lost with a restored backup?): kept in unknown_keys \
                                                  (mssbroker unknown-keys)");
        }
        self.unknown_keys += 1;
        Ok(())
    }

    /// The MSS started the request's attempt.
    fn started(&mut self, id: i64, row: &Charged) -> DbResult<bool> {
        if !matches!(row.state, RequestState::Accepted | RequestState::Submitted) {
            return Ok(false);
        }
        // started_ms is the first start: a report's wait is from queueing to first start;
        // checked_ms is this attempt's news, which the stale sweep counts from.
        self.note(id);
        self.tx.execute(
            "UPDATE requests SET state = 'running', started_ms = COALESCE(started_ms, ?2), \
             submitted_ms = COALESCE(submitted_ms, ?2), checked_ms = ?2 WHERE id = ?1",
            params![id, self.now],
        )?;
        if row.started_ms.is_none() {
            let over_priority = row.class != Class::Priority && self.st.priority_waiting > 0;
            self.report.started(
                &row.group,
                self.now,
                self.now - row.created_ms,
                over_priority,
            );
            // FBSNG in pass-through mode: the MSS started it (held and volumes modes count
            // releases).
            if !self.policy.order.held() && !self.policy.order.volumes() {
                if let Some(g) = self.policy.group_by_path(&row.group) {
                    self.fbsng_started(g);
                }
            }
        }
        self.moved(row.class, Some(row.state), RequestState::Running);
        self.tally(row, RequestState::Running);
        Ok(true)
    }

    /// The MSS failed the attempt: another attempt after a backoff, or failed for good
    /// ([`after_failure`]).
    fn failed(&mut self, id: i64, row: &Charged, reason: &str, retryable: bool) -> DbResult<()> {
        match self.after_failure(row, retryable) {
            AfterFailure::Retry { attempt, after } => {
                let due = self.now + after.as_millis() as i64;
                self.note(id);
                self.tx.execute(
                    "UPDATE requests SET state = 'accepted', attempt = ?2, \
                     mss_id = NULL, next_attempt_ms = ?3, last_error = ?4 WHERE id = ?1",
                    params![id, attempt, due, &*clip_error(reason)],
                )?;
                self.moved(row.class, Some(row.state), RequestState::Accepted);
                self.tally(row, RequestState::Accepted);
                self.ready = true;
                self.carrier_ended(id, CarrierEnd::Retried)
            }
            AfterFailure::Final => {
                let why = final_failure(self.retry, row.attempt, reason);
                self.finalize(id, row, RequestState::Failed, None, Some(&why))
            }
        }
    }

    /// What follows a failure of `row`'s attempt.
    fn after_failure(&self, row: &Charged, retryable: bool) -> AfterFailure {
        after_failure(self.retry, row.attempt, retryable)
    }

    pub fn store_cursor(&self, cursor: &EventCursor) -> DbResult<()> {
        let mut stmt = self.tx.prepare(
            "INSERT INTO meta(key, value) VALUES (?1, ?2) \
             ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        )?;
        stmt.execute(params!["mss_event_epoch", cursor.epoch])?;
        stmt.execute(params!["mss_event_after", cursor.after.to_string()])?;
        Ok(())
    }

    pub fn cancel(&mut self, id: i64) -> DbResult<CancelOutcome> {
        let Some(row) = self.load_charged(id)? else {
            return Ok(CancelOutcome::NotFound);
        };
        if row.state.is_terminal() {
            return Ok(CancelOutcome::AlreadyFinal(row.state));
        }
        let maybe_at_mss = match row.state {
            RequestState::Held | RequestState::Queued | RequestState::Riding => false,
            // Being sent, or sent without an answer that could be read: the MSS may hold it, so
            // its cancel goes there. Ended here, the MSS could transfer a file nobody is charged
            // for.
            RequestState::Accepted => row.maybe_at_mss,
            _ => true,
        };
        if !maybe_at_mss {
            self.finalize(id, &row, RequestState::Cancelled, None, None)?;
            return Ok(CancelOutcome::Cancelled);
        }
        if row.state == RequestState::Accepted {
            return self.cancel_maybe_at_mss(id, &row);
        }
        self.note(id);
        self.tx.execute(
            "UPDATE requests SET cancel_requested = 1 WHERE id = ?1",
            params![id],
        )?;
        Ok(CancelOutcome::Requested(row.state))
    }

    /// The cancel of an `accepted` request the MSS may hold (`sent_attempt`): it is taken as
    /// at the MSS (`submitted`, its MSS id unknown until an answer names it) and never sent
    /// again. The cancel goes to the MSS by its key; if the MSS does not hold it, the stale
    /// sweep's status finds it unknown and `resubmit_lost` ends it cancelled; if it does, its events or
    /// its status settle it (transferred: charged).
    fn cancel_maybe_at_mss(&mut self, id: i64, row: &Charged) -> DbResult<CancelOutcome> {
        let to = RequestState::Submitted;
        self.note(id);
        self.tx.execute(
            "UPDATE requests SET state = ?2, cancel_requested = 1, \
             submitted_ms = COALESCE(submitted_ms, ?3), checked_ms = ?3 WHERE id = ?1",
            params![id, to.as_str(), self.now],
        )?;
        self.moved(row.class, Some(row.state), to);
        self.tally(row, to);
        Ok(CancelOutcome::Requested(to))
    }

    /// The MSS confirmed these in-flight requests are still queued or running.
    pub fn confirm_in_flight(&self, ids: &[i64]) -> DbResult<()> {
        let mut stmt = self
            .tx
            .prepare("UPDATE requests SET checked_ms = ?2 WHERE id = ?1")?;
        for id in ids {
            self.note(*id);
            stmt.execute(params![id, self.now])?;
        }
        Ok(())
    }

    /// Record priorities the MSS took (for the attempt still at the MSS, not yet running).
    pub fn reprioritised(&self, items: &[NewPriority]) -> DbResult<usize> {
        let mut n = 0;
        for i in items {
            self.note(i.id);
            n += self.tx.execute(
                "UPDATE requests SET mss_priority = ?3, explain = ?4 \
                 WHERE id = ?1 AND attempt = ?2 AND state = 'submitted'",
                params![i.id, i.attempt, i.mss_priority, i.explain.to_text()],
            )?;
        }
        Ok(n)
    }
}

//! Duplicate reads coalesce (issue 16): a read of a file that another read is already
//! transferring, or about to (its *carrier*: `accepted`, `submitted` or `running`), does not
//! get a transfer of its own. It is recorded `riding` with `rides_on` naming the carrier,
//! charged to its own group at once (it costs the library nothing more, like a request riding
//! on a mounted volume), and settles with the carrier in the same transaction:
//!
//! - the carrier is done: every rider is done with the carrier's bytes, each charged to its
//!   own group;
//! - the carrier failed for good (or the MSS refused it): every rider fails with its error;
//! - the carrier retries (a retryable failure, a lost attempt): the riders wait on;
//! - the carrier is cancelled: its oldest rider takes its place as a request of its own
//!   (`accepted`, a new transfer) and the other riders ride on that one;
//! - a rider is cancelled: it alone is, and refunded;
//! - the carrier's caller cancels while the MSS has it: the transfer is not cancelled while
//!   riders wait on it (`read::cancelling` skips it); when it ends the riders take its outcome
//!   and the carrier is cancelled and refunded.
//!
//! A carrier matches on the same file and the same station-side copy (`local_file`, NULL
//! equal to NULL: encp writes one destination per transfer). A held or queued request is not
//! a carrier (it has no transfer yet), and a priority-class read rides only on a
//! priority-class carrier, so a duplicate never waits behind a lower class. Everything is in
//! the rows, so a restart needs no state of its own.
//!
//! The writer finds a carrier through [`Carriers`], a map in memory rather than an index on
//! the file name: an index kept for every read while it is in flight doubled the writer's
//! cost per request (docs/coalescing.md has the figures).

use std::collections::HashMap;

use rusqlite::{params, Connection, OptionalExtension};

use super::idempotency::fingerprint;
use super::state::Txn;
use crate::domain::{Class, RequestState};
use crate::ledger::read::parse_class;
use crate::ledger::NewRequest;
use crate::policy::order::is_fair;
use mss_adapters::Direction;

/// Which read may carry each file: the fingerprint of the file and its local copy to the
/// oldest read of it offered since it was decided. A hint, confirmed against the row before a
/// request rides, so a stale entry (after a rollback, or a fingerprint collision) costs a
/// ride, never a wrong one; an entry leaves when its read settles.
#[derive(Debug, Default)]
pub(super) struct Carriers(HashMap<u64, i64>);

impl Carriers {
    /// The map's key for a read of `file` to `local_file`.
    pub fn key(file: &str, local_file: Option<&str>) -> u64 {
        match local_file {
            Some(local) => fingerprint(file, local),
            None => !fingerprint(file, ""),
        }
    }

    /// `id`, a read of `key` just decided, carries it unless an older one does.
    pub fn offer(&mut self, key: u64, id: i64) {
        self.0.entry(key).or_insert(id);
    }

    /// `id` no longer carries `key`.
    pub fn forget(&mut self, key: u64, id: i64) {
        if self.0.get(&key) == Some(&id) {
            self.0.remove(&key);
        }
    }

    pub fn get(&self, key: u64) -> Option<i64> {
        self.0.get(&key).copied()
    }

    /// The reads in flight, from the rows (at start and at reload).
    pub fn load(conn: &Connection) -> rusqlite::Result<Carriers> {
        let mut stmt = conn.prepare(
            "SELECT id, file, local_file FROM requests WHERE state = 'accepted' \
             AND direction = 'read' UNION ALL SELECT id, file, local_file FROM requests \
             WHERE state IN ('submitted', 'running') AND direction = 'read' ORDER BY id",
        )?;
        let mut rows = stmt.query([])?;
        let mut carriers = Carriers::default();
        while let Some(r) = rows.next()? {
            let (file, local): (String, Option<String>) = (r.get(1)?, r.get(2)?);
            carriers.offer(Carriers::key(&file, local.as_deref()), r.get(0)?);
        }
        Ok(carriers)
    }
}

impl super::state::WriterState {
    /// The reads in flight, as loaded.
    pub fn with_carriers(mut self, carriers: Carriers) -> Self {
        self.carriers = carriers;
        self
    }
}

/// How a carrier's attempt ended, for its riders.
pub(super) enum CarrierEnd<'e> {
    Done(u64),
    Failed(&'e str),
    /// Cancelled without a result: the transfer passes to a rider.
    Cancelled,
}

impl<'e> CarrierEnd<'e> {
    /// How a carrier that moved to the terminal `state` ended.
    pub(super) fn of(state: RequestState, bytes: Option<u64>, error: Option<&'e str>) -> Self {
        match (state, bytes) {
            (RequestState::Done, Some(b)) => CarrierEnd::Done(b),
            (RequestState::Failed, _) => CarrierEnd::Failed(error.unwrap_or("failed")),
            _ => CarrierEnd::Cancelled,
        }
    }
}

impl Txn<'_, '_> {
    /// The request a new read of `item` rides on, if any.
    pub(super) fn carrier_for(&mut self, item: &NewRequest) -> rusqlite::Result<Option<i64>> {
        let Some(key) = carrier_key(item) else {
            return Ok(None);
        };
        let Some(id) = self.st.carriers.get(key) else {
            return Ok(None);
        };
        let class: Option<String> = self
            .tx
            .prepare_cached(
                "SELECT class FROM requests WHERE id = ?1 AND file = ?2 AND local_file IS ?3 \
                 AND direction = 'read' AND state IN ('accepted', 'submitted', 'running') \
                 AND cancel_requested = 0",
            )?
            .query_row(params![id, item.file, item.extras.local_file], |r| r.get(0))
            .optional()?;
        let Some(class) = class else {
            // Stale (settled in a rolled-back transaction, or another file's fingerprint).
            self.st.carriers.forget(key, id);
            return Ok(None);
        };
        let priority = parse_class(0, &class)? == Class::Priority;
        Ok((priority || is_fair(self.policy, item.group)).then_some(id))
    }

    /// `id`, a new request just decided, may carry its file.
    pub(super) fn offer_new(&mut self, item: &NewRequest, id: i64) {
        if let Some(key) = carrier_key(item) {
            self.st.carriers.offer(key, id);
        }
    }

    /// The riders waiting on `carrier`, oldest first.
    fn riders(&self, carrier: i64) -> rusqlite::Result<Vec<i64>> {
        let mut stmt = self.tx.prepare_cached(
            "SELECT id FROM requests WHERE rides_on = ?1 AND state = 'riding' ORDER BY id",
        )?;
        let rows = stmt.query_map([carrier], |r| r.get(0))?;
        rows.collect()
    }

    /// Whether any request rides on `carrier`.
    pub(super) fn has_riders(&self, carrier: i64) -> rusqlite::Result<bool> {
        Ok(!self.riders(carrier)?.is_empty())
    }

    /// `carrier` (a read when it has a `key`) settled: it carries its file no longer, and its
    /// riders follow.
    pub(super) fn carrier_left(
        &mut self,
        carrier: i64,
        key: Option<u64>,
        end: CarrierEnd,
    ) -> rusqlite::Result<()> {
        if let Some(key) = key {
            self.st.carriers.forget(key, carrier);
        }
        self.carrier_ended(carrier, end)
    }

    /// `carrier`'s attempt ended: its riders follow (see the module's rules).
    pub(super) fn carrier_ended(&mut self, carrier: i64, end: CarrierEnd) -> rusqlite::Result<()> {
        let riders = self.riders(carrier)?;
        let Some((&first, rest)) = riders.split_first() else {
            return Ok(());
        };
        match end {
            CarrierEnd::Done(bytes) => {
                for &id in &riders {
                    self.settle_rider(id, RequestState::Done, Some(bytes), None)?;
                }
            }
            CarrierEnd::Failed(why) => {
                let why = format!("its carrier, request {carrier}, failed: {why}");
                for &id in &riders {
                    self.settle_rider(id, RequestState::Failed, None, Some(&why))?;
                }
            }
            CarrierEnd::Cancelled => self.promote(first, rest)?,
        }
        Ok(())
    }

    /// A rider settles with its carrier (or is cancelled alone).
    fn settle_rider(
        &mut self,
        id: i64,
        state: RequestState,
        bytes: Option<u64>,
        error: Option<&str>,
    ) -> rusqlite::Result<()> {
        match self.load_charged(id)? {
            Some(row) if row.riding() => self.finalize(id, &row, state, bytes, error),
            _ => Ok(()),
        }
    }

    /// `first` becomes a request of its own, ready for the MSS; `rest` ride on it.
    fn promote(&mut self, first: i64, rest: &[i64]) -> rusqlite::Result<()> {
        let Some(row) = self.load_charged(first)? else {
            return Ok(());
        };
        let (file, local): (String, Option<String>) = self
            .tx
            .prepare_cached(
                "UPDATE requests SET state = 'accepted', rides_on = NULL, \
                 next_attempt_ms = ?2 WHERE id = ?1 RETURNING file, local_file",
            )?
            .query_row(params![first, self.now], |r| Ok((r.get(0)?, r.get(1)?)))?;
        self.took_transfer(&row);
        let key = Carriers::key(&file, local.as_deref());
        self.st.carriers.offer(key, first);
        let mut stmt = self
            .tx
            .prepare_cached("UPDATE requests SET rides_on = ?1 WHERE id = ?2")?;
        for id in rest {
            stmt.execute(params![first, id])?;
        }
        Ok(())
    }
}

/// The carrier map's key for `item`, if it is a read.
fn carrier_key(item: &NewRequest) -> Option<u64> {
    (item.direction == Direction::Read)
        .then(|| Carriers::key(&item.file, item.extras.local_file.as_deref()))
}

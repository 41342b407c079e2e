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

use rusqlite::{params, OptionalExtension};

use super::state::Txn;
use crate::domain::{Class, RequestState};
use crate::ledger::read::parse_class;
use crate::ledger::NewRequest;
use crate::policy::order::is_fair;
use mss_adapters::Direction;

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
    pub(super) fn carrier_for(&self, item: &NewRequest) -> rusqlite::Result<Option<i64>> {
        if item.direction != Direction::Read {
            return Ok(None);
        }
        let found: Option<(i64, String)> = self
            .tx
            .prepare_cached(
                "SELECT id, class FROM requests WHERE file = ?1 AND direction = 'read' \
                 AND state IN ('accepted', 'submitted', 'running') AND cancel_requested = 0 \
                 AND local_file IS ?2 ORDER BY id LIMIT 1",
            )?
            .query_row(params![item.file, item.extras.local_file], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()?;
        let Some((id, class)) = found else {
            return Ok(None);
        };
        let priority = parse_class(1, &class)? == Class::Priority;
        Ok((priority || is_fair(self.policy, item.group)).then_some(id))
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
        self.tx
            .prepare_cached(
                "UPDATE requests SET state = 'accepted', rides_on = NULL, \
                 next_attempt_ms = ?2 WHERE id = ?1",
            )?
            .execute(params![first, self.now])?;
        self.took_transfer(&row);
        let mut stmt = self
            .tx
            .prepare_cached("UPDATE requests SET rides_on = ?1 WHERE id = ?2")?;
        for id in rest {
            stmt.execute(params![first, id])?;
        }
        Ok(())
    }
}

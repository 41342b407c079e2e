//! Duplicate reads coalesce (issue 16): a read of a file that another read is already
//! transferring, about to, or waiting in the broker's queue to (its *carrier*: `queued`,
//! `accepted`, `submitted` or `running`), does not get a transfer of its own. It is recorded
//! `riding` with `rides_on` naming the carrier and charged to its own group when the carrier
//! is (at once if the carrier is decided, else when the carrier is released: it costs the
//! library nothing more, like a request riding on a mounted volume). It settles with the
//! carrier in the same transaction:
//!
//! - the carrier is done: every rider is done with the carrier's bytes, each charged to its
//!   own group;
//! - the carrier failed for good (or the MSS refused it): every rider fails with its error;
//! - the carrier retries (a retryable failure, a lost attempt): the riders wait on;
//! - the carrier is cancelled: its oldest priority-class rider, else its oldest rider, takes
//!   its place as a request of its own (a new transfer, or its place in the broker's queue)
//!   and the other riders ride on that one (so a priority-class rider never ends up riding on
//!   a fair-share carrier);
//! - a rider is cancelled: it alone is, and refunded;
//! - the carrier's caller cancels while the MSS has it: the transfer is not cancelled while
//!   riders wait on it (`read::cancelling` skips it); when it ends the riders take its outcome
//!   and the carrier is cancelled and refunded.
//!
//! A carrier matches on the same file and the same station-side copy (`local_file`, NULL
//! equal to NULL: encp writes one destination per transfer). A request held by a feasibility
//! cap is not a carrier (it may wait indefinitely), and a priority-class read rides only on a
//! priority-class carrier, so a duplicate never waits behind a lower class. Everything is in
//! the rows, so a restart needs no state of its own.
//!
//! The writer finds a carrier through [`Carriers`], a map in memory rather than an index on
//! the file name: an index kept for every read while it is in flight doubled the writer's
//! cost per request (docs/coalescing.md has the figures).

use std::collections::HashMap;

use crate::ledger::db::{params, spelled, Db, DbError, DbResult, Spelled};

use super::idempotency::fingerprint;
use super::state::{Charge, Txn, Undo};
use super::volumes::{read_place, PLACE_COLUMNS};
use crate::domain::order::Coalesce;
use crate::domain::{Class, RequestState};
use crate::ledger::candidate::{read_candidate, CANDIDATE_COLUMNS};
use crate::ledger::read::parse_class;
use crate::ledger::NewRequest;
use crate::policy::order::is_fair;
use crate::policy::transition::{
    may_carry, may_ride, riders_follow, take_over_order, CarrierEnd, CarrierView, RidersFollow,
};
use mss_adapters::Direction;

/// Which reads may carry each file: the fingerprint of the file and its local copy to every
/// read of it offered since it was decided or queued, oldest first. A read rides on the oldest
/// one it may ride on (a priority-class read only on a priority-class one), so a priority-class
/// read that could not ride on an older fair-share carrier carries the file for the ones after
/// it, and for every read once the fair-share one is gone. A hint, confirmed against the row
/// before a request rides, so a stale entry (a fingerprint collision) costs a ride, never a
/// wrong one; an entry leaves when its read settles. Changes go through
/// `WriterState::offer_carrier` and `forget_carrier`, which journal them, so a rolled-back
/// transaction neither leaves an offer nor loses a carrier.
#[derive(Debug, Default)]
pub(super) struct Carriers(HashMap<u64, Offered>);

/// The reads offered for one file, in id order: the oldest apart, so the usual single carrier
/// allocates nothing.
#[derive(Debug)]
struct Offered {
    oldest: i64,
    others: Vec<i64>,
}

impl Carriers {
    /// The map's key for a read of `file` to `local_file`.
    pub fn key(file: &str, local_file: Option<&str>) -> u64 {
        match local_file {
            Some(local) => fingerprint(file, local),
            None => !fingerprint(file, ""),
        }
    }

    /// `id`, a read of `key` just decided or queued, may carry it (after any older one); whether
    /// it was not offered already.
    pub fn offer(&mut self, key: u64, id: i64) -> bool {
        let Some(o) = self.0.get_mut(&key) else {
            self.0.insert(
                key,
                Offered {
                    oldest: id,
                    others: Vec::new(),
                },
            );
            return true;
        };
        if o.oldest == id {
            return false;
        }
        let other = id.max(o.oldest);
        o.oldest = id.min(o.oldest);
        match o.others.binary_search(&other) {
            Ok(_) => false,
            Err(at) => {
                o.others.insert(at, other);
                true
            }
        }
    }

    /// `id` no longer carries `key`; whether it was offered.
    pub fn forget(&mut self, key: u64, id: i64) -> bool {
        let Some(o) = self.0.get_mut(&key) else {
            return false;
        };
        if o.oldest == id {
            if o.others.is_empty() {
                self.0.remove(&key);
            } else {
                o.oldest = o.others.remove(0);
            }
            return true;
        }
        match o.others.binary_search(&id) {
            Ok(at) => {
                o.others.remove(at);
                true
            }
            Err(_) => false,
        }
    }

    /// The reads offered for `key`, oldest first.
    pub fn get(&self, key: u64) -> Vec<i64> {
        self.0
            .get(&key)
            .map(|o| {
                std::iter::once(o.oldest)
                    .chain(o.others.iter().copied())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every key and its reads (tests).
    #[cfg(test)]
    pub fn entries(&self) -> Vec<(u64, Vec<i64>)> {
        self.0.keys().map(|&k| (k, self.get(k))).collect()
    }

    /// The reads that may carry their file under `coalesce`, from the rows (at start and at
    /// reload): those in flight, and with `coalesce = "queued"` those queued in the broker.
    pub fn load(db: &Db<'_>, coalesce: Coalesce) -> DbResult<Carriers> {
        let queued = if coalesce == Coalesce::Queued {
            "UNION ALL SELECT id, file, local_file FROM requests \
             WHERE state = 'queued' AND direction = 'read'"
        } else {
            ""
        };
        let sql = format!(
            "SELECT id, file, local_file FROM requests WHERE state = 'accepted' \
             AND direction = 'read' {queued} UNION ALL SELECT id, file, local_file FROM requests \
             WHERE state IN ('submitted', 'running') AND direction = 'read' ORDER BY id"
        );
        let mut carriers = Carriers::default();
        db.for_each(&sql, params![], |r| {
            let (file, local): (String, Option<String>) = (r.get(1)?, r.get(2)?);
            carriers.offer(Carriers::key(&file, local.as_deref()), r.get(0)?);
            Ok::<_, DbError>(())
        })?;
        Ok(carriers)
    }
}

impl super::state::WriterState {
    /// The reads in flight, as loaded.
    pub fn with_carriers(mut self, carriers: Carriers) -> Self {
        self.carriers = carriers;
        self
    }

    /// `id` may carry `key` (journalled: a rollback takes the offer back).
    pub(super) fn offer_carrier(&mut self, key: u64, id: i64) {
        if self.carriers.offer(key, id) {
            self.journal(Undo::CarrierOffered(key, id));
        }
    }

    /// `id` carries `key` no longer (journalled: a rollback gives it back).
    pub(super) fn forget_carrier(&mut self, key: u64, id: i64) {
        if self.carriers.forget(key, id) {
            self.journal(Undo::CarrierForgot(key, id));
        }
    }
}

/// How a carrier that moved to the terminal `state` ended, for its riders (`decided`: it had
/// been released to the MSS side).
pub(super) fn carrier_end<'e>(
    state: RequestState,
    bytes: Option<u64>,
    error: Option<&'e str>,
    decided: bool,
) -> CarrierEnd<'e> {
    match (state, bytes) {
        (RequestState::Done, Some(b)) => CarrierEnd::Done(b),
        (RequestState::Failed, _) => CarrierEnd::Failed(error.unwrap_or("failed")),
        _ => CarrierEnd::Cancelled { decided },
    }
}

/// Carrier `?1`, if it still carries file `?2` to the copy `?3` (none: the adapter's own):
/// its class, and whether its class is decided (not queued).
const CARRIER: Spelled = spelled!(
    "SELECT class, state != 'queued' FROM requests WHERE id = ?1 AND file = ?2 AND ",
    [is "local_file", "?3"],
    " AND direction = 'read' AND state IN ('queued', 'accepted', 'submitted', 'running') \
     AND cancel_requested = 0",
);

impl Txn<'_, '_> {
    /// The request a new read of `item` rides on, if any, and what a rider needs to know of it
    /// (whether it is decided, released to the MSS side, or still queued in the broker).
    pub(super) fn carrier_for(
        &mut self,
        item: &NewRequest,
    ) -> DbResult<Option<(i64, CarrierView)>> {
        let Some(key) = carrier_key(item) else {
            return Ok(None);
        };
        let coalesce = self.policy.order.release.coalesce;
        if coalesce == Coalesce::Off {
            return Ok(None);
        }
        let fair = is_fair(self.policy, item.group);
        for id in self.st.carriers.get(key) {
            let found: Option<(String, bool)> = self.tx.query_opt(
                self.tx.dialect().pick(&CARRIER),
                params![id, item.file, item.extras.local_file],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            let Some((class, decided)) = found else {
                // Stale (another file's fingerprint, or a carrier its caller cancelled).
                self.st.forget_carrier(key, id);
                continue;
            };
            let carrier = CarrierView {
                fair: parse_class(0, &class)? != Class::Priority,
                decided,
            };
            // Else a later one may do: a priority-class carrier beside an older fair-share one.
            if may_ride(coalesce, fair, carrier) {
                return Ok(Some((id, carrier)));
            }
        }
        Ok(None)
    }

    /// `id`, a new request just decided or queued (`queued`), may carry its file.
    pub(super) fn offer_new(&mut self, item: &NewRequest, id: i64, queued: bool) {
        if let Some(key) = carrier_key(item).filter(|_| self.may_carry(queued)) {
            self.st.offer_carrier(key, id);
        }
    }

    /// `id`, just decided or queued (`queued`), may carry its file if it is a read (`read`: its
    /// file and local copy, as an UPDATE's RETURNING gives them).
    pub(super) fn offer_read(
        &mut self,
        id: i64,
        read: Option<(String, Option<String>)>,
        queued: bool,
    ) {
        if let Some((file, local)) = read.filter(|_| self.may_carry(queued)) {
            self.st
                .offer_carrier(Carriers::key(&file, local.as_deref()), id);
        }
    }

    /// Whether a read decided, or queued in the broker (`queued`), may carry its file
    /// ([`may_carry`]).
    fn may_carry(&self, queued: bool) -> bool {
        may_carry(self.policy.order.release.coalesce, queued)
    }

    /// The riders waiting on `carrier` in the order they stand to carry its file on
    /// (`transition::take_over_order`: the first takes over if the carrier is cancelled).
    fn riders(&self, carrier: i64) -> DbResult<Vec<i64>> {
        let rows = self.tx.query_rows(
            "SELECT id, class = 'priority' FROM requests WHERE rides_on = ?1 AND state = 'riding'",
            params![carrier],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        Ok(take_over_order(rows))
    }

    /// Whether any request rides on `carrier`.
    pub(super) fn has_riders(&self, carrier: i64) -> DbResult<bool> {
        Ok(!self.riders(carrier)?.is_empty())
    }

    /// `carrier` (a read when it has a `key`) settled: it carries its file no longer, and its
    /// riders follow.
    pub(super) fn carrier_left(
        &mut self,
        carrier: i64,
        key: Option<u64>,
        end: CarrierEnd,
    ) -> DbResult<()> {
        if let Some(key) = key {
            self.st.forget_carrier(key, carrier);
        }
        self.carrier_ended(carrier, end)
    }

    /// `carrier`, queued in the broker, was just decided and charged: so are its riders, each
    /// to its own group (a rider of a decided carrier was charged when it joined).
    pub(super) fn charge_riders(&mut self, carrier: i64) -> DbResult<()> {
        for id in self.riders(carrier)? {
            let row: Option<(String, String, i64)> = self.tx.query_opt(
                "SELECT group_path, access_mode, size_bytes FROM requests \
                 WHERE id = ?1 AND charged_ms IS NULL",
                params![id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )?;
            let Some((path, mode, size)) = row else {
                continue;
            };
            let size = size.max(0) as u64;
            let benefit = crate::policy::benefit(self.policy, &mode, size);
            self.note(id);
            self.tx.execute(
                "UPDATE requests SET charged = ?2, charged_bytes = ?3, charged_ms = ?4 \
                 WHERE id = ?1",
                params![id, benefit as i64, size as i64, self.now],
            )?;
            let charge = Charge {
                usage: i128::from(benefit),
                at_ms: self.now,
                bytes: i128::from(size),
                ..Charge::default()
            };
            self.charge(&path, charge);
        }
        Ok(())
    }

    /// `carrier`'s attempt ended as `end`: its riders follow by the shared rule
    /// (`policy::transition::riders_follow`, which the simulator's engine calls too).
    pub(super) fn carrier_ended(&mut self, carrier: i64, end: CarrierEnd) -> DbResult<()> {
        let follow = riders_follow(carrier, end);
        if follow == RidersFollow::WaitOn {
            return Ok(());
        }
        let riders = self.riders(carrier)?;
        let Some((&first, rest)) = riders.split_first() else {
            return Ok(());
        };
        match follow {
            RidersFollow::Settle {
                state,
                bytes,
                error,
            } => {
                for &id in &riders {
                    self.settle_rider(id, state, bytes, error.as_deref())?;
                }
            }
            RidersFollow::WaitOn => {}
            RidersFollow::FirstTakesOver {
                state: RequestState::Queued,
            } => self.promote_queued(first, rest)?,
            RidersFollow::FirstTakesOver { .. } => self.promote(carrier, first, rest)?,
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
    ) -> DbResult<()> {
        match self.load_charged(id)? {
            Some(row) if row.riding() => self.finalize(id, &row, state, bytes, error),
            _ => Ok(()),
        }
    }

    /// `first` becomes a request of its own, ready for the MSS; `rest` ride on it. If
    /// `carrier` was released in a volume's batch, `first` reads that volume in its flight
    /// (counted until it ends, and numbered with the carrier's batch, so a restart counts it
    /// too).
    fn promote(&mut self, carrier: i64, first: i64, rest: &[i64]) -> DbResult<()> {
        let Some(row) = self.load_charged(first)? else {
            return Ok(());
        };
        let (file, local) = self.unlink(first, RequestState::Accepted)?;
        if self.st.volume_join_flight(first, carrier) {
            self.note(first);
            self.tx.execute(
                "UPDATE requests SET (release_seq, release_lead) = \
                 (SELECT release_seq, release_lead FROM requests WHERE id = ?2) WHERE id = ?1",
                params![first, carrier],
            )?;
        }
        self.took_transfer(&row);
        self.took_over(first, rest, (&file, local.as_deref()))
    }

    /// `carrier`, queued in the broker, went to `held` at its release (its group over a
    /// feasibility cap): a held request carries nothing (it may wait indefinitely), so its
    /// riders go on as if it had been cancelled in the queue.
    pub(super) fn carrier_held(&mut self, carrier: i64) -> DbResult<()> {
        if !self.has_riders(carrier)? {
            return Ok(());
        }
        let (file, local): (String, Option<String>) = self.tx.query_one(
            "SELECT file, local_file FROM requests WHERE id = ?1",
            params![carrier],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        self.st
            .forget_carrier(Carriers::key(&file, local.as_deref()), carrier);
        self.carrier_ended(carrier, CarrierEnd::Cancelled { decided: false })
    }

    /// `first`'s carrier, still queued in the broker, was cancelled: `first` takes its place
    /// in the queue (not charged, like any queued request) and `rest` ride on it.
    fn promote_queued(&mut self, first: i64, rest: &[i64]) -> DbResult<()> {
        let Some(row) = self.load_charged(first)? else {
            return Ok(());
        };
        let (file, local) = self.unlink(first, RequestState::Queued)?;
        let sql =
            format!("SELECT {CANDIDATE_COLUMNS}, {PLACE_COLUMNS} FROM requests WHERE id = ?1");
        let queued = self.tx.query_one(&sql, params![first], |r| {
            Ok(read_candidate(self.policy, r)?.map(|c| (c, read_place(r))))
        })?;
        if let Some((c, place)) = queued {
            let (volume, position) = place?;
            self.enqueue(c, volume.as_deref(), position)?;
        }
        self.joined_queue(&row);
        self.took_over(first, rest, (&file, local.as_deref()))
    }

    /// `first` rides no longer: it moves to `state` (`accepted`: ready to submit now); its file
    /// and local copy.
    fn unlink(&mut self, first: i64, state: RequestState) -> DbResult<(String, Option<String>)> {
        self.note(first);
        self.tx.query_one(
            "UPDATE requests SET state = ?2, rides_on = NULL, next_attempt_ms = \
             CASE WHEN ?2 = 'accepted' THEN ?3 ELSE next_attempt_ms END WHERE id = ?1 \
             RETURNING file, local_file",
            params![first, state.as_str(), self.now],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
    }

    /// `first` carries its file now, for itself and for `rest`.
    fn took_over(
        &mut self,
        first: i64,
        rest: &[i64],
        (file, local): (&str, Option<&str>),
    ) -> DbResult<()> {
        self.st.offer_carrier(Carriers::key(file, local), first);
        let mut stmt = self
            .tx
            .prepare("UPDATE requests SET rides_on = ?1 WHERE id = ?2")?;
        for id in rest {
            self.note(*id);
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

#[cfg(test)]
mod tests {
    use super::Carriers;

    /// Every read offered for a file is kept, oldest first, whatever the order of the offers
    /// (a promoted rider is older than the read beside it); forgetting one leaves the others.
    #[test]
    fn the_map_keeps_every_offered_read_of_a_file_oldest_first() {
        let mut c = Carriers::default();
        assert!(c.offer(1, 5));
        assert!(!c.offer(1, 5), "offered once");
        assert!(c.offer(1, 7));
        assert!(c.offer(1, 3));
        assert!(!c.offer(1, 7));
        assert_eq!(c.get(1), [3, 5, 7]);
        assert!(c.forget(1, 3));
        assert!(!c.forget(1, 3));
        assert_eq!(c.get(1), [5, 7]);
        assert!(c.forget(1, 7));
        assert!(c.forget(1, 5));
        assert_eq!(c.get(1), [] as [i64; 0]);
        assert!(c.0.is_empty(), "no empty entry left");
    }
}

//! The terminal step ([`Txn::finalize`]): a request that is done, failed for good or cancelled
//! gets its final row (state, bytes, the benefit charged), its report hour, its tallies, its
//! riders' outcome and its place in the queues given up, and its group's charge settled: the
//! estimate taken back at its own date, the actual charged now (`policy::transition::settle`).

use crate::ledger::db::{params, DbResult};

use super::super::coalesce::carrier_end;
use super::super::state::{Charge, Txn};
use super::{clip_error, Charged};
use crate::domain::RequestState;
use crate::ledger::aggregates::HourRow;
use crate::policy;
use crate::policy::transition::{settle, Dated};

impl Txn<'_, '_> {
    /// Move a request to a terminal state and settle its charge: `actual` bytes replace the
    /// estimate (done), or the charge is refunded (failed, cancelled). The estimate is taken
    /// back at its own date; the actual is charged now, when it was received. A carrier's
    /// riders follow it ([`super::coalesce`]).
    pub(in crate::ledger::writer) fn finalize(
        &mut self,
        id: i64,
        row: &Charged,
        state: RequestState,
        actual_bytes: Option<u64>,
        error: Option<&str>,
    ) -> DbResult<()> {
        let (benefit, bytes) = self.benefit_of(row, actual_bytes);
        self.write_final_row(id, state, (benefit, bytes), error)?;
        self.report_final(row, state, (benefit, bytes));
        self.moved(row.class, Some(row.state), state);
        self.tally(row, state);
        self.st.free_output(id);
        self.key_finished(id)?;
        // Riders first: a promoted one joins this request's volume flight before it leaves.
        if row.outstanding() || matches!(row.state, RequestState::Queued | RequestState::Held) {
            let end = carrier_end(state, actual_bytes, error, row.outstanding());
            self.carrier_left(id, row.carrier_key, end)?;
        }
        if row.outstanding() {
            self.occupy(&row.library, row.slots, false);
            if self.policy.order.volumes() {
                self.st.volume_request_finished(self.policy, id, self.now);
            }
        }
        if row.state == RequestState::Queued {
            self.st.dequeue(id);
            self.st.dequeue_volume(id);
        }
        let actual = actual_bytes.map(|_| (benefit, bytes));
        self.settle_final_charge(row, actual);
        Ok(())
    }

    /// The benefit and bytes `actual_bytes` earn `row` (none when nothing was transferred).
    /// What the MSS reports is not bounded by `limits.max_size_bytes`: a per-request figure
    /// stays an i64 column, so an absurd report saturates instead of wrapping negative.
    fn benefit_of(&self, row: &Charged, actual_bytes: Option<u64>) -> (i64, i64) {
        match actual_bytes {
            Some(b) => {
                let b = b.min(i64::MAX as u64);
                let benefit = policy::benefit(self.policy, &row.access_mode, b);
                (i64::try_from(benefit).unwrap_or(i64::MAX), b as i64)
            }
            None => (0, 0),
        }
    }

    /// The request's row in its terminal `state`, charged `benefit` for `bytes` now.
    fn write_final_row(
        &self,
        id: i64,
        state: RequestState,
        (benefit, bytes): (i64, i64),
        error: Option<&str>,
    ) -> DbResult<()> {
        self.note(id);
        self.tx.execute(
            "UPDATE requests SET state = ?2, charged = ?3, charged_bytes = ?4, \
             bytes_done = ?5, finished_ms = ?6, last_error = COALESCE(?7, last_error), \
             charged_ms = ?8 WHERE id = ?1",
            params![
                id,
                state.as_str(),
                benefit,
                bytes,
                bytes,
                self.now,
                error.map(clip_error).as_deref(),
                // Charged now when charged at all (computed here, not as `CASE WHEN ?3 != 0`:
                // PostgreSQL would type `?3` both BIGINT and INTEGER there).
                (benefit != 0).then_some(self.now)
            ],
        )?;
        Ok(())
    }

    /// The request's end in its group's report hour.
    fn report_final(&mut self, row: &Charged, state: RequestState, (benefit, bytes): (i64, i64)) {
        self.report.add(
            &row.group,
            self.now,
            HourRow {
                done: i64::from(state == RequestState::Done),
                failed: i64::from(state == RequestState::Failed),
                cancelled: i64::from(state == RequestState::Cancelled),
                held_cancelled: i64::from(row.state == RequestState::Held),
                bytes_done: i128::from(bytes),
                benefit_done: i128::from(benefit),
                ..HourRow::default()
            },
        );
    }

    /// The group's usage settled: the estimate taken back at its own date, and the `actual`
    /// (benefit, bytes), when there is one, charged now ([`settle`]).
    fn settle_final_charge(&mut self, row: &Charged, actual: Option<(i64, i64)>) {
        let charged = Dated {
            benefit: row.charged.max(0) as u64,
            at_ms: row.charged_ms,
        };
        let settled = settle(charged, actual.map(|(benefit, _)| benefit as u64), self.now);
        let refund = Charge {
            usage: -i128::from(settled.refund.benefit),
            at_ms: settled.refund.at_ms,
            bytes: -i128::from(row.charged_bytes),
            pending: -1,
            held: -i64::from(row.state == RequestState::Held),
        };
        self.charge(&row.group, refund);
        if let (Some(dated), Some((_, bytes))) = (settled.actual, actual) {
            let actual = Charge {
                usage: i128::from(dated.benefit),
                at_ms: dated.at_ms,
                bytes: i128::from(bytes),
                ..Charge::default()
            };
            self.charge(&row.group, actual);
        }
    }
}

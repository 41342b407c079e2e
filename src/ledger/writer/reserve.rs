//! The drive reservation for the priority classes in `serve` (`policy::reserve`, as the
//! simulator's engine applies it): what the writer sees of them (priority requests queued at the
//! MSS, the last time one moved) goes to [`reservation`], whose answer caps the `held` mode's
//! free slots (`release.rs`) and the `volumes` mode's volumes in flight (`volumes.rs`).

use crate::ledger::db::{params, DbResult};

use super::state::Txn;
use crate::policy::reserve::{reservation, Reservation};

impl Txn<'_, '_> {
    /// What the reservation holds back at `library` now.
    pub fn reservation(&self, library: &str) -> Reservation {
        let demand = self.st.priority_demand();
        reservation(
            &self.policy.order.release.reserve,
            library,
            demand,
            self.now,
        )
    }

    /// Slots priority-class requests take at `library` (accepted, submitted, running): only
    /// asked while a reservation holds, through the partial indexes on those states.
    pub fn priority_slots(&self, library: &str) -> DbResult<u32> {
        let n: i64 = self.tx.query_one(
            "SELECT COALESCE(SUM(slots), 0) FROM (\
             SELECT slots FROM requests WHERE state = 'accepted' AND class = 'priority' \
             AND library = ?1 UNION ALL \
             SELECT slots FROM requests WHERE state IN ('submitted', 'running') \
             AND class = 'priority' AND library = ?1) AS p",
            params![library],
            |r| r.get(0),
        )?;
        Ok(n.clamp(0, i64::from(u32::MAX)) as u32)
    }

    /// The earliest end of a reservation window over `libraries` (when the release must look
    /// again without news).
    pub fn reserve_due(&self, libraries: &[String]) -> Option<i64> {
        (libraries.iter())
            .filter_map(|l| self.reservation(l).until_ms)
            .min()
    }
}

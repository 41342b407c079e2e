//! Holding and releasing: held requests (a feasibility cap) are released oldest first per group
//! when their group is back under every cap; queued requests (the held release mode) are
//! released while their library has free slots, each the policy's first at that instant.

use crate::ledger::db::{params, DbResult};
use tracing::warn;

use super::state::{Charge, Txn};
use super::volumes::{read_place, PLACE_COLUMNS};
use crate::domain::GroupId;
use crate::ledger::aggregates::HourRow;
use crate::ledger::candidate::{read_candidate, CANDIDATE_COLUMNS};

use crate::policy::order::{Candidate, Placement, ShareSnapshot};
use crate::shares::limits::held_by;

/// A row's volume and tape position.
type Place = (Option<String>, Option<u64>);

impl Txn<'_, '_> {
    /// Release held requests, oldest first per group, while their group is under every
    /// feasibility cap on its path; each is decided and charged as it is released. Returns how
    /// many.
    pub fn release_held(&mut self) -> DbResult<usize> {
        let waiting: Vec<GroupId> = (self.st.held.iter().enumerate())
            .filter(|(_, &h)| h > 0)
            .map(|(i, _)| GroupId(i))
            .collect();
        let mut released = 0;
        for g in waiting {
            released += self.release_group(g)?;
        }
        Ok(released)
    }

    /// Release group `g`'s held requests, 64 rows at a time, until one is over a cap.
    fn release_group(&mut self, g: GroupId) -> DbResult<usize> {
        let path = self.policy.group(g).path.to_string();
        let mut released = 0;
        loop {
            let batch: Vec<(Candidate, Place)> = self
                .tx
                .query_rows(
                    &format!(
                        "SELECT {CANDIDATE_COLUMNS}, {PLACE_COLUMNS} FROM requests \
                         WHERE state = 'held' AND group_path = ?1 ORDER BY id LIMIT 64"
                    ),
                    params![path],
                    |r| {
                        let place = read_place(r)?;
                        Ok(read_candidate(self.policy, r)?.map(|c| (c, place)))
                    },
                )?
                .into_iter()
                .flatten()
                .collect();
            if batch.is_empty() {
                // The count said some were held but none are: put the count right rather than
                // hold the group's new requests behind nothing.
                let stale = self.st.held.get(g.0).copied().unwrap_or(0);
                if stale > 0 {
                    warn!(group = %path, count = stale, "held count without held requests; reset");
                    self.charge(&path, Charge::held(-(stale as i64)));
                }
                return Ok(released);
            }
            for (c, place) in batch {
                if held_by(self.policy, &self.st.usage.at(self.now), g, c.benefit).is_some() {
                    return Ok(released);
                }
                self.release_one(&path, c, place)?;
                released += 1;
            }
        }
    }

    /// One held request released: into the broker's queue (held and volumes release modes:
    /// decided and charged when the queue releases it), or decided and charged now.
    fn release_one(&mut self, path: &str, c: Candidate, place: Place) -> DbResult<()> {
        let released = HourRow {
            released: 1,
            ..HourRow::default()
        };
        if self.policy.order.held() || self.policy.order.volumes() {
            self.note(c.id);
            let read: Option<(String, Option<String>)> = self.tx.query_one(
                "UPDATE requests SET state = 'queued', held_reason = NULL, \
                 released_ms = ?2 WHERE id = ?1 RETURNING direction = 'read', file, local_file",
                params![c.id, self.now],
                |r| Ok(r.get::<bool>(0)?.then_some((r.get(1)?, r.get(2)?))),
            )?;
            // Queued in the broker, it may carry its file (a restart forgot it while held).
            self.offer_read(c.id, read, true);
            self.charge(path, Charge::held(-1));
            self.report.add(path, self.now, released);
            self.enqueue(c, place.0.as_deref(), place.1)?;
        } else {
            let p = self.placement(&c);
            self.decide_and_charge(&c, &p)?;
            self.charge(path, Charge::held(-1));
            self.report.add(path, self.now, released.decided(p.class));
        }
        Ok(())
    }

    /// Decide a released request at `p`, charge it and make it ready to submit.
    pub(super) fn decide_and_charge(&mut self, c: &Candidate, p: &Placement) -> DbResult<()> {
        self.note(c.id);
        let read: Option<(String, Option<String>)> = self.tx.query_one(
            "UPDATE requests SET state = 'accepted', class = ?2, mss_priority = ?3, \
             charged = ?4, charged_bytes = ?5, charged_ms = ?6, held_reason = NULL, \
             released_ms = ?6, explain = ?7 WHERE id = ?1 \
             RETURNING direction = 'read', file, local_file",
            params![
                c.id,
                p.class.as_str(),
                p.mss_priority,
                c.benefit as i64,
                c.size_bytes as i64,
                self.now,
                super::explain_text(p),
            ],
            |r| Ok(r.get::<bool>(0)?.then_some((r.get(1)?, r.get(2)?))),
        )?;
        self.offer_read(c.id, read, false);
        let path = self.policy.group(c.group).path.to_string();
        let charge = Charge {
            usage: i128::from(c.benefit),
            at_ms: self.now,
            bytes: i128::from(c.size_bytes),
            ..Charge::default()
        };
        self.charge(&path, charge);
        self.occupy(&c.library, c.slots, true);
        self.ready = true;
        self.charge_riders(c.id)
    }

    /// Release queued requests while their library has free slots (all of them when the mode
    /// is no longer `held`), each the policy's first at this instant; each is decided and
    /// charged as it goes, so the next choice sees it. A request whose group is now over a
    /// feasibility cap goes back to `held`.
    pub fn release_queued(&mut self) -> DbResult<usize> {
        let mut released = 0;
        if self.policy.order.volumes() {
            released += self.release_volumes()?;
        }
        if self.st.queue.is_empty() {
            return Ok(released);
        }
        for lib in self.st.queue.libraries() {
            while let Some(free) = self.free_slots(&lib)? {
                let order = &self.policy.order;
                let pick = {
                    let usage = self.st.usage.at(self.now);
                    let standing = ShareSnapshot::new(self.policy, usage, &self.st.queues);
                    self.st.queue.pick(order, &standing, &lib, free, self.now)
                };
                let Some(pick) = pick else { break };
                released += usize::from(self.release_pick(pick)?);
            }
        }
        Ok(released)
    }

    /// Slots free for fair-share work at library `lib` (`None`: none): in held mode what the
    /// limit leaves, less the drives reserved for the priority classes (`policy::reserve`).
    fn free_slots(&self, lib: &str) -> DbResult<Option<u32>> {
        let order = &self.policy.order;
        let used = self.st.outstanding.get(lib).copied().unwrap_or(0);
        let free = if order.held() {
            let limit = order.release.limit_of(lib);
            let reserve = self.reservation(lib);
            let priority = if reserve.holds() {
                self.priority_slots(lib)?
            } else {
                0
            };
            reserve.fair_free(limit, used, priority)
        } else {
            u32::MAX.saturating_sub(used)
        };
        Ok(Some(free).filter(|&free| free > 0))
    }

    /// Release the queue's pick (or hold it again if its group is now over a cap). Returns
    /// whether it was released.
    fn release_pick(&mut self, pick: crate::policy::queue::Pick) -> DbResult<bool> {
        let c = &pick.candidate;
        self.st.dequeue(c.id);
        let path = self.policy.group(c.group).path.to_string();
        if let Some(reason) = held_by(self.policy, &self.st.usage.at(self.now), c.group, c.benefit)
        {
            self.note(c.id);
            self.tx.execute(
                "UPDATE requests SET state = 'held', held_reason = ?2 WHERE id = ?1",
                params![c.id, reason],
            )?;
            self.charge(&path, Charge::held(1));
            self.carrier_held(c.id)?;
            return Ok(false);
        }
        self.decide_and_charge(c, &pick.placement)?;
        let row = HourRow::default();
        self.report
            .add(&path, self.now, row.decided(pick.placement.class));
        if self.policy.order.held() {
            self.fbsng_started(c.group);
        }
        for &id in &pick.passed_over {
            self.note(id);
            self.tx.execute(
                "UPDATE requests SET passed = passed + 1 WHERE id = ?1",
                params![id],
            )?;
            self.st.passed_over(id);
        }
        Ok(true)
    }
}

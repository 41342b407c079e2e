//! The part of the writer's memory that grows with the request rows ([`RowState`]): the held
//! queue, the volume queue's waiting requests, the queued-bytes tallies, the slots outstanding,
//! the priority requests waiting at the MSS and the carriers. Read whole from the rows (at
//! start, or off the writer from a reload's snapshot), and brought up to date one row at a time
//! ([`RowState::replace`]: a row's part as it was taken out, as it is now put in), which is how a
//! reload catches up with what was committed after its snapshot.

use std::collections::HashMap;

use super::coalesce::Carriers;
use super::queued::{Owner, QueuedBytes};
use super::volumes::{self, read_place, PLACE_COLUMNS};
use crate::domain::order::Coalesce;
use crate::domain::{GroupKind, PolicySettings};
use crate::ledger::candidate::{read_candidate, CANDIDATE_COLUMNS};
use crate::ledger::db::{params, Db};
use crate::ledger::LedgerError;
use crate::policy::order::Candidate;
use crate::policy::queue::HeldQueue;
use crate::policy::volumes::VolumeQueue;

/// The writer's memory that is one entry (or one sum) per request row, for one policy.
pub(super) struct RowState {
    /// The held mode's queue (rows `queued`; empty in the volumes mode).
    pub queue: HeldQueue,
    /// The volumes mode's waiting requests (rows `queued`); no volume in flight yet (those are
    /// read with the rest of the memory, `volumes::add_flights`).
    pub volumes: VolumeQueue,
    pub queued: QueuedBytes,
    /// Slots per library of the rows `accepted`, `submitted`, `running`.
    pub outstanding: HashMap<String, u32>,
    /// Priority-class rows `submitted`.
    pub priority_waiting: i64,
    pub carriers: Carriers,
}

impl RowState {
    /// Read from the rows, as start-up does.
    pub fn read(db: &Db<'_>, policy: &PolicySettings) -> Result<RowState, LedgerError> {
        Ok(RowState {
            queue: super::load::load_held_queue(db, policy)?,
            volumes: volumes::load_waiting(db, policy)?,
            queued: super::load::load_queued_bytes(db, policy)?,
            outstanding: super::load::load_outstanding(db)?,
            // Uses the partial index on in-flight requests.
            priority_waiting: db.query_one(
                "SELECT COUNT(*) FROM requests WHERE state IN ('submitted', 'running') \
                 AND state = 'submitted' AND class = 'priority'",
                params![],
                |r| r.get(0),
            )?,
            carriers: Carriers::load(db, policy.order.release.coalesce)?,
        })
    }

    /// Row `id` changed between `was` and `now` (each read with [`Row::read`]: `None`, no such
    /// row): its part as it was comes out, its part as it is goes in.
    pub fn replace(&mut self, policy: &PolicySettings, was: Option<&Row>, now: Option<&Row>) {
        if let Some(r) = was {
            self.count(policy, r, false);
        }
        if let Some(r) = now {
            self.count(policy, r, true);
        }
    }

    /// Put `r`'s part in (`add`) or take it out, as each loader counts a row.
    fn count(&mut self, policy: &PolicySettings, r: &Row, add: bool) {
        let state = r.state.as_str();
        if let (Some(c), "queued") = (&r.candidate, state) {
            let settings = &policy.order.release.volumes;
            match (policy.order.volumes(), add) {
                (true, true) => {
                    (self.volumes).push(settings, c.clone(), r.volume.as_deref(), r.position)
                }
                (true, false) => drop(self.volumes.remove(settings, r.id)),
                (false, true) => self.queue.push(c.clone()),
                (false, false) => drop(self.queue.remove(r.id)),
            }
        }
        let sign = |n: i128| if add { n } else { -n };
        // Every unfinished request counts against its caps (`queued.rs`), as the loader reads it.
        if r.unfinished() {
            let fair = policy
                .group_by_path(&r.group_path)
                .filter(|&g| matches!(policy.group(g).kind, GroupKind::FairShare { .. }));
            if let Some(g) = fair {
                let owner = Owner {
                    station: &r.station,
                    user: &r.user,
                };
                (self.queued).add(g, owner, sign(i128::from(r.size_bytes.max(0))));
            }
        }
        let in_flight = matches!(state, "accepted" | "submitted" | "running");
        if in_flight {
            let slots = u32::try_from(r.slots.max(0)).unwrap_or(u32::MAX);
            let n = self.outstanding.entry(r.library.clone()).or_default();
            *n = if add {
                n.saturating_add(slots)
            } else {
                n.saturating_sub(slots)
            };
        }
        if state == "submitted" && r.class == "priority" {
            self.priority_waiting += if add { 1 } else { -1 };
        }
        let queued_carries = policy.order.release.coalesce == Coalesce::Queued && state == "queued";
        if r.direction == "read" && (in_flight || queued_carries) {
            let key = Carriers::key(&r.file, r.local_file.as_deref());
            if add {
                self.carriers.offer(key, r.id);
            } else {
                self.carriers.forget(key, r.id);
            }
        }
    }
}

/// What [`RowState`] reads of one request row.
pub(super) struct Row {
    id: i64,
    state: String,
    class: String,
    group_path: String,
    station: String,
    user: String,
    size_bytes: i64,
    library: String,
    slots: i64,
    direction: String,
    file: String,
    local_file: Option<String>,
    /// As the queues hold it, for a `queued` row of a configured group.
    candidate: Option<Candidate>,
    volume: Option<String>,
    position: Option<u64>,
}

impl Row {
    /// Row `id` as `db` sees it (`None`: there is none), read for `policy`.
    pub fn read(db: &Db<'_>, policy: &PolicySettings, id: i64) -> Result<Option<Row>, LedgerError> {
        let sql = format!(
            "SELECT {CANDIDATE_COLUMNS}, {PLACE_COLUMNS}, state, class, user_name, direction, \
             file, local_file, station FROM requests WHERE id = ?1"
        );
        let row = db.query_opt(&sql, params![id], |r| {
            let state: String = r.get(12)?;
            // Read as the loaders read it: only a queued row becomes a candidate.
            let candidate = match state.as_str() {
                "queued" => read_candidate(policy, r)?,
                _ => None,
            };
            let (volume, position) = read_place(r)?;
            Ok(Row {
                id,
                state,
                class: r.get(13)?,
                group_path: r.get(1)?,
                user: r.get(14)?,
                size_bytes: r.get(4)?,
                library: r.get(2)?,
                slots: r.get(8)?,
                direction: r.get(15)?,
                file: r.get(16)?,
                local_file: r.get(17)?,
                station: r.get(18)?,
                candidate,
                volume,
                position,
            })
        })?;
        Ok(row)
    }

    /// Whether the row is unfinished in a group `policy` does not configure (a reload that
    /// leaves it out must be refused).
    pub fn unfinished_outside(&self, policy: &PolicySettings) -> bool {
        self.unfinished() && policy.group_by_path(&self.group_path).is_none()
    }

    /// Not done, failed or cancelled.
    fn unfinished(&self) -> bool {
        matches!(
            self.state.as_str(),
            "accepted" | "held" | "queued" | "riding" | "submitted" | "running"
        )
    }
}

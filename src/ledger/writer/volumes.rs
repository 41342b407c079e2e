//! The `volumes` release mode in the writer (issue 16, docs/volumes-live.md): fair-share requests
//! wait in the [`VolumeQueue`] (the rows in state `queued` are its durable copy), and at the end
//! of every transaction each library releases the batches the queue gives while it has room
//! (`next_batch`: the policy's group, that group's best eligible volume, piggy-backed requests
//! of other groups on it). Each request of a batch is decided and charged to its own group as it
//! is released, numbered in tape-position order (`release_seq`, which the submit loop reads the
//! ready requests by) and given the batch's one MSS priority, so the batch reaches the MSS
//! together and in order. The queue hears of every released request that ends
//! (`settle::finalize`). Nothing here walks the whole queue: a decision costs what
//! `next_batch` costs.

use std::collections::BTreeMap;

use crate::ledger::db::{params, Db, DbError, DbResult, Row};
use tracing::{info, warn};

use super::state::{Charge, Txn};
use crate::domain::GroupId;
use crate::domain::PolicySettings;
use crate::ledger::aggregates::HourRow;
use crate::ledger::candidate::{read_candidate, CANDIDATE_COLUMNS};
use crate::policy::order::{Candidate, ShareSnapshot};
use crate::policy::volumes::{Batch, BatchReason, VolumeId, VolumeQueue};
use crate::shares::limits::held_by;
use crate::shares::UsageLookup;

/// Usage as the feasibility caps see it with the benefit of the requests a batch has already
/// let go counted (they are charged only once the whole batch is placed).
struct WithBatch<'a, L> {
    base: &'a L,
    pending: &'a BTreeMap<GroupId, u128>,
}

impl<L: UsageLookup> UsageLookup for WithBatch<'_, L> {
    fn value(&self, g: GroupId) -> u128 {
        self.base.value(g)
    }
    fn fair_total(&self) -> u128 {
        self.base.fair_total()
    }
    fn unit(&self) -> u128 {
        self.base.unit()
    }
    fn measure(&self, g: GroupId) -> u128 {
        let extra = self.pending.get(&g).copied().unwrap_or(0);
        self.base.measure(g).saturating_add(extra)
    }
    fn fair_measure_total(&self) -> u128 {
        let extra: u128 = self.pending.values().sum();
        self.base.fair_measure_total().saturating_add(extra)
    }
}

/// Columns [`read_place`] reads, after [`CANDIDATE_COLUMNS`].
pub(in crate::ledger) const PLACE_COLUMNS: &str = "volume, position";

/// The volume and tape position of a row read as `{CANDIDATE_COLUMNS}, {PLACE_COLUMNS}`.
pub(in crate::ledger) fn read_place(r: &Row<'_>) -> DbResult<(Option<String>, Option<u64>)> {
    let volume: Option<String> = r.get(10)?;
    let position: Option<i64> = r.get(11)?;
    Ok((volume, position.and_then(|p| u64::try_from(p).ok())))
}

impl Txn<'_, '_> {
    /// Put a request that waits in the broker into the queue of the release mode: the volume
    /// queue (`volumes`) or the held queue.
    /// With a volume lookup configured, a request without a volume that no lookup has answered
    /// waits for one (see `policy::volumes::VolumeId::Unlocated`).
    pub fn enqueue(
        &mut self,
        c: Candidate,
        volume: Option<&str>,
        position: Option<u64>,
    ) -> DbResult<()> {
        let lookup = self.policy.order.release.volumes.lookup_wait_ms.is_some();
        let unanswered = self.policy.order.volumes()
            && lookup
            && volume.is_none_or(str::is_empty)
            && !self.looked_up(c.id)?;
        self.enqueue_new(c, volume, position, unanswered);
        Ok(())
    }

    /// [`Self::enqueue`] of a request whose row says whether a lookup answered for it
    /// (`unanswered`: none did; a request just inserted).
    pub fn enqueue_new(
        &mut self,
        c: Candidate,
        volume: Option<&str>,
        position: Option<u64>,
        unanswered: bool,
    ) {
        if !self.policy.order.volumes() {
            self.st.enqueue(c);
            return;
        }
        let lookup = self.policy.order.release.volumes.lookup_wait_ms.is_some();
        if lookup && unanswered && volume.is_none_or(str::is_empty) {
            self.st.enqueue_unlocated(c);
        } else {
            self.st.enqueue_volume(c, volume, position);
        }
    }

    /// Whether a lookup answered for request `id` (`volume_source` set).
    fn looked_up(&self, id: i64) -> DbResult<bool> {
        self.tx.query_one(
            "SELECT volume_source IS NOT NULL FROM requests WHERE id = ?1",
            params![id],
            |r| r.get(0),
        )
    }

    /// Release the batches the volume queue gives, per library, until it gives none. Returns
    /// how many requests were released.
    pub fn release_volumes(&mut self) -> DbResult<usize> {
        let mut released = 0;
        for lib in self.st.volumes.libraries() {
            loop {
                let reserve = self.reservation(&lib);
                let batch = {
                    let (policy, now) = (self.policy, self.now);
                    let st = &mut *self.st;
                    let standing = ShareSnapshot::new(policy, st.usage.at(now), &st.queues);
                    (st.volumes).next_batch_reserving(&policy.order, &standing, &lib, now, reserve)
                };
                let Some(batch) = batch else { break };
                released += self.release_batch(batch)?;
            }
        }
        let libraries = self.st.volumes.libraries();
        let due = self.st.volumes.next_wakeup(self.now);
        self.st.volumes_due = due.into_iter().chain(self.reserve_due(&libraries)).min();
        Ok(released)
    }

    /// Release one batch: a request whose group is now over a feasibility cap goes back to
    /// `held` (out of the queue); the rest are decided at the batch's MSS priority (the highest
    /// of their placements: a piggy-backed request never lowers the mount it rides on), charged
    /// each to its own group and numbered in position order. Every request leaves the queue, so
    /// the next `next_batch` sees a smaller one.
    fn release_batch(&mut self, mut batch: Batch) -> DbResult<usize> {
        let mut going = Vec::with_capacity(batch.requests.len());
        // What the batch has let go so far counts against the caps, as it would were its
        // requests released one at a time.
        let mut pending: BTreeMap<GroupId, u128> = BTreeMap::new();
        for c in std::mem::take(&mut batch.requests) {
            let at = self.st.usage.at(self.now);
            let usage = WithBatch {
                base: &at,
                pending: &pending,
            };
            if let Some(reason) = held_by(self.policy, &usage, c.group, c.benefit) {
                self.hold_again(&c, &reason)?;
            } else {
                *pending.entry(c.group).or_default() += u128::from(c.benefit);
                going.push(c);
            }
        }
        if going.is_empty() {
            return Ok(0);
        }
        let placements: Vec<_> = going.iter().map(|c| self.placement(c)).collect();
        let priority = placements.iter().map(|p| p.mss_priority).max();
        batch.requests = going;
        self.st.volume_batch_started(self.policy, &batch, self.now);
        // The group whose max_volumes counts the flight: this batch's, or the one that led the
        // flight a sticky batch continues. Kept on each row, so a restart counts the same one
        // after that group's own requests have ended.
        let leader = (self.st.volumes)
            .flight_leader(&batch.library, &batch.volume)
            .unwrap_or(batch.group);
        let lead_path = self.policy.group(leader).path.to_string();
        for (c, mut p) in batch.requests.iter().zip(placements) {
            if let Some(top) = priority {
                p.mss_priority = top;
                p.explain.mss_priority = top;
            }
            self.decide_and_charge(c, &p)?;
            self.st.release_seq += 1;
            self.note(c.id);
            self.tx.execute(
                "UPDATE requests SET release_seq = ?2, release_lead = ?3 WHERE id = ?1",
                params![c.id, self.st.release_seq, lead_path],
            )?;
            let path = self.policy.group(c.group).path.to_string();
            self.report
                .add(&path, self.now, HourRow::default().decided(p.class));
            self.fbsng_started(c.group);
        }
        Ok(batch.requests.len())
    }

    /// A request of a batch whose group is over a feasibility cap: `held` again, uncharged.
    fn hold_again(&mut self, c: &Candidate, reason: &str) -> DbResult<()> {
        self.st.dequeue_volume(c.id);
        self.note(c.id);
        self.tx.execute(
            "UPDATE requests SET state = 'held', held_reason = ?2 WHERE id = ?1",
            params![c.id, reason],
        )?;
        let path = self.policy.group(c.group).path.to_string();
        self.charge(&path, Charge::held(1));
        self.carrier_held(c.id)
    }
}

/// A released request not yet ended: the request, its tape position, whether its group led
/// its batch, and the flight's leading group as its row names it (`release_lead`).
type InFlight = (Candidate, Option<u64>, bool, Option<GroupId>);

/// The volume queue from the rows at `now`: the `queued` requests in id order, then the
/// volumes in flight (released requests not yet ended, per library and volume in release
/// order, led by the group the first of them names in `release_lead`; for rows of builds
/// before it, by the group of the first request marked `release_led`), so a restart (or a
/// rollback) keeps the waiting volumes, their figures, the volumes' slots and each group's
/// `max_volumes` count. (What another release mode sent is numbered when this mode is entered,
/// [`enter_mode`], and counts from then on.)
pub(super) fn load_volume_queue(
    db: &Db<'_>,
    policy: &PolicySettings,
    now: i64,
) -> DbResult<VolumeQueue> {
    let mut queue = load_waiting(db, policy)?;
    add_flights(db, policy, now, &mut queue)?;
    Ok(queue)
}

/// [`load_volume_queue`]'s first part: the `queued` requests in id order (a reload reads them
/// off the writer, from its snapshot).
pub(super) fn load_waiting(db: &Db<'_>, policy: &PolicySettings) -> DbResult<VolumeQueue> {
    let settings = &policy.order.release.volumes;
    let mut queue = VolumeQueue::default();
    // Only the volumes mode keeps this queue: in `held` mode the queued rows are the held
    // queue's, and entries here would never leave (the release timer would never rest).
    if !policy.order.volumes() {
        return Ok(queue);
    }
    let lookup = settings.lookup_wait_ms.is_some();
    let sql = format!(
        "SELECT {CANDIDATE_COLUMNS}, {PLACE_COLUMNS}, volume_source IS NULL FROM requests \
         WHERE state = 'queued' ORDER BY id"
    );
    db.for_each(&sql, params![], |r| {
        match read_candidate(policy, r)? {
            Some(c) => {
                let (volume, position) = read_place(r)?;
                let unanswered: bool = r.get(12)?;
                if lookup && unanswered && volume.as_deref().is_none_or(str::is_empty) {
                    queue.push_unlocated(settings, c);
                } else {
                    queue.push(settings, c, volume.as_deref(), position);
                }
            }
            None => warn!("a queued request of a group no longer configured stays queued"),
        }
        Ok::<_, DbError>(())
    })?;
    Ok(queue)
}

/// [`load_volume_queue`]'s second part: the volumes in flight, from the rows at `now`, into
/// `queue` (which holds the waiting requests).
pub(super) fn add_flights(
    db: &Db<'_>,
    policy: &PolicySettings,
    now: i64,
    queue: &mut VolumeQueue,
) -> DbResult<()> {
    let settings = &policy.order.release.volumes;
    if !policy.order.volumes() {
        return Ok(());
    }
    let mut flights: BTreeMap<(String, VolumeId), Vec<InFlight>> = BTreeMap::new();
    let sql = format!(
        "SELECT {CANDIDATE_COLUMNS}, {PLACE_COLUMNS}, release_led, release_lead FROM requests \
         WHERE state IN ('accepted', 'submitted', 'running') AND release_seq IS NOT NULL \
         ORDER BY release_seq"
    );
    db.for_each(&sql, params![], |r| {
        let Some(c) = read_candidate(policy, r)? else {
            return Ok::<_, DbError>(());
        };
        let (volume, position) = read_place(r)?;
        let led = r.get::<Option<bool>>(12)?.unwrap_or(false);
        let lead = r.get::<Option<String>>(13)?;
        let lead = lead.and_then(|path| policy.group_by_path(&path));
        let key = (c.library.clone(), VolumeId::of(volume.as_deref(), c.group));
        flights
            .entry(key)
            .or_default()
            .push((c, position, led, lead));
        Ok(())
    })?;
    for ((library, volume), reqs) in flights {
        let named = reqs.iter().find_map(|r| r.3);
        let marked = reqs
            .iter()
            .find(|r| r.2)
            .or(reqs.first())
            .map(|r| r.0.group);
        let Some(group) = named.or(marked) else {
            continue;
        };
        for (c, position, _, _) in &reqs {
            queue.push(settings, c.clone(), volume.label(), *position);
        }
        let requests: Vec<Candidate> = reqs.into_iter().map(|r| r.0).collect();
        let batch = Batch {
            library,
            volume,
            group,
            reason: BatchReason::Chosen,
            bytes: requests.iter().map(|c| c.size_bytes).sum(),
            requests,
            ride_capped: Vec::new(),
            remainder: Vec::new(),
        };
        queue.batch_started(settings, policy, &batch, now);
    }
    Ok(())
}

/// The last release sequence a request released and not yet ended carries (0: none): later
/// batches are numbered after it, so they are submitted after it, also after a restart when
/// the highest numbers are at the MSS and one of those is retried. (The partial indexes on
/// ready and in-flight requests answer this without reading the table's history.)
pub(super) fn last_release_seq(db: &Db<'_>) -> DbResult<i64> {
    let seq: Option<i64> = db.query_one(
        "SELECT MAX(s) FROM ( \
             SELECT MAX(release_seq) AS s FROM requests WHERE state = 'accepted' \
             UNION ALL \
             SELECT MAX(release_seq) FROM requests WHERE state IN ('submitted', 'running')) AS m",
        params![],
        |r| r.get(0),
    )?;
    Ok(seq.unwrap_or(0))
}

/// The `meta` key naming the release mode the rows were last kept under.
const META_MODE: &str = "release_mode";

/// Entering the volumes mode from another (a reload, or a start on a database another mode
/// kept last, or one from before the mode was recorded): the fair-share requests that mode
/// released and that have not ended (`accepted`, `submitted`, `running`, with no
/// `release_seq`) are at the MSS as much as a batch is, so they are numbered after the last
/// batch, each led by its own group, and load as volumes in flight (`add_flights`): they count
/// against the libraries' and the groups' `max_volumes` until they end, and no volume goes to
/// the MSS over the limit meanwhile. (Priority classes are sent at once in every mode, beside
/// the volumes, and are never numbered.) Records the mode in force, in the caller's
/// transaction. Returns how many requests were numbered. Its rows are not noted for a reload
/// (`noted.rs`): it runs only where none is being prepared, at start and in a reload's install.
pub(super) fn enter_mode(tx: &Db<'_>, policy: &PolicySettings) -> DbResult<usize> {
    let mode = policy.order.release.mode.name();
    let was = crate::ledger::usage::meta(tx, META_MODE)?;
    crate::ledger::usage::set_meta(tx, META_MODE, mode)?;
    if !policy.order.volumes() || was.as_deref() == Some(mode) {
        return Ok(0);
    }
    let ids: Vec<i64> = tx.query_rows(
        "SELECT id FROM requests WHERE state = 'accepted' AND release_seq IS NULL \
         AND class != 'priority' UNION ALL SELECT id FROM requests \
         WHERE state IN ('submitted', 'running') AND release_seq IS NULL \
         AND class != 'priority' ORDER BY id",
        params![],
        |r| r.get(0),
    )?;
    let mut seq = last_release_seq(tx)?;
    let mut stmt = tx
        .prepare("UPDATE requests SET release_seq = ?2, release_lead = group_path WHERE id = ?1")?;
    for id in &ids {
        seq += 1;
        stmt.execute(params![id, seq])?;
    }
    if !ids.is_empty() {
        info!(
            requests = ids.len(),
            was = was.as_deref().unwrap_or("not recorded"),
            "entering the volumes release mode: requests the previous mode sent count as volumes in flight"
        );
    }
    Ok(ids.len())
}

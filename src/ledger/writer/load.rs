//! Start-up: every configured group gets a row, and the writer's memory is loaded from the
//! stored aggregates and rows (usage, held counts, the held queue, slots outstanding, FBSNG
//! queue priorities, the idempotency map).

use std::collections::HashMap;
use std::sync::Arc;

use rusqlite::{Connection, Transaction};
use tokio::sync::Notify;
use tracing::{info, warn};

use super::coalesce::Carriers;
use super::idempotency::Idempotency;
use super::queued::QueuedBytes;
use super::release::{read_candidate, CANDIDATE_COLUMNS};
use super::removed::removed_groups;
use super::state::WriterState;
use super::volumes;
use super::Writer;
use crate::clock::Clock;
use crate::domain::PolicySettings;
use crate::ledger::live::Published;
use crate::ledger::wide::Wide;
use crate::ledger::{identity, usage, LedgerError, LedgerOptions};
use crate::policy::fbsng::Queues;
use crate::policy::queue::HeldQueue;
use crate::shares::{UsageBook, UsageLookup};

impl Writer {
    /// Make sure every configured group has a row, and load usage from the stored aggregates.
    /// Refuses a configuration that leaves out a group with unfinished requests.
    pub fn load(
        mut conn: Connection,
        policy: Arc<PolicySettings>,
        clock: Arc<dyn Clock>,
        options: &LedgerOptions,
        (ready, published): (Arc<Notify>, Arc<Published>),
    ) -> Result<Writer, LedgerError> {
        let file = identity::DbFile::of(&options.path)?;
        refuse_removed_groups(&conn, &policy)?;
        let idempotency = load_idempotency(&conn)?;
        info!(requests = idempotency.len(), "idempotency keys loaded");
        let state = load_state(&mut conn, &policy, clock.now_ms(), idempotency)?;
        published.publish(&policy, (&state.usage, &state.queues), &state.queue);
        Ok(Writer {
            conn,
            policy,
            clock,
            state,
            batch_max: options.commit_batch_max.max(1),
            retry: options.retry,
            ready,
            published,
            metrics: options.metrics.clone(),
            file,
            volumes_stale: false,
        })
    }

    /// Decide with `policy` from the next commit on. Run between two commits: the memory is
    /// rebuilt from the committed rows and aggregates as start-up builds it (every structure
    /// indexed by group id is built anew for the new groups, by path), then swapped in whole
    /// and published. Refused, changing nothing, when the policy leaves out a group with
    /// unfinished requests or the memory cannot be read.
    pub fn reload(&mut self, policy: Arc<PolicySettings>) -> Result<(), LedgerError> {
        refuse_removed_groups(&self.conn, &policy)?;
        // Nothing is written to a file that is no longer the database (as before a commit).
        self.file.check()?;
        let idempotency = std::mem::take(&mut self.state.idempotency);
        let loaded = load_state(
            &mut self.conn,
            &policy,
            self.clock.now_ms(),
            Idempotency::default(),
        );
        let mut state = match loaded {
            Ok(state) => state,
            Err(e) => {
                self.state.idempotency = idempotency;
                return Err(e);
            }
        };
        // Keyed by request id and fingerprint, not by group: carried over as it is.
        state.idempotency = idempotency;
        // What the volume queue's rows do not hold (volumes that ended within `sticky_secs`,
        // the size of each flight's last batch), kept as a rollback keeps it: else every
        // reload, a token rotation's too, would unmount the volumes the sticky rule keeps.
        if self.policy.order.volumes() && policy.order.volumes() {
            let (old, new) = (&self.policy, &policy);
            let regroup =
                |g: crate::domain::GroupId| new.group_by_path(old.groups.get(g.0)?.path.as_str());
            state
                .volumes
                .restore(self.state.volumes.memory().regroup(regroup));
        }
        let _gate = self.published.gate();
        self.state = state;
        self.policy = policy;
        self.published.publish(
            &self.policy,
            (&self.state.usage, &self.state.queues),
            &self.state.queue,
        );
        info!(
            groups = self.policy.groups.len(),
            "ledger writer reloaded its policy"
        );
        Ok(())
    }
}

/// The groups left out of `policy` that still have unfinished requests, as an error.
fn refuse_removed_groups(conn: &Connection, policy: &PolicySettings) -> Result<(), LedgerError> {
    let removed = removed_groups(conn, policy)?;
    if removed.0.is_empty() {
        return Ok(());
    }
    Err(LedgerError::RemovedGroups(removed))
}

/// The writer's memory for `policy`, from the rows and aggregates (`idempotency` is not group
/// indexed: the caller loads or keeps it). One transaction: what it writes for `policy` (the
/// groups' rows, aggregates rebuilt for a new usage model) is committed only once the whole
/// memory was read, so a load that fails (a refused reload) leaves the file as it was.
fn load_state(
    conn: &mut Connection,
    policy: &PolicySettings,
    now: i64,
    idempotency: Idempotency,
) -> Result<WriterState, LedgerError> {
    let tx = conn.transaction()?;
    let state = read_state(&tx, policy, now, idempotency)?;
    tx.commit()?;
    Ok(state)
}

/// [`load_state`]'s work, in its transaction.
fn read_state(
    conn: &Transaction<'_>,
    policy: &PolicySettings,
    now: i64,
    idempotency: Idempotency,
) -> Result<WriterState, LedgerError> {
    add_groups(conn, policy)?;
    let usage = load_usage(conn, policy, now)?;
    let held = usage::group_counts(conn, policy)?
        .into_iter()
        .map(|c| c.held)
        .collect();
    // Uses the partial index on in-flight requests.
    let priority_waiting: i64 = conn.query_row(
        "SELECT COUNT(*) FROM requests WHERE state IN ('submitted', 'running') \
         AND state = 'submitted' AND class = 'priority'",
        [],
        |r| r.get(0),
    )?;
    info!(fair_total = %usage.at(now).fair_total(), model = policy.usage_model.name(),
        "ledger usage loaded");
    let order = load_order_state(conn, policy)?;
    if !order.0.is_empty() {
        info!(
            queued = order.0.len(),
            mode = policy.order.release.mode.name(),
            "held release queue loaded"
        );
    }
    let volumes = volumes::load_volume_queue(conn, policy, now)?;
    if !volumes.is_empty() {
        info!(
            queued = volumes.len(),
            in_flight = volumes.in_flight_requests(),
            "volume release queue loaded"
        );
    }
    let release_seq = volumes::last_release_seq(conn)?;
    let queued = load_queued_bytes(conn, policy)?;
    Ok(
        WriterState::new(usage, held, priority_waiting, order, idempotency)
            .with_volumes(&policy.order.release.volumes, volumes, release_seq)
            .with_queued(queued)
            .with_carriers(Carriers::load(conn, policy.order.release.coalesce)?),
    )
}

/// A row for every configured group; a warning for stored usage of a group no longer
/// configured.
fn add_groups(conn: &Transaction<'_>, policy: &PolicySettings) -> Result<(), LedgerError> {
    for g in &policy.groups {
        conn.execute(
            "INSERT OR IGNORE INTO groups(path) VALUES (?1)",
            [g.path.as_str()],
        )?;
    }
    let mut stmt = conn.prepare("SELECT path, usage FROM groups")?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, Wide>(1)?)))?;
    for row in rows {
        let (path, Wide(usage)) = row?;
        if usage != 0 && policy.group_by_path(&path).is_none() {
            warn!(
                group = %path,
                usage = %usage,
                "stored usage of a group that is no longer configured is kept but not used"
            );
        }
    }
    Ok(())
}

/// The usage book, rebuilt from the requests if the usage model changed (the rebuilt
/// aggregates written in the caller's transaction).
fn load_usage(
    tx: &Transaction<'_>,
    policy: &PolicySettings,
    now: i64,
) -> Result<UsageBook, LedgerError> {
    let started = std::time::Instant::now();
    let loaded = usage::load_book(tx, policy, now)?;
    if loaded.rebuilt {
        usage::persist_rebuilt(tx, policy, &loaded.book)?;
        info!(
            model = %policy.usage_model.describe(),
            millis = started.elapsed().as_millis() as u64,
            "usage aggregates rebuilt from the requests for a changed usage model"
        );
    } else {
        usage::store_model(tx, policy, &loaded.book)?;
    }
    Ok(loaded.book)
}

fn load_idempotency(conn: &Connection) -> Result<Idempotency, LedgerError> {
    // Sized once: a map grown by doubling leaves its outgrown tables (as much again as the
    // final one) to the allocator.
    let rows: i64 = conn.query_row("SELECT COUNT(*) FROM idempotency", [], |r| r.get(0))?;
    let mut idempotency = Idempotency::with_capacity(usize::try_from(rows).unwrap_or(0));
    let mut stmt = conn.prepare("SELECT id, fingerprint FROM idempotency")?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))?;
    for row in rows {
        let (id, fp) = row?;
        idempotency.insert(fp as u64, id);
    }
    let mut stmt = conn.prepare("SELECT fingerprint FROM idempotency_finished")?;
    let mut rows = stmt.query([])?;
    while let Some(row) = rows.next()? {
        idempotency.finished(row.get::<_, i64>(0)? as u64);
    }
    Ok(idempotency)
}

/// The queued-bytes tallies: the bytes of fair-share requests not yet at the MSS, per group and
/// user (each state through its partial index).
fn load_queued_bytes(
    conn: &Connection,
    policy: &PolicySettings,
) -> Result<QueuedBytes, LedgerError> {
    let mut tally = QueuedBytes::default();
    let mut stmt = conn.prepare(
        // Row by row, not SUM(): a sum of sizes may pass i64, which SQLite refuses.
        "SELECT group_path, user_name, size_bytes FROM requests WHERE state = 'held' \
         UNION ALL SELECT group_path, user_name, size_bytes FROM requests WHERE state = 'queued' \
         UNION ALL SELECT group_path, user_name, size_bytes FROM requests \
           WHERE state = 'accepted'",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, i64>(2)?,
        ))
    })?;
    for row in rows {
        let (path, user, bytes) = row?;
        let fair = policy.group_by_path(&path).filter(|&g| {
            matches!(
                policy.group(g).kind,
                crate::domain::GroupKind::FairShare { .. }
            )
        });
        if let Some(g) = fair {
            tally.add(g, &user, i128::from(bytes.max(0)));
        }
    }
    Ok(tally)
}

/// The held release queue, the slots outstanding per library and the FBSNG queue priorities,
/// from the rows.
fn load_order_state(
    conn: &Connection,
    policy: &PolicySettings,
) -> Result<(HeldQueue, HashMap<String, u32>, Queues), LedgerError> {
    // The volumes mode keeps its own queue (`volumes::load_volume_queue`).
    let where_queued = if policy.order.volumes() {
        "0"
    } else {
        "state = 'queued'"
    };
    let expected: i64 = conn.query_row(
        &format!("SELECT COUNT(*) FROM requests WHERE {where_queued}"),
        [],
        |r| r.get(0),
    )?;
    let mut stmt = conn.prepare(&format!(
        "SELECT {CANDIDATE_COLUMNS} FROM requests WHERE {where_queued} ORDER BY id"
    ))?;
    let rows = stmt.query_map([], |r| read_candidate(policy, r))?;
    // Streamed into the queue in id order (not collected first: at 1M queued a copy of
    // every request would be 100 MB more at start).
    let (mut failed, mut unconfigured) = (None, 0usize);
    let waiting = rows
        .map_while(|row| row.map_err(|e| failed = Some(e)).ok())
        .filter_map(|c| {
            unconfigured += usize::from(c.is_none());
            c
        });
    let queue = HeldQueue::from_waiting(waiting, usize::try_from(expected).unwrap_or(0));
    if let Some(e) = failed {
        return Err(e.into());
    }
    if unconfigured > 0 {
        warn!(
            requests = unconfigured,
            "queued requests of a group no longer configured stay queued"
        );
    }
    let mut outstanding = HashMap::new();
    let mut stmt = conn.prepare(
        "SELECT library, SUM(slots) FROM requests \
         WHERE state IN ('accepted', 'submitted', 'running') GROUP BY library",
    )?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
    for row in rows {
        let (lib, n) = row?;
        outstanding.insert(lib, n.clamp(0, i64::from(u32::MAX)) as u32);
    }
    let mut queues = Queues::new(&policy.order.fbsng);
    let mut stmt =
        conn.prepare("SELECT path, queue_priority FROM groups WHERE queue_priority IS NOT NULL")?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
    for row in rows {
        let (path, p) = row?;
        if let Some(g) = policy.group_by_path(&path) {
            if let Some(slot) = queues.priority.get_mut(g.0) {
                *slot = p;
            }
        }
    }
    Ok((queue, outstanding, queues))
}

#[cfg(test)]
impl Writer {
    /// What the memory holds that the committed rows do not say, as start-up would load them
    /// under the policy in force (in a transaction rolled back): the held counts, the slots
    /// outstanding, the queued-bytes tallies, the queues' sizes, the priority requests waiting
    /// must be equal; every read the rows say may carry its file must be in the carrier map (a
    /// stale entry there is only a hint).
    pub(super) fn audit(&mut self) -> Result<Vec<String>, LedgerError> {
        let tx = self.conn.transaction()?;
        let rows = read_state(
            &tx,
            &self.policy,
            self.clock.now_ms(),
            Idempotency::default(),
        )?;
        drop(tx);
        let live = &self.state;
        let mut wrong = Vec::new();
        let mut differ = |what: &str, memory: String, rows: String| {
            if memory != rows {
                wrong.push(format!("{what}: memory {memory}, rows {rows}"));
            }
        };
        let trimmed = |v: &[u128]| {
            let mut v = v.to_vec();
            while v.last() == Some(&0) {
                v.pop();
            }
            v
        };
        let busy = |m: &HashMap<String, u32>| {
            let mut v: Vec<_> = m.iter().filter(|(_, &n)| n > 0).collect();
            v.sort();
            format!("{v:?}")
        };
        let users = |m: &HashMap<String, u128>| {
            let mut v: Vec<_> = m.iter().collect();
            v.sort();
            format!("{v:?}")
        };
        differ(
            "held",
            format!("{:?}", live.held),
            format!("{:?}", rows.held),
        );
        differ(
            "outstanding",
            busy(&live.outstanding),
            busy(&rows.outstanding),
        );
        differ(
            "queued bytes by group",
            format!("{:?}", trimmed(&live.queued.by_group)),
            format!("{:?}", trimmed(&rows.queued.by_group)),
        );
        differ(
            "queued bytes by user",
            users(&live.queued.by_user),
            users(&rows.queued.by_user),
        );
        differ(
            "held queue",
            live.queue.len().to_string(),
            rows.queue.len().to_string(),
        );
        differ(
            "volume queue",
            live.volumes.len().to_string(),
            rows.volumes.len().to_string(),
        );
        differ(
            "volume flights' requests",
            live.volumes.in_flight_requests().to_string(),
            rows.volumes.in_flight_requests().to_string(),
        );
        differ(
            "priority waiting",
            live.priority_waiting.to_string(),
            rows.priority_waiting.to_string(),
        );
        // Fingerprints: memory holds the `idempotency` table's, which are the unfinished
        // requests'; every final request's is in `idempotency_finished`, under its own.
        let table = load_idempotency(&self.conn)?;
        differ(
            "fingerprints",
            format!("{:?}", self.state.idempotency.entries()),
            format!("{:?}", table.entries()),
        );
        let count = |sql: &str| -> Result<i64, LedgerError> {
            Ok(self.conn.query_row(sql, [], |r| r.get(0))?)
        };
        let finals = "('done', 'failed', 'cancelled')";
        differ(
            "fingerprints of final requests in `idempotency`",
            count(&format!(
                "SELECT COUNT(*) FROM idempotency i JOIN requests r ON r.id = i.id \
                 WHERE r.state IN {finals}"
            ))?
            .to_string(),
            "0".into(),
        );
        differ(
            "unfinished requests without a fingerprint in `idempotency`",
            count(&format!(
                "SELECT COUNT(*) FROM requests r WHERE r.state NOT IN {finals} \
                 AND NOT EXISTS (SELECT 1 FROM idempotency i WHERE i.id = r.id)"
            ))?
            .to_string(),
            "0".into(),
        );
        let mut finals_stmt = self.conn.prepare(&format!(
            "SELECT id, station, client_request_id FROM requests WHERE state IN {finals}"
        ))?;
        let mut on_disk = self.conn.prepare(
            "SELECT COUNT(*) FROM idempotency_finished WHERE fingerprint = ?1 AND id = ?2",
        )?;
        let mut final_rows = finals_stmt.query([])?;
        let mut missing = Vec::new();
        while let Some(r) = final_rows.next()? {
            let (id, station, crid): (i64, String, String) = (r.get(0)?, r.get(1)?, r.get(2)?);
            let fp = super::idempotency::fingerprint(&station, &crid) as i64;
            let n: i64 = on_disk.query_row(rusqlite::params![fp, id], |r| r.get(0))?;
            if n != 1 || !self.state.idempotency.may_have_finished(fp as u64) {
                missing.push(id);
            }
        }
        differ(
            "final requests without their fingerprint in `idempotency_finished` and its filter",
            format!("{missing:?}"),
            "[]".into(),
        );
        // A carrier whose caller asked to cancel it carries nothing more (`carrier_for`
        // forgets it when it meets it).
        let cancelling = |id: &i64| {
            self.conn
                .query_row(
                    "SELECT cancel_requested FROM requests WHERE id = ?1",
                    [id],
                    |r| r.get::<_, bool>(0),
                )
                .unwrap_or(false)
        };
        for (key, ids) in rows.carriers.entries() {
            let known = live.carriers.get(key);
            let missing: Vec<i64> = (ids.into_iter())
                .filter(|id| !known.contains(id) && !cancelling(id))
                .collect();
            if !missing.is_empty() {
                wrong.push(format!("carriers of {key:x}: {missing:?} not in memory"));
            }
        }
        Ok(wrong)
    }
}

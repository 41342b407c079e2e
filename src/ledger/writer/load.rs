//! Start-up: every configured group gets a row, and the writer's memory is loaded from the
//! stored aggregates and rows (usage, held counts, the held queue, slots outstanding, FBSNG
//! queue priorities, the idempotency map, the station-side copies of the unfinished reads).

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::Notify;
use tracing::{info, warn};

use super::fence::write_transaction;
use super::idempotency::Idempotency;
use super::outputs::Outputs;
use super::queued::{Owner, QueuedBytes};
use super::removed::removed_groups;
use super::rows::RowState;
use super::state::WriterState;
use super::volumes;
use super::Writer;
use crate::clock::Clock;
use crate::domain::PolicySettings;
use crate::ledger::candidate::{read_candidate, CANDIDATE_COLUMNS};
use crate::ledger::db::{params, Db, DbConn, DbError, Tx};
use crate::ledger::live::Published;
use crate::ledger::mss_key::MssKeys;
use crate::ledger::wide::Wide;
use crate::ledger::{identity, usage, LedgerError, LedgerOptions};
use crate::policy::fbsng::Queues;
use crate::policy::order::ShareSnapshot;
use crate::policy::queue::HeldQueue;
use crate::shares::{UsageBook, UsageLookup};

impl Writer {
    /// Make sure every configured group has a row, and load usage from the stored aggregates.
    /// Refuses a configuration that leaves out a group with unfinished requests.
    pub fn load(
        mut conn: DbConn,
        policy: Arc<PolicySettings>,
        clock: Arc<dyn Clock>,
        options: &LedgerOptions,
        (ready, published): (Arc<Notify>, Arc<Published>),
    ) -> Result<Writer, LedgerError> {
        // The file's identity, checked before every COMMIT: SQLite only.
        let file = match options.url {
            Some(_) => None,
            None => Some(identity::DbFile::of(&options.path)?),
        };
        refuse_removed_groups(&conn.db(), &policy)?;
        let idempotency = load_idempotency(&conn.db())?;
        info!(requests = idempotency.len(), "idempotency keys loaded");
        let outputs = Outputs::load(&conn.db(), options.read_outputs.clone())?;
        // The term's writes at load are fenced as its groups are: a term deposed meanwhile
        // commits none of them (PostgreSQL).
        let fence_epoch = options.url.as_ref().map(|_| options.epoch);
        let tx = write_transaction(&mut conn, fence_epoch)?;
        let state = load_state(tx, &policy, clock.now_ms(), idempotency)?.with_outputs(outputs);
        // Committed before any request of this start exists (see `ledger::mss_key`).
        let keys = begin_incarnation(&mut conn, fence_epoch, clock.now_ms()).map_err(|e| {
            LedgerError::Open {
                path: options.shown(),
                message: format!("cannot record this start's incarnation: {e}"),
            }
        })?;
        published.publish(
            &policy,
            (&state.usage, &state.queues),
            (&state.queue, state.priority_demand()),
        );
        Ok(Writer {
            conn,
            keys: Arc::new(keys),
            policy,
            clock,
            state,
            batch_max: options.commit_batch_max.max(1),
            retry: options.retry,
            ready,
            published,
            metrics: options.metrics.clone(),
            file,
            fence_epoch,
            fenced: false,
            volumes_stale: false,
            reloads: Default::default(),
        })
    }
}

/// The groups left out of `policy` that still have unfinished requests, as an error.
pub(super) fn refuse_removed_groups(
    db: &Db<'_>,
    policy: &PolicySettings,
) -> Result<(), LedgerError> {
    let removed = removed_groups(db, policy)?;
    if removed.0.is_empty() {
        return Ok(());
    }
    Err(LedgerError::RemovedGroups(removed))
}

/// This start's incarnation of the MSS keys, recorded in a write transaction of its own
/// (fenced at `fence_epoch` on PostgreSQL).
fn begin_incarnation(
    conn: &mut DbConn,
    fence_epoch: Option<i64>,
    now: i64,
) -> Result<MssKeys, DbError> {
    let tx = write_transaction(conn, fence_epoch)?;
    let keys = MssKeys::begin(&tx, now)?;
    tx.commit()?;
    Ok(keys)
}

/// The writer's memory for `policy`, from the rows and aggregates (`idempotency` is not group
/// indexed: the caller loads or keeps it). In `tx`, a write transaction (fenced on PostgreSQL)
/// committed here: what it writes for `policy` (the groups' rows, aggregates rebuilt for a new
/// usage model) is committed only once the whole memory was read, so a load that fails (a
/// refused reload) leaves the database as it was.
pub(super) fn load_state(
    tx: Tx<'_>,
    policy: &PolicySettings,
    now: i64,
    idempotency: Idempotency,
) -> Result<WriterState, LedgerError> {
    let state = read_state(&tx, policy, now, idempotency)?;
    tx.commit()?;
    Ok(state)
}

/// [`load_state`]'s work, in its transaction.
fn read_state(
    conn: &Db<'_>,
    policy: &PolicySettings,
    now: i64,
    idempotency: Idempotency,
) -> Result<WriterState, LedgerError> {
    add_groups(conn, policy)?;
    volumes::enter_mode(conn, policy)?;
    let rows = RowState::read(conn, policy)?;
    finish_state(conn, policy, now, rows, idempotency)
}

/// The writer's memory for `policy` from `rows` (the part per request row, read already) and
/// what is read here: usage (rebuilt, and written in the caller's transaction, for a changed
/// usage model), the held counts and FBSNG queue priorities (per group), the volumes in flight
/// and the last release sequence. Called after `add_groups`.
pub(super) fn finish_state(
    conn: &Db<'_>,
    policy: &PolicySettings,
    now: i64,
    rows: RowState,
    idempotency: Idempotency,
) -> Result<WriterState, LedgerError> {
    let usage = load_usage(conn, policy, now)?;
    let held = usage::group_counts(conn, policy)?
        .into_iter()
        .map(|c| c.held)
        .collect();
    info!(fair_total = %usage.at(now).fair_total(), model = policy.usage_model.name(),
        "ledger usage loaded");
    if !rows.queue.is_empty() {
        info!(
            queued = rows.queue.len(),
            mode = policy.order.release.mode.name(),
            "held release queue loaded"
        );
    }
    let mut volumes = rows.volumes;
    volumes::add_flights(conn, policy, now, &mut volumes)?;
    if !volumes.is_empty() {
        info!(
            queued = volumes.len(),
            in_flight = volumes.in_flight_requests(),
            "volume release queue loaded"
        );
    }
    let release_seq = volumes::last_release_seq(conn)?;
    let queues = load_fbsng_priorities(conn, policy)?;
    // Which groups repay a ride's lead is not in the rows: every group ahead of its share does
    // (a reload or a rollback gives the queue the set it had instead).
    volumes.repay_every_lead(&ShareSnapshot::new(policy, usage.at(now), &queues));
    Ok(WriterState::new(
        usage,
        held,
        rows.priority_waiting,
        (rows.queue, rows.outstanding, queues),
        idempotency,
    )
    .with_volumes(&policy.order.release.volumes, volumes, release_seq)
    .with_queued(rows.queued)
    .with_carriers(rows.carriers))
}

/// A row for every configured group; a warning for stored usage of a group no longer
/// configured.
pub(super) fn add_groups(conn: &Db<'_>, policy: &PolicySettings) -> Result<(), LedgerError> {
    for g in &policy.groups {
        conn.execute(
            "INSERT INTO groups(path) VALUES (?1) ON CONFLICT DO NOTHING",
            params![g.path.as_str()],
        )?;
    }
    let rows = conn.query_rows("SELECT path, usage FROM groups", params![], |r| {
        Ok((r.get::<String>(0)?, r.get::<Wide>(1)?))
    })?;
    for (path, Wide(usage)) in rows {
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
fn load_usage(db: &Db<'_>, policy: &PolicySettings, now: i64) -> Result<UsageBook, LedgerError> {
    let started = std::time::Instant::now();
    let loaded = usage::load_book(db, policy, now)?;
    if loaded.rebuilt {
        usage::persist_rebuilt(db, policy, &loaded.book)?;
        info!(
            model = %policy.usage_model.describe(),
            millis = started.elapsed().as_millis() as u64,
            "usage aggregates rebuilt from the requests for a changed usage model"
        );
    } else {
        usage::store_model(db, policy, &loaded.book)?;
    }
    Ok(loaded.book)
}

fn load_idempotency(conn: &Db<'_>) -> Result<Idempotency, LedgerError> {
    // Sized once: a map grown by doubling leaves its outgrown tables (as much again as the
    // final one) to the allocator.
    let rows: i64 = conn.query_one("SELECT COUNT(*) FROM idempotency", params![], |r| r.get(0))?;
    let mut idempotency = Idempotency::with_capacity(usize::try_from(rows).unwrap_or(0));
    conn.for_each("SELECT id, fingerprint FROM idempotency", params![], |r| {
        let (id, fp) = (r.get::<i64>(0)?, r.get::<i64>(1)?);
        idempotency.insert(fp as u64, id);
        Ok::<_, DbError>(())
    })?;
    conn.for_each(
        "SELECT fingerprint FROM idempotency_finished",
        params![],
        |r| {
            idempotency.finished(r.get::<i64>(0)? as u64);
            Ok::<_, DbError>(())
        },
    )?;
    Ok(idempotency)
}

/// The queued-bytes tallies: the bytes of fair-share requests not finished, per group and per
/// user of a station (each unfinished state through its partial index, as `removed.rs` reads
/// them).
pub(super) fn load_queued_bytes(
    conn: &Db<'_>,
    policy: &PolicySettings,
) -> Result<QueuedBytes, LedgerError> {
    let mut tally = QueuedBytes::default();
    let columns = "group_path, station, user_name, size_bytes";
    let sql = format!(
        // Row by row, not SUM(): a sum of sizes may pass i64, which SQLite refuses.
        "SELECT {columns} FROM requests WHERE state = 'held' \
         UNION ALL SELECT {columns} FROM requests WHERE state = 'queued' \
         UNION ALL SELECT {columns} FROM requests WHERE state = 'accepted' \
         UNION ALL SELECT {columns} FROM requests WHERE state = 'riding' \
         UNION ALL SELECT {columns} FROM requests WHERE state IN ('submitted', 'running')"
    );
    conn.for_each(&sql, params![], |r| {
        let path: String = r.get(0)?;
        let fair = policy.group_by_path(&path).filter(|&g| {
            matches!(
                policy.group(g).kind,
                crate::domain::GroupKind::FairShare { .. }
            )
        });
        if let Some(g) = fair {
            let (station, user): (String, String) = (r.get(1)?, r.get(2)?);
            let owner = Owner {
                station: &station,
                user: &user,
            };
            tally.add(g, owner, i128::from(r.get::<i64>(3)?.max(0)));
        }
        Ok::<_, DbError>(())
    })?;
    Ok(tally)
}

/// The held release queue, from the rows `queued` (empty in the volumes mode).
pub(super) fn load_held_queue(
    conn: &Db<'_>,
    policy: &PolicySettings,
) -> Result<HeldQueue, LedgerError> {
    // The volumes mode keeps its own queue (`volumes::load_volume_queue`). `FALSE`, not `0`:
    // PostgreSQL wants a boolean after WHERE.
    let where_queued = if policy.order.volumes() {
        "FALSE"
    } else {
        "state = 'queued'"
    };
    let expected: i64 = conn.query_one(
        &format!("SELECT COUNT(*) FROM requests WHERE {where_queued}"),
        params![],
        |r| r.get(0),
    )?;
    let mut stmt = conn.prepare(&format!(
        "SELECT {CANDIDATE_COLUMNS} FROM requests WHERE {where_queued} ORDER BY id"
    ))?;
    let rows = stmt.query_map(params![], |r| read_candidate(policy, r))?;
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
    Ok(queue)
}

/// The slots outstanding per library: rows `accepted`, `submitted`, `running`.
pub(super) fn load_outstanding(conn: &Db<'_>) -> Result<HashMap<String, u32>, LedgerError> {
    let mut outstanding = HashMap::new();
    let rows = conn.query_rows(
        "SELECT library, SUM(slots) FROM requests \
         WHERE state IN ('accepted', 'submitted', 'running') GROUP BY library",
        params![],
        |r| Ok((r.get::<String>(0)?, r.get::<i64>(1)?)),
    )?;
    for (lib, n) in rows {
        outstanding.insert(lib, n.clamp(0, i64::from(u32::MAX)) as u32);
    }
    Ok(outstanding)
}

/// The FBSNG queue priorities, from the groups' rows.
fn load_fbsng_priorities(conn: &Db<'_>, policy: &PolicySettings) -> Result<Queues, LedgerError> {
    let mut queues = Queues::new(&policy.order.fbsng);
    let rows = conn.query_rows(
        "SELECT path, queue_priority FROM groups WHERE queue_priority IS NOT NULL",
        params![],
        |r| Ok((r.get::<String>(0)?, r.get::<i64>(1)?)),
    )?;
    for (path, p) in rows {
        if let Some(g) = policy.group_by_path(&path) {
            if let Some(slot) = queues.priority.get_mut(g.0) {
                *slot = p;
            }
        }
    }
    Ok(queues)
}

#[cfg(test)]
impl Writer {
    /// What the memory holds that the committed rows do not say, as start-up would load them
    /// under the policy in force (in a transaction rolled back): the held counts, the slots
    /// outstanding, the queued-bytes tallies, the queues' sizes, the priority requests waiting
    /// must be equal, and so must the station-side copies of the unfinished reads; every read
    /// the rows say may carry its file must be in the carrier map (a stale entry there is only
    /// a hint).
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
            format!("{:?}", live.queued.users_sorted()),
            format!("{:?}", rows.queued.users_sorted()),
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
        let table = load_idempotency(&self.conn.db())?;
        differ(
            "fingerprints",
            format!("{:?}", self.state.idempotency.entries()),
            format!("{:?}", table.entries()),
        );
        let db = self.conn.db();
        let count = |sql: &str| -> Result<i64, LedgerError> {
            Ok(db.query_one(sql, params![], |r| r.get(0))?)
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
        let finals_sql =
            format!("SELECT id, station, client_request_id FROM requests WHERE state IN {finals}");
        let mut missing = Vec::new();
        db.for_each(&finals_sql, params![], |r| {
            let (id, station, crid): (i64, String, String) = (r.get(0)?, r.get(1)?, r.get(2)?);
            let fp = super::idempotency::fingerprint(&station, &crid) as i64;
            let n: i64 = db.query_one(
                "SELECT COUNT(*) FROM idempotency_finished WHERE fingerprint = ?1 AND id = ?2",
                params![fp, id],
                |r| r.get(0),
            )?;
            if n != 1 || !self.state.idempotency.may_have_finished(fp as u64) {
                missing.push(id);
            }
            Ok::<_, DbError>(())
        })?;
        differ(
            "final requests without their fingerprint in `idempotency_finished` and its filter",
            format!("{missing:?}"),
            "[]".into(),
        );
        // A carrier whose caller asked to cancel it carries nothing more (`carrier_for`
        // forgets it when it meets it).
        let cancelling = |id: &i64| {
            db.query_one(
                "SELECT cancel_requested FROM requests WHERE id = ?1",
                params![id],
                |r| r.get::<bool>(0),
            )
            .unwrap_or(false)
        };
        let outputs = Outputs::load(&db, self.state.outputs.rule())?;
        differ(
            "station-side copies held",
            format!("{:?}", self.state.outputs.held_by_id()),
            format!("{:?}", outputs.held_by_id()),
        );
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

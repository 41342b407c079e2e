//! Questions about the writer's memory, answered off the writer: the writer publishes its usage
//! and FBSNG queue priorities after every commit ([`Published`], O(groups)), and the questions
//! run on the read pool against the committed rows: a queued request's placement now (explain),
//! what a ranking of the queue needs, and the requests at the MSS whose priority the policy now
//! puts elsewhere. None of them is a writer command.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::db::{params, Db, DbError, DbResult, Tx};

use super::candidate::{read_candidate, CANDIDATE_COLUMNS};
use super::stored_explain::{Explanation, StoredExplain};
use super::volume_wait::volume_wait;
use super::{NewPriority, QueuedPlacement, RankInputs};
use crate::domain::PolicySettings;
use crate::policy::fbsng::Queues;
use crate::policy::order::{place, ShareSnapshot};
use crate::policy::queue::{HeldQueue, RankKey};
use crate::policy::reserve::{reservation, PriorityDemand};
use crate::policy::transition::{reprioritise_pass, reprioritised, Waiting};
use crate::shares::UsageBook;

/// The writer's memory as of its latest commit.
pub(super) struct Memory {
    /// The policy the writer decides with: the usage and queues are indexed by its groups.
    pub policy: Arc<PolicySettings>,
    usage: UsageBook,
    queues: Queues,
    /// Requests queued per library (the held queue's).
    waiting: Vec<(String, usize)>,
    /// What the writer saw of the priority classes (the drive reservation's input).
    priority: PriorityDemand,
}

/// Where the writer publishes its memory.
pub(super) struct Published {
    latest: Mutex<Option<Arc<Memory>>>,
    /// The policy of the latest memory (the one given at open until the writer loaded).
    policy: Mutex<Arc<PolicySettings>>,
    /// Held by the writer from the start of a transaction until its memory is published (or
    /// the transaction rolled back), and by a question while it opens its read snapshot and
    /// takes the memory: so the rows a question reads and the memory it places them with are
    /// of the same commit. (Taken first, a memory could miss the charge of a row committed
    /// before the snapshot: its group would look lighter than it is.)
    gate: Mutex<()>,
}

impl Published {
    pub fn new(policy: Arc<PolicySettings>) -> Published {
        Published {
            latest: Mutex::new(None),
            policy: Mutex::new(policy),
            gate: Mutex::new(()),
        }
    }

    pub fn publish(
        &self,
        policy: &Arc<PolicySettings>,
        (usage, queues): (&UsageBook, &Queues),
        (queue, priority): (&HeldQueue, PriorityDemand),
    ) {
        let memory = Arc::new(Memory {
            policy: policy.clone(),
            usage: usage.clone(),
            queues: queues.clone(),
            waiting: queue.waiting_by_library(),
            priority,
        });
        if let Ok(mut latest) = self.latest.lock() {
            *latest = Some(memory);
        }
        *self
            .policy
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = policy.clone();
    }

    /// The writer's side of the gate, held across a transaction and its publish.
    pub fn gate(&self) -> MutexGuard<'_, ()> {
        self.gate
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A read transaction on `c` whose snapshot is of the same commit as the memory returned
    /// with it (`None` only before the writer loaded). The snapshot is fixed by a first read
    /// while the gate is held.
    pub fn snapshot<'c>(&self, c: &'c Db<'_>) -> DbResult<(Tx<'c>, Option<Arc<Memory>>)> {
        let _gate = self.gate();
        let tx = c.snapshot()?;
        Ok((tx, self.latest()))
    }

    /// The policy of the latest memory.
    pub fn policy(&self) -> Arc<PolicySettings> {
        self.policy
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The latest memory (`None` only before the writer loaded).
    pub fn latest(&self) -> Option<Arc<Memory>> {
        self.latest.lock().ok()?.clone()
    }
}

impl Memory {
    /// The usage rolled to `now` (windows past the depth dropped, as the writer does).
    fn usage_at(&self, now: i64) -> UsageBook {
        let mut usage = self.usage.clone();
        usage.roll(now);
        usage
    }

    /// Requests queued for `library` as of this memory's commit.
    pub fn waiting(&self, library: &str) -> usize {
        (self.waiting.iter())
            .find(|(name, _)| name == library)
            .map_or(0, |(_, n)| *n)
    }

    /// Usage frozen at `now` and the queue priorities, for a ranking built off the writer.
    pub fn rank_inputs(&self, now: i64) -> RankInputs {
        RankInputs {
            usage: self.usage_at(now).snapshot(now),
            queues: self.queues.clone(),
            now_ms: now,
        }
    }
}

/// Queued request `id`'s placement now (`None` when it is not queued): one placement, not a
/// walk of the queue.
pub(super) fn explain_queued(
    c: &Db<'_>,
    memory: &Memory,
    id: i64,
    now: i64,
) -> DbResult<Option<QueuedPlacement>> {
    let policy = &*memory.policy;
    let candidate = c
        .query_opt(
            &format!(
                "SELECT {CANDIDATE_COLUMNS}, volume, volume_source IS NULL FROM requests \
                 WHERE id = ?1 AND state = 'queued'"
            ),
            params![id],
            |r| {
                let volume: Option<String> = r.get(10)?;
                let unanswered: bool = r.get(11)?;
                Ok(read_candidate(policy, r)?.map(|c| (c, volume, unanswered)))
            },
        )?
        .flatten();
    let Some((candidate, volume, unanswered)) = candidate else {
        return Ok(None);
    };
    let usage = memory.usage_at(now);
    let standing = ShareSnapshot::new(policy, usage.at(now), &memory.queues);
    let p = place(&policy.order, &standing, &candidate, now);
    let volume = if policy.order.volumes() {
        let at = (&candidate, volume.as_deref(), unanswered);
        Some(volume_wait(c, policy, &standing, at, now)?)
    } else {
        None
    };
    let reserve = reservation(
        &policy.order.release.reserve,
        &candidate.library,
        memory.priority,
        now,
    );
    let held_back = policy.order.held() || policy.order.volumes();
    Ok(Some(QueuedPlacement {
        explain: Explanation::from(&p.explain),
        key: RankKey::of(&candidate, &p),
        library: candidate.library,
        volume,
        drive_reserve: (held_back && reserve.holds()).then_some(reserve),
    }))
}

/// Requests queued at the MSS whose priority the policy now puts elsewhere, at most `max`: the
/// rows read here, the pass decided by `transition::reprioritise_pass` (the one the simulator's
/// engine follows): a fair-share request not released in a `volumes` batch (`release_seq`
/// set), placed as `transition::replaced`, lowest ids first.
pub(super) fn reprioritise(
    c: &Db<'_>,
    memory: &Memory,
    keys: &super::mss_key::MssKeys,
    max: usize,
    now: i64,
) -> DbResult<Vec<NewPriority>> {
    let policy = &*memory.policy;
    let sql = format!(
        "SELECT {CANDIDATE_COLUMNS}, attempt, mss_priority, class, mss_id, file, \
         release_seq IS NOT NULL FROM requests \
         WHERE state IN ('submitted', 'running') AND state = 'submitted' ORDER BY id"
    );
    let mut waiting = Vec::new();
    let mut transfers = HashMap::new();
    c.for_each(&sql, params![], |r| {
        let fair = r.get::<String>(12)? != "priority";
        if !reprioritised(fair, r.get(15)?) {
            return Ok::<_, DbError>(());
        }
        let Some(candidate) = read_candidate(policy, r)? else {
            return Ok(());
        };
        let attempt = r.get::<i64>(10)?.max(0) as u32;
        let transfer = mss_adapters::TransferRef {
            key: keys.key(candidate.id),
            attempt,
            mss_id: r.get(13)?,
            file: r.get(14)?,
            size_bytes: candidate.size_bytes,
        };
        transfers.insert(candidate.id, transfer);
        let sent = r.get(11)?;
        waiting.push(Waiting { candidate, sent });
        Ok(())
    })?;
    let usage = memory.usage_at(now);
    let standing = ShareSnapshot::new(policy, usage.at(now), &memory.queues);
    let pass = reprioritise_pass(&policy.order, &standing, now, waiting, max);
    Ok((pass.into_iter())
        .filter_map(|p| {
            let transfer = transfers.remove(&p.id)?;
            Some(NewPriority {
                id: p.id,
                attempt: transfer.attempt,
                transfer,
                old_priority: p.sent,
                mss_priority: p.now,
                explain: StoredExplain::from(&p.with.explain),
            })
        })
        .collect())
}

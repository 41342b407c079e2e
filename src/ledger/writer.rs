//! The writer thread: the one owner of the write connection. It takes every command waiting on
//! its channel, applies them in one transaction (group commit), and answers only after COMMIT.
//! If anything fails, the whole group is rolled back, the in-memory usage is put back as it was,
//! and every caller gets the error: no partial state, no answer for anything not on disk.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use mss_adapters::{EventCursor, EventKind, MssEvent};
use rusqlite::{params, Connection, OptionalExtension, Transaction};
use tokio::sync::{mpsc, oneshot, Notify};
use tracing::{debug, error, info, warn};

use super::aggregates::{HourRow, ReportDeltas};
use super::read::parse_state;
use super::usage;
use super::wide::Wide;
use super::{
    Accepted, AfterSubmit, CancelOutcome, Command, LedgerError, LedgerOptions, NewPriority,
    NewRequest, QueuedPlacement, RankInputs, SubmittedTransfer,
};
use crate::clock::Clock;
use crate::domain::{Class, RequestState};
use crate::domain::{GroupId, GroupKind, PolicySettings, RetrySettings};
use crate::policy;
use crate::policy::fbsng::Queues;
use crate::policy::order::{is_fair, place, Algorithm, Candidate, Placement, Standing};
use crate::policy::queue::HeldQueue;
use crate::shares::limits::held_by;
use crate::shares::UsageBook;

pub(super) struct Writer {
    conn: Connection,
    policy: Arc<PolicySettings>,
    clock: Arc<dyn Clock>,
    /// Every group's usage under the configured model.
    usage: UsageBook,
    /// Held requests per group (by group id).
    held: Vec<u64>,
    /// Priority-class requests queued at the MSS (submitted, not yet running).
    priority_waiting: i64,
    /// The held release mode's queue (rows in state `queued`).
    queue: HeldQueue,
    /// Slots taken at the MSS per library (requests accepted, submitted or running).
    outstanding: HashMap<String, u32>,
    /// FBSNG queue priorities per group.
    queues: Queues,
    idempotency: Idempotency,
    batch_max: usize,
    retry: RetrySettings,
    ready: Arc<Notify>,
    metrics: Arc<crate::metrics::Metrics>,
    /// The database file as opened: checked before every COMMIT (see `ledger::identity`).
    file: super::identity::DbFile,
}

/// Longest the writer waits for more commands before committing what it has.
const GATHER_MAX_WAIT: std::time::Duration = std::time::Duration::from_micros(300);
/// How often it looks while waiting.
const GATHER_POLL: std::time::Duration = std::time::Duration::from_micros(50);

/// Per-group changes of one transaction, written once before COMMIT.
#[derive(Default)]
struct Deltas {
    /// path -> (usage, bytes, pending, held)
    groups: HashMap<String, (i128, i128, i64, i64)>,
    /// (path, window) -> usage, for the windows model
    windows: HashMap<(String, i64), i128>,
    /// Groups whose half-life accumulator changed (written as absolute values).
    decayed: BTreeSet<GroupId>,
}

/// Fingerprint -> request ids, for replays of (station, client_request_id). Almost every
/// fingerprint has one id; the rare collision keeps the others in `more`.
#[derive(Default)]
struct Idempotency {
    first: HashMap<u64, i64>,
    more: HashMap<u64, Vec<i64>>,
}

impl Idempotency {
    fn candidates(&self, fp: u64) -> impl Iterator<Item = i64> + '_ {
        self.first
            .get(&fp)
            .copied()
            .into_iter()
            .chain(self.more.get(&fp).into_iter().flatten().copied())
    }

    fn insert(&mut self, fp: u64, id: i64) {
        match self.first.entry(fp) {
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(id);
            }
            std::collections::hash_map::Entry::Occupied(_) => {
                self.more.entry(fp).or_default().push(id)
            }
        }
    }

    /// Undo `insert`s of a rolled-back transaction.
    fn remove(&mut self, fp: u64, id: i64) {
        if let Some(v) = self.more.get_mut(&fp) {
            v.retain(|&x| x != id);
            if v.is_empty() {
                self.more.remove(&fp);
            }
        }
        if self.first.get(&fp) == Some(&id) {
            self.first.remove(&fp);
        }
    }
}

/// A stable 64-bit fingerprint of (station, client_request_id): FNV-1a with a splitmix
/// finaliser. Stored on disk, so it must never change; 0xff cannot occur in UTF-8 and separates
/// the two strings unambiguously.
pub(super) fn fingerprint(station: &str, client_request_id: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in station
        .bytes()
        .chain([0xff])
        .chain(client_request_id.bytes())
    {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// What one transaction is working with.
struct Ctx<'a> {
    policy: &'a PolicySettings,
    usage: &'a mut UsageBook,
    held: &'a mut Vec<u64>,
    priority_waiting: &'a mut i64,
    queue: &'a mut HeldQueue,
    /// How to put the queue back if the transaction rolls back.
    queue_undo: Vec<QueueUndo>,
    outstanding: &'a mut HashMap<String, u32>,
    queues: &'a mut Queues,
    queues_changed: bool,
    report: ReportDeltas,
    idempotency: &'a mut Idempotency,
    /// Fingerprints added in this transaction, removed again if it rolls back.
    added: Vec<(u64, i64)>,
    deltas: Deltas,
    retry: &'a RetrySettings,
    now: i64,
    /// Some request became ready to submit.
    ready: bool,
}

/// One change to the in-memory queue, to undo on rollback.
enum QueueUndo {
    Pushed(i64),
    Removed(Candidate),
    Passed(i64),
}

/// One change to a group's figures.
#[derive(Default, Clone, Copy)]
struct Charge {
    /// Benefit charged (negative: refunded) ...
    usage: i128,
    /// ... dated (a refund names the date of the charge it takes back).
    at_ms: i64,
    bytes: i128,
    pending: i64,
    held: i64,
}

impl Ctx<'_> {
    fn enqueue(&mut self, c: Candidate) {
        self.queue_undo.push(QueueUndo::Pushed(c.id));
        self.queue.push(c);
    }

    fn dequeue(&mut self, id: i64) {
        if let Some(c) = self.queue.remove(id) {
            self.queue_undo.push(QueueUndo::Removed(c));
        }
    }

    /// Slots a request takes at the MSS from now (`+`) or no longer (`-`).
    fn occupy(&mut self, library: &str, slots: u32, taken: bool) {
        let e = self.outstanding.entry(library.to_string()).or_default();
        *e = if taken {
            e.saturating_add(slots)
        } else {
            e.saturating_sub(slots)
        };
    }

    /// FBSNG: a request of `group` started (held mode: was released).
    fn fbsng_started(&mut self, group: GroupId) {
        if self.policy.order.algorithm != Algorithm::Fbsng || !is_fair(self.policy, group) {
            return;
        }
        let fair: Vec<bool> = self
            .policy
            .group_ids()
            .map(|g| is_fair(self.policy, g))
            .collect();
        self.queues
            .started(&self.policy.order.fbsng, &fair, group.0);
        self.queues_changed = true;
    }

    /// A request of `class` moves from `from` to `to`: keep the count of priority-class
    /// requests queued at the MSS. (One still in the broker is submitted before any fair-share
    /// request, so only the MSS can start a fair-share request over it; counting the moments
    /// between its commit and its submission would count the submit loop's latency.)
    fn moved(&mut self, class: Class, from: Option<RequestState>, to: RequestState) {
        if class != Class::Priority {
            return;
        }
        let waiting = |s: Option<RequestState>| matches!(s, Some(RequestState::Submitted));
        *self.priority_waiting += i64::from(waiting(Some(to))) - i64::from(waiting(from));
    }

    /// Change a group's usage, bytes and counts, in memory and in this transaction's deltas.
    fn charge(&mut self, path: &str, c: Charge) {
        if let Some(g) = self.policy.group_by_path(path) {
            if c.usage != 0 {
                self.usage.add(g, c.usage, c.at_ms);
                match self.policy.usage_model {
                    crate::shares::UsageModel::HalfLife { .. } => {
                        self.deltas.decayed.insert(g);
                    }
                    crate::shares::UsageModel::Windows { .. } => {
                        let w = self.policy.usage_model.window_of(c.at_ms);
                        *self
                            .deltas
                            .windows
                            .entry((path.to_string(), w))
                            .or_default() += c.usage;
                    }
                    crate::shares::UsageModel::Cumulative => {}
                }
            }
            if let Some(h) = self.held.get_mut(g.0) {
                *h = h.saturating_add_signed(c.held);
            }
        }
        let e = self.deltas.groups.entry(path.to_string()).or_default();
        e.0 += c.usage;
        e.1 += c.bytes;
        e.2 += c.pending;
        e.3 += c.held;
    }
}

/// A caller's answer, held until the transaction's fate is known.
enum Reply {
    Accept(
        oneshot::Sender<Result<Vec<Accepted>, LedgerError>>,
        Vec<Accepted>,
    ),
    Submitted(
        oneshot::Sender<Result<Vec<AfterSubmit>, LedgerError>>,
        Vec<AfterSubmit>,
    ),
    Rejected(oneshot::Sender<Result<(), LedgerError>>),
    Lost(oneshot::Sender<Result<bool, LedgerError>>, bool),
    Checked(oneshot::Sender<Result<(), LedgerError>>),
    Events(oneshot::Sender<Result<usize, LedgerError>>, usize),
    Cancel(
        oneshot::Sender<Result<CancelOutcome, LedgerError>>,
        CancelOutcome,
    ),
    Release(oneshot::Sender<Result<usize, LedgerError>>, usize),
}

impl Reply {
    // A caller that went away (client disconnected) needs no answer: send errors are ignored.
    fn ok(self) {
        let _ = match self {
            Reply::Accept(tx, v) => tx.send(Ok(v)).map_err(drop),
            Reply::Submitted(tx, v) => tx.send(Ok(v)).map_err(drop),
            Reply::Rejected(tx) => tx.send(Ok(())).map_err(drop),
            Reply::Lost(tx, v) => tx.send(Ok(v)).map_err(drop),
            Reply::Checked(tx) => tx.send(Ok(())).map_err(drop),
            Reply::Events(tx, v) => tx.send(Ok(v)).map_err(drop),
            Reply::Cancel(tx, v) => tx.send(Ok(v)).map_err(drop),
            Reply::Release(tx, v) => tx.send(Ok(v)).map_err(drop),
        };
    }

    fn err(self, message: &str) {
        let e = || LedgerError::Storage(message.to_string());
        let _ = match self {
            Reply::Accept(tx, _) => tx.send(Err(e())).map_err(drop),
            Reply::Submitted(tx, _) => tx.send(Err(e())).map_err(drop),
            Reply::Rejected(tx) => tx.send(Err(e())).map_err(drop),
            Reply::Lost(tx, _) => tx.send(Err(e())).map_err(drop),
            Reply::Checked(tx) => tx.send(Err(e())).map_err(drop),
            Reply::Events(tx, _) => tx.send(Err(e())).map_err(drop),
            Reply::Cancel(tx, _) => tx.send(Err(e())).map_err(drop),
            Reply::Release(tx, _) => tx.send(Err(e())).map_err(drop),
        };
    }
}

impl Writer {
    /// Make sure every configured group has a row, and load usage from the stored aggregates.
    pub fn load(
        mut conn: Connection,
        policy: Arc<PolicySettings>,
        clock: Arc<dyn Clock>,
        options: &LedgerOptions,
        ready: Arc<Notify>,
    ) -> Result<Writer, LedgerError> {
        let file = super::identity::DbFile::of(&options.path)?;
        let tx = conn.transaction()?;
        for g in &policy.groups {
            tx.execute(
                "INSERT OR IGNORE INTO groups(path) VALUES (?1)",
                [g.path.as_str()],
            )?;
        }
        tx.commit()?;
        {
            let mut stmt = conn.prepare("SELECT path, usage FROM groups")?;
            let rows =
                stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, Wide>(1)?)))?;
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
        }
        let now = clock.now_ms();
        let started = std::time::Instant::now();
        let loaded = usage::load_book(&conn, &policy, now)?;
        let usage = loaded.book;
        let tx = conn.transaction()?;
        if loaded.rebuilt {
            usage::persist_rebuilt(&tx, &policy, &usage)?;
            info!(
                model = %policy.usage_model.describe(),
                millis = started.elapsed().as_millis() as u64,
                "usage aggregates rebuilt from the requests for a changed usage model"
            );
        } else {
            usage::store_model(&tx, &policy, &usage)?;
        }
        tx.commit()?;
        let held = usage::group_counts(&conn, &policy)?
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
        let mut idempotency = Idempotency::default();
        {
            let mut stmt = conn.prepare("SELECT id, fingerprint FROM idempotency")?;
            let rows = stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))?;
            for row in rows {
                let (id, fp) = row?;
                idempotency.insert(fp as u64, id);
            }
        }
        {
            use crate::shares::UsageLookup;
            info!(fair_total = %usage.at(now).fair_total(), model = policy.usage_model.name(), requests = idempotency.first.len(), "ledger usage loaded");
        }
        let (queue, outstanding, queues) = load_order_state(&conn, &policy)?;
        if !queue.is_empty() {
            info!(
                queued = queue.len(),
                mode = policy.order.release.mode.name(),
                "held release queue loaded"
            );
        }
        Ok(Writer {
            conn,
            policy,
            clock,
            usage,
            held,
            priority_waiting,
            queue,
            outstanding,
            queues,
            idempotency,
            batch_max: options.commit_batch_max.max(1),
            retry: options.retry.clone(),
            ready,
            metrics: options.metrics.clone(),
            file,
        })
    }

    /// Serve commands until every sender is gone.
    pub fn run(mut self, mut rx: mpsc::Receiver<Command>) {
        let mut last = 0usize;
        while let Some(first) = rx.blocking_recv() {
            let commands = self.gather(first, &mut rx, last);
            last = commands.len();
            self.commit_group(commands);
        }
        debug!("ledger writer stopped");
    }

    /// Take what is waiting. Under load, callers answered by the last commit send again within
    /// microseconds; a commit costs about the same whether it carries 20 requests or 200 (one
    /// fsync, the same hot pages), so wait briefly for about as many as last time before
    /// committing. A lone request (last commit carried one) never waits.
    fn gather(
        &self,
        first: Command,
        rx: &mut mpsc::Receiver<Command>,
        last: usize,
    ) -> Vec<Command> {
        let mut commands = vec![first];
        let target = last.min(self.batch_max);
        let deadline = std::time::Instant::now() + GATHER_MAX_WAIT;
        loop {
            while commands.len() < self.batch_max {
                match rx.try_recv() {
                    Ok(c) => commands.push(c),
                    Err(_) => break,
                }
            }
            let enough = commands.len() * 4 >= target * 3;
            if target <= 1 || enough || std::time::Instant::now() >= deadline {
                return commands;
            }
            std::thread::sleep(GATHER_POLL);
        }
    }

    fn commit_group(&mut self, commands: Vec<Command>) {
        // Questions answered from memory, without a transaction.
        let commands: Vec<Command> = commands
            .into_iter()
            .filter_map(|c| self.answer_from_memory(c))
            .collect();
        if commands.is_empty() {
            return;
        }
        // The release timer's command when nothing is held: answer without a transaction (and
        // without counting a commit that wrote nothing).
        if self.held.iter().all(|&h| h == 0)
            && self.queue.is_empty()
            && commands
                .iter()
                .all(|c| matches!(c, Command::Release { .. }))
        {
            for c in commands {
                if let Command::Release { reply } = c {
                    let _ = reply.send(Ok(0));
                }
            }
            return;
        }
        let started = std::time::Instant::now();
        let count = commands.len();
        let saved = (
            self.usage.clone(),
            self.held.clone(),
            self.priority_waiting,
            self.outstanding.clone(),
            self.queues.clone(),
        );
        let now = self.clock.now_ms();
        let rebase = self.usage.rebase(now);
        self.usage.roll(now);
        let mut ctx = Ctx {
            policy: &self.policy,
            usage: &mut self.usage,
            held: &mut self.held,
            priority_waiting: &mut self.priority_waiting,
            queue: &mut self.queue,
            queue_undo: Vec::new(),
            outstanding: &mut self.outstanding,
            queues: &mut self.queues,
            queues_changed: false,
            report: ReportDeltas::default(),
            idempotency: &mut self.idempotency,
            added: Vec::new(),
            deltas: Deltas::default(),
            retry: &self.retry,
            now,
            ready: false,
        };
        let mut replies = Vec::with_capacity(commands.len());
        let outcome = (|| -> rusqlite::Result<()> {
            let tx = self.conn.transaction()?;
            if let Some(factor) = rebase {
                tx.execute("UPDATE groups SET decayed = decayed * ?1", [factor])?;
                usage::store_model(&tx, ctx.policy, ctx.usage)?;
            }
            let mut first_error = None;
            for command in commands {
                let (reply, result) = handle(&tx, &mut ctx, command);
                replies.push(reply);
                if let Err(e) = result {
                    first_error = Some(e);
                    break;
                }
            }
            if let Some(e) = first_error {
                return Err(e);
            }
            release_queued(&tx, &mut ctx)?;
            flush_deltas(&tx, &ctx)?;
            ctx.report.flush(&tx)?;
            self.file.check()?;
            tx.commit()
        })();
        let ready = ctx.ready;
        let added = std::mem::take(&mut ctx.added);
        let undo = std::mem::take(&mut ctx.queue_undo);
        let elapsed = started.elapsed();
        self.metrics.commit_seconds.observe(elapsed.as_secs_f64());
        self.metrics.commit_commands.observe(count as f64);
        debug!(
            commands = count,
            micros = elapsed.as_micros() as u64,
            "group commit"
        );
        match outcome {
            Ok(()) => {
                for r in replies {
                    r.ok();
                }
                if ready {
                    self.ready.notify_one();
                }
            }
            Err(e) => {
                error!(error = %e, commands = replies.len(), "ledger transaction rolled back");
                (
                    self.usage,
                    self.held,
                    self.priority_waiting,
                    self.outstanding,
                    self.queues,
                ) = saved;
                for op in undo.into_iter().rev() {
                    match op {
                        QueueUndo::Pushed(id) => {
                            self.queue.remove(id);
                        }
                        QueueUndo::Removed(c) => self.queue.push(c),
                        QueueUndo::Passed(id) => {
                            if let Some(c) = self.queue.get_mut(id) {
                                c.passed = c.passed.saturating_sub(1);
                            }
                        }
                    }
                }
                for (fp, id) in added {
                    self.idempotency.remove(fp, id);
                }
                let message = e.to_string();
                for r in replies {
                    r.err(&message);
                }
            }
        }
    }
}

impl Writer {
    /// Answer a question that needs no transaction; hand anything else back.
    fn answer_from_memory(&mut self, c: Command) -> Option<Command> {
        match c {
            Command::Explain { id, reply } => {
                let now = self.clock.now_ms();
                self.usage.roll(now);
                let _ = reply.send(Ok(self.explain_queued(id, now)));
                None
            }
            Command::RankInputs { reply } => {
                let now = self.clock.now_ms();
                self.usage.roll(now);
                let _ = reply.send(Ok(self.rank_inputs(now)));
                None
            }
            Command::Reprioritise { max, reply } => {
                let now = self.clock.now_ms();
                self.usage.roll(now);
                let _ = reply.send(self.reprioritise(max, now).map_err(LedgerError::from));
                None
            }
            other => Some(other),
        }
    }

    /// One placement, whatever the queue's length: the position comes from a ranking built off
    /// the writer (`ledger::rank`).
    fn explain_queued(&self, id: i64, now: i64) -> Option<QueuedPlacement> {
        let standing = Standing::new(&self.policy, self.usage.at(now), &self.queues);
        let p = self
            .queue
            .placement(&self.policy.order, &standing, id, now)?;
        Some(QueuedPlacement { explain: p.explain })
    }

    /// What a ranking of the queue needs from memory: usage frozen now and the FBSNG queue
    /// priorities (O(groups); the queued rows are read from a snapshot off the writer).
    fn rank_inputs(&self, now: i64) -> RankInputs {
        RankInputs {
            usage: self.usage.snapshot(now),
            queues: self.queues.clone(),
            now_ms: now,
        }
    }

    /// Requests queued at the MSS whose priority the policy now puts elsewhere. Their charge is
    /// already in the usage, so they are placed with no benefit of their own.
    fn reprioritise(&self, max: usize, now: i64) -> rusqlite::Result<Vec<NewPriority>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {CANDIDATE_COLUMNS}, attempt, mss_priority, class, mss_id, file FROM requests \
             WHERE state IN ('submitted', 'running') AND state = 'submitted' \
             AND class != 'priority' ORDER BY id"
        ))?;
        let standing = Standing::new(&self.policy, self.usage.at(now), &self.queues);
        let mut out = Vec::new();
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let Some(mut c) = read_candidate(&self.policy, r)? else {
                continue;
            };
            c.benefit = 0;
            let attempt = r.get::<_, i64>(10)?.max(0) as u32;
            let old: i64 = r.get(11)?;
            let transfer = mss_adapters::TransferRef {
                key: c.id.to_string(),
                attempt,
                mss_id: r.get(13)?,
                file: r.get(14)?,
                size_bytes: c.size_bytes,
            };
            let p = place(&self.policy.order, &standing, &c, now);
            if p.mss_priority != old {
                out.push(NewPriority {
                    id: c.id,
                    attempt,
                    transfer,
                    old_priority: old,
                    mss_priority: p.mss_priority,
                    explain: explain_text(&p).unwrap_or_default(),
                });
                if out.len() >= max {
                    break;
                }
            }
        }
        Ok(out)
    }
}

/// Record priorities the MSS took (for the attempt still at the MSS, not yet running).
fn reprioritised(tx: &Transaction<'_>, items: &[NewPriority]) -> rusqlite::Result<usize> {
    let mut n = 0;
    for i in items {
        n += tx
            .prepare_cached(
                "UPDATE requests SET mss_priority = ?3, explain = ?4 \
                 WHERE id = ?1 AND attempt = ?2 AND state = 'submitted'",
            )?
            .execute(params![i.id, i.attempt, i.mss_priority, i.explain])?;
    }
    Ok(n)
}

/// Apply one command inside the transaction. The reply carries the answer to send on commit.
fn handle(
    tx: &Transaction<'_>,
    ctx: &mut Ctx<'_>,
    command: Command,
) -> (Reply, rusqlite::Result<()>) {
    match command {
        Command::Accept { items, reply } => {
            let mut out = Vec::with_capacity(items.len());
            let r = items
                .iter()
                .try_for_each(|item| accept_one(tx, ctx, item).map(|a| out.push(a)));
            (Reply::Accept(reply, out), r)
        }
        Command::Submitted { items, reply } => {
            let mut out = Vec::with_capacity(items.len());
            let r = items
                .iter()
                .try_for_each(|item| submitted_one(tx, ctx, item).map(|a| out.push(a)));
            (Reply::Submitted(reply, out), r)
        }
        Command::Rejected {
            id,
            attempt,
            reason,
            reply,
        } => (
            Reply::Rejected(reply),
            rejected(tx, ctx, id, attempt, &reason),
        ),
        Command::Lost {
            id,
            attempt,
            reason,
            reply,
        } => match lost(tx, ctx, id, attempt, &reason) {
            Ok(v) => (Reply::Lost(reply, v), Ok(())),
            Err(e) => (Reply::Lost(reply, false), Err(e)),
        },
        Command::Events {
            events,
            cursor,
            reply,
        } => {
            let mut changed = 0;
            let r = events
                .iter()
                .try_for_each(|e| apply_event(tx, ctx, e).map(|c| changed += usize::from(c)))
                .and_then(|()| cursor.as_ref().map_or(Ok(()), |c| store_cursor(tx, c)));
            (Reply::Events(reply, changed), r)
        }
        Command::Checked { ids, reply } => {
            let r = ids.iter().try_for_each(|id| {
                tx.prepare_cached("UPDATE requests SET checked_ms = ?2 WHERE id = ?1")?
                    .execute(params![id, ctx.now])
                    .map(drop)
            });
            (Reply::Checked(reply), r)
        }
        Command::Reprioritised { items, reply } => match reprioritised(tx, &items) {
            Ok(n) => (Reply::Release(reply, n), Ok(())),
            Err(e) => (Reply::Release(reply, 0), Err(e)),
        },
        // Answered from memory before the transaction; nothing to do here.
        Command::Explain { reply, .. } => {
            let _ = reply.send(Ok(None));
            (Reply::Checked(oneshot::channel().0), Ok(()))
        }
        Command::RankInputs { .. } => (Reply::Checked(oneshot::channel().0), Ok(())),
        Command::Reprioritise { reply, .. } => {
            let _ = reply.send(Ok(Vec::new()));
            (Reply::Checked(oneshot::channel().0), Ok(()))
        }
        Command::Release { reply } => match release_held(tx, ctx) {
            Ok(n) => (Reply::Release(reply, n), Ok(())),
            Err(e) => (Reply::Release(reply, 0), Err(e)),
        },
        Command::Cancel { id, reply } => match cancel(tx, ctx, id) {
            Ok(o) => (Reply::Cancel(reply, o), Ok(())),
            Err(e) => (Reply::Cancel(reply, CancelOutcome::NotFound), Err(e)),
        },
    }
}

fn accept_one(
    tx: &Transaction<'_>,
    ctx: &mut Ctx<'_>,
    item: &NewRequest,
) -> rusqlite::Result<Accepted> {
    let fp = fingerprint(&item.station, &item.client_request_id);
    let candidates: Vec<i64> = ctx.idempotency.candidates(fp).collect();
    for id in candidates {
        if let Some(a) = replayed(tx, id, item)? {
            return Ok(a);
        }
    }
    let path = ctx.policy.group(item.group).path.as_str();
    let order = &ctx.policy.order;
    let held_reason = hold_reason(ctx, item.group);
    let slots = order.release.slots(&item.extras.library, item.size_bytes);
    let mut candidate = Candidate {
        id: 0,
        group: item.group,
        library: item.extras.library.clone(),
        created_ms: ctx.now,
        size_bytes: item.size_bytes,
        benefit: item.benefit,
        qos: order.qos(item.extras.qos, &item.access_mode),
        user: item.extras.user_factor.unwrap_or(1.0),
        queue: order.queue_factor(&item.access_mode),
        slots,
        passed: 0,
    };
    // Held (feasibility cap) and queued (held release mode) requests are neither decided nor
    // charged until released; their class and priority are provisional.
    let provisional = policy::Decision {
        class: Class::Back,
        mss_priority: ctx.policy.p_back,
    };
    let (decision, state, benefit, bytes, charged_ms, explain) = if held_reason.is_some() {
        (provisional, RequestState::Held, 0, 0, None, None)
    } else if order.held() && is_fair(ctx.policy, item.group) {
        (provisional, RequestState::Queued, 0, 0, None, None)
    } else {
        let p = placement(ctx, &candidate);
        (
            policy::Decision {
                class: p.class,
                mss_priority: p.mss_priority,
            },
            RequestState::Accepted,
            item.benefit,
            item.size_bytes,
            Some(ctx.now),
            explain_text(&p),
        )
    };
    tx.prepare_cached(
        "INSERT INTO requests (station, client_request_id, user_name, file, size_bytes, \
         access_mode, physics_group, volume, direction, group_path, class, mss_priority, \
         charged, charged_bytes, state, created_ms, charged_ms, held_reason, library, slots, \
         qos, user_factor, explain, local_file, bfid) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, \
         ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25)",
    )?
    .execute(params![
        item.station,
        item.client_request_id,
        item.user,
        item.file,
        item.size_bytes as i64,
        item.access_mode,
        item.physics_group,
        item.volume,
        item.direction.as_str(),
        path,
        decision.class.as_str(),
        decision.mss_priority,
        benefit as i64,
        bytes as i64,
        state.as_str(),
        ctx.now,
        charged_ms,
        held_reason,
        item.extras.library,
        slots,
        item.extras.qos.map(|q| q.as_str()),
        item.extras.user_factor,
        explain,
        item.extras.local_file,
        item.extras.bfid,
    ])?;
    let id = tx.last_insert_rowid();
    tx.prepare_cached("INSERT INTO idempotency (id, fingerprint) VALUES (?1, ?2)")?
        .execute(params![id, fp as i64])?;
    ctx.idempotency.insert(fp, id);
    ctx.added.push((fp, id));
    let held = i64::from(state == RequestState::Held);
    let row = HourRow {
        accepted: 1,
        held,
        ..HourRow::default()
    };
    match state {
        RequestState::Accepted => {
            ctx.report.add(path, ctx.now, row.decided(decision.class));
            ctx.moved(decision.class, None, RequestState::Accepted);
            ctx.occupy(&item.extras.library, slots, true);
        }
        RequestState::Queued => {
            ctx.report.add(path, ctx.now, row);
            candidate.id = id;
            ctx.enqueue(candidate);
        }
        _ => ctx.report.add(path, ctx.now, row),
    }
    ctx.charge(
        path,
        Charge {
            usage: i128::from(benefit),
            at_ms: ctx.now,
            bytes: i128::from(bytes),
            pending: 1,
            held,
        },
    );
    ctx.ready |= state == RequestState::Accepted;
    Ok(Accepted {
        id,
        group: path.to_string(),
        class: decision.class,
        mss_priority: decision.mss_priority,
        state,
        duplicate: false,
        held_reason,
    })
}

/// Where request `c` goes now, under the configured policy.
fn placement(ctx: &Ctx<'_>, c: &Candidate) -> Placement {
    let standing = Standing::new(ctx.policy, ctx.usage.at(ctx.now), ctx.queues);
    place(&ctx.policy.order, &standing, c, ctx.now)
}

/// The explanation stored with a decision.
fn explain_text(p: &Placement) -> Option<String> {
    serde_json::to_string(&p.explain).ok()
}

/// Why a new request of group `g` is held: a feasibility cap on its path is reached, or
/// earlier requests of the group are held (they are released first, in order).
fn hold_reason(ctx: &Ctx<'_>, g: GroupId) -> Option<String> {
    if !matches!(ctx.policy.group(g).kind, GroupKind::FairShare { .. }) {
        return None; // priority classes are never held
    }
    if let Some(reason) = held_by(ctx.policy, &ctx.usage.at(ctx.now), g) {
        return Some(reason);
    }
    let waiting = ctx.held.get(g.0).copied().unwrap_or(0);
    (waiting > 0).then(|| {
        format!(
            "behind {waiting} held request(s) of `{}`, released in order",
            ctx.policy.group(g).path
        )
    })
}

/// The stored request `id`, if it really is this station's `client_request_id` (a fingerprint
/// hit is confirmed against the row).
fn replayed(
    tx: &Transaction<'_>,
    id: i64,
    item: &NewRequest,
) -> rusqlite::Result<Option<Accepted>> {
    tx.prepare_cached(
        "SELECT id, group_path, class, mss_priority, state, held_reason FROM requests \
         WHERE id = ?1 AND station = ?2 AND client_request_id = ?3",
    )?
    .query_row(params![id, item.station, item.client_request_id], |r| {
        let class: String = r.get(2)?;
        let state: String = r.get(4)?;
        Ok(Accepted {
            id: r.get(0)?,
            group: r.get(1)?,
            class: Class::parse(&class).unwrap_or(Class::Back),
            mss_priority: r.get(3)?,
            state: parse_state(4, &state)?,
            duplicate: true,
            held_reason: r.get(5)?,
        })
    })
    .optional()
}

/// The columns finalising needs.
struct Charged {
    state: RequestState,
    attempt: u32,
    group: String,
    access_mode: String,
    charged: i64,
    charged_bytes: i64,
    charged_ms: i64,
    class: Class,
    created_ms: i64,
    started_ms: Option<i64>,
    library: String,
    slots: u32,
    /// A station or operator asked to cancel it while it was at the MSS.
    cancel_requested: bool,
}

impl Charged {
    /// Whether it holds slots at the MSS (released and not finished).
    fn outstanding(&self) -> bool {
        matches!(
            self.state,
            RequestState::Accepted | RequestState::Submitted | RequestState::Running
        )
    }
}

fn load_charged(tx: &Transaction<'_>, id: i64) -> rusqlite::Result<Option<Charged>> {
    tx.prepare_cached(
        "SELECT state, attempt, group_path, access_mode, charged, charged_bytes, \
         COALESCE(charged_ms, created_ms), class, created_ms, started_ms, library, slots, \
         cancel_requested FROM requests WHERE id = ?1",
    )?
    .query_row([id], |r| {
        let state: String = r.get(0)?;
        Ok(Charged {
            state: parse_state(0, &state)?,
            attempt: r.get::<_, i64>(1)? as u32,
            group: r.get(2)?,
            access_mode: r.get(3)?,
            charged: r.get(4)?,
            charged_bytes: r.get(5)?,
            charged_ms: r.get(6)?,
            class: Class::parse(&r.get::<_, String>(7)?).unwrap_or(Class::Back),
            created_ms: r.get(8)?,
            started_ms: r.get(9)?,
            library: r.get(10)?,
            slots: r.get::<_, i64>(11)?.clamp(0, i64::from(u32::MAX)) as u32,
            cancel_requested: r.get::<_, i64>(12)? != 0,
        })
    })
    .optional()
}

/// What is stored of an error text (often the MSS's): a few hundred characters at most (room
/// for an adapter's message around the MSS text it already clipped).
fn clip_error(text: &str) -> std::borrow::Cow<'_, str> {
    mss_adapters::answer::clip(text, 500)
}

/// Move a request to a terminal state and settle its charge: `actual` bytes replace the
/// estimate (done), or the charge is refunded (failed, cancelled).
fn finalize(
    tx: &Transaction<'_>,
    ctx: &mut Ctx<'_>,
    id: i64,
    row: &Charged,
    state: RequestState,
    actual_bytes: Option<u64>,
    error: Option<&str>,
) -> rusqlite::Result<()> {
    // What the MSS reports is not bounded by `limits.max_size_bytes`: a per-request figure
    // stays an i64 column, so an absurd report saturates instead of wrapping negative.
    let (benefit, bytes) = match actual_bytes {
        Some(b) => {
            let b = b.min(i64::MAX as u64);
            let benefit = policy::benefit(ctx.policy, &row.access_mode, b);
            (i64::try_from(benefit).unwrap_or(i64::MAX), b as i64)
        }
        None => (0, 0),
    };
    tx.prepare_cached(
        "UPDATE requests SET state = ?2, charged = ?3, charged_bytes = ?4, bytes_done = ?5, \
         finished_ms = ?6, last_error = COALESCE(?7, last_error), \
         charged_ms = CASE WHEN ?3 != 0 THEN ?6 END WHERE id = ?1",
    )?
    .execute(params![
        id,
        state.as_str(),
        benefit,
        bytes,
        bytes,
        ctx.now,
        error.map(clip_error)
    ])?;
    ctx.report.add(
        &row.group,
        ctx.now,
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
    ctx.moved(row.class, Some(row.state), state);
    if row.outstanding() {
        ctx.occupy(&row.library, row.slots, false);
    }
    if row.state == RequestState::Queued {
        ctx.dequeue(id);
    }
    // The estimate is taken back at its own date; the actual is charged now, when it was
    // received.
    ctx.charge(
        &row.group,
        Charge {
            usage: -i128::from(row.charged),
            at_ms: row.charged_ms,
            bytes: -i128::from(row.charged_bytes),
            pending: -1,
            held: -i64::from(row.state == RequestState::Held),
        },
    );
    ctx.charge(
        &row.group,
        Charge {
            usage: i128::from(benefit),
            at_ms: ctx.now,
            bytes: i128::from(bytes),
            ..Charge::default()
        },
    );
    Ok(())
}

fn submitted_one(
    tx: &Transaction<'_>,
    ctx: &mut Ctx<'_>,
    item: &SubmittedTransfer,
) -> rusqlite::Result<AfterSubmit> {
    let Some(row) = load_charged(tx, item.id)? else {
        return Ok(AfterSubmit::Recorded);
    };
    if row.attempt != item.attempt {
        return Ok(AfterSubmit::Recorded);
    }
    let new_state = match row.state {
        RequestState::Accepted => RequestState::Submitted,
        other => other,
    };
    tx.prepare_cached(
        "UPDATE requests SET state = ?2, mss_id = COALESCE(mss_id, ?3), \
         submitted_ms = COALESCE(submitted_ms, ?4) WHERE id = ?1",
    )?
    .execute(params![item.id, new_state.as_str(), item.mss_id, ctx.now])?;
    ctx.moved(row.class, Some(row.state), new_state);
    Ok(if row.state == RequestState::Cancelled {
        AfterSubmit::CancelAtMss
    } else {
        AfterSubmit::Recorded
    })
}

fn rejected(
    tx: &Transaction<'_>,
    ctx: &mut Ctx<'_>,
    id: i64,
    attempt: u32,
    reason: &str,
) -> rusqlite::Result<()> {
    match load_charged(tx, id)? {
        Some(row) if row.attempt == attempt && row.state == RequestState::Accepted => {
            finalize(tx, ctx, id, &row, RequestState::Failed, None, Some(reason))
        }
        _ => Ok(()),
    }
}

/// The MSS lost an in-flight attempt: back to `accepted` as the next attempt, at once.
fn lost(
    tx: &Transaction<'_>,
    ctx: &mut Ctx<'_>,
    id: i64,
    attempt: u32,
    reason: &str,
) -> rusqlite::Result<bool> {
    let row = load_charged(tx, id)?;
    let in_flight = matches!(
        &row,
        Some(row) if row.attempt == attempt
            && matches!(row.state, RequestState::Submitted | RequestState::Running)
    );
    if let (true, Some(row)) = (in_flight, &row) {
        if row.cancel_requested {
            // Cancelled while at the MSS, which lost it: nothing is left to cancel or resend.
            finalize(tx, ctx, id, row, RequestState::Cancelled, None, None)?;
            return Ok(true);
        }
        ctx.moved(row.class, Some(row.state), RequestState::Accepted);
        tx.prepare_cached(
            "UPDATE requests SET state = 'accepted', attempt = attempt + 1, mss_id = NULL, \
             next_attempt_ms = ?2, last_error = ?3 WHERE id = ?1",
        )?
        .execute(params![id, ctx.now, reason])?;
        ctx.ready = true;
    }
    Ok(in_flight)
}

/// Apply one MSS event. Events of another attempt, of unknown requests, or of requests already
/// final change nothing, so a duplicated or replayed event is harmless. Returns whether it
/// changed the request.
fn apply_event(
    tx: &Transaction<'_>,
    ctx: &mut Ctx<'_>,
    event: &MssEvent,
) -> rusqlite::Result<bool> {
    let Ok(id) = event.key.parse::<i64>() else {
        warn!(key = %event.key, "event for a key this broker never issued");
        return Ok(false);
    };
    let Some(row) = load_charged(tx, id)? else {
        warn!(request_id = id, "event for an unknown request");
        return Ok(false);
    };
    if row.attempt != event.attempt
        || row.state.is_terminal()
        || matches!(row.state, RequestState::Held | RequestState::Queued)
    {
        return Ok(false);
    }
    match &event.kind {
        EventKind::Started => {
            if !matches!(row.state, RequestState::Accepted | RequestState::Submitted) {
                return Ok(false);
            }
            // started_ms is the first start: a report's wait is from queueing to first start.
            tx.prepare_cached(
                "UPDATE requests SET state = 'running', started_ms = COALESCE(started_ms, ?2), \
                 submitted_ms = COALESCE(submitted_ms, ?2) WHERE id = ?1",
            )?
            .execute(params![id, ctx.now])?;
            if row.started_ms.is_none() {
                let over_priority = row.class != Class::Priority && *ctx.priority_waiting > 0;
                ctx.report
                    .started(&row.group, ctx.now, ctx.now - row.created_ms, over_priority);
                // FBSNG in pass-through mode: the MSS started it (held mode counts releases).
                if !ctx.policy.order.held() {
                    if let Some(g) = ctx.policy.group_by_path(&row.group) {
                        ctx.fbsng_started(g);
                    }
                }
            }
            ctx.moved(row.class, Some(row.state), RequestState::Running);
        }
        EventKind::Done { bytes } => {
            finalize(tx, ctx, id, &row, RequestState::Done, Some(*bytes), None)?;
        }
        // A cancel was asked while it was at the MSS, which answers with a failure (EOS lists
        // a cancelled file with an error, not a cancelled state): cancelled, never resent.
        EventKind::Failed { .. } if row.cancel_requested => {
            finalize(tx, ctx, id, &row, RequestState::Cancelled, None, None)?;
        }
        EventKind::Failed { reason, retryable } => {
            if *retryable && row.attempt < ctx.retry.max_attempts {
                let delay = ctx.retry.backoff(row.attempt).as_millis() as i64;
                tx.prepare_cached(
                    "UPDATE requests SET state = 'accepted', attempt = attempt + 1, \
                     mss_id = NULL, next_attempt_ms = ?2, last_error = ?3 WHERE id = ?1",
                )?
                .execute(params![id, ctx.now + delay, clip_error(reason)])?;
                ctx.moved(row.class, Some(row.state), RequestState::Accepted);
                ctx.ready = true;
            } else {
                let why = format!(
                    "{reason} (attempt {} of {})",
                    row.attempt, ctx.retry.max_attempts
                );
                finalize(tx, ctx, id, &row, RequestState::Failed, None, Some(&why))?;
            }
        }
        EventKind::Cancelled => {
            finalize(tx, ctx, id, &row, RequestState::Cancelled, None, None)?;
        }
    }
    Ok(true)
}

fn store_cursor(tx: &Transaction<'_>, cursor: &EventCursor) -> rusqlite::Result<()> {
    let mut stmt = tx.prepare_cached(
        "INSERT INTO meta(key, value) VALUES (?1, ?2) \
         ON CONFLICT(key) DO UPDATE SET value = excluded.value",
    )?;
    stmt.execute(params!["mss_event_epoch", cursor.epoch])?;
    stmt.execute(params!["mss_event_after", cursor.after.to_string()])?;
    Ok(())
}

fn cancel(tx: &Transaction<'_>, ctx: &mut Ctx<'_>, id: i64) -> rusqlite::Result<CancelOutcome> {
    let Some(row) = load_charged(tx, id)? else {
        return Ok(CancelOutcome::NotFound);
    };
    match row.state {
        s if s.is_terminal() => Ok(CancelOutcome::AlreadyFinal(s)),
        RequestState::Accepted | RequestState::Held | RequestState::Queued => {
            finalize(tx, ctx, id, &row, RequestState::Cancelled, None, None)?;
            Ok(CancelOutcome::Cancelled)
        }
        s => {
            tx.prepare_cached("UPDATE requests SET cancel_requested = 1 WHERE id = ?1")?
                .execute([id])?;
            Ok(CancelOutcome::Requested(s))
        }
    }
}

/// Release held requests, oldest first per group, while their group is under every feasibility
/// cap on its path; each is decided and charged as it is released. Returns how many.
fn release_held(tx: &Transaction<'_>, ctx: &mut Ctx<'_>) -> rusqlite::Result<usize> {
    let waiting: Vec<GroupId> = ctx
        .held
        .iter()
        .enumerate()
        .filter(|(_, &h)| h > 0)
        .map(|(i, _)| GroupId(i))
        .collect();
    let mut released_count = 0;
    for g in waiting {
        let path = ctx.policy.group(g).path.to_string();
        'group: loop {
            let batch: Vec<Candidate> = tx
                .prepare_cached(&format!(
                    "SELECT {CANDIDATE_COLUMNS} FROM requests \
                     WHERE state = 'held' AND group_path = ?1 ORDER BY id LIMIT 64"
                ))?
                .query_map([&path], |r| read_candidate(ctx.policy, r))?
                .filter_map(Result::transpose)
                .collect::<rusqlite::Result<_>>()?;
            if batch.is_empty() {
                // The count said some were held but none are: put the count right rather than
                // hold the group's new requests behind nothing.
                let stale = ctx.held.get(g.0).copied().unwrap_or(0);
                if stale > 0 {
                    warn!(group = %path, count = stale, "held count without held requests; reset");
                    ctx.charge(
                        &path,
                        Charge {
                            held: -(stale as i64),
                            ..Charge::default()
                        },
                    );
                }
                break;
            }
            for c in batch {
                if held_by(ctx.policy, &ctx.usage.at(ctx.now), g).is_some() {
                    break 'group;
                }
                let released = HourRow {
                    released: 1,
                    ..HourRow::default()
                };
                if ctx.policy.order.held() {
                    // Into the broker's queue: decided and charged when the queue releases it.
                    tx.prepare_cached(
                        "UPDATE requests SET state = 'queued', held_reason = NULL, \
                         released_ms = ?2 WHERE id = ?1",
                    )?
                    .execute(params![c.id, ctx.now])?;
                    ctx.charge(
                        &path,
                        Charge {
                            held: -1,
                            ..Charge::default()
                        },
                    );
                    ctx.report.add(&path, ctx.now, released);
                    ctx.enqueue(c);
                } else {
                    let p = placement(ctx, &c);
                    decide_and_charge(tx, ctx, &c, &p)?;
                    ctx.charge(
                        &path,
                        Charge {
                            held: -1,
                            ..Charge::default()
                        },
                    );
                    ctx.report.add(&path, ctx.now, released.decided(p.class));
                }
                released_count += 1;
            }
        }
    }
    Ok(released_count)
}

/// Columns [`read_candidate`] reads.
pub(super) const CANDIDATE_COLUMNS: &str =
    "id, group_path, library, created_ms, size_bytes, access_mode, \
                                 qos, user_factor, slots, passed";

/// A request row as the ordering sees it (`None` for a group no longer configured).
pub(super) fn read_candidate(
    policy: &PolicySettings,
    r: &rusqlite::Row<'_>,
) -> rusqlite::Result<Option<Candidate>> {
    let path: String = r.get(1)?;
    let Some(group) = policy.group_by_path(&path) else {
        return Ok(None);
    };
    let size: i64 = r.get(4)?;
    let mode: String = r.get(5)?;
    let qos: Option<String> = r.get(6)?;
    let user: Option<f64> = r.get(7)?;
    let order = &policy.order;
    Ok(Some(Candidate {
        id: r.get(0)?,
        group,
        library: r.get(2)?,
        created_ms: r.get(3)?,
        size_bytes: size.max(0) as u64,
        benefit: policy::benefit(policy, &mode, size.max(0) as u64),
        qos: order.qos(
            qos.as_deref().and_then(policy::multifactor::Qos::parse),
            &mode,
        ),
        user: user.unwrap_or(1.0),
        queue: order.queue_factor(&mode),
        slots: r.get::<_, i64>(8)?.clamp(1, i64::from(u32::MAX)) as u32,
        passed: r.get::<_, i64>(9)?.clamp(0, i64::from(u32::MAX)) as u32,
    }))
}

/// Decide a released request at `p`, charge it and make it ready to submit.
fn decide_and_charge(
    tx: &Transaction<'_>,
    ctx: &mut Ctx<'_>,
    c: &Candidate,
    p: &Placement,
) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "UPDATE requests SET state = 'accepted', class = ?2, mss_priority = ?3, \
         charged = ?4, charged_bytes = ?5, charged_ms = ?6, held_reason = NULL, \
         released_ms = ?6, explain = ?7 WHERE id = ?1",
    )?
    .execute(params![
        c.id,
        p.class.as_str(),
        p.mss_priority,
        c.benefit as i64,
        c.size_bytes as i64,
        ctx.now,
        explain_text(p),
    ])?;
    let path = ctx.policy.group(c.group).path.to_string();
    ctx.charge(
        &path,
        Charge {
            usage: i128::from(c.benefit),
            at_ms: ctx.now,
            bytes: i128::from(c.size_bytes),
            ..Charge::default()
        },
    );
    ctx.occupy(&c.library, c.slots, true);
    ctx.ready = true;
    Ok(())
}

/// Release queued requests while their library has free slots (all of them when the mode is
/// no longer `held`), each the policy's first at this instant; each is decided and charged as
/// it goes, so the next choice sees it. A request whose group is now over a feasibility cap
/// goes back to `held`.
fn release_queued(tx: &Transaction<'_>, ctx: &mut Ctx<'_>) -> rusqlite::Result<usize> {
    if ctx.queue.is_empty() {
        return Ok(0);
    }
    let policy = ctx.policy;
    let order = &policy.order;
    let mut released = 0;
    for lib in ctx.queue.libraries() {
        loop {
            let limit = if order.held() {
                order.release.limit_of(&lib)
            } else {
                u32::MAX
            };
            let used = ctx.outstanding.get(&lib).copied().unwrap_or(0);
            let free = limit.saturating_sub(used);
            if free == 0 {
                break;
            }
            let pick = {
                let standing = Standing::new(policy, ctx.usage.at(ctx.now), ctx.queues);
                ctx.queue.pick(order, &standing, &lib, free, ctx.now)
            };
            let Some(pick) = pick else { break };
            let c = &pick.candidate;
            ctx.dequeue(c.id);
            let path = policy.group(c.group).path.to_string();
            if let Some(reason) = held_by(policy, &ctx.usage.at(ctx.now), c.group) {
                tx.prepare_cached(
                    "UPDATE requests SET state = 'held', held_reason = ?2 WHERE id = ?1",
                )?
                .execute(params![c.id, reason])?;
                ctx.charge(
                    &path,
                    Charge {
                        held: 1,
                        ..Charge::default()
                    },
                );
                continue;
            }
            decide_and_charge(tx, ctx, c, &pick.placement)?;
            let row = HourRow::default();
            ctx.report
                .add(&path, ctx.now, row.decided(pick.placement.class));
            if order.held() {
                ctx.fbsng_started(c.group);
            }
            for &id in &pick.passed_over {
                tx.prepare_cached("UPDATE requests SET passed = passed + 1 WHERE id = ?1")?
                    .execute([id])?;
                if let Some(w) = ctx.queue.get_mut(id) {
                    w.passed = w.passed.saturating_add(1);
                    ctx.queue_undo.push(QueueUndo::Passed(id));
                }
            }
            released += 1;
        }
    }
    Ok(released)
}

/// The held release queue, the slots outstanding per library and the FBSNG queue priorities,
/// from the rows.
fn load_order_state(
    conn: &Connection,
    policy: &PolicySettings,
) -> Result<(HeldQueue, HashMap<String, u32>, Queues), LedgerError> {
    let mut queue = HeldQueue::default();
    let mut stmt = conn.prepare(&format!(
        "SELECT {CANDIDATE_COLUMNS} FROM requests WHERE state = 'queued' ORDER BY id"
    ))?;
    let rows = stmt.query_map([], |r| read_candidate(policy, r))?;
    for c in rows {
        match c? {
            Some(c) => queue.push(c),
            None => warn!("a queued request of a group no longer configured stays queued"),
        }
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

fn flush_deltas(tx: &Transaction<'_>, ctx: &Ctx<'_>) -> rusqlite::Result<()> {
    let deltas = &ctx.deltas;
    let mut stmt = tx.prepare_cached(
        "INSERT INTO groups(path, usage, usage_bytes, pending, held) VALUES (?1, ?2, ?3, ?4, ?5) \
         ON CONFLICT(path) DO UPDATE SET usage = wide_add(usage, excluded.usage), \
         usage_bytes = wide_add(usage_bytes, excluded.usage_bytes), \
         pending = pending + excluded.pending, \
         held = held + excluded.held",
    )?;
    for (path, (usage, bytes, pending, held)) in &deltas.groups {
        if *usage == 0 && *bytes == 0 && *pending == 0 && *held == 0 {
            continue;
        }
        stmt.execute(params![path, Wide(*usage), Wide(*bytes), pending, held])?;
    }
    // The accumulator is written whole: the stored value is bit for bit the one in memory, so
    // a restart reads back exactly what the decisions used.
    let mut stmt = tx.prepare_cached("UPDATE groups SET decayed = ?2 WHERE path = ?1")?;
    for &g in &deltas.decayed {
        stmt.execute(params![
            ctx.policy.group(g).path.as_str(),
            ctx.usage.decayed(g)
        ])?;
    }
    if ctx.queues_changed {
        let mut stmt =
            tx.prepare_cached("UPDATE groups SET queue_priority = ?2 WHERE path = ?1")?;
        for g in ctx.policy.group_ids().filter(|&g| is_fair(ctx.policy, g)) {
            stmt.execute(params![
                ctx.policy.group(g).path.as_str(),
                ctx.queues.get(g.0)
            ])?;
        }
    }
    let mut stmt = tx.prepare_cached(
        "INSERT INTO usage_windows(path, window, usage) VALUES (?1, ?2, ?3) \
         ON CONFLICT(path, window) DO UPDATE SET usage = wide_add(usage, excluded.usage)",
    )?;
    for ((path, window), usage) in &deltas.windows {
        if *usage != 0 {
            stmt.execute(params![path, window, Wide(*usage)])?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_are_stable_and_separate_the_fields() {
        // Stored on disk: this value must never change.
        assert_eq!(fingerprint("st", "c1"), fingerprint("st", "c1"));
        assert_ne!(fingerprint("ab", "c"), fingerprint("a", "bc"));
        assert_ne!(fingerprint("st", "c1"), fingerprint("st", "c2"));
        // Golden value, computed independently (Python) from the definition.
        assert_eq!(fingerprint("station-a", "req-1"), 0xfb5991509a323d33);
    }

    #[test]
    fn colliding_fingerprints_keep_every_id_and_undo_cleanly() {
        let mut m = Idempotency::default();
        m.insert(7, 1);
        m.insert(7, 2);
        m.insert(7, 3);
        assert_eq!(m.candidates(7).collect::<Vec<_>>(), [1, 2, 3]);
        m.remove(7, 2);
        assert_eq!(m.candidates(7).collect::<Vec<_>>(), [1, 3]);
        m.remove(7, 3);
        m.remove(7, 1);
        assert_eq!(m.candidates(7).count(), 0);
        assert!(m.more.is_empty() && m.first.is_empty());
    }
}

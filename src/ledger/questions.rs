//! Questions answered off the writer: each `Ledger` method here reads on the read pool
//! (`read.rs`, `history.rs`), never queueing behind a commit; explain's placement and the
//! re-prioritisation pass read the rows and the memory the writer published at one commit
//! (`live.rs`).

use std::sync::Arc;

use mss_adapters::EventCursor;

use super::{
    history, live, read, GroupRow, InFlight, Ledger, LedgerError, MetricFigures, NewPriority,
    PositionBasis, QueuedExplain, RankInputs, ReportFigures, RequestRecord, ToSubmit, WaitRow,
};
use crate::domain::{PolicySettings, RequestState};
use crate::shares::view::SharesView;

impl Ledger {
    /// In-flight requests the MSS has said nothing of since `before_ms`.
    pub async fn stale(&self, before_ms: i64, limit: usize) -> Result<Vec<InFlight>, LedgerError> {
        let keys = self.keys.clone();
        self.reads
            .run(move |c| read::stale(c, &keys, before_ms, limit))
            .await
    }

    /// Requests at the MSS (submitted or running).
    pub async fn in_flight(&self) -> Result<Vec<InFlight>, LedgerError> {
        let keys = self.keys.clone();
        self.reads.run(move |c| read::in_flight(c, &keys)).await
    }

    /// The live placement of a queued request (`None` when it is not queued) and its place in
    /// the latest ranking of the queue (see `rank`): one placement on the read pool, and the
    /// position from the latest ranking, or estimated against it for a request queued after
    /// it. Never waits for a ranking: one that is due is made in the background.
    pub async fn explain_queued(&self, id: i64) -> Result<Option<QueuedExplain>, LedgerError> {
        let before = self.memory()?;
        let published = self.published.clone();
        let now = self.clock.now_ms();
        let answer = self
            .reads
            .run(move |c| {
                let (tx, memory) = published.snapshot(c)?;
                let memory = memory.unwrap_or(before);
                let live = live::explain_queued(&tx, &memory, id, now)?;
                Ok(live.map(|l| {
                    let waiting = memory.waiting(&l.library);
                    (l, waiting)
                }))
            })
            .await?;
        let Some((live, waiting)) = answer else {
            return Ok(None);
        };
        if live.volume.is_some() {
            // The volumes mode releases a volume at a time: its figures say where the request
            // stands, not a ranking of single requests.
            return Ok(Some(QueuedExplain {
                explain: live.explain,
                position: None,
                waiting: None,
                ranked_at_ms: None,
                basis: PositionBasis::Volumes,
                volume: live.volume,
                library: live.library,
                drive_reserve: live.drive_reserve,
            }));
        }
        let ranked = self.ranked_place(id, &live.library, &live.key);
        let (position, waiting) = match (ranked.basis, ranked.place) {
            (PositionBasis::Ranking, Some(p)) => (Some(p.position), Some(p.waiting)),
            // Counted now: requests queued after the ranking are waiting too.
            (_, Some(p)) => (Some(p.position.min(waiting.max(1))), Some(waiting.max(1))),
            (_, None) => (None, Some(waiting.max(1))),
        };
        Ok(Some(QueuedExplain {
            explain: live.explain,
            position,
            waiting,
            ranked_at_ms: ranked.at_ms,
            basis: ranked.basis,
            volume: None,
            library: live.library,
            drive_reserve: live.drive_reserve,
        }))
    }

    /// Rank the held queue now (off the writer, on the read pool), for explain's positions:
    /// `serve` starts one at start so the first explains after a restart find a ranking.
    /// Returns the requests ranked.
    pub async fn rank_queue(&self) -> Result<usize, LedgerError> {
        self.rank_now().await
    }

    /// Requests at the MSS (not yet running) whose priority the policy now puts elsewhere, at
    /// most `max`.
    pub async fn reprioritise(&self, max: usize) -> Result<Vec<NewPriority>, LedgerError> {
        let before = self.memory()?;
        let published = self.published.clone();
        let now = self.clock.now_ms();
        let keys = self.keys.clone();
        self.reads
            .run(move |c| {
                // The rows and the memory of one commit: a request committed after the memory
                // was taken would otherwise be placed without its group's charge.
                let (tx, memory) = published.snapshot(c)?;
                live::reprioritise(&tx, &memory.unwrap_or(before), &keys, max, now)
            })
            .await
    }

    /// The writer's memory as of its latest commit.
    pub(super) fn memory(&self) -> Result<Arc<live::Memory>, LedgerError> {
        self.published.latest().ok_or(LedgerError::Closed)
    }

    /// Usage and queue priorities now, and the policy they are indexed by, for a ranking built
    /// off the writer.
    pub(super) fn rank_inputs(&self) -> Result<(RankInputs, Arc<PolicySettings>), LedgerError> {
        let memory = self.memory()?;
        Ok((
            memory.rank_inputs(self.clock.now_ms()),
            memory.policy.clone(),
        ))
    }

    pub async fn request(&self, id: i64) -> Result<Option<RequestRecord>, LedgerError> {
        let keys = self.keys.clone();
        self.reads.run(move |c| read::request(c, &keys, id)).await
    }

    /// Requests ready to submit (state accepted, retry time reached): highest MSS priority
    /// first, then in release order (the `volumes` mode numbers a volume's batch in
    /// tape-position order, so it is read together and in that order), then in decision order.
    pub async fn to_submit(
        &self,
        after_id: i64,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<ToSubmit>, LedgerError> {
        let keys = self.keys.clone();
        self.reads
            .run(move |c| read::to_submit(c, &keys, after_id, now_ms, limit))
            .await
    }

    /// When the earliest waiting retry becomes due, if any.
    pub async fn next_retry_ms(&self) -> Result<Option<i64>, LedgerError> {
        self.reads.run(read::next_retry_ms).await
    }

    /// Requests whose cancellation has been asked for and that have not ended: at the MSS, or
    /// waiting to be resent after an answer that could not be read.
    pub async fn cancel_pending(&self) -> Result<Vec<i64>, LedgerError> {
        self.reads.run(read::cancel_pending).await
    }

    /// Requests at the MSS whose cancellation has been asked for.
    pub async fn cancelling(&self) -> Result<Vec<InFlight>, LedgerError> {
        let keys = self.keys.clone();
        self.reads.run(move |c| read::cancelling(c, &keys)).await
    }

    /// Request `id`, if its cancel is one to carry to the MSS now (as `cancelling` lists them).
    pub async fn cancelling_one(&self, id: i64) -> Result<Option<InFlight>, LedgerError> {
        let keys = self.keys.clone();
        self.reads
            .run(move |c| read::cancelling_one(c, &keys, id))
            .await
    }

    pub async fn groups(&self) -> Result<Vec<GroupRow>, LedgerError> {
        self.reads.run(read::groups).await
    }

    /// The ledger's figures now, for the Prometheus exposition (`metrics` encodes them).
    pub async fn metric_figures(&self, now_ms: i64) -> Result<MetricFigures, LedgerError> {
        let policy = self.policy();
        self.reads
            .run(move |c| history::metric_figures(c, &policy, now_ms))
            .await
    }

    /// The wait histograms' rows from hour `since_hour` on, those before `seal_hour` summed
    /// apart from the later ones, for the Prometheus exposition.
    pub async fn metric_waits(
        &self,
        since_hour: i64,
        seal_hour: i64,
    ) -> Result<Vec<WaitRow>, LedgerError> {
        self.reads
            .run(move |c| history::wait_rows_since(c, since_hour, seal_hour))
            .await
    }

    /// A report's inputs: the aggregates over `hours` (hour numbers, end exclusive) and the
    /// share view at `diagnose_at_ms` (`report` builds the report from them).
    pub async fn report_figures(
        &self,
        hours: std::ops::Range<i64>,
        diagnose_at_ms: i64,
        now_ms: i64,
    ) -> Result<ReportFigures, LedgerError> {
        let policy = self.policy();
        self.reads
            .run(move |c| history::report_figures(c, &policy, hours, diagnose_at_ms, now_ms))
            .await
    }

    /// The share view at `at_ms`, from the committed aggregates (`now_ms`: the present; an
    /// earlier `at_ms` is replayed from the requests).
    pub async fn shares(&self, at_ms: i64, now_ms: i64) -> Result<SharesView, LedgerError> {
        let policy = self.policy();
        self.reads
            .run(move |c| history::read_shares(c, &policy, at_ms, now_ms))
            .await
    }

    pub async fn event_cursor(&self) -> Result<EventCursor, LedgerError> {
        self.reads.run(read::event_cursor).await
    }

    /// Number of requests in each state.
    pub async fn state_counts(&self) -> Result<Vec<(RequestState, u64)>, LedgerError> {
        self.reads.run(read::state_counts).await
    }
}

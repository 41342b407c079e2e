//! Explain's positions in the held queue, off the writer. The writer answers an explain with one
//! placement; the position comes from the latest [`Ranking`] of the whole queue, built on a
//! blocking thread from a read snapshot of the `queued` rows and the writer's usage and queue
//! priorities (published by the writer after every commit, see `live`).
//!
//! An explain never waits for a ranking (one takes about a second with 1M queued): a request the
//! latest ranking knows answers with its place there; one queued after it with an estimate
//! against it ([`Ranking::estimate`]); and before the first ranking since the start (`serve`
//! starts one, [`Ledger::rank_queue`]) with no position. Each answer says which
//! ([`PositionBasis`]). A ranking is reused while it is younger than [`reuse_for`]; an explain
//! that finds it older, or finds its request missing from it, starts the next one in the
//! background, no sooner than the window allows: at most one build per window, single-flight,
//! whatever clients ask.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::warn;

use super::candidate::{read_candidate, CANDIDATE_COLUMNS};
use super::db::{params, DbError};
use super::{CommitObserver, Ledger, LedgerError, PositionBasis};
use crate::policy::order::ShareSnapshot;
use crate::policy::queue::{Place, RankKey, Ranking, RankingBuilder};

/// A ranking is reused for at least this long.
const REUSE_MIN: Duration = Duration::from_secs(1);
/// ... and for this many times what it took to build, so a large queue is not ranked
/// back to back (a ranking of 1M requests takes about a second).
const REUSE_FACTOR: u32 = 4;

/// The latest ranking and the single-flight lock that builds the next.
pub(super) struct Ranker {
    latest: Mutex<Option<Arc<Built>>>,
    building: Arc<tokio::sync::Mutex<()>>,
    /// Told how long each ranking took (`mssbroker_queue_ranking_seconds`).
    observer: Arc<dyn CommitObserver>,
}

struct Built {
    ranking: Ranking,
    /// When its build started (before the snapshot was read).
    started: Instant,
    took: Duration,
}

/// A queued request's position as the latest ranking gives it.
pub(super) struct Ranked {
    pub place: Option<Place>,
    /// When that ranking was computed (`None`: there is none yet).
    pub at_ms: Option<i64>,
    pub basis: PositionBasis,
}

/// How long a ranking that took `took` to build is reused.
fn reuse_for(took: Duration) -> Duration {
    REUSE_MIN.max(took * REUSE_FACTOR)
}

impl Ranker {
    pub fn new(observer: Arc<dyn CommitObserver>) -> Ranker {
        Ranker {
            latest: Mutex::new(None),
            building: Arc::default(),
            observer,
        }
    }

    fn latest(&self) -> Option<Arc<Built>> {
        self.latest.lock().ok()?.clone()
    }

    fn store(&self, built: Arc<Built>) {
        if let Ok(mut latest) = self.latest.lock() {
            *latest = Some(built);
        }
    }
}

impl Ledger {
    /// Request `id`'s place (`library` and `key`: where and how its placement now orders it)
    /// from the latest ranking, at once: its place there, an estimate against it, or none
    /// before the first ranking. Starts the next ranking in the background when this one is
    /// due for renewal or does not know the request.
    pub(super) fn ranked_place(&self, id: i64, library: &str, key: &RankKey) -> Ranked {
        let Some(built) = self.ranker.latest() else {
            self.refresh_in_background();
            return Ranked {
                place: None,
                at_ms: None,
                basis: PositionBasis::NotRanked,
            };
        };
        let at_ms = Some(built.ranking.at_ms);
        if let Some(place) = built.ranking.get(id) {
            if built.started.elapsed() >= reuse_for(built.took) {
                self.refresh_in_background();
            }
            return Ranked {
                place: Some(place),
                at_ms,
                basis: PositionBasis::Ranking,
            };
        }
        // Queued after this ranking (or it left the queue meanwhile): the next one will know.
        self.refresh_in_background();
        Ranked {
            place: Some(built.ranking.estimate(library, key)),
            at_ms,
            basis: PositionBasis::Estimate,
        }
    }

    /// Rank now, after any ranking being built; the requests ranked.
    pub(super) async fn rank_now(&self) -> Result<usize, LedgerError> {
        let _one_at_a_time = self.ranker.building.lock().await;
        Ok(self.build_ranking().await?.ranking.len())
    }

    /// Start the next ranking unless one is being built or waited for: it waits for the latest
    /// one's reuse window to end, then builds, so clients that ask about each request right
    /// after its 202 cannot make the queue be ranked back to back.
    fn refresh_in_background(&self) {
        let Ok(guard) = self.ranker.building.clone().try_lock_owned() else {
            return; // one is on its way
        };
        let ledger = self.clone();
        tokio::spawn(async move {
            if let Some(built) = ledger.ranker.latest() {
                let (window, age) = (reuse_for(built.took), built.started.elapsed());
                if age < window {
                    tokio::time::sleep(window - age).await;
                }
            }
            if let Err(e) = ledger.build_ranking().await {
                warn!(error = %e, "cannot rank the held queue");
            }
            drop(guard);
        });
    }

    /// Rank the queue now. The caller holds `building`.
    async fn build_ranking(&self) -> Result<Arc<Built>, LedgerError> {
        let started = Instant::now();
        let (inputs, policy) = self.rank_inputs()?;
        let ranking = self
            .reads
            .run(move |conn| {
                let standing = ShareSnapshot::new(&policy, inputs.usage, &inputs.queues);
                let mut ranking = RankingBuilder::new(&policy.order, &standing, inputs.now_ms);
                conn.for_each(
                    &format!("SELECT {CANDIDATE_COLUMNS} FROM requests WHERE state = 'queued'"),
                    params![],
                    |row| {
                        // A group no longer configured: the writer does not queue it either.
                        if let Some(c) = read_candidate(&policy, row)? {
                            ranking.push(&c);
                        }
                        Ok::<_, DbError>(())
                    },
                )?;
                Ok(ranking.finish())
            })
            .await?;
        let built = Arc::new(Built {
            ranking,
            started,
            took: started.elapsed(),
        });
        self.ranker
            .observer
            .ranked(built.took.as_secs_f64(), built.ranking.len());
        self.ranker.store(built.clone());
        Ok(built)
    }
}

//! Explain's positions in the held queue, off the writer. The writer answers an explain with one
//! placement; the position comes from the latest [`Ranking`] of the whole queue, built on a
//! blocking thread from a read snapshot of the `queued` rows and the writer's usage and queue
//! priorities (published by the writer after every commit, see `live`). A ranking is reused while it is younger than
//! [`reuse_for`] (then the next explain refreshes it in the background, answering from the old
//! one); a request the latest ranking does not know (queued after it) waits for a ranking that
//! started after its explain was asked, shared by every explain waiting for one and started no
//! sooner than the latest one's reuse window ends (at most one build per window).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::warn;

use super::writer::{read_candidate, CANDIDATE_COLUMNS};
use super::{Ledger, LedgerError};
use crate::policy::order::Standing;
use crate::policy::queue::{Place, Ranking, RankingBuilder};

/// A ranking is reused for at least this long.
const REUSE_MIN: Duration = Duration::from_secs(1);
/// ... and for this many times what it took to build, so a large queue is not ranked
/// back to back (a ranking of 1M requests takes about a second).
const REUSE_FACTOR: u32 = 4;

/// The latest ranking and the single-flight lock that builds the next.
#[derive(Default)]
pub(super) struct Ranker {
    latest: Mutex<Option<Arc<Built>>>,
    building: Arc<tokio::sync::Mutex<()>>,
}

struct Built {
    ranking: Ranking,
    /// When its build started (before the snapshot was read).
    started: Instant,
    took: Duration,
}

/// How long a ranking that took `took` to build is reused.
fn reuse_for(took: Duration) -> Duration {
    REUSE_MIN.max(took * REUSE_FACTOR)
}

impl Ranker {
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
    /// Request `id`'s place in a ranking that knows it (`None`: it left the queue before one
    /// did), and when that ranking was computed.
    pub(super) async fn ranked_place(
        &self,
        id: i64,
        asked: Instant,
    ) -> Result<(Option<Place>, i64), LedgerError> {
        if let Some(built) = self.ranker.latest() {
            if let Some(place) = built.ranking.get(id) {
                if built.started.elapsed() >= reuse_for(built.took) {
                    self.refresh_in_background();
                }
                return Ok((Some(place), built.ranking.at_ms));
            }
        }
        let built = self.ranking_since(asked).await?;
        Ok((built.ranking.get(id), built.ranking.at_ms))
    }

    /// A ranking whose build started at or after `asked`: one another caller built meanwhile,
    /// or a new one, started no earlier than the latest one's reuse window allows, so clients
    /// that ask about each request right after its 202 cannot make the queue be ranked back to
    /// back: at most one build per window, whatever they ask.
    async fn ranking_since(&self, asked: Instant) -> Result<Arc<Built>, LedgerError> {
        let _one_at_a_time = self.ranker.building.lock().await;
        if let Some(built) = self.ranker.latest() {
            if built.started >= asked {
                return Ok(built);
            }
            let window = reuse_for(built.took);
            let age = built.started.elapsed();
            if age < window {
                tokio::time::sleep(window - age).await;
            }
        }
        self.build_ranking().await
    }

    fn refresh_in_background(&self) {
        let Ok(guard) = self.ranker.building.clone().try_lock_owned() else {
            return; // one is being built
        };
        let ledger = self.clone();
        tokio::spawn(async move {
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
                let standing = Standing::new(&policy, inputs.usage, &inputs.queues);
                let mut ranking = RankingBuilder::new(&policy.order, &standing, inputs.now_ms);
                let mut stmt = conn.prepare_cached(&format!(
                    "SELECT {CANDIDATE_COLUMNS} FROM requests WHERE state = 'queued'"
                ))?;
                let mut rows = stmt.query([])?;
                while let Some(row) = rows.next()? {
                    // A group no longer configured: the writer does not queue it either.
                    if let Some(c) = read_candidate(&policy, row)? {
                        ranking.push(&c);
                    }
                }
                Ok(ranking.finish())
            })
            .await?;
        let built = Arc::new(Built {
            ranking,
            started,
            took: started.elapsed(),
        });
        self.ranker.store(built.clone());
        Ok(built)
    }
}

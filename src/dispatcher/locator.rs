//! The locator (issue 38, docs/volumes-live.md): in the `volumes` release mode, asks where the
//! file of each queued request without a volume lies (`[mss.volume_lookup]`, through
//! `mss_adapters::locate::Locator`: Enstore's layer 4 or a site command, bounded in time and
//! concurrency, answers cached) and stores each answer through the ledger writer, which moves
//! a request still waiting to its tape's queue. It runs beside ingest: a request is accepted
//! (and answered 202) first; the writer holds it among its group's requests waiting for the
//! lookup for at most `wait_secs`, after which it goes without a volume.
//!
//! Restartable from the ledger alone: the requests to look up are the queued rows without a
//! volume and without an answer (`Ledger::unlocated`), so after a crash the lookups whose
//! answers were not committed run again. A failed lookup is stored as `failed` and the request
//! goes without a volume; it is never refused. Failures are counted
//! (`mssbroker_volume_lookups_total{outcome="failed"}`) and logged once until a lookup succeeds
//! again. No log line carries a path's lookup command or what it printed.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use mss_adapters::locate::Locator;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use crate::ledger::{Ledger, LedgerError, VolumeFound};

/// Longest the locator sleeps when idle before looking again (accepts notify it).
const IDLE_POLL: Duration = Duration::from_secs(1);

/// Rows read per query.
const READ_BATCH: usize = 256;

/// Looks up where files lie for queued requests without a volume.
pub struct VolumeLocator {
    ledger: Ledger,
    locator: Arc<Locator>,
    metrics: Arc<crate::metrics::Metrics>,
    /// Notified when requests without a volume were accepted.
    wake: Arc<Notify>,
    /// Lookups started and not yet stored, at most this many.
    outstanding: usize,
}

/// One finished lookup.
type Done = (VolumeFound, bool, Option<String>);

impl VolumeLocator {
    pub fn new(
        ledger: Ledger,
        locator: Locator,
        concurrency: usize,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> VolumeLocator {
        VolumeLocator {
            wake: ledger.unlocated_accepted().clone(),
            ledger,
            locator: Arc::new(locator),
            metrics,
            outstanding: concurrency.max(1) * 4,
        }
    }

    /// Run until the task is dropped.
    pub async fn run(self) {
        info!(method = self.locator.method(), "volume lookups on");
        let mut tasks: JoinSet<Done> = JoinSet::new();
        let mut taken: HashSet<i64> = HashSet::new();
        let mut cursor = 0;
        let mut failing = false;
        loop {
            if self.ledger.policy().order.volumes() {
                match self.start(&mut tasks, &mut taken, &mut cursor).await {
                    Ok(()) => {}
                    Err(e) => warn!(error = %e, "reading requests to look up failed; will retry"),
                }
            }
            if tasks.is_empty() {
                let _ = tokio::time::timeout(IDLE_POLL, self.wake.notified()).await;
                continue;
            }
            tokio::select! {
                Some(done) = tasks.join_next() => {
                    if let Ok(done) = done {
                        let id = done.0.id;
                        self.store(done, &mut failing).await;
                        taken.remove(&id);
                    }
                }
                _ = self.wake.notified() => {}
            }
        }
    }

    /// Start lookups for requests not yet taken, while fewer than `outstanding` run. Reads
    /// after `cursor`; at the end of the rows, starts over from the first (requests whose answer
    /// could not be stored, held requests queued since).
    async fn start(
        &self,
        tasks: &mut JoinSet<Done>,
        taken: &mut HashSet<i64>,
        cursor: &mut i64,
    ) -> Result<(), LedgerError> {
        let mut wrapped = false;
        while tasks.len() < self.outstanding {
            let rows = self.ledger.unlocated(*cursor, READ_BATCH).await?;
            let Some(&(last, _)) = rows.last() else {
                if *cursor == 0 || wrapped {
                    return Ok(());
                }
                *cursor = 0;
                wrapped = true;
                continue;
            };
            for (id, file) in rows {
                *cursor = id;
                if !taken.insert(id) {
                    continue;
                }
                let locator = self.locator.clone();
                tasks.spawn(async move {
                    let lookup = locator.locate(&file).await;
                    let (found, why) = match lookup.answer {
                        Ok(l) => (Some((l.volume, l.position)), None),
                        Err(e) => (None, Some(e.to_string())),
                    };
                    let source = locator.method();
                    (VolumeFound { id, found, source }, lookup.cached, why)
                });
                if tasks.len() >= self.outstanding {
                    return Ok(());
                }
            }
            *cursor = last;
        }
        Ok(())
    }

    /// Store one answer (the writer groups them with whatever else it commits).
    async fn store(&self, (found, cached, why): Done, failing: &mut bool) {
        let ok = found.found.is_some();
        self.metrics.volume_lookup(found.source, ok, cached);
        match &why {
            Some(why) if !*failing => {
                *failing = true;
                warn!(request = found.id, method = found.source, error = %why,
                    "volume lookup failed: the request goes without a volume; further failures \
                     are counted in mssbroker_volume_lookups_total until one succeeds");
            }
            Some(why) => debug!(request = found.id, error = %why, "volume lookup failed"),
            None if *failing => {
                *failing = false;
                info!(method = found.source, "volume lookups succeed again");
            }
            None => {}
        }
        if let Err(e) = self.ledger.located(vec![found]).await {
            warn!(error = %e, "storing a volume lookup failed; it runs again");
        }
    }
}

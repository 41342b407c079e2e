//! The Enstore adapter: a semaphore of `max_processes`, the runs in memory, the `MssAdapter`
//! calls; each run is watched to its end by `watch`.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{Notify, Semaphore};
use tracing::{debug, info};

use super::commands::run_command;
use super::config::EncpConfig;
use super::existing::existing_output;
use super::invocation::invocation;
use super::watch::{spawn, watch, Output};
use crate::event_log::EventLog;
use crate::opening::adapter_opening;
use crate::protocol::{Direction, EventKind, Transfer};
use crate::{
    EventBatch, EventCursor, MssAdapter, MssError, Progress, Submitted, TransferRef, TransferStatus,
};

/// Finished transfers remembered for status queries.
const FINISHED_KEPT: usize = 65_536;

/// The Enstore adapter.
pub struct EncpAdapter {
    shared: Arc<EncpState>,
}

/// The encp adapter's state, shared by its handle and the tasks that watch its runs.
pub(super) struct EncpState {
    pub(super) cfg: EncpConfig,
    pub(super) log: EventLog,
    slots: Arc<Semaphore>,
    pub(super) room: Notify,
    procs: Mutex<Procs>,
}

#[derive(Default)]
pub(super) struct Procs {
    pub(super) running: HashMap<String, Proc>,
    finished: HashMap<String, (u32, EventKind)>,
    finished_order: VecDeque<String>,
}

impl Procs {
    /// Remember how a run ended, the oldest forgotten past `FINISHED_KEPT`.
    fn record_finished(&mut self, key: &str, attempt: u32, kind: EventKind) {
        self.running.remove(key);
        if self
            .finished
            .insert(key.to_string(), (attempt, kind))
            .is_none()
        {
            self.finished_order.push_back(key.to_string());
        }
        while self.finished_order.len() > FINISHED_KEPT {
            if let Some(old) = self.finished_order.pop_front() {
                self.finished.remove(&old);
            }
        }
    }
}

impl Procs {
    /// The answer to a send of a transfer this adapter runs or ran: a duplicate of the attempt
    /// running or finished, or not now while an earlier attempt runs. `None`: a new run.
    fn answer_to_a_resend(&self, t: &Transfer) -> Option<Result<Submitted, MssError>> {
        if let Some(run) = self.running.get(&t.key) {
            if run.attempt == t.attempt {
                return Some(Ok(Submitted {
                    mss_id: format!("encp:{}", run.pid),
                    duplicate: true,
                }));
            }
            return Some(Err(MssError::Unavailable(format!(
                "attempt {} of this transfer is still running",
                run.attempt
            ))));
        }
        let finished = self.finished.get(&t.key);
        finished.filter(|(a, _)| *a >= t.attempt).map(|_| {
            Ok(Submitted {
                mss_id: "encp:finished".into(),
                duplicate: true,
            })
        })
    }
}

/// Links may have changed since the request arrived: the local file must still be where the
/// roots allow, and not a directory.
fn recheck_local_file(cfg: &EncpConfig, t: &Transfer) -> Result<(), MssError> {
    let Some(f) = &t.local_file else {
        return Ok(());
    };
    cfg.check_local_file(f)
        .map_err(|why| MssError::Rejected(format!("local_file `{f}` {why}")))
}

pub(super) struct Proc {
    pub(super) attempt: u32,
    pid: u32,
    pub(super) started: bool,
    /// The library manager's id of its ticket, and its library (from the printed ticket).
    pub(super) unique_id: Option<String>,
    pub(super) library: Option<String>,
    file: String,
    stop: Arc<Notify>,
}

impl EncpAdapter {
    pub fn new(cfg: EncpConfig) -> EncpAdapter {
        let slots = Arc::new(Semaphore::new(cfg.max_processes));
        EncpAdapter {
            shared: Arc::new(EncpState {
                cfg,
                log: EventLog::new("encp"),
                slots,
                room: Notify::new(),
                procs: Mutex::new(Procs::default()),
            }),
        }
    }

    /// Processes running now.
    pub fn running(&self) -> usize {
        self.shared.lock().running.len()
    }
}

impl EncpState {
    pub(super) fn lock(&self) -> MutexGuard<'_, Procs> {
        self.procs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Record the end of a run and publish it.
    pub(super) fn finish(&self, key: &str, attempt: u32, kind: EventKind) {
        self.lock().record_finished(key, attempt, kind.clone());
        self.log.push(key, attempt, kind);
    }
}

#[async_trait]
impl MssAdapter for EncpAdapter {
    adapter_opening!("encp");

    fn cancel_reaches_mss(&self) -> bool {
        self.shared.cfg.cancel_command.is_some()
    }

    /// Not the followed transfers under `max_outstanding` of FTS3 and Tape REST
    /// (`crate::opening`): the encp processes that may start now, `max_processes` less those
    /// running; a run frees its slot when it exits (`room_freed`).
    fn room(&self) -> Option<usize> {
        Some(self.shared.slots.available_permits())
    }

    fn check_local_file(&self, local_file: &str) -> Result<(), String> {
        self.shared.cfg.check_local_file(local_file)
    }

    fn check_local_file_for(&self, station: &str, local_file: &str) -> Result<(), String> {
        self.shared.cfg.check_local_file_for(station, local_file)
    }

    async fn room_freed(&self) {
        self.shared.room.notified().await
    }

    async fn submit(&self, t: &Transfer) -> Result<Submitted, MssError> {
        let sh = &self.shared;
        // Checked and started under one lock (spawning does not wait), so one key never runs
        // twice at once.
        let mut p = sh.lock();
        if let Some(answer) = p.answer_to_a_resend(t) {
            return answer;
        }
        let inv = invocation(&sh.cfg, t)?;
        recheck_local_file(&sh.cfg, t)?;
        // A read whose output is there already ends without encp (`existing`): the earlier
        // attempt's copy is done, anything else refused as encp would. A write's namespace
        // entry there is refused the same way, but for the empty one, without a bfid, that a
        // SIGKILLed earlier run of this request left: removed, and encp runs. Recorded under
        // this lock, so a resend of this attempt is answered as a duplicate.
        if let Some(kind) = existing_output(t, &inv.args, &inv.local) {
            info!(key = %t.key, attempt = t.attempt, path = %inv.local.display(), outcome = ?kind,
                "encp not run: the output exists");
            p.record_finished(&t.key, t.attempt, kind.clone());
            drop(p);
            sh.log.push(&t.key, t.attempt, kind);
            return Ok(Submitted {
                mss_id: "encp:not-run".into(),
                duplicate: false,
            });
        }
        // Whether a read's output is encp's own to remove should the run be killed before
        // encp could (it refuses an output that exists, so one there now stays untouched).
        let output = Output {
            path: inv.local.clone(),
            made_by_run: t.direction == Direction::Read && inv.local.symlink_metadata().is_err(),
        };
        let permit = sh.slots.clone().try_acquire_owned().map_err(|_| {
            MssError::Unavailable(format!(
                "all {} encp processes are busy",
                sh.cfg.max_processes
            ))
        })?;
        let child = spawn(&inv).map_err(|e| {
            MssError::Unavailable(format!("cannot run {}: {e}", inv.program.display()))
        })?;
        let pid = child.id().unwrap_or(0);
        let stop = Arc::new(Notify::new());
        p.running.insert(
            t.key.clone(),
            Proc {
                attempt: t.attempt,
                pid,
                started: false,
                unique_id: None,
                library: None,
                file: t.file.clone(),
                stop: stop.clone(),
            },
        );
        drop(p);
        debug!(key = %t.key, attempt = t.attempt, pid, args = ?inv.args, "encp started");
        tokio::spawn(watch(sh.clone(), child, t.clone(), output, stop, permit));
        Ok(Submitted {
            mss_id: format!("encp:{pid}"),
            duplicate: false,
        })
    }

    async fn cancel(&self, t: &TransferRef) -> Result<(), MssError> {
        let p = self.shared.lock();
        match p.running.get(&t.key) {
            Some(run) if run.attempt == t.attempt => {
                // The watcher stops encp, then deletes its ticket (`cancel_command`).
                run.stop.notify_one();
                Ok(())
            }
            _ => Err(MssError::Rejected(
                "no encp of this transfer is running".into(),
            )),
        }
    }

    async fn reprioritize(&self, t: &TransferRef, priority: i64) -> Result<(), MssError> {
        let Some(template) = &self.shared.cfg.reprioritize_command else {
            return Err(MssError::Rejected(
                "mss.encp.reprioritize_command is not set".into(),
            ));
        };
        let (pid, file) = {
            let p = self.shared.lock();
            match p.running.get(&t.key) {
                Some(run) if run.attempt == t.attempt && !run.started => {
                    (run.pid, run.file.clone())
                }
                Some(run) if run.attempt == t.attempt => {
                    return Err(MssError::Rejected("the transfer has started".into()))
                }
                _ => {
                    return Err(MssError::Rejected(
                        "no encp of this transfer is running".into(),
                    ))
                }
            }
        };
        let args: Vec<String> = template
            .iter()
            .map(|a| {
                a.replace("{pid}", &pid.to_string())
                    .replace("{priority}", &priority.to_string())
                    .replace("{key}", &t.key)
                    .replace("{attempt}", &t.attempt.to_string())
                    .replace("{file}", &file)
            })
            .collect();
        run_command(&args, &self.shared.cfg.env).await
    }

    async fn status(&self, t: &TransferRef) -> Result<Option<TransferStatus>, MssError> {
        let p = self.shared.lock();
        if let Some(run) = p.running.get(&t.key) {
            return Ok(Some(TransferStatus {
                attempt: run.attempt,
                progress: if run.started {
                    Progress::Running
                } else {
                    Progress::Queued
                },
            }));
        }
        Ok(p.finished
            .get(&t.key)
            .map(|(attempt, kind)| TransferStatus {
                attempt: *attempt,
                progress: Progress::Finished(kind.clone()),
            }))
    }

    async fn events(&self, cursor: &EventCursor, wait: Duration) -> Result<EventBatch, MssError> {
        Ok(self.shared.log.read(cursor, wait).await)
    }
}

//! Readiness (`GET /readyz`): whether this broker can do its work now, as opposed to liveness
//! (`/healthz`: the process answers HTTP). Ready means: the ledger writer thread is alive and
//! committed or ticked within [`WRITER_STALE`] (a timer sends it an empty command every
//! [`TICK`], so this holds without traffic); the database file at the configured path is the
//! one the writer has open (`ledger::identity`) and this process may write it and its directory
//! (`access(2)`, so a file made read-only, or immutable, is seen before a restart would fail on
//! it); and the MSS answered the dispatcher's latest call (a refusal is an answer).
//!
//! A load balancer probes every few seconds, so a probe is not logged; a change is, once: the
//! broker becoming not ready (at WARN, with every problem) or ready again (at INFO), judged by
//! which checks fail ([`Readiness::check`]).
//!
//! `/readyz`'s checks (`Readiness::check`: the writer's heartbeat age, the database file's identity
//! and `access(W_OK)`, the dispatcher's `LastCall`) and `tick_loop` (an empty writer command every
//! second, spawned by `run_until_stopped`); a change of the answer is logged once, not every probe.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::dispatcher::LastCall;
use crate::ledger::identity::DbFile;
use crate::ledger::Ledger;

/// How often the writer is sent an empty command.
pub const TICK: Duration = Duration::from_secs(1);
/// A writer whose last commit or tick is older than this is not ready.
pub const WRITER_STALE: Duration = Duration::from_secs(5);

/// `/readyz`'s answer.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct ReadyBody {
    pub ready: bool,
    /// Present on a standby (a broker that does not lead, never ready); absent on the leader,
    /// whose body is as it always was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub standby: Option<StandbyBody>,
    /// What is wrong; empty when ready.
    pub problems: Vec<Problem>,
}

/// A standby's part of `/readyz`'s answer.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct StandbyBody {
    /// The leader epoch it last led at or saw lost (none: it never led).
    pub epoch: Option<i64>,
}

/// One failed check.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Problem {
    /// `writer`, `database`, `mss`, or `role` (a standby).
    pub check: &'static str,
    pub error: String,
}

/// What readiness looks at.
pub struct Readiness {
    ledger: Ledger,
    /// The SQLite database's path and its file as the writer opened it (`None` on PostgreSQL:
    /// no file to check; a lost server shows as the writer's stale heartbeat).
    db: Option<(PathBuf, DbFile)>,
    mss: Arc<LastCall>,
    /// The checks that failed at the previous probe (empty: ready; `None`: no probe yet).
    last: Mutex<Option<Vec<&'static str>>>,
}

impl Readiness {
    pub fn new(ledger: Ledger, db: Option<(PathBuf, DbFile)>, mss: Arc<LastCall>) -> Self {
        Readiness {
            ledger,
            db,
            mss,
            last: Mutex::new(None),
        }
    }

    /// Every check's problem, if any (a few `stat`/`access` calls: cheap to answer often); a
    /// change of which checks fail since the previous probe is logged (see the module's notes).
    pub fn check(&self) -> ReadyBody {
        let body = self.problems();
        self.log_change(&body);
        body
    }

    /// Log `body` if the checks that fail are not those of the previous probe: not ready at
    /// WARN with the reasons, ready again at INFO. A first probe that finds the broker ready
    /// says nothing.
    fn log_change(&self, body: &ReadyBody) {
        let failing: Vec<&'static str> = body.problems.iter().map(|p| p.check).collect();
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let before = last.replace(failing.clone());
        if before.as_ref() == Some(&failing) || (before.is_none() && failing.is_empty()) {
            return;
        }
        if failing.is_empty() {
            tracing::info!("ready again: /readyz answers 200");
            return;
        }
        let reasons: Vec<String> = (body.problems.iter())
            .map(|p| format!("{}: {}", p.check, p.error))
            .collect();
        tracing::warn!(checks = ?failing, problems = %reasons.join("; "),
            "not ready: /readyz answers 503 until this changes");
    }

    fn problems(&self) -> ReadyBody {
        let mut problems = Vec::new();
        // An MSS error may quote the call's URL: shown without its password and query.
        let mut add = |check, error: String| {
            let error = mss_adapters::redact::urls(&error).into_owned();
            problems.push(Problem { check, error })
        };
        let age = self.ledger.writer_heartbeat_age();
        if age > WRITER_STALE {
            add(
                "writer",
                format!(
                    "the ledger writer has neither committed nor ticked for {} ms (stopped or stuck)",
                    age.as_millis()
                ),
            );
        }
        if let Some((path, file)) = &self.db {
            if let Err(e) = file.check() {
                add("database", e.to_string());
            }
            for problem in writable(path) {
                add("database", problem);
            }
        }
        match self.mss.get() {
            None => add("mss", "no call to the mss has been made yet".into()),
            Some(o) => {
                if let Some(e) = &o.error {
                    let ms = o.age().as_millis();
                    add(
                        "mss",
                        format!("the last call ({}, {ms} ms ago) failed: {e}", o.call),
                    );
                }
            }
        }
        ReadyBody {
            ready: problems.is_empty(),
            standby: None,
            problems,
        }
    }
}

impl ReadyBody {
    /// The answer of a standby that last led at `epoch`: not ready, saying `why`.
    pub fn standby(epoch: Option<i64>, why: String) -> ReadyBody {
        ReadyBody {
            ready: false,
            standby: Some(StandbyBody { epoch }),
            problems: vec![Problem {
                check: "role",
                error: why,
            }],
        }
    }
}

/// Why this process could not write the database file or create files (journal, WAL) next to
/// it; empty when it can.
fn writable(path: &Path) -> Vec<String> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    [(path, "database file"), (dir, "database directory")]
        .into_iter()
        .filter_map(|(p, what)| {
            may_write(p)
                .err()
                .map(|e| format!("the {what} {} is not writable: {e}", p.display()))
        })
        .collect()
}

/// `access(path, W_OK)`: the kernel's answer for this process (EACCES for a read-only file,
/// EPERM for an immutable one even as root, EROFS on a read-only mount).
fn may_write(path: &Path) -> std::io::Result<()> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Send the writer an empty command every [`TICK`], so its heartbeat stays fresh while idle.
pub async fn tick_loop(ledger: Ledger) {
    loop {
        tokio::time::sleep(TICK).await;
        if let Err(e) = ledger.tick().await {
            tracing::warn!(error = %e, "the ledger writer did not answer its tick");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{LedgerOptions, NoObserver};

    fn checks(body: &ReadyBody) -> Vec<&'static str> {
        body.problems.iter().map(|p| p.check).collect()
    }

    #[tokio::test]
    async fn each_check_is_reported_by_name_and_all_passing_is_ready() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        let settings = crate::tests::TestConfig::new().settings();
        let options = LedgerOptions {
            path: path.clone(),
            commit_batch_max: 64,
            url: None,
            epoch: 1,
            retry: settings.mss.retry,
            metrics: Arc::new(NoObserver),
            read_outputs: settings.mss.read_outputs(),
        };
        let clock = Arc::new(crate::clock::SystemClock);
        let (ledger, writer) = Ledger::open(&options, settings.policy.clone(), clock).unwrap();
        let mss = Arc::new(LastCall::default());
        let file = DbFile::of(&path).unwrap();
        let readiness = Readiness::new(ledger.clone(), Some((path.clone(), file)), mss.clone());
        ledger.tick().await.unwrap();
        assert!(ledger.writer_heartbeat_age() < WRITER_STALE);
        // No call to the MSS yet.
        assert_eq!(checks(&readiness.check()), ["mss"]);
        let down = mss_adapters::MssError::Unavailable("connection refused".into());
        mss.record("events", Some(&down));
        let body = readiness.check();
        assert_eq!(checks(&body), ["mss"]);
        assert!(
            body.problems[0].error.contains("events") && body.problems[0].error.contains("refused")
        );
        mss.record("events", None);
        let body = readiness.check();
        assert!(body.ready && body.problems.is_empty(), "{body:?}");
        // The file at the path replaced by another: the open one is no longer the configured.
        std::fs::rename(&path, dir.path().join("moved.db")).unwrap();
        std::fs::write(&path, b"").unwrap();
        let body = readiness.check();
        assert_eq!(checks(&body), ["database"]);
        assert!(body.problems[0].error.contains("replaced"), "{body:?}");
        drop((readiness, ledger));
        writer.join().unwrap();
    }

    #[test]
    fn a_missing_file_or_directory_is_not_writable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.db");
        std::fs::write(&path, b"a").unwrap();
        assert!(writable(&path).is_empty());
        let missing = dir.path().join("nope").join("x.db");
        let problems = writable(&missing);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("database file"), "{problems:?}");
        assert!(problems[1].contains("database directory"), "{problems:?}");
    }
}

//! The FTS3 adapter: the jobs in flight in memory, the credential's VO ids (read again when
//! they may have changed), and the
//! `MssAdapter` calls; `poller` follows the jobs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};
use tracing::warn;

use super::batch::Place;
use super::config::{Fts3Config, MIN_PRIORITY};
use super::job::{conflict_is_ours, file_mss_id, job_id_in, split_mss_id};
use super::poller::poll_loop;
use super::progress::{is_staging, progress_of};
use crate::endpoint::Endpoint;
use crate::event_log::EventLog;
use crate::opening::adapter_opening;
use crate::protocol::Transfer;
use crate::renew::RenewingClient;
use crate::rest;
use crate::{
    EventBatch, EventCursor, MssAdapter, MssError, PriorityScale, Progress, Submitted, TransferRef,
    TransferStatus,
};

/// The FTS3 adapter.
pub struct Fts3Adapter {
    shared: Arc<Fts3State>,
    poller: tokio::task::JoinHandle<()>,
}

/// The FTS3 adapter's state, shared by its handle and its poller.
pub(super) struct Fts3State {
    pub(super) cfg: Fts3Config,
    sid_prefix: String,
    /// `cfg.url` parsed: every call's URL is built from it.
    endpoint: Endpoint,
    /// Rebuilt when the certificate, key or CA files are renewed in place.
    client: RenewingClient,
    pub(super) log: EventLog,
    jobs: Mutex<HashMap<String, Track>>,
    /// Transfers found in a job FTS3 holds (after a 409 or a lost answer) and not submitted
    /// again yet, by key.
    found: Mutex<HashMap<String, Place>>,
    /// Transfers whose submission's answer was lost, by key: the attempt, the sid of the job
    /// they were sent in, and when.
    uncertain: Mutex<HashMap<String, Unsettled>>,
    /// Set once this broker's jobs in flight were read after the start (`batch::recover`).
    pub(super) recovered: std::sync::OnceLock<()>,
    /// When reading them last failed (tried again a minute later, not at every submission).
    pub(super) recover_failed: Mutex<Option<std::time::Instant>>,
    /// The credential's DN as FTS3 sees it (`user_dn` of `GET /whoami`): the jobs listed are
    /// this credential's.
    pub(super) user_dn: std::sync::OnceLock<String>,
    /// The namespaces of this credential's job ids, FTS3's `vos_id[0]` from `GET /whoami`: the
    /// one last read first, then those read before (a token renewed with other groups moves
    /// new jobs to another VO; the jobs made before keep their ids).
    vo_ids: Mutex<Vec<uuid::Uuid>>,
    /// Held while `GET /whoami` is read, so concurrent first needs read it once.
    reading_vo: tokio::sync::Mutex<()>,
    /// Destinations FTS3 holds for a transfer not ended yet: not sent again before their next
    /// try (`holds.rs`).
    pub(super) holds: super::holds::Holds,
}

/// A job in flight.
#[derive(Debug, Clone)]
pub(super) struct Track {
    pub(super) attempt: u32,
    pub(super) job_id: String,
    /// The file's index in a job of several files.
    pub(super) index: Option<u64>,
    pub(super) level: i64,
    pub(super) started: bool,
    pub(super) staging: bool,
    pub(super) size_bytes: u64,
    /// Where the file goes, when known (not for a job adopted after a restart): its end frees
    /// a destination held for it (`holds.rs`).
    pub(super) dest: Option<String>,
}

/// A transfer whose submission's answer was lost: its attempt, the sid it was sent under, and,
/// when the answer was never read (FTS3 may still be creating the job), since when.
pub(super) type Unsettled = (u32, String, Option<std::time::Instant>);

/// The part of FTS3's `GET /whoami` the adapter reads.
#[derive(Debug, Deserialize)]
struct WhoAmI {
    #[serde(default)]
    vos: Vec<String>,
    #[serde(default)]
    vos_id: Vec<String>,
    #[serde(default)]
    user_dn: Option<String>,
}

impl Fts3Adapter {
    /// Build the adapter and start its poller. `instance` names the broker's ledger (used in
    /// the submission ids unless `sid_prefix` is set). Must run inside a tokio runtime.
    pub fn new(cfg: Fts3Config, instance: &str) -> Result<Fts3Adapter, MssError> {
        let client = RenewingClient::new(&cfg.auth, cfg.timeout)?;
        let endpoint = Endpoint::parse(&cfg.url).map_err(MssError::Protocol)?;
        let sid_prefix = cfg
            .sid_prefix
            .clone()
            .unwrap_or_else(|| format!("mssbroker-{instance}"));
        let shared = Arc::new(Fts3State {
            cfg,
            sid_prefix,
            endpoint,
            client,
            log: EventLog::new("fts3"),
            jobs: Mutex::new(HashMap::new()),
            found: Mutex::new(HashMap::new()),
            uncertain: Mutex::new(HashMap::new()),
            recovered: std::sync::OnceLock::new(),
            recover_failed: Mutex::new(None),
            user_dn: std::sync::OnceLock::new(),
            vo_ids: Mutex::new(Vec::new()),
            reading_vo: tokio::sync::Mutex::new(()),
            holds: Default::default(),
        });
        let poller = tokio::spawn(poll_loop(shared.clone()));
        Ok(Fts3Adapter { shared, poller })
    }

    /// Jobs being followed.
    pub fn in_flight(&self) -> usize {
        self.shared.lock().len()
    }
}

impl Drop for Fts3Adapter {
    fn drop(&mut self) {
        self.poller.abort();
    }
}

impl Track {
    /// The MSS id the broker records: the job's, with the file's index in a job of several.
    pub(super) fn mss_id(&self) -> String {
        match self.index {
            Some(i) => file_mss_id(&self.job_id, i),
            None => self.job_id.clone(),
        }
    }
}

impl Fts3State {
    pub(super) fn lock(&self) -> MutexGuard<'_, HashMap<String, Track>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn found_mut(&self) -> MutexGuard<'_, HashMap<String, Place>> {
        self.found.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn uncertain_mut(&self) -> MutexGuard<'_, HashMap<String, Unsettled>> {
        self.uncertain.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn sid(&self, key: &str, attempt: u32) -> String {
        format!("{}-{key}-{attempt}", self.sid_prefix)
    }

    /// The job a transfer is in, and its index there in a job of several files.
    async fn place_of(&self, t: &TransferRef) -> Result<(String, Option<u64>), MssError> {
        if let Some(track) = self.lock().get(&t.key).filter(|j| j.attempt == t.attempt) {
            return Ok((track.job_id.clone(), track.index));
        }
        match &t.mss_id {
            Some(id) => Ok(split_mss_id(id)),
            None => self.place_unanswered(t).await,
        }
    }

    /// The place of a transfer the broker has no MSS id for (its submission's answer was lost,
    /// or the broker stopped before recording it; the broker may then settle it by key alone):
    /// a job of several files is named after its first transfer, so the job that lost answer
    /// names, or one this broker's jobs in flight hold (read after a start), comes first; else
    /// the job of its own sid (a job of one file). A lost answer's job FTS3 does not show yet,
    /// so soon that it may still be creating it, is an unknown outcome (asked again later).
    async fn place_unanswered(&self, t: &TransferRef) -> Result<(String, Option<u64>), MssError> {
        self.recover_once().await;
        if let Some(place) = self.found_place(&t.key, t.attempt) {
            return Ok((place.job_id, place.index));
        }
        let lost = (self.uncertain_mut().get(&t.key))
            .filter(|(attempt, _, _)| *attempt == t.attempt)
            .cloned();
        if let Some((_, sid, lost_at)) = lost {
            let shown = self.look_up(&sid).await?;
            if let Some(place) = self.found_place(&t.key, t.attempt) {
                return Ok((place.job_id, place.index));
            }
            if !shown && lost_at.is_some_and(|at| at.elapsed() <= self.cfg.timeout * 2) {
                return Err(MssError::Unknown(format!(
                    "fts3 does not show job `{sid}` yet, whose submission's answer was lost"
                )));
            }
        }
        let own = self.sid(&t.key, t.attempt);
        // Under which VO's id FTS3 made it is known only by looking, when there were several.
        if self.vo_ids().await?.len() > 1 && self.look_up(&own).await? {
            if let Some(place) = self.found_place(&t.key, t.attempt) {
                return Ok((place.job_id, place.index));
            }
        }
        Ok((job_id_in(&self.vo_id().await?, &own), None))
    }

    /// The VO id FTS3 derives job ids from for this credential: `vos_id[0]` of `GET /whoami`
    /// (fts-rest-flask `controllers/delegation.py` `whoami`), read at the first need and again
    /// only when it may have changed ([`Fts3State::rederive`]).
    pub(super) async fn vo_id(&self) -> Result<uuid::Uuid, MssError> {
        if let Some(id) = self.vo_ids_mut().first() {
            return Ok(*id);
        }
        let _reading = self.reading_vo.lock().await;
        if let Some(id) = self.vo_ids_mut().first() {
            return Ok(*id);
        }
        Ok(self.read_whoami().await?.0)
    }

    /// Every VO id this credential has had, the last read first: a job is looked for under
    /// each, since one made before a change keeps its id.
    pub(super) async fn vo_ids(&self) -> Result<Vec<uuid::Uuid>, MssError> {
        self.vo_id().await?;
        Ok(self.vo_ids_mut().clone())
    }

    fn vo_ids_mut(&self) -> MutexGuard<'_, Vec<uuid::Uuid>> {
        self.vo_ids.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Read `GET /whoami` again: the VO id FTS3 derives job ids from now, and whether it
    /// changed since the last reading. FTS3 derives `vos` from the credential at every call
    /// (fts-rest-flask `lib/middleware/fts3auth/methods/oauth2.py`: a token's groups unless the
    /// gridmap or the provider's configuration names its VO; `methods/ssl.py`: the client
    /// certificate's FQANs) and names a deterministic job `uuid5(uuid5(BASE_ID, vos[0]), sid)`
    /// (`lib/JobBuilder.py`, fts-rest-flask a8b49830ce86230f92b2b3849c51ddd916feb8f5). The
    /// token is read at every call, so its VO may change while the adapter runs (the client
    /// certificate is read once, when the adapter is built): read again when FTS3 shows no job
    /// where the VO id known would put it, or names a job of ours (409).
    pub(super) async fn rederive(&self) -> Result<(uuid::Uuid, bool), MssError> {
        let _reading = self.reading_vo.lock().await;
        self.read_whoami().await
    }

    async fn read_whoami(&self) -> Result<(uuid::Uuid, bool), MssError> {
        let rb = self.request(reqwest::Method::GET, "/whoami")?;
        let who: WhoAmI = rest::decode(rest::send(rb, self.cfg.timeout).await?).await?;
        let first = who
            .vos_id
            .first()
            .ok_or_else(|| MssError::Protocol("fts3's /whoami lists no vos_id".into()))?;
        let id = uuid::Uuid::parse_str(first)
            .map_err(|e| MssError::Protocol(format!("fts3's /whoami vos_id `{first}`: {e}")))?;
        if let Some(dn) = who.user_dn.filter(|d| !d.is_empty()) {
            let _ = self.user_dn.set(dn);
        }
        let vo = who.vos.first().map(String::as_str).unwrap_or("");
        let mut ids = self.vo_ids_mut();
        let before = ids.first().copied();
        if before == Some(id) {
            return Ok((id, false));
        }
        ids.retain(|v| *v != id);
        ids.insert(0, id);
        drop(ids);
        if before.is_some() {
            warn!(fts3 = %vo, "fts3 maps the credential to another VO now (a renewed token?): new job ids follow it, jobs made before are still found under theirs");
        } else if vo != self.cfg.vo {
            warn!(configured = %self.cfg.vo, fts3 = %vo, "fts3 maps the credential to another VO than mss.fts3.vo; job ids follow fts3's");
        }
        Ok((id, before.is_some()))
    }

    pub(super) fn level(&self, priority: i64) -> i64 {
        PriorityScale::Bands(self.cfg.bands.clone())
            .map(priority)
            .unwrap_or(MIN_PRIORITY)
    }

    pub(super) fn request(
        &self,
        method: reqwest::Method,
        path: &str,
    ) -> Result<reqwest::RequestBuilder, MssError> {
        let rb = (self.client.client())
            .request(method, self.endpoint.url(path))
            .header("accept", "application/json");
        self.cfg.auth.authorize(rb)
    }

    /// Cancel one file of a job of several: `DELETE /jobs/{id}/files/{file_id}`, the file's id
    /// read from the job (fts-rest-flask `controllers/jobs.py` `cancel_files`, which answers the
    /// file's new state, or its state when it had already ended).
    pub(super) async fn cancel_file(&self, job_id: &str, index: u64) -> Result<(), MssError> {
        let job = self
            .get_jobs(&[job_id.to_string()])
            .await?
            .into_iter()
            .next()
            .unwrap_or(Value::Null);
        let file = file_at(&job, Some(index)).flatten();
        let state = file
            .and_then(|f| f.get("file_state"))
            .and_then(Value::as_str);
        if let Some(ended @ ("FINISHED" | "FAILED" | "CANCELED")) = state {
            // FTS3 would answer an ended file's state, "CANCELED" included: ask first.
            return Err(MssError::Rejected(format!(
                "the fts3 file is already {ended}"
            )));
        }
        let file_id = file
            .and_then(|f| f.get("file_id"))
            .and_then(Value::as_u64)
            .ok_or_else(|| {
                MssError::Rejected(format!("fts3 job {job_id} has no file {index} (any more)"))
            })?;
        let path = format!("/jobs/{job_id}/files/{file_id}");
        let rb = self.request(reqwest::Method::DELETE, &path)?;
        let answer: Value = rest::decode(rest::send(rb, self.cfg.timeout).await?).await?;
        match answer.as_str() {
            Some("CANCELED") => Ok(()),
            Some(other) => Err(MssError::Rejected(format!("the fts3 file is {other}"))),
            None => Err(MssError::Protocol(format!(
                "fts3 answered a file's cancel with {}",
                clip_json(&answer)
            ))),
        }
    }

    /// What a 409 answer means: the job of this sid exists (ours again: recover it), or a
    /// file's destination is held by another not ended yet (FTS3's message).
    pub(super) async fn conflict(
        &self,
        resp: reqwest::Response,
        sid: &str,
    ) -> Result<Conflict, MssError> {
        let answer = rest::Answer::read(resp).await?;
        let message = answer.server_error().unwrap_or_else(|| answer.text());
        if !conflict_is_ours(&message) {
            return Ok(Conflict::Destination(message));
        }
        // FTS3 holds this transfer's job: failing the request now would let a later request
        // copy the file again, so a job id that cannot be derived yet is an unknown outcome
        // (resent, answered 409 again, derived then). The VO id is read again: FTS3 named the
        // job under the credential's VO of this very call.
        let vo_id = self
            .rederive()
            .await
            .map(|(id, _)| id)
            .map_err(|e| match e {
                MssError::Protocol(m) | MssError::Rejected(m) => MssError::Unknown(format!(
                    "fts3 already holds this transfer's job, but its id cannot be derived yet: {m}"
                )),
                other => other,
            })?;
        Ok(Conflict::Ours(job_id_in(&vo_id, sid)))
    }
}

/// What FTS3's 409 to a submission says.
pub(super) enum Conflict {
    /// It holds a job under this sid already: this job id.
    Ours(String),
    /// "The submission is duplicated": a file's destination (`dest_surl_uuid`, for the VOs of
    /// FTS3's `CheckDuplicates`) is held by a file that has not ended, of another job or of this
    /// one. FTS3 clears it when that file ends (cern-fts/fts3 `src/db/mysql/MySqlAPI.cpp`
    /// `updateFileTransferStatusInternal`), so the same submission is taken later. FTS3's
    /// message.
    Destination(String),
}

#[async_trait]
impl MssAdapter for Fts3Adapter {
    adapter_opening!("fts3", room: followed up to max_outstanding);

    fn check_file(&self, file: &str) -> Result<(), String> {
        super::config::check_file(file)
    }

    fn check_local_file(&self, local_file: &str) -> Result<(), String> {
        self.shared.cfg.check_local_file(local_file)
    }

    async fn submit(&self, t: &Transfer) -> Result<Submitted, MssError> {
        self.shared
            .submit_all(std::slice::from_ref(t))
            .await
            .pop()
            .unwrap_or_else(|| Err(MssError::Protocol("no answer".into())))
    }

    /// One job per volume (its transfers at one FTS3 level, up to `job_max_files`), one job
    /// for each transfer without a volume.
    async fn submit_batch(&self, transfers: &[Transfer]) -> Vec<Result<Submitted, MssError>> {
        self.shared.submit_all(transfers).await
    }

    async fn cancel(&self, t: &TransferRef) -> Result<(), MssError> {
        let sh = &self.shared;
        let (id, index) = sh.place_of(t).await?;
        if let Some(index) = index {
            return sh.cancel_file(&id, index).await;
        }
        let rb = sh.request(reqwest::Method::DELETE, &format!("/jobs/{id}"))?;
        let job: Value = rest::decode(rest::send(rb, sh.cfg.timeout).await?).await?;
        // FTS3 answers a job already final with its state and "304 Not Modified".
        let unchanged = job
            .get("http_status")
            .and_then(Value::as_str)
            .is_some_and(|s| s.starts_with("304"));
        match job.get("job_state").and_then(Value::as_str) {
            Some("CANCELED") if !unchanged => Ok(()),
            Some(other) => Err(MssError::Rejected(format!(
                "the fts3 job is already {other}"
            ))),
            None => Err(MssError::Protocol(format!("no job_state in {job}"))),
        }
    }

    async fn reprioritize(&self, t: &TransferRef, priority: i64) -> Result<(), MssError> {
        let sh = &self.shared;
        let level = sh.level(priority);
        let current = sh
            .lock()
            .get(&t.key)
            .filter(|j| j.attempt == t.attempt)
            .map(|j| j.level);
        if current == Some(level) {
            // The new broker priority falls in the same FTS3 band: nothing to change there.
            return Ok(());
        }
        let (id, _) = sh.place_of(t).await?;
        let rb = sh
            .request(reqwest::Method::POST, &format!("/jobs/{id}"))?
            .json(&json!({"params": {"priority": level}}));
        let job: Value = rest::decode(rest::send(rb, sh.cfg.timeout).await?).await?;
        let state = job.get("job_state").and_then(Value::as_str).unwrap_or("");
        if !matches!(state, "SUBMITTED" | "STAGING" | "READY") {
            return Err(MssError::Rejected(format!("the fts3 job is {state}")));
        }
        // The job's every file has the new priority: one volume batch moves together.
        for j in sh.lock().values_mut().filter(|j| j.job_id == id) {
            j.level = level;
        }
        Ok(())
    }

    async fn status(&self, t: &TransferRef) -> Result<Option<TransferStatus>, MssError> {
        let sh = &self.shared;
        let (id, index) = sh.place_of(t).await?;
        let job = sh
            .get_jobs(std::slice::from_ref(&id))
            .await?
            .into_iter()
            .next()
            .unwrap_or(Value::Null);
        if job
            .get("http_status")
            .and_then(Value::as_str)
            .is_some_and(|s| s.starts_with("404"))
        {
            sh.forget_unanswered(&t.key, t.attempt);
            return Ok(None);
        }
        let staging = is_staging(&job);
        let Some(file) = file_at(&job, index) else {
            return Err(MssError::Protocol(format!(
                "fts3 job {id} has no file at index {index:?}"
            )));
        };
        let Some(progress) = progress_of(&job, file, t.size_bytes, staging) else {
            return Err(MssError::Protocol(format!("no state in {job}")));
        };
        if !matches!(progress, Progress::Finished(_)) {
            // A job submitted before a restart: follow it from now on.
            let level = job
                .get("priority")
                .and_then(Value::as_i64)
                .unwrap_or(MIN_PRIORITY);
            sh.lock().entry(t.key.clone()).or_insert(Track {
                attempt: t.attempt,
                job_id: id,
                index,
                level,
                started: progress == Progress::Running,
                staging,
                size_bytes: t.size_bytes,
                dest: None,
            });
        }
        // Followed now, or finished: what a lost answer left of it is done with.
        sh.forget_unanswered(&t.key, t.attempt);
        Ok(Some(TransferStatus {
            attempt: t.attempt,
            progress,
        }))
    }

    async fn events(&self, cursor: &EventCursor, wait: Duration) -> Result<EventBatch, MssError> {
        Ok(self.shared.log.read(cursor, wait).await)
    }
}

/// The file a transfer is of a polled job: the one at `index` in a job of several files, the
/// first (or, with no `files`, the job itself) in a job of one.
pub(super) fn file_at(job: &Value, index: Option<u64>) -> Option<Option<&Value>> {
    let files = job.get("files").and_then(Value::as_array);
    match index {
        None => Some(files.and_then(|f| f.first())),
        Some(i) => files?
            .iter()
            .find(|f| f.get("file_index").and_then(Value::as_u64) == Some(i))
            .map(Some),
    }
}

/// A JSON answer as text for a message, clipped.
pub(super) fn clip_json(v: &Value) -> String {
    crate::answer::clip(&v.to_string(), crate::answer::MAX_MESSAGE_CHARS).into_owned()
}

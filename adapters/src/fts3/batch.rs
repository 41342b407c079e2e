//! Submitting transfers in jobs of many files: a volume's batch is one FTS3 job (one
//! bring-online request for all its files at FTS3), and a transfer is never queued twice
//! however answers are lost.
//!
//! A job's `sid` is its first transfer's (`<prefix>-<key>-<attempt>`), the same as that
//! transfer's job of its own would have, so FTS3's 409 "The sid provided by the user is
//! duplicated" recognises it whatever company it was sent in. On that 409 the adapter reads
//! the job's files (`file_metadata` names each one's transfer) and takes every transfer of
//! this submission found there as submitted; the rest go in a new job. A submission whose
//! answer was lost is remembered, and before any of its transfers is sent again the job it
//! may have created is looked up, so a transfer that went in a job led by another is not sent
//! in a second one even when the company changed meanwhile. What a restart of the broker
//! forgets of that, the jobs in flight read after the start (`recover`) cover.
//!
//! Reading a job's files and looking up the jobs FTS3 may hold already is `batch/lookup.rs`.

use std::time::Instant;

use reqwest::StatusCode;
use serde_json::Value;
use tracing::warn;

use super::adapter::{Conflict, Fts3State, Track};
use super::job::{
    apart_by_destination, batch_body, clashing, endpoints, file_entry, file_mss_id, file_owner,
    job_body, jobs_of,
};
use crate::protocol::Transfer;
use crate::rest;
use crate::{MssError, Submitted};

mod lookup;

/// Where a transfer sits in a job FTS3 holds: the job and, in a job of several files, its index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Place {
    pub(super) attempt: u32,
    pub(super) job_id: String,
    pub(super) index: Option<u64>,
}

impl Place {
    fn mss_id(&self) -> String {
        match self.index {
            Some(i) => file_mss_id(&self.job_id, i),
            None => self.job_id.clone(),
        }
    }
}

pub(super) type Answers = Vec<Option<Result<Submitted, MssError>>>;

impl Fts3State {
    /// Submit `transfers`, in jobs of one volume each where they share one: one answer each.
    pub(super) async fn submit_all(
        &self,
        transfers: &[Transfer],
    ) -> Vec<Result<Submitted, MssError>> {
        let mut out: Answers = vec![None; transfers.len()];
        self.recover_once().await;
        self.look_up_uncertain(transfers, &mut out).await;
        let mut items = Vec::new();
        for (i, t) in transfers.iter().enumerate() {
            if out[i].is_some() {
                continue;
            }
            if let Some(s) = self.known(t) {
                out[i] = Some(Ok(s));
            } else {
                items.push((i, t.direction, t.volume.as_deref(), self.level(t.priority)));
            }
        }
        for job in jobs_of(&items, self.cfg.job_max_files) {
            for job in apart_by_destination(&self.destinations(transfers, &job)) {
                self.submit_job(transfers, job, &mut out).await;
            }
        }
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(MssError::Protocol("no answer".into()))))
            .collect()
    }

    /// Where a job FTS3 holds (one whose answer was lost, or found after a start) has the
    /// transfer `key` at `attempt`, if one does.
    pub(super) fn found_place(&self, key: &str, attempt: u32) -> Option<Place> {
        (self.found_mut().get(key))
            .filter(|p| p.attempt == attempt)
            .cloned()
    }

    /// Drop what a lost answer or a start's reading left of transfer `key` at `attempt` (its
    /// place in a job, its lost answer's sid) once its status is known: a request settled by
    /// key alone is never sent again, so nothing else would take them away.
    pub(super) fn forget_unanswered(&self, key: &str, attempt: u32) {
        let mut found = self.found_mut();
        if found.get(key).is_some_and(|p| p.attempt == attempt) {
            found.remove(key);
        }
        drop(found);
        let mut uncertain = self.uncertain_mut();
        if uncertain.get(key).is_some_and(|(a, _, _)| *a == attempt) {
            uncertain.remove(key);
        }
    }

    /// The transfers at `job` (positions in `transfers`) with their destinations (empty for
    /// one FTS3 cannot be asked for: it fails on its own).
    fn destinations(&self, transfers: &[Transfer], job: &[usize]) -> Vec<(usize, String)> {
        (job.iter())
            .map(|&i| match endpoints(&self.cfg, &transfers[i]) {
                Ok((_, dest)) => (i, dest),
                Err(_) => (i, String::new()),
            })
            .collect()
    }

    /// A transfer already in a job: followed, or found in a job whose answer was lost.
    fn known(&self, t: &Transfer) -> Option<Submitted> {
        if let Some(track) = self.lock().get(&t.key).filter(|j| j.attempt == t.attempt) {
            return Some(Submitted {
                mss_id: track.mss_id(),
                duplicate: true,
            });
        }
        let place = self.found_mut().remove(&t.key)?;
        if place.attempt != t.attempt {
            return None;
        }
        self.follow(t, &place, self.level(t.priority));
        Some(Submitted {
            mss_id: place.mss_id(),
            duplicate: true,
        })
    }

    /// Follow a transfer FTS3 holds.
    fn follow(&self, t: &Transfer, place: &Place, level: i64) {
        let staging = t.direction == crate::Direction::Read && self.cfg.bring_online > 0;
        self.lock().insert(
            t.key.clone(),
            Track {
                attempt: t.attempt,
                job_id: place.job_id.clone(),
                index: place.index,
                level,
                started: false,
                staging,
                size_bytes: t.size_bytes,
                dest: endpoints(&self.cfg, t).ok().map(|(_, dest)| dest),
            },
        );
    }

    /// Submit the transfers at `job` (positions in `transfers`) in one job, then what FTS3 did
    /// not already hold of them in another, until each has an answer.
    async fn submit_job(&self, transfers: &[Transfer], mut job: Vec<usize>, out: &mut Answers) {
        self.answer_the_unsendable(transfers, &mut job, out);
        while let Some(&lead) = job.first() {
            let members: Vec<&Transfer> = job.iter().map(|&i| &transfers[i]).collect();
            match self.post_job(&members).await {
                Ok(Posted::Created(job_id, level)) => {
                    return self.follow_created(transfers, &job, (job_id, level), out);
                }
                Ok(Posted::Exists(job_id)) => {
                    if let Err(e) = self.adopt(&job_id, &transfers[lead]).await {
                        // Which of them the job holds is not known: none is sent again
                        // before it is.
                        return self.unsettled(transfers, &job, e, out);
                    }
                    job.retain(|&i| match self.known(&transfers[i]) {
                        Some(s) => {
                            out[i] = Some(Ok(s));
                            false
                        }
                        None => true,
                    });
                }
                Ok(Posted::Clash(message)) => {
                    let at = self.destinations(transfers, &job);
                    let dests: Vec<&str> = at.iter().map(|(_, d)| d.as_str()).collect();
                    let mut named = clashing(&message, &dests);
                    if named.is_empty() && job.len() > 1 {
                        // Which file clashed is not known: each is sent on its own, so only
                        // that one waits.
                        for &i in &job {
                            Box::pin(self.submit_job(transfers, vec![i], out)).await;
                        }
                        return;
                    }
                    if named.is_empty() {
                        named.push(0);
                    }
                    job = self.defer_clashing(&job, &at, &named, &message, out);
                }
                Err(e) if e.is_retryable() => return self.unsettled(transfers, &job, e, out),
                // FTS3 refuses a whole submission for one bad file: fts-rest-flask builds every
                // file before it makes the job (`lib/JobBuilder.py` `_populate_files` calls
                // `JobBuilder_utils.py` `validate_url`, whose ValueError is the 400). Nothing was
                // made, so each is sent on its own and only what FTS3 refuses alone fails.
                Err(MssError::Rejected(why)) if job.len() > 1 => {
                    warn!(files = job.len(), server = %why,
                          "fts3 refused a job of several files; submitting them one by one");
                    for &i in &job {
                        Box::pin(self.submit_job(transfers, vec![i], out)).await;
                    }
                    return;
                }
                Err(e) => {
                    for &i in &job {
                        out[i] = Some(Err(e.clone()));
                    }
                    return;
                }
            }
        }
    }

    /// Answers, and takes out of `job`, the transfers that cannot go in it: those with no file
    /// entry FTS3 would take, and those whose destination FTS3 refused lately for another
    /// transfer holding it, which wait for their next try here, not in another doomed
    /// `POST /jobs` (`holds.rs`).
    fn answer_the_unsendable(
        &self,
        transfers: &[Transfer],
        job: &mut Vec<usize>,
        out: &mut Answers,
    ) {
        job.retain(|&i| match file_entry(&self.cfg, &transfers[i]) {
            Ok(_) => true,
            Err(e) => {
                out[i] = Some(Err(e));
                false
            }
        });
        let now = Instant::now();
        for (i, dest) in self.destinations(transfers, job) {
            if let Some(wait) = self.holds.check(&dest, now) {
                out[i] = Some(Err(wait));
            }
        }
        job.retain(|&i| out[i].is_none());
    }

    /// FTS3 made the job `job_id` at `level`: its destinations are no longer held, and each of
    /// its transfers is followed and answered with its place in it.
    fn follow_created(
        &self,
        transfers: &[Transfer],
        job: &[usize],
        (job_id, level): (String, i64),
        out: &mut Answers,
    ) {
        for (_, dest) in self.destinations(transfers, job) {
            self.holds.release(&dest);
        }
        let many = job.len() > 1;
        for (n, &i) in job.iter().enumerate() {
            let place = Place {
                attempt: transfers[i].attempt,
                job_id: job_id.clone(),
                index: many.then_some(n as u64),
            };
            self.follow(&transfers[i], &place, level);
            out[i] = Some(Ok(Submitted {
                mss_id: place.mss_id(),
                duplicate: false,
            }));
        }
    }

    /// The transfers at positions `named` of `job` clash with a transfer FTS3 holds to the
    /// same destination (`at`: each position's destination). Not a refusal: FTS3 made nothing
    /// (the transaction is rolled back), and takes the same submission once the file holding
    /// the destination has ended. Deferred, so the broker sends it again later with the same
    /// key and attempt, spending no attempt, and counts FTS3 as up. Returns the rest of `job`.
    fn defer_clashing(
        &self,
        job: &[usize],
        at: &[(usize, String)],
        named: &[usize],
        message: &str,
        out: &mut Answers,
    ) -> Vec<usize> {
        let why = format!(
            "fts3 holds another transfer to the same destination that has not ended \
             (its dest_surl_uuid: the VO is in FTS3's CheckDuplicates); sent again \
             once it has: {message}"
        );
        let now = Instant::now();
        for &n in named {
            if let Some((_, dest)) = at.get(n) {
                self.holds.hold(dest, &why, now);
            }
            out[job[n]] = Some(Err(MssError::Deferred(why.clone())));
        }
        (job.iter().enumerate())
            .filter(|(n, _)| !named.contains(n))
            .map(|(_, &i)| i)
            .collect()
    }

    /// The transfers at `job` may be in a job FTS3 made under its first one's sid: each is
    /// answered `e` and remembered, so the job is looked up before any of them is sent again.
    fn unsettled(&self, transfers: &[Transfer], job: &[usize], e: MssError, out: &mut Answers) {
        let Some(&lead) = job.first() else {
            return;
        };
        let sid = self.sid(&transfers[lead].key, transfers[lead].attempt);
        let mut uncertain = self.uncertain_mut();
        for &i in job {
            // No answer from FTS3 itself (a timeout, a proxy's page, a garbled answer): FTS3 may
            // still be creating the job. FTS3 saying it is unavailable: it was not created.
            let settling = matches!(e, MssError::Unknown(_)).then(Instant::now);
            let entry = (transfers[i].attempt, sid.clone(), settling);
            uncertain.insert(transfers[i].key.clone(), entry);
            out[i] = Some(Err(e.clone()));
        }
    }

    /// `POST /jobs` for these transfers (the first one's sid, the highest level among them).
    async fn post_job(&self, members: &[&Transfer]) -> Result<Posted, MssError> {
        let lead = members[0];
        let sid = self.sid(&lead.key, lead.attempt);
        let level = members
            .iter()
            .map(|t| self.level(t.priority))
            .max()
            .unwrap_or(1);
        let body = if members.len() == 1 {
            job_body(&self.cfg, &sid, level, lead)?
        } else {
            let files = members
                .iter()
                .map(|t| file_entry(&self.cfg, t))
                .collect::<Result<Vec<_>, _>>()?;
            batch_body(&self.cfg, &sid, level, files, lead)
        };
        let rb = self.request(reqwest::Method::POST, "/jobs")?.json(&body);
        // Sent, perhaps taken: no answer in time is not a refusal.
        let resp = rest::send_submission(rb, self.cfg.timeout).await?;
        if resp.status() == StatusCode::CONFLICT {
            return Ok(match self.conflict(resp, &sid).await? {
                // FTS3 has this sid already: our earlier submission, whose answer we lost.
                Conflict::Ours(job_id) => Posted::Exists(job_id),
                Conflict::Destination(message) => Posted::Clash(message),
            });
        }
        if resp.status().is_server_error() {
            let answer = rest::Answer::read(resp).await?;
            if answer.server_error().is_none() {
                // A proxy's page, not FTS3's own error: FTS3 may have taken the job.
                return Err(MssError::Unknown(format!(
                    "{}: an answer not from fts3 (a proxy's?): {}",
                    answer.status,
                    answer.text()
                )));
            }
            return Err(answer.error());
        }
        let answer: Value = rest::decode(resp).await?;
        let id = answer
            .get("job_id")
            .and_then(Value::as_str)
            // FTS3 may have created the job: retried, it answers 409 (same sid).
            .ok_or_else(|| {
                MssError::Unknown(format!(
                    "no job_id in {}",
                    super::adapter::clip_json(&answer)
                ))
            })?;
        Ok(Posted::Created(id.to_string(), level))
    }
}

/// What `POST /jobs` did.
enum Posted {
    /// A new job, at this level.
    Created(String, i64),
    /// FTS3 holds a job under this sid already.
    Exists(String),
    /// A file's destination is held by a file not ended yet (FTS3's message): nothing made.
    Clash(String),
}

/// How long after a failed reading of the jobs in flight it is tried again.
const RECOVER_RETRY: std::time::Duration = std::time::Duration::from_secs(60);

impl Fts3State {
    /// Read this broker's jobs in flight once after the start (tried again at a submission a
    /// minute after a failure, until it succeeds; a submission does not wait for it).
    pub(super) async fn recover_once(&self) {
        if self.recovered.get().is_some() {
            return;
        }
        let failed = *self
            .recover_failed
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if failed.is_some_and(|at| at.elapsed() < RECOVER_RETRY) {
            return;
        }
        match self.recover().await {
            Ok(n) => {
                let _ = self.recovered.set(());
                tracing::info!(jobs = n, "read this broker's fts3 jobs in flight");
            }
            Err(e) => {
                *self
                    .recover_failed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = Some(std::time::Instant::now());
                tracing::warn!(
                    error = %e,
                    "cannot list this broker's fts3 jobs in flight yet (tried again in a \
                     minute); until it can, a batch resent in another order after a restart \
                     could be queued twice"
                )
            }
        }
    }

    /// After a start: note where every transfer of this broker's jobs FTS3 still holds sits, so
    /// one resent in another company after a restart is recognised (`GET /jobs`, fts-rest-flask
    /// `controllers/jobs.py` `index`: the jobs not finished that the credential may see, with
    /// `fields`). A job is this broker's when its id is the one its `job_metadata` names by
    /// this broker's sid, under the VO id of the credential or of the job's `vo_name` (the
    /// submitter's `vos[0]`, `lib/JobBuilder.py`: made before the credential's VO changed).
    /// The number of this broker's jobs found.
    async fn recover(&self) -> Result<usize, MssError> {
        let vo_ids = self.vo_ids().await?;
        let mut rb = self
            .request(reqwest::Method::GET, "/jobs")?
            .query(&[("fields", "job_id,job_metadata,vo_name")]);
        // Only this credential's jobs (FTS3 refuses another DN; the VO's may be many more).
        if let Some(dn) = self.user_dn.get() {
            rb = rb.query(&[("user_dn", dn)]);
        }
        let jobs: Value = rest::decode(rest::send(rb, self.cfg.timeout).await?).await?;
        let jobs = jobs.as_array().cloned().unwrap_or_default();
        let mut ours = 0;
        for job in &jobs {
            let Some(job_id) = job.get("job_id").and_then(Value::as_str) else {
                continue;
            };
            let meta = job.get("job_metadata").cloned().unwrap_or(Value::Null);
            let owner = file_owner(&serde_json::json!({ "file_metadata": meta }));
            let Some((key, attempt)) = owner else {
                continue;
            };
            let sid = self.sid(&key, attempt);
            let own = job
                .get("vo_name")
                .and_then(Value::as_str)
                .map(super::job::vo_id);
            let named = |vo_id: &uuid::Uuid| super::job::job_id_in(vo_id, &sid) == job_id;
            if !(vo_ids.iter().any(named) || own.as_ref().is_some_and(named)) {
                continue;
            }
            ours += 1;
            if meta.get("files").and_then(Value::as_u64).unwrap_or(1) > 1 {
                if let Some(files) = self.files_of(job_id).await? {
                    self.note(job_id, &files);
                }
            } else {
                let place = Place {
                    attempt,
                    job_id: job_id.to_string(),
                    index: None,
                };
                self.found_mut().insert(key, place);
            }
        }
        Ok(ours)
    }
}

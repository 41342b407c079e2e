//! What FTS3 holds already, so no transfer is queued twice: a job's files read and where each
//! transfer sits in it noted (`found`), for a job FTS3 answered exists under a submission's
//! sid (`adopt`), and for one a submission whose answer was lost may have made, looked up
//! before any of its transfers is sent again (`look_up_uncertain`), under every VO id the
//! credential has had (`look_up`).

use std::collections::HashMap;
use std::time::Instant;

use serde_json::Value;

use super::super::adapter::Fts3State;
use super::super::job::file_owner;
use super::{Answers, Place};
use crate::protocol::Transfer;
use crate::rest;
use crate::MssError;

impl Fts3State {
    /// Note where every transfer of a job FTS3 holds sits in it, from its files' metadata. The
    /// job's first transfer `lead` must be among them (its sid named the job).
    pub(super) async fn adopt(&self, job_id: &str, lead: &Transfer) -> Result<(), MssError> {
        let Some(files) = self.files_of(job_id).await? else {
            return Err(MssError::Unknown(format!(
                "fts3 answered that job {job_id} exists, then that it does not"
            )));
        };
        self.note(job_id, &files);
        let many = files.len() > 1;
        let mut found = self.found_mut();
        let lead_found = found
            .get(&lead.key)
            .is_some_and(|p| p.attempt == lead.attempt);
        if !lead_found && !many {
            // A job of one file without our metadata (a broker of old): its sid is this
            // transfer's, so the file is.
            let place = Place {
                attempt: lead.attempt,
                job_id: job_id.to_string(),
                index: None,
            };
            found.insert(lead.key.clone(), place);
        } else if !lead_found {
            return Err(MssError::Rejected(format!(
                "fts3 holds job {job_id} under this transfer's sid, without this transfer in it"
            )));
        }
        Ok(())
    }

    /// The files of a job (`file_index` and `file_metadata` of each), `None` if FTS3 does not
    /// know it.
    pub(super) async fn files_of(&self, job_id: &str) -> Result<Option<Vec<Value>>, MssError> {
        let rb = self
            .request(reqwest::Method::GET, &format!("/jobs/{job_id}"))?
            .query(&[("files", "file_id,file_index,file_metadata")]);
        let answer = rest::Answer::read(rest::send(rb, self.cfg.timeout).await?).await?;
        if answer.not_found() {
            return Ok(None);
        }
        if !answer.status.is_success() {
            return Err(answer.error());
        }
        let job: Value = answer.json()?;
        let files = job.get("files").and_then(Value::as_array).cloned();
        files
            .map(Some)
            .ok_or_else(|| MssError::Protocol(format!("no files in job {job_id}")))
    }

    /// Before sending again a transfer whose submission's answer was lost, look up the job that
    /// submission may have created: what it holds is submitted already. A transfer whose job
    /// cannot be looked up now, or was not found so soon after the lost answer that FTS3 may
    /// still be creating it, is answered with that (retryable) error, not sent.
    pub(super) async fn look_up_uncertain(&self, transfers: &[Transfer], out: &mut Answers) {
        let mut sids: HashMap<String, (Option<Instant>, Vec<usize>)> = HashMap::new();
        {
            let mut uncertain = self.uncertain_mut();
            for (i, t) in transfers.iter().enumerate() {
                match uncertain.get(&t.key) {
                    Some((attempt, sid, at)) if *attempt == t.attempt => {
                        let entry = sids.entry(sid.clone()).or_insert((*at, Vec::new()));
                        entry.1.push(i);
                    }
                    // A later attempt: the broker settled the lost one (it failed it).
                    Some(_) => {
                        uncertain.remove(&t.key);
                    }
                    None => {}
                }
            }
        }
        for (sid, (lost_at, at)) in sids {
            let answer = match self.look_up(&sid).await {
                Ok(true) => Ok(()),
                Ok(false) if lost_at.is_none_or(|t| t.elapsed() > self.cfg.timeout * 2) => Ok(()),
                Ok(false) => Err(MssError::Unavailable(format!(
                    "fts3 does not show job `{sid}` yet, whose submission's answer was lost; \
                     waiting for it to settle before sending its transfers again"
                ))),
                Err(e) => Err(MssError::Unknown(format!(
                    "cannot look up job `{sid}`, whose submission's answer was lost: {e}"
                ))),
            };
            match answer {
                Ok(()) => self.uncertain_mut().retain(|_, (_, s, _)| *s != sid),
                Err(e) => {
                    for i in at {
                        out[i] = Some(Err(e.clone()));
                    }
                }
            }
        }
    }

    /// Note what the job of `sid` holds; whether FTS3 has it. Looked for under every VO id
    /// the credential has had, then, when none has it, under the one FTS3 derives now if that
    /// changed (a renewed token): FTS3 names a job under the VO of the call that made it.
    pub(in crate::fts3) async fn look_up(&self, sid: &str) -> Result<bool, MssError> {
        for vo_id in self.vo_ids().await? {
            if self.look_up_in(&vo_id, sid).await? {
                return Ok(true);
            }
        }
        match self.rederive().await? {
            (vo_id, true) => self.look_up_in(&vo_id, sid).await,
            (_, false) => Ok(false),
        }
    }

    /// Note what the job of `sid` under `vo_id` holds; whether FTS3 has it.
    pub(super) async fn look_up_in(&self, vo_id: &uuid::Uuid, sid: &str) -> Result<bool, MssError> {
        let job_id = super::super::job::job_id_in(vo_id, sid);
        let Some(files) = self.files_of(&job_id).await? else {
            return Ok(false);
        };
        self.note(&job_id, &files);
        Ok(true)
    }

    /// Note where each of a job's files (`file_index`, `file_metadata`) sits.
    pub(super) fn note(&self, job_id: &str, files: &[Value]) {
        let many = files.len() > 1;
        let mut found = self.found_mut();
        for f in files {
            if let (Some((key, attempt)), Some(index)) =
                (file_owner(f), f.get("file_index").and_then(Value::as_u64))
            {
                let index = many.then_some(index);
                found.insert(
                    key,
                    Place {
                        attempt,
                        job_id: job_id.to_string(),
                        index,
                    },
                );
            }
        }
    }
}

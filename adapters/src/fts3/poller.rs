//! Following the jobs in flight: `GET /jobs/{ids}` every `poll_ms`, each job's state turned
//! into events.

use std::collections::HashMap;
use std::sync::Arc;

use reqwest::StatusCode;
use serde_json::{json, Value};
use tracing::{debug, warn};

use super::adapter::{file_at, Fts3State};
use super::progress::progress_of;
use crate::event_log::Seen;
use crate::rest;
use crate::MssError;

/// Most job ids asked for in one poll.
const POLL_BATCH: usize = 50;

/// The file fields a poll asks for.
pub(super) const FILE_FIELDS: &str =
    "file_id,file_index,file_state,filesize,user_filesize,reason,recoverable";

impl Fts3State {
    /// `GET /jobs/{ids}` with the file fields: one JSON object per id asked for.
    pub(super) async fn get_jobs(&self, ids: &[String]) -> Result<Vec<Value>, MssError> {
        let rb = self
            .request(reqwest::Method::GET, &format!("/jobs/{}", ids.join(",")))?
            .query(&[("files", FILE_FIELDS)]);
        let answer = rest::Answer::read(rest::send(rb, self.cfg.timeout).await?).await?;
        // Only FTS3's own 404 (its JSON error) says the job is unknown, not a proxy's page.
        if answer.not_found() && ids.len() == 1 {
            return Ok(vec![
                json!({"job_id": ids[0], "http_status": "404 Not Found"}),
            ]);
        }
        let status = answer.status;
        if !(status.is_success() || status == StatusCode::MULTI_STATUS) {
            return Err(answer.error());
        }
        let body: Value = answer.json()?;
        Ok(match body {
            Value::Array(items) => items,
            one => vec![one],
        })
    }

    /// Turn a transfer's file of a polled job into events, and stop following it once final.
    fn observe(&self, key: &str, job: &Value) {
        let Some(track) = self.lock().get(key).cloned() else {
            return;
        };
        if job
            .get("http_status")
            .and_then(Value::as_str)
            .is_some_and(|s| s.starts_with("404"))
        {
            warn!(key, job_id = %track.job_id, "fts3 no longer knows the job; the broker's status check will settle it");
            self.lock().remove(key);
            return;
        }
        let Some(file) = file_at(job, track.index) else {
            warn!(key, job_id = %track.job_id, index = ?track.index, "the fts3 job has no file at this index; the broker's status check will settle it");
            self.lock().remove(key);
            return;
        };
        let Some(progress) = progress_of(job, file, track.size_bytes, track.staging) else {
            return;
        };
        if let (crate::Progress::Finished(_), Some(dest)) = (&progress, &track.dest) {
            // Before its end is told: a transfer to the same place sent on hearing it goes.
            self.holds.release(dest);
        }
        match self
            .log
            .observe(key, track.attempt, track.started, progress)
        {
            Seen::Nothing => {}
            Seen::Started => {
                if let Some(t) = self.lock().get_mut(key) {
                    t.started = true;
                }
            }
            Seen::Final => {
                self.lock().remove(key);
            }
        }
    }
}

/// Poll the jobs in flight every `poll_ms`.
pub(super) async fn poll_loop(sh: Arc<Fts3State>) {
    // The credential's VO id, read at start (submissions wait for it if this fails).
    if let Err(e) = sh.vo_id().await {
        warn!(error = %e, "cannot read fts3's /whoami yet; retried at the first submission");
    }
    loop {
        tokio::time::sleep(sh.cfg.poll).await;
        // The keys followed in each job (one, or the transfers of a job of several files).
        let mut keys_of: HashMap<String, Vec<String>> = HashMap::new();
        for (k, t) in sh.lock().iter() {
            keys_of.entry(t.job_id.clone()).or_default().push(k.clone());
        }
        let ids: Vec<String> = keys_of.keys().cloned().collect();
        for chunk in ids.chunks(POLL_BATCH) {
            match sh.get_jobs(chunk).await {
                Ok(jobs) => {
                    for job in &jobs {
                        let id = job.get("job_id").and_then(Value::as_str).unwrap_or("");
                        for key in keys_of.get(id).into_iter().flatten() {
                            sh.observe(key, job);
                        }
                    }
                }
                Err(e) => {
                    debug!(error = %e, "cannot poll fts3; next period");
                    break;
                }
            }
        }
    }
}

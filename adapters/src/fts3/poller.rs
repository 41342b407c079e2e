//! Following the jobs in flight: `GET /jobs/{ids}` every `poll_ms`, each job's state turned
//! into events.

use std::collections::HashMap;
use std::sync::Arc;

use reqwest::StatusCode;
use serde_json::{json, Value};
use tracing::{debug, warn};

use super::adapter::Shared;
use super::progress::progress_of;
use crate::event_log::Seen;
use crate::rest;
use crate::MssError;

/// Most job ids asked for in one poll.
const POLL_BATCH: usize = 50;

/// The file fields a poll asks for.
const FILE_FIELDS: &str = "file_state,filesize,user_filesize,reason,recoverable";

impl Shared {
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

    /// Turn a polled job into events, and stop following it once final.
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
        let Some(progress) = progress_of(job, track.size_bytes, track.staging) else {
            return;
        };
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
pub(super) async fn poll_loop(sh: Arc<Shared>) {
    // The credential's VO id, read at start (submissions wait for it if this fails).
    if let Err(e) = sh.vo_id().await {
        warn!(error = %e, "cannot read fts3's /whoami yet; retried at the first submission");
    }
    loop {
        tokio::time::sleep(sh.cfg.poll).await;
        let tracked: Vec<(String, String)> = sh
            .lock()
            .iter()
            .map(|(k, t)| (t.job_id.clone(), k.clone()))
            .collect();
        for chunk in tracked.chunks(POLL_BATCH) {
            let ids: Vec<String> = chunk.iter().map(|(id, _)| id.clone()).collect();
            let key_of: HashMap<&str, &str> = chunk
                .iter()
                .map(|(id, k)| (id.as_str(), k.as_str()))
                .collect();
            match sh.get_jobs(&ids).await {
                Ok(jobs) => {
                    for job in &jobs {
                        let id = job.get("job_id").and_then(Value::as_str).unwrap_or("");
                        if let Some(key) = key_of.get(id) {
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

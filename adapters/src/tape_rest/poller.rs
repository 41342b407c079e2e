//! Following the stage requests: `GET /stage/{id}` every `poll_ms`, each file's state turned
//! into events, and `DELETE /stage/{id}` once every file of a request is final.

use std::collections::BTreeSet;
use std::sync::Arc;

use reqwest::Method;
use serde_json::Value;
use tracing::{debug, warn};

use super::adapter::{TapeRestState, Track};
use super::progress::{all_final, file_progress};
use super::stage::id_segment;
use crate::event_log::Seen;
use crate::rest;
use crate::MssError;

impl TapeRestState {
    /// `GET /stage/{id}`, or `None` when the server does not know the request.
    pub(super) async fn stage_request(&self, id: &str) -> Result<Option<Value>, MssError> {
        let rb = self.request(Method::GET, &format!("/stage/{}", id_segment(id)))?;
        let answer = rest::Answer::read(rest::send(rb, self.cfg.timeout).await?).await?;
        // Only the server's own 404 (its JSON problem) says the request is unknown.
        if answer.not_found() {
            return Ok(None);
        }
        if !answer.status.is_success() {
            return Err(answer.error());
        }
        answer.json().map(Some)
    }

    /// `DELETE /stage/{id}`; done when the server no longer has it.
    async fn delete(&self, id: &str) -> Result<(), MssError> {
        let rb = self.request(Method::DELETE, &format!("/stage/{}", id_segment(id)))?;
        let answer = rest::Answer::read(rest::send(rb, self.cfg.timeout).await?).await?;
        if answer.status.is_success() || answer.not_found() {
            return Ok(());
        }
        Err(answer.error())
    }

    /// Turn one polled request into events for the transfers in it; a request whose files are
    /// all final and no longer followed is marked for deletion.
    pub(super) fn observe(&self, id: &str, request: Option<&Value>) {
        let mine: Vec<(String, Track)> = self
            .lock()
            .iter()
            .filter(|(_, t)| t.request_id == id)
            .map(|(k, t)| (k.clone(), t.clone()))
            .collect();
        let Some(request) = request else {
            warn!(request_id = id, "the tape endpoint no longer knows the stage request; the broker's status check will settle it");
            let mut tracks = self.lock();
            for (k, _) in &mine {
                tracks.remove(k);
            }
            return;
        };
        for (key, track) in mine {
            let Some(progress) = file_progress(&self.cfg, request, &track.path, track.size_bytes)
            else {
                continue;
            };
            match self
                .log
                .observe(&key, track.attempt, track.started, progress)
            {
                Seen::Nothing => {}
                Seen::Started => {
                    if let Some(t) = self.lock().get_mut(&key) {
                        t.started = true;
                    }
                }
                Seen::Final => {
                    self.lock().remove(&key);
                }
            }
        }
        let followed = self.lock().values().any(|t| t.request_id == id);
        if !followed && all_final(&self.cfg, request) {
            self.finished().insert(id.to_string());
        }
    }

    /// Delete the stage requests that are over; a failure is tried again next period.
    pub(super) async fn delete_finished(&self) {
        let ids: Vec<String> = self.finished().iter().cloned().collect();
        for id in ids {
            match self.delete(&id).await {
                Ok(()) => {
                    self.finished().remove(&id);
                }
                Err(e) => {
                    debug!(request_id = %id, error = %e, "cannot delete the stage request; next period")
                }
            }
        }
    }
}

pub(super) async fn poll_loop(sh: Arc<TapeRestState>) {
    if let Err(e) = sh.site().await {
        warn!(error = %e, "cannot read the tape site's discovery document; trying again at the first submission");
    }
    loop {
        tokio::time::sleep(sh.cfg.poll).await;
        let ids: BTreeSet<String> = sh.lock().values().map(|t| t.request_id.clone()).collect();
        for id in ids {
            match sh.stage_request(&id).await {
                Ok(request) => sh.observe(&id, request.as_ref()),
                Err(e) => {
                    debug!(error = %e, "cannot poll the tape endpoint; next period");
                    break;
                }
            }
        }
        sh.delete_finished().await;
    }
}

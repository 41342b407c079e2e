//! The Tape REST adapter: the files being staged in memory, the sitename read once, and the
//! `MssAdapter` calls; `stage` submits, `poller` follows the stage requests.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio::sync::OnceCell;
use tracing::{info, warn};

use super::config::TapeRestConfig;
use super::discovery;
use super::paths;
use super::poller::poll_loop;
use super::progress::file_progress;
use super::stage::{id_segment, SETTLED_BEFORE_STAGING};
use crate::endpoint::Endpoint;
use crate::event_log::EventLog;
use crate::opening::adapter_opening;
use crate::protocol::Transfer;
use crate::renew::RenewingClient;
use crate::{redact, rest};
use crate::{
    EventBatch, EventCursor, MssAdapter, MssError, Progress, Submitted, TransferRef, TransferStatus,
};

/// The WLCG Tape REST API adapter.
pub struct TapeRestAdapter {
    pub(super) shared: Arc<TapeRestState>,
    poller: tokio::task::JoinHandle<()>,
}

/// The tape REST adapter's state, shared by its handle and its poller.
pub(super) struct TapeRestState {
    pub(super) cfg: TapeRestConfig,
    /// `cfg.url` parsed: every call's URL is built from it.
    endpoint: Endpoint,
    /// Rebuilt when the certificate, key or CA files are renewed in place.
    pub(super) client: RenewingClient,
    pub(super) log: EventLog,
    pub(super) tracks: Mutex<HashMap<String, Track>>,
    /// The `targetedMetadata` key, once the discovery document has been read.
    pub(super) site: OnceCell<String>,
    /// Most files in one stage request now: `max_files_per_request`, lowered by a 413.
    pub(super) max_files: AtomicUsize,
    /// Stage requests whose files are all final, to `DELETE`.
    pub(super) finished: Mutex<BTreeSet<String>>,
}

/// A file being staged for one transfer.
#[derive(Debug, Clone)]
pub(super) struct Track {
    pub(super) attempt: u32,
    pub(super) request_id: String,
    /// Normalised.
    pub(super) path: String,
    pub(super) size_bytes: u64,
    pub(super) started: bool,
}

impl TapeRestAdapter {
    /// Build the adapter and start its poller (which reads the discovery document first). Must
    /// run inside a tokio runtime.
    pub fn new(cfg: TapeRestConfig) -> Result<TapeRestAdapter, MssError> {
        let client = RenewingClient::new(&cfg.auth, cfg.timeout)?;
        let endpoint = Endpoint::parse(&cfg.url).map_err(MssError::Protocol)?;
        let max_files = AtomicUsize::new(cfg.max_files_per_request);
        let shared = Arc::new(TapeRestState {
            cfg,
            endpoint,
            client,
            log: EventLog::new("tape-rest"),
            tracks: Mutex::new(HashMap::new()),
            site: OnceCell::new(),
            max_files,
            finished: Mutex::new(BTreeSet::new()),
        });
        let poller = tokio::spawn(poll_loop(shared.clone()));
        Ok(TapeRestAdapter { shared, poller })
    }
}

impl Drop for TapeRestAdapter {
    fn drop(&mut self) {
        self.poller.abort();
    }
}

impl TapeRestState {
    pub(super) fn lock(&self) -> MutexGuard<'_, HashMap<String, Track>> {
        self.tracks.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn finished(&self) -> MutexGuard<'_, BTreeSet<String>> {
        self.finished.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn request(
        &self,
        method: Method,
        path: &str,
    ) -> Result<reqwest::RequestBuilder, MssError> {
        let rb = (self.client.client())
            .request(method, self.endpoint.url(path))
            .header("accept", "application/json");
        self.cfg.auth.authorize(rb)
    }

    /// The `targetedMetadata` key: the site's `sitename`, read once from its discovery document.
    pub(super) async fn site(&self) -> Result<String, MssError> {
        self.site.get_or_try_init(|| self.discover()).await.cloned()
    }

    /// Read the discovery document. Unreachable or a server error: try again later; any other
    /// answer without a `sitename`: the configured key.
    async fn discover(&self) -> Result<String, MssError> {
        let fallback = self.cfg.metadata_key.clone();
        let Some(url) = discovery::document_url(&self.cfg.url) else {
            return Ok(fallback);
        };
        let rb = (self.client.client())
            .get(&url)
            .header("accept", "application/json");
        let answer = rest::Answer::read(rest::send(rb, self.cfg.timeout).await?).await?;
        let retry_later = answer.status.is_server_error()
            || answer.status == StatusCode::TOO_MANY_REQUESTS
            || answer.status == StatusCode::REQUEST_TIMEOUT;
        if retry_later {
            return Err(answer.error());
        }
        let doc = answer
            .status
            .is_success()
            .then(|| answer.json::<Value>().ok())
            .flatten();
        let found = doc.as_ref().map(discovery::read);
        match found.as_ref().and_then(|d| d.endpoint.as_ref()) {
            Some((uri, version)) if uri.trim_end_matches('/') != self.cfg.url => warn!(
                uri = %redact::urls(uri), %version, configured = %self.endpoint.redacted(),
                "the site's discovery document lists another tape endpoint than the configured url"
            ),
            Some(_) => {}
            None => {
                warn!(url = %redact::urls(&url), status = %answer.status, "no v1 tape endpoint in the site's discovery document")
            }
        }
        let site = found.and_then(|d| d.sitename);
        info!(url = %redact::urls(&url), sitename = ?site, metadata_key = %site.as_deref().unwrap_or(&fallback),
              "read the tape site's discovery document");
        Ok(site.unwrap_or(fallback))
    }

    /// `POST /archiveinfo` for `paths`.
    pub(super) async fn archive_info(&self, paths: &[String]) -> Result<Value, MssError> {
        let rb = self
            .request(Method::POST, "/archiveinfo")?
            .json(&json!({ "paths": paths }));
        rest::decode::<Value>(rest::send(rb, self.cfg.timeout).await?).await
    }

    /// The stage request a transfer is in: followed, or recorded by the broker.
    pub(super) fn request_id_of(&self, t: &TransferRef) -> Option<String> {
        self.lock()
            .get(&t.key)
            .filter(|tr| tr.attempt == t.attempt)
            .map(|tr| tr.request_id.clone())
            .or_else(|| t.mss_id.clone())
    }

    /// `POST {path}` with `{"paths": [file]}` for a transfer's file.
    async fn paths_call(&self, path: &str, t: &TransferRef) -> Result<(), MssError> {
        let Some(id) = self
            .request_id_of(t)
            .filter(|id| id != SETTLED_BEFORE_STAGING)
        else {
            return Err(MssError::Rejected(
                "no stage request is known for this transfer".into(),
            ));
        };
        let rb = self
            .request(Method::POST, &path.replace("{id}", &id_segment(&id)))?
            .json(&json!({"paths": [paths::normal(&t.file)]}));
        rest::no_content(rest::send(rb, self.cfg.timeout).await?).await
    }
}

#[async_trait]
impl MssAdapter for TapeRestAdapter {
    adapter_opening!("tape_rest", room: followed up to max_outstanding);

    async fn submit(&self, t: &Transfer) -> Result<Submitted, MssError> {
        self.submit_batch(std::slice::from_ref(t))
            .await
            .pop()
            .unwrap_or_else(|| Err(MssError::Protocol("no answer".into())))
    }

    /// Archive info first, then one stage request per group of distinct paths; writes and
    /// transfers already followed are answered without a call.
    async fn submit_batch(&self, transfers: &[Transfer]) -> Vec<Result<Submitted, MssError>> {
        let mut out: Vec<Option<Result<Submitted, MssError>>> = vec![None; transfers.len()];
        let todo = self.triage(transfers, &mut out);
        if !todo.is_empty() {
            match self.shared.site().await {
                Ok(site) => {
                    let todo = self.settle_before_staging(transfers, todo, &mut out).await;
                    self.stage_all(transfers, todo, &site, &mut out).await;
                }
                Err(e) => {
                    for i in todo {
                        out[i] = Some(Err(e.clone()));
                    }
                }
            }
        }
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(MssError::Protocol("no answer".into()))))
            .collect()
    }

    async fn cancel(&self, t: &TransferRef) -> Result<(), MssError> {
        self.shared.paths_call("/stage/{id}/cancel", t).await
    }

    async fn release(&self, t: &TransferRef) -> Result<(), MssError> {
        if self.shared.request_id_of(t).as_deref() == Some(SETTLED_BEFORE_STAGING) {
            // Found on disk before staging: no stage request, so no pin of ours to release.
            return Ok(());
        }
        self.shared.paths_call("/release/{id}", t).await
    }

    async fn status(&self, t: &TransferRef) -> Result<Option<TransferStatus>, MssError> {
        let sh = &self.shared;
        let Some(id) = sh.request_id_of(t) else {
            return Ok(None);
        };
        if id == SETTLED_BEFORE_STAGING {
            return self.settled_status(t).await;
        }
        let Some(request) = sh.stage_request(&id).await? else {
            return Ok(None);
        };
        let Some(progress) = file_progress(&sh.cfg, &request, &t.file, t.size_bytes) else {
            return Ok(None);
        };
        if !matches!(progress, Progress::Finished(_)) {
            // Staged before a restart: follow it from now on.
            sh.lock().entry(t.key.clone()).or_insert(Track {
                attempt: t.attempt,
                request_id: id,
                path: paths::normal(&t.file),
                size_bytes: t.size_bytes,
                started: progress == Progress::Running,
            });
        }
        Ok(Some(TransferStatus {
            attempt: t.attempt,
            progress,
        }))
    }

    async fn events(&self, cursor: &EventCursor, wait: Duration) -> Result<EventBatch, MssError> {
        Ok(self.shared.log.read(cursor, wait).await)
    }
}

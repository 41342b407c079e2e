//! The HTTP adapter: JSON over HTTP with reqwest, the protocol in [`crate::protocol`] that the
//! bundled simulator speaks. Answers are read bounded ([`crate::answer`]); a refusal is the
//! simulator's own JSON error, and an answer that cannot be read is an unknown outcome. Each
//! call's URL is built from the parsed base ([`Endpoint`]): a base with a path, a trailing slash
//! or a query string (kept on every call) works.
//!
//! `HttpAdapter` on reqwest; answers through `rest::Answer`, transport errors are `Unavailable`.

use std::time::Duration;

use async_trait::async_trait;
use reqwest::Client;

use crate::answer::{clip, MAX_MESSAGE_CHARS};
use crate::endpoint::Endpoint;
use crate::protocol::{
    BatchItem, BatchRequest, BatchResponse, EventKind, EventsResponse, SubmitResponse, Transfer,
    TransferState,
};
use crate::rest::{decode, no_content, submission_transport, transport, Answer};
use crate::{
    Capabilities, EventBatch, EventCursor, MssAdapter, MssError, Progress, Submitted, TransferRef,
    TransferStatus,
};

/// An adapter for an MSS reached at a base URL such as `http://127.0.0.1:7070`.
#[derive(Debug, Clone)]
pub struct HttpAdapter {
    base: Endpoint,
    client: Client,
    timeout: Duration,
}

impl HttpAdapter {
    /// `timeout` bounds every call except event polls, which get their wait on top. A base
    /// that is not an http(s) URL is refused (its secrets hidden in the message).
    pub fn new(base: &str, timeout: Duration) -> Result<HttpAdapter, MssError> {
        let base = Endpoint::parse(base).map_err(MssError::Protocol)?;
        let client = Client::builder()
            .pool_max_idle_per_host(64)
            .connect_timeout(crate::rest::connect_timeout(timeout))
            .build()
            .map_err(|e| {
                MssError::Protocol(format!(
                    "cannot build http client: {}",
                    crate::redact::urls(&e.to_string())
                ))
            })?;
        Ok(HttpAdapter {
            base,
            client,
            timeout,
        })
    }

    /// The base URL as it may be shown (password and query hidden).
    pub fn base(&self) -> String {
        self.base.redacted()
    }
}

#[async_trait]
impl MssAdapter for HttpAdapter {
    fn name(&self) -> &'static str {
        "http"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::full()
    }

    async fn submit(&self, transfer: &Transfer) -> Result<Submitted, MssError> {
        let resp = self
            .client
            .post(self.base.url("/v1/transfers"))
            .timeout(self.timeout)
            .json(transfer)
            .send()
            .await
            .map_err(submission_transport)?;
        let body: SubmitResponse = decode(resp).await?;
        Ok(Submitted {
            mss_id: body.mss_id,
            duplicate: body.duplicate,
        })
    }

    async fn submit_batch(&self, transfers: &[Transfer]) -> Vec<Result<Submitted, MssError>> {
        let all = |e: &MssError| transfers.iter().map(|_| Err(e.clone())).collect::<Vec<_>>();
        let body = BatchRequest {
            transfers: transfers.to_vec(),
        };
        let sent = self
            .client
            .post(self.base.url("/v1/transfers/batch"))
            .timeout(self.timeout)
            .json(&body)
            .send()
            .await;
        let resp = match sent {
            Ok(r) => r,
            Err(e) => return all(&submission_transport(e)),
        };
        // A body over the server's limit (the simulator's axum router takes 2 MiB) is refused
        // before anything is read, with no JSON error: nothing was queued, so the halves go
        // out in order. Left as an unknown outcome, the same call would be resent forever and
        // hold back everything read with it.
        if resp.status() == reqwest::StatusCode::PAYLOAD_TOO_LARGE && transfers.len() > 1 {
            let (first, second) = transfers.split_at(transfers.len() / 2);
            let mut out = Box::pin(self.submit_batch(first)).await;
            out.extend(Box::pin(self.submit_batch(second)).await);
            return out;
        }
        let answer: BatchResponse = match decode(resp).await {
            Ok(a) => a,
            Err(e) => return all(&e),
        };
        if answer.results.len() != transfers.len() {
            // The MSS may have queued some of them: an unknown outcome, retried with the same
            // keys.
            return all(&MssError::Unknown(format!(
                "{} answers to {} transfers",
                answer.results.len(),
                transfers.len()
            )));
        }
        answer
            .results
            .into_iter()
            .map(|item| match item {
                BatchItem::Ok(s) => Ok(Submitted {
                    mss_id: s.mss_id,
                    duplicate: s.duplicate,
                }),
                BatchItem::Err(e) => Err(MssError::Rejected(
                    clip(&e.error, MAX_MESSAGE_CHARS).into_owned(),
                )),
            })
            .collect()
    }

    async fn cancel(&self, t: &TransferRef) -> Result<(), MssError> {
        let resp = self
            .client
            .delete(self.base.url(&format!("/v1/transfers/{}", t.key)))
            .timeout(self.timeout)
            .send()
            .await
            .map_err(transport)?;
        no_content(resp).await
    }

    async fn reprioritize(&self, t: &TransferRef, priority: i64) -> Result<(), MssError> {
        let resp = self
            .client
            .put(self.base.url(&format!("/v1/transfers/{}/priority", t.key)))
            .json(&crate::protocol::PriorityChange {
                attempt: t.attempt,
                priority,
            })
            .timeout(self.timeout)
            .send()
            .await
            .map_err(transport)?;
        no_content(resp).await
    }

    async fn status(&self, t: &TransferRef) -> Result<Option<TransferStatus>, MssError> {
        let resp = self
            .client
            .get(self.base.url(&format!("/v1/transfers/{}", t.key)))
            .timeout(self.timeout)
            .send()
            .await
            .map_err(transport)?;
        let answer = Answer::read(resp).await?;
        if answer.not_found() {
            return Ok(None);
        }
        if !answer.status.is_success() {
            return Err(answer.error());
        }
        let t: TransferState = answer.json()?;
        let progress = match t.state.as_str() {
            "pending" => Progress::Queued,
            "running" => Progress::Running,
            "done" => Progress::Finished(EventKind::Done {
                bytes: t.bytes_done,
            }),
            "failed" => Progress::Finished(EventKind::Failed {
                reason: "failed at the mss (found by a status query)".to_string(),
                retryable: true,
            }),
            "cancelled" => Progress::Finished(EventKind::Cancelled),
            other => {
                return Err(MssError::Protocol(format!(
                    "unknown transfer state `{other}`"
                )))
            }
        };
        Ok(Some(TransferStatus {
            attempt: t.attempt,
            progress,
        }))
    }

    async fn events(&self, cursor: &EventCursor, wait: Duration) -> Result<EventBatch, MssError> {
        let resp = self
            .client
            .get(self.base.url("/v1/events"))
            .query(&[
                ("epoch", cursor.epoch.clone()),
                ("after", cursor.after.to_string()),
                ("wait_ms", wait.as_millis().to_string()),
            ])
            .timeout(self.timeout + wait)
            .send()
            .await
            .map_err(transport)?;
        let body: EventsResponse = decode(resp).await?;
        let restarted = body.epoch != cursor.epoch;
        let base = if restarted { 0 } else { cursor.after };
        let after = body.events.iter().map(|e| e.seq).max().unwrap_or(base);
        Ok(EventBatch {
            cursor: EventCursor {
                epoch: body.epoch,
                after,
            },
            events: body.events,
        })
    }
}

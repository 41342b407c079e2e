//! The HTTP adapter: JSON over HTTP with reqwest, the protocol in [`crate::protocol`] that the
//! bundled simulator speaks. Answers are read bounded ([`crate::answer`]); a refusal is the
//! simulator's own JSON error, and an answer that cannot be read is an unknown outcome.

use std::time::Duration;

use async_trait::async_trait;
use reqwest::Client;

use crate::answer::{clip, MAX_MESSAGE_CHARS};
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
    base: String,
    client: Client,
    timeout: Duration,
}

impl HttpAdapter {
    /// `timeout` bounds every call except event polls, which get their wait on top.
    pub fn new(base: &str, timeout: Duration) -> Result<HttpAdapter, MssError> {
        let client = Client::builder()
            .pool_max_idle_per_host(64)
            .connect_timeout(crate::rest::connect_timeout(timeout))
            .build()
            .map_err(|e| MssError::Protocol(format!("cannot build http client: {e}")))?;
        Ok(HttpAdapter {
            base: base.trim_end_matches('/').to_string(),
            client,
            timeout,
        })
    }

    pub fn base(&self) -> &str {
        &self.base
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
            .post(format!("{}/v1/transfers", self.base))
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
            .post(format!("{}/v1/transfers/batch", self.base))
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
            .delete(format!("{}/v1/transfers/{}", self.base, t.key))
            .timeout(self.timeout)
            .send()
            .await
            .map_err(transport)?;
        no_content(resp).await
    }

    async fn reprioritize(&self, t: &TransferRef, priority: i64) -> Result<(), MssError> {
        let resp = self
            .client
            .put(format!("{}/v1/transfers/{}/priority", self.base, t.key))
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
            .get(format!("{}/v1/transfers/{}", self.base, t.key))
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
            .get(format!("{}/v1/events", self.base))
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

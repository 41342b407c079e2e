//! Submitting reads: the triage of a batch, `POST /archiveinfo` to settle files already on disk
//! (or lost), then `POST /stage` per group of distinct paths, split on a 413.

use std::collections::{BTreeSet, HashSet, VecDeque};
use std::sync::atomic::Ordering;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tracing::{debug, warn};

use super::adapter::{TapeRestAdapter, Track};
use super::config::TapeRestConfig;
use super::{archive, paths};
use crate::protocol::{Direction, Transfer};
use crate::rest;
use crate::{MssError, Progress, Submitted, TransferRef, TransferStatus};

/// The MSS id of a transfer settled by `POST /archiveinfo`, with no stage request.
pub const SETTLED_BEFORE_STAGING: &str = "archiveinfo";

/// The body of `POST /stage` for a set of reads (paths unique once normalised), their
/// `targetedMetadata` under `site` (the sitename).
pub fn stage_body(cfg: &TapeRestConfig, site: &str, transfers: &[&Transfer]) -> Value {
    let files: Vec<Value> = transfers
        .iter()
        .map(|t| {
            json!({
                "path": paths::normal(&t.file),
                "diskLifetime": cfg.disk_lifetime,
                "targetedMetadata": {site: {"activity": t.group}},
            })
        })
        .collect();
    json!({ "files": files })
}

/// Why a stage request was not created.
enum StageError {
    /// 413: too many files for the server in one request.
    TooLarge(String),
    Mss(MssError),
}

impl TapeRestAdapter {
    /// Answer writes and transfers already followed; the indices left to stage.
    pub(super) fn triage(
        &self,
        transfers: &[Transfer],
        out: &mut [Option<Result<Submitted, MssError>>],
    ) -> Vec<usize> {
        let tracks = self.shared.lock();
        let mut todo = Vec::new();
        for (i, t) in transfers.iter().enumerate() {
            if t.direction == Direction::Write {
                out[i] = Some(Err(MssError::Rejected(
                    "the WLCG Tape REST API only stages files (reads)".into(),
                )));
            } else if let Some(tr) = tracks.get(&t.key).filter(|tr| tr.attempt == t.attempt) {
                out[i] = Some(Ok(Submitted {
                    mss_id: tr.request_id.clone(),
                    duplicate: true,
                }));
            } else {
                todo.push(i);
            }
        }
        todo
    }

    /// `POST /archiveinfo` for the files to stage: those on disk are done and those lost or
    /// missing failed at once (an event each, MSS id [`SETTLED_BEFORE_STAGING`]); the indices
    /// still to stage.
    pub(super) async fn settle_before_staging(
        &self,
        transfers: &[Transfer],
        todo: Vec<usize>,
        out: &mut [Option<Result<Submitted, MssError>>],
    ) -> Vec<usize> {
        let sh = &self.shared;
        let wanted: BTreeSet<String> = todo
            .iter()
            .map(|&i| paths::normal(&transfers[i].file))
            .collect();
        let wanted: Vec<String> = wanted.into_iter().collect();
        let info = match sh.archive_info(&wanted).await {
            Ok(info) => info,
            Err(e) => {
                debug!(error = %e, "no archiveinfo; staging every file");
                return todo;
            }
        };
        let mut left = Vec::new();
        for i in todo {
            let t = &transfers[i];
            match archive::before_staging(&info, &t.file, t.size_bytes, |e| sh.cfg.is_fatal(e)) {
                archive::Before::Stage => left.push(i),
                archive::Before::Settled(kind) => {
                    debug!(key = %t.key, ?kind, "settled by archiveinfo without staging");
                    sh.log.push(&t.key, t.attempt, kind);
                    out[i] = Some(Ok(Submitted {
                        mss_id: SETTLED_BEFORE_STAGING.into(),
                        duplicate: false,
                    }));
                }
            }
        }
        left
    }

    /// Stage `todo` in requests of distinct paths, in order, halving a request the server
    /// finds too large (413) and keeping the lower limit for later ones.
    pub(super) async fn stage_all(
        &self,
        transfers: &[Transfer],
        todo: Vec<usize>,
        site: &str,
        out: &mut [Option<Result<Submitted, MssError>>],
    ) {
        let sh = &self.shared;
        let mut groups = group_distinct(transfers, &todo, sh.max_files.load(Ordering::Relaxed));
        while let Some(group) = groups.pop_front() {
            let batch: Vec<&Transfer> = group.iter().map(|&i| &transfers[i]).collect();
            let result = match self.stage(&batch, site).await {
                Err(StageError::TooLarge(why)) if group.len() > 1 => {
                    let limit = lower_limit(group.len(), &why);
                    sh.max_files.fetch_min(limit, Ordering::Relaxed);
                    warn!(files = group.len(), now = limit, server = %why,
                          "the tape endpoint refused a stage request as too large (413); splitting it");
                    for chunk in group.chunks(limit).rev() {
                        groups.push_front(chunk.to_vec());
                    }
                    continue;
                }
                Err(StageError::TooLarge(why)) => {
                    warn!(server = %why, "the tape endpoint refuses even one file per stage request (413)");
                    Err(MssError::Unavailable(format!(
                        "413: even one file is too many for the tape endpoint: {why}"
                    )))
                }
                // A refusal (a 4xx) is of the whole stage request, which may be for one file
                // the endpoint will not take: nothing was staged, so each is asked for on its
                // own and only what is refused alone fails.
                Err(StageError::Mss(MssError::Rejected(why))) if group.len() > 1 => {
                    warn!(files = group.len(), server = %why,
                          "the tape endpoint refused a stage request of several files; staging them one by one");
                    for &i in group.iter().rev() {
                        groups.push_front(vec![i]);
                    }
                    continue;
                }
                Err(StageError::Mss(e)) => Err(e),
                Ok(s) => Ok(s),
            };
            if let Ok(s) = &result {
                self.follow(&batch, &s.mss_id);
            }
            for &i in &group {
                out[i] = Some(result.clone());
            }
        }
    }

    fn follow(&self, batch: &[&Transfer], request_id: &str) {
        let mut tracks = self.shared.lock();
        for t in batch {
            tracks.insert(
                t.key.clone(),
                Track {
                    attempt: t.attempt,
                    request_id: request_id.to_string(),
                    path: paths::normal(&t.file),
                    size_bytes: t.size_bytes,
                    started: false,
                },
            );
        }
    }

    /// `POST /stage` for a group of reads; their shared stage request id.
    async fn stage(&self, batch: &[&Transfer], site: &str) -> Result<Submitted, StageError> {
        let sh = &self.shared;
        let rb = sh
            .request(Method::POST, "/stage")
            .map_err(StageError::Mss)?
            .json(&stage_body(&sh.cfg, site, batch));
        let resp = rest::send_submission(rb, sh.cfg.timeout)
            .await
            .map_err(StageError::Mss)?;
        let answer = rest::Answer::read(resp).await.map_err(StageError::Mss)?;
        // Before the shared classification: a 413 is not a refusal of these files.
        if answer.status == StatusCode::PAYLOAD_TOO_LARGE {
            return Err(StageError::TooLarge(
                answer.server_error().unwrap_or_else(|| answer.text()),
            ));
        }
        if !answer.status.is_success() {
            return Err(StageError::Mss(answer.error()));
        }
        let body: Value = answer.json().map_err(StageError::Mss)?;
        let id = body
            .get("requestId")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                let text = crate::answer::clip(&body.to_string(), crate::answer::MAX_MESSAGE_CHARS)
                    .into_owned();
                StageError::Mss(MssError::Unknown(format!("no requestId in {text}")))
            })?;
        Ok(Submitted {
            mss_id: id.to_string(),
            duplicate: false,
        })
    }

    /// The status of a transfer settled by archiveinfo: asked again (after a restart its event
    /// may be lost); `None` (resubmit) when the file now needs staging.
    pub(super) async fn settled_status(
        &self,
        t: &TransferRef,
    ) -> Result<Option<TransferStatus>, MssError> {
        let sh = &self.shared;
        let info = sh.archive_info(&[paths::normal(&t.file)]).await?;
        Ok(
            match archive::before_staging(&info, &t.file, t.size_bytes, |e| sh.cfg.is_fatal(e)) {
                archive::Before::Settled(kind) => Some(TransferStatus {
                    attempt: t.attempt,
                    progress: Progress::Finished(kind),
                }),
                archive::Before::Stage => None,
            },
        )
    }
}

/// The files per request to try after a 413 for `files`: the maximum dCache names in its
/// message ("The number of targets N exceeds maximum M ...", dCache/dcache `BulkService.java`)
/// when it gives one below `files`, otherwise half.
pub(super) fn lower_limit(files: usize, why: &str) -> usize {
    let named = why
        .split("maximum ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|n| (1..files).contains(n));
    named.unwrap_or(files / 2).max(1)
}

/// `todo` in groups of at most `max` distinct (normalised) paths, in order.
pub(super) fn group_distinct(
    transfers: &[Transfer],
    todo: &[usize],
    max: usize,
) -> VecDeque<Vec<usize>> {
    let mut groups: VecDeque<Vec<usize>> = VecDeque::new();
    let mut in_last: HashSet<String> = HashSet::new();
    for &i in todo {
        let path = paths::normal(&transfers[i].file);
        let fits = groups
            .back()
            .is_some_and(|g| g.len() < max.max(1) && !in_last.contains(&path));
        match groups.back_mut() {
            Some(g) if fits => g.push(i),
            _ => {
                groups.push_back(vec![i]);
                in_last.clear();
            }
        }
        in_last.insert(path);
    }
    groups
}

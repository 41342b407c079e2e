//! Submitting reads: the triage of a batch, `POST /archiveinfo` to settle files already on disk
//! (or lost), then `POST /stage` per group of distinct paths, split on a 413.
//!
//! The API has no idempotency key: a stage request whose answer is lost is staged (and pinned)
//! again when resent. So a 201 whose body cannot be read (cut short, broken off, not the JSON
//! asked for) is not given up as unknown when its `Location` header names the request: every
//! implementation sends one, an absolute URL ending `/stage/{id}` ([`location_request_id`]).

use std::collections::{BTreeSet, HashSet, VecDeque};
use std::sync::atomic::Ordering;

use reqwest::header::{HeaderMap, LOCATION};
use reqwest::{Method, StatusCode, Url};
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
        // Read before the body, which may not come whole.
        let named = (resp.status() == StatusCode::CREATED)
            .then(|| created_request_id(resp.url(), resp.headers()))
            .flatten();
        let answer = match rest::Answer::read(resp).await {
            Ok(answer) => answer,
            Err(e) => return by_location(named, e),
        };
        // Before the shared classification: a 413 is not a refusal of these files.
        if answer.status == StatusCode::PAYLOAD_TOO_LARGE {
            return Err(StageError::TooLarge(
                answer.server_error().unwrap_or_else(|| answer.text()),
            ));
        }
        if !answer.status.is_success() {
            return Err(StageError::Mss(answer.error()));
        }
        let id = answer.json::<Value>().and_then(|body| {
            body.get("requestId")
                .and_then(Value::as_str)
                .filter(|id| usable_request_id(id))
                .map(str::to_string)
                .ok_or_else(|| {
                    let text =
                        crate::answer::clip(&body.to_string(), crate::answer::MAX_MESSAGE_CHARS)
                            .into_owned();
                    MssError::Unknown(format!("no usable requestId in {text}"))
                })
        });
        match id {
            Ok(id) => {
                if let Some(other) = named.filter(|n| *n != id) {
                    warn!(request_id = %id, location = %other,
                          "the tape endpoint's stage answer names another request in its \
                           Location; following its requestId");
                }
                Ok(Submitted {
                    mss_id: id,
                    duplicate: false,
                })
            }
            Err(e) => by_location(named, e),
        }
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

/// A stage request created (201) but whose answer could not be read (`e`): known by the id its
/// `Location` named, if it named one; otherwise `e`, an unknown outcome, as before.
fn by_location(named: Option<String>, e: MssError) -> Result<Submitted, StageError> {
    match named {
        Some(id) => {
            warn!(request_id = %id, error = %e,
                  "the tape endpoint's stage answer (201) is unreadable; the request is the one \
                   its Location names");
            Ok(Submitted {
                mss_id: id,
                duplicate: false,
            })
        }
        None => Err(StageError::Mss(e)),
    }
}

/// The id the `Location` header of a 201 to a POST to `posted` names, if it names one.
fn created_request_id(posted: &Url, headers: &HeaderMap) -> Option<String> {
    let location = headers.get(LOCATION)?.to_str().ok()?;
    location_request_id(posted, location)
}

/// The stage request id a `Location` names: its last path segment, which must follow a `stage`
/// segment and pass [`valid_request_id`]. A relative `Location` is resolved against `posted`
/// (the URL posted to); only the id is taken, never the scheme, host or route, which need not be
/// the configured URL's. What the servers send, each an absolute URL:
/// - dCache: the POST's `getRequestURL()` (the URL as its servlet sees it), `/`, the UUID.
///   dCache/dcache at 77340d6671e9, `modules/dcache-frontend/src/main/java/org/dcache/restful/
///   resources/tape/StageResources.java` `submit`, lines 303-323:
///   `request.setUrlPrefix(this.request.getRequestURL().toString())`, then
///   `.header("location", message.getRequestUrl())`, the `requestId` being its text after the
///   last `/`; `modules/dcache-bulk/src/main/java/org/dcache/services/bulk/BulkService.java`
///   line 192: `setRequestUrl(request.getUrlPrefix() + "/" + request.getUid())`, the UUID of
///   line 184.
/// - EOS: `https://{mgmofs.alias}:{xrdhttp port}/api/v1/stage/{id}`, whatever URL was used.
///   cern-eos/eos at e63126c64c7b, `mgm/http/rest-api/action/tape/stage/
///   CreateStageBulkRequest.cc` lines 65-77 (`responseMap["Location"] = generateAccessURL(..)`);
///   `mgm/http/rest-api/handler/tape/TapeRestHandler.cc` line 91 (the route
///   `{entry point}v1/stage/`, `/api/` by default) and lines 235-244 (`getAccessURLBuilder`:
///   `https://`, the alias, the port); `unit_tests/mgm/http/rest-api/tape/TapeActionsTest.cc`
///   lines 64-89 expect `https://tape.example.org:1234/api/v1/stage/<id>`.
/// - StoRM Tape: `{proto}://{host}:{port}/api/v1/stage/{id}`, from the `Forwarded` or `Host`
///   header (`src/io.cpp` `make_location`, read in the giacomini/storm-tape fork at 027e915a).
pub(super) fn location_request_id(posted: &Url, location: &str) -> Option<String> {
    let location = location.trim();
    if location.is_empty() {
        return None;
    }
    let named = posted.join(location).ok()?;
    if named.path() == posted.path() {
        // The URL posted to itself (`?x`, `#x`): names nothing new.
        return None;
    }
    let mut segments = named.path_segments()?.filter(|s| !s.is_empty()).rev();
    let id = segments.next()?;
    (segments.next()? == "stage" && valid_request_id(id)).then(|| id.to_string())
}

/// Most bytes of a stage request id taken from a `Location` (a UUID, what dCache, EOS and StoRM
/// give, has 36).
pub(super) const MAX_REQUEST_ID_BYTES: usize = 128;

/// Whether `id` can be a stage request id taken from a `Location`: not empty, at most
/// [`MAX_REQUEST_ID_BYTES`], only URL-unreserved characters (RFC 3986: letters, digits,
/// `-._~`) and not a dot segment, so that it is the same in `/stage/{id}` and `/release/{id}`
/// as in the `Location`. (The `requestId` of a readable body need only be
/// [`usable_request_id`].)
pub(super) fn valid_request_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_REQUEST_ID_BYTES
        && !id.bytes().all(|b| b == b'.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
}

/// Whether the `requestId` of a stage answer's body can name the request: not empty, at most
/// [`MAX_REQUEST_ID_BYTES`], no control character and not a dot segment (`.` or `..`, which a
/// URL drops however it is encoded). The servers send UUIDs; anything else that passes goes
/// into a path through [`id_segment`]. One that does not is an unreadable answer: the request
/// is the one the `Location` names, or unknown.
pub(super) fn usable_request_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_REQUEST_ID_BYTES
        && !id.chars().any(char::is_control)
        && !id.bytes().all(|b| b == b'.')
}

/// What a path segment may hold as it is: RFC 3986's unreserved characters.
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A stage request id as one segment of a path (`/stage/{id}`, `/release/{id}`): the server
/// chose it, so a `/`, `?` or `#` in it is percent-encoded rather than read as the URL's
/// structure. A UUID is unchanged.
pub(super) fn id_segment(id: &str) -> String {
    percent_encoding::utf8_percent_encode(id, SEGMENT).to_string()
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

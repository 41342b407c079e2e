//! `POST /v1/requests` and `POST /v1/requests/batch`: read, validate and classify requests off
//! the ledger writer, then hand them to the ledger and answer after the commit.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::caller::Caller;
use super::error::{self, ApiError};
use super::request::{self, RequestInput};
use super::responses::{self, AcceptedBody, BatchBody, BatchResult};
use super::AppHandle;
use crate::auth::{Principal, RoleKind};
use crate::ledger::{Accepted, NewRequest, OutputInUse, Refused};
use crate::live_settings::Live;
use crate::office::Office;
use crate::policy::{self, RequestFields};

/// Check the content type and read the body.
pub(super) fn json_bytes(
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Bytes, ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mime = content_type.split(';').next().unwrap_or("").trim();
    if !mime.eq_ignore_ascii_case("application/json") {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Some("content-type"),
            format!("expected content-type application/json, got `{content_type}`"),
        ));
    }
    body.map_err(|e| ApiError::new(e.status(), Some("body"), e.body_text()))
}

/// Classify a parsed request into what the ledger takes, under `live`'s policy (the caller
/// holds the reload gate until the ledger answered: the writer decides with the same policy).
fn prepare(
    office: &Office,
    live: &Live,
    input: RequestInput,
    prefix: &str,
) -> Result<NewRequest, ApiError> {
    let fields = RequestFields {
        access_mode: &input.access_mode,
        physics_group: &input.physics_group,
        station: &input.station,
        user: &input.user,
        file: &input.file,
    };
    let group = policy::classify(&live.policy, &fields)
        .map_err(|e| ApiError::field(&format!("{prefix}physics_group"), e.to_string()))?;
    mss_can_take(office.mss.as_ref(), &input, prefix)?;
    library_known(&live.policy, &input.extras.library, prefix)?;
    let benefit = policy::benefit(&live.policy, &input.access_mode, input.size_bytes);
    Ok(NewRequest {
        input,
        group,
        benefit,
    })
}

/// Refuse a `library` the configuration does not name. The field only keys the broker's own
/// limits (held mode's slots, volumes mode's drives per library; no adapter passes it on), and
/// every unnamed library would get a full limit of its own: a station naming a fresh library
/// per request would skip the queue.
fn library_known(
    policy: &crate::domain::PolicySettings,
    library: &str,
    prefix: &str,
) -> Result<(), ApiError> {
    let release = &policy.order.release;
    let named =
        |l: &str| release.libraries.contains_key(l) || release.volumes.libraries.contains_key(l);
    match library {
        "" => Ok(()),
        l if named(l) => Ok(()),
        _ => {
            let known: std::collections::BTreeSet<&str> = (release.libraries.keys())
                .chain(release.volumes.libraries.keys())
                .map(String::as_str)
                .collect();
            let list = known.into_iter().collect::<Vec<_>>().join(", ");
            let why = if list.is_empty() {
                "names no library the configuration knows (none is configured: leave it out)"
                    .to_string()
            } else {
                format!(
                    "names no library the configuration knows ([release.libraries], \
                     [release.volumes.libraries]): one of {list}, or leave it out"
                )
            };
            Err(ApiError::field(&format!("{prefix}library"), why))
        }
    }
}

/// Refuse what the configured MSS cannot do with this request, naming the field: a write to an
/// MSS that only stages, a `file` it cannot name, a missing `local_file` the adapter needs, a
/// bfid it cannot use.
fn mss_can_take(
    mss: &dyn mss_adapters::MssAdapter,
    input: &RequestInput,
    prefix: &str,
) -> Result<(), ApiError> {
    use mss_adapters::Direction;
    let caps = mss.capabilities();
    let name = mss.name();
    let field = |f: &str, m: String| Err(ApiError::field(&format!("{prefix}{f}"), m));
    match input.direction {
        Direction::Write if !caps.writes => {
            return field(
                "direction",
                format!("the {name} adapter's MSS only stages files: \"read\" only"),
            )
        }
        Direction::Read if caps.reads_need_local_file && input.extras.local_file.is_none() => {
            return field(
                "local_file",
                format!("is required for a read with the {name} adapter: where the file goes"),
            )
        }
        Direction::Write if caps.writes_need_local_file && input.extras.local_file.is_none() => {
            return field(
                "local_file",
                format!("is required for a write with the {name} adapter: the file to store"),
            )
        }
        _ => {}
    }
    if let Err(why) = mss.check_file(&input.file) {
        return field("file", format!("{why} for the {name} adapter"));
    }
    if let Some(f) = &input.extras.local_file {
        if let Err(why) = mss.check_local_file_for(&input.station, f) {
            return field("local_file", format!("{why} for the {name} adapter"));
        }
    }
    if input.extras.bfid.is_some() && !caps.bfid {
        return field(
            "bfid",
            format!("the {name} adapter names files by path and cannot use a bfid"),
        );
    }
    Ok(())
}

/// Submit one request.
#[utoipa::path(post, path = "/v1/requests", request_body = request::SubmitRequest, responses(
    (status = 202, description = "committed (or a replay of a committed request)", body = AcceptedBody),
    (status = 400, body = error::ErrorBody), (status = 401, body = error::ErrorBody),
    (status = 403, body = error::ErrorBody), (status = 409, body = error::ErrorBody),
    (status = 413, body = error::ErrorBody), (status = 415, body = error::ErrorBody),
    (status = 422, body = responses::Unprocessable), (status = 429, body = error::ErrorBody),
    (status = 503, body = error::ErrorBody),
))]
pub(super) async fn submit_one(
    State(state): State<AppHandle>,
    caller: Caller,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    caller.require(&[RoleKind::Station, RoleKind::Operator], "submit requests")?;
    let office = state.office()?;
    caller.charge(&state, 1)?;
    let bytes = json_bytes(&headers, body)?;
    let st = state.clone();
    let input = off_the_workers(bytes.len(), move || {
        RequestInput::from_slice(&bytes, &st.limits)
    })
    .await??;
    caller.may_submit_for(&input.station, "station")?;
    caller.may_transfer(&input.file, input.direction, "file")?;
    let (gate, live) = state.live.deciding().await;
    let item = prepare(&office, &live, input, "")?;
    let mut answers = office.ledger.accept_each(vec![item]).await?;
    drop(gate);
    super::still_in_office(&office)?;
    let answer = answers.pop().ok_or_else(|| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            None,
            "no answer from the ledger",
        )
    })?;
    let a = match answer {
        Ok(a) => a,
        Err(Refused::QueuedCap(r)) => return Err(ApiError::from(&r)),
        Err(Refused::OutputInUse(r)) => return Err(in_use(&caller.0, &r, "")),
    };
    tracing::debug!(request_id = a.id, group = %a.group, class = a.class.as_str(), priority = a.mss_priority, "accepted");
    Ok((StatusCode::ACCEPTED, Json(AcceptedBody::from(a))).into_response())
}

/// Submit a batch; answers in order, one result per request.
#[utoipa::path(post, path = "/v1/requests/batch", request_body = request::SubmitBatch, responses(
    (status = 202, description = "the valid requests are committed", body = BatchBody),
    (status = 400, body = error::ErrorBody), (status = 401, body = error::ErrorBody),
    (status = 403, body = error::ErrorBody), (status = 413, body = error::ErrorBody),
    (status = 415, body = error::ErrorBody), (status = 422, body = responses::Unprocessable),
    (status = 429, body = responses::TooMany), (status = 503, body = error::ErrorBody),
))]
pub(super) async fn submit_batch(
    State(state): State<AppHandle>,
    caller: Caller,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    caller.require(&[RoleKind::Station, RoleKind::Operator], "submit requests")?;
    let office = state.office()?;
    let who = caller.0.clone();
    let bytes = json_bytes(&headers, body)?;
    let size = bytes.len();
    if size <= INLINE_BODY_BYTES {
        let items = request::batch_items(&bytes, &state.limits)?;
        caller.charge(&state, items.len())?;
        let (gate, live) = state.live.deciding().await;
        let (refusals, valid) = prepare_items(&state, &office, &live, &caller, &items)?;
        return accept_batch(&office, &who, gate, refusals, valid).await;
    }
    // Read and charged before the gate, as a small body is: a malformed or over-rate batch is
    // answered without waiting on a reload, and no reload (nor every submitter queued behind
    // it) waits while a large body is read. The items are kept as spans of the body.
    let st = state.clone();
    let (bytes, caller, spans) = off_the_workers(size, move || {
        let items = request::batch_items(&bytes, &st.limits)?;
        caller.charge(&st, items.len())?;
        let base = bytes.as_ptr() as usize;
        let spans: Vec<std::ops::Range<usize>> = (items.iter())
            .map(|raw| {
                let at = raw.get().as_ptr() as usize - base;
                at..at + raw.get().len()
            })
            .collect();
        Ok::<_, ApiError>((bytes, caller, spans))
    })
    .await??;
    let (gate, live) = state.live.deciding().await;
    let st = state.clone();
    let of = office.clone();
    let (refusals, valid) = off_the_workers(size, move || {
        let items = (spans.into_iter())
            .map(|span| serde_json::from_slice::<&serde_json::value::RawValue>(&bytes[span]))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    None,
                    format!("reading a batch item again failed: {e}"),
                )
            })?;
        prepare_items(&st, &of, &live, &caller, &items)
    })
    .await??;
    accept_batch(&office, &who, gate, refusals, valid).await
}

/// The prepared items of a batch to the ledger under the decision gate, and the answer.
async fn accept_batch(
    office: &Office,
    who: &Principal,
    gate: tokio::sync::RwLockReadGuard<'_, ()>,
    refusals: Vec<Option<BatchResult>>,
    valid: Vec<NewRequest>,
) -> Result<Response, ApiError> {
    let answers = office.ledger.accept_each(valid).await?;
    drop(gate);
    super::still_in_office(office)?;
    let (results, capped) = merge_answers(who, refusals, answers)?;
    Ok(batch_response(results, capped))
}

/// A read refused because another unfinished read, of another file, writes its station-side
/// copy: 409 naming the field, and naming that read only to a caller who may read it (another
/// station's request stays unnamed, as `GET /v1/requests/{id}` keeps it).
fn in_use(who: &Principal, r: &OutputInUse, prefix: &str) -> ApiError {
    let whose = if who.may_act_for(&r.holder_station) {
        format!(
            "request {} (a read of `{}`, not finished) writes its copy there",
            r.holder, r.holder_file
        )
    } else {
        "it is in use: another unfinished read writes its copy there".to_string()
    };
    let copy = if r.field == "file" {
        "this read's copy (the file's name in the adapter's read directory)"
    } else {
        "this read's copy"
    };
    ApiError::new(
        StatusCode::CONFLICT,
        Some(&format!("{prefix}{}", r.field)),
        format!(
            "{copy} would be `{}`, but {whose}: two reads of different files may not write one \
             station-side file (a read of the same file to the same copy rides on it); name \
             another local_file, or send it again once that read has ended",
            r.output
        ),
    )
}

/// The largest body read on an HTTP worker (a batch of about 6,000 small items: a few
/// milliseconds). A larger one (up to `limits.max_body_bytes`, 16 MiB shipped: tens of
/// milliseconds to parse and check) is read on a blocking thread, so that the workers go on
/// answering other clients meanwhile. Not lower: handing every batch of 1,000 to the blocking
/// pool cost 4 to 8 % of batch ingest (docs/benchmarks.md).
const INLINE_BODY_BYTES: usize = 1024 * 1024;

/// `work` (reading a body of `size` bytes) here for a small body, on a blocking thread for a
/// large one.
async fn off_the_workers<T: Send + 'static>(
    size: usize,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    if size <= INLINE_BODY_BYTES {
        return Ok(work());
    }
    tokio::task::spawn_blocking(work).await.map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            None,
            format!("reading the body failed: {e}"),
        )
    })
}

/// Each item parsed and prepared: per item, its refusal (`None`: it goes to the ledger, in
/// order), and the items that go. Another station's request in a station's batch refuses the
/// whole batch: it is a client error, and nothing of the batch is committed.
fn prepare_items(
    state: &AppHandle,
    office: &Office,
    live: &Live,
    caller: &Caller,
    items: &[&serde_json::value::RawValue],
) -> Result<(Vec<Option<BatchResult>>, Vec<NewRequest>), ApiError> {
    let mut refusals: Vec<Option<BatchResult>> = Vec::with_capacity(items.len());
    let mut valid = Vec::new();
    for (i, raw) in items.iter().enumerate() {
        let prefix = format!("requests[{i}].");
        let parsed = RequestInput::from_slice_at(raw.get().as_bytes(), &state.limits, &prefix);
        for station in stations_of(&parsed, raw) {
            caller.may_submit_for(&station, &format!("{prefix}station"))?;
        }
        if let Ok(input) = &parsed {
            caller.may_transfer(&input.file, input.direction, &format!("{prefix}file"))?;
        }
        match parsed.and_then(|input| prepare(office, live, input, &prefix)) {
            Ok(item) => {
                valid.push(item);
                refusals.push(None);
            }
            Err(e) => refusals.push(Some(BatchResult::Refused {
                error: e.message,
                field: e.field,
            })),
        }
    }
    Ok((refusals, valid))
}

/// One result per item, in order: its refusal, or the ledger's answer; and how many the
/// ledger refused for a queued-bytes cap.
fn merge_answers(
    who: &Principal,
    refusals: Vec<Option<BatchResult>>,
    answers: Vec<Result<Accepted, Refused>>,
) -> Result<(Vec<BatchResult>, usize), ApiError> {
    let mut answers = answers.into_iter();
    let mut capped = 0;
    let results = refusals
        .into_iter()
        .enumerate()
        .map(|(i, r)| match r {
            Some(refused) => Ok(refused),
            None => answers
                .next()
                .map(|a| match a {
                    Ok(a) => BatchResult::Accepted(a.into()),
                    Err(Refused::QueuedCap(over)) => {
                        capped += 1;
                        BatchResult::Refused {
                            error: over.message,
                            field: Some(over.field),
                        }
                    }
                    Err(Refused::OutputInUse(r)) => {
                        let e = in_use(who, &r, &format!("requests[{i}]."));
                        BatchResult::Refused {
                            error: e.message,
                            field: e.field,
                        }
                    }
                })
                .ok_or_else(|| {
                    ApiError::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        None,
                        "the ledger answered fewer items than sent",
                    )
                }),
        })
        .collect::<Result<_, _>>()?;
    Ok((results, capped))
}

/// The batch's answer: 202 if any item was accepted; else 429 (with `Retry-After`) when every
/// refusal was a queued-bytes cap (the items before them count, so a retry may pass), 422
/// otherwise.
fn batch_response(results: Vec<BatchResult>, capped: usize) -> Response {
    let accepted_count = (results.iter())
        .filter(|r| matches!(r, BatchResult::Accepted(_)))
        .count();
    let refused = results.len() - accepted_count;
    let body = BatchBody {
        refused,
        accepted: accepted_count,
        results,
    };
    let status = match (accepted_count, capped) {
        (0, c) if c > 0 && c == refused => StatusCode::TOO_MANY_REQUESTS,
        (0, _) => StatusCode::UNPROCESSABLE_ENTITY,
        _ => StatusCode::ACCEPTED,
    };
    let mut response = (status, Json(body)).into_response();
    if capped > 0 {
        response.headers_mut().insert(
            header::RETRY_AFTER,
            header::HeaderValue::from(error::QUEUED_CAP_RETRY_AFTER_SECS),
        );
    }
    response
}

/// The stations a batch item names: the parsed one, or, for an item refused for any reason,
/// every string given as its top-level `station` (a key given twice names two).
fn stations_of(
    parsed: &Result<RequestInput, ApiError>,
    raw: &serde_json::value::RawValue,
) -> Vec<String> {
    match parsed {
        Ok(input) => vec![input.station.clone()],
        Err(_) => stations_named(raw.get()),
    }
}

/// Every string value of a top-level `station` key of a JSON object, up to where the text stops
/// being one (none for anything else).
fn stations_named(text: &str) -> Vec<String> {
    use serde::de::{IgnoredAny, MapAccess, Visitor};
    use serde_json::value::RawValue;
    use std::borrow::Cow;
    struct Scan<'v>(&'v mut Vec<String>);
    impl<'de> Visitor<'de> for Scan<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                if key == "station" {
                    // Kept when a string; any other value is skipped unread.
                    let raw = map.next_value::<&'de RawValue>()?;
                    self.0
                        .extend(serde_json::from_str::<String>(raw.get()).ok());
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(())
        }
    }
    let mut named = Vec::new();
    let mut de = serde_json::Deserializer::from_str(text);
    // A text that stops being an object keeps the stations named before that point.
    let _ = serde::Deserializer::deserialize_map(&mut de, Scan(&mut named));
    named
}

#[cfg(test)]
mod tests {
    use super::stations_named;

    #[test]
    fn every_station_an_item_names_is_found() {
        assert_eq!(stations_named(r#"{"station":"a"}"#), ["a"]);
        assert_eq!(
            stations_named(r#"{"station":"a","x":1,"station":"b"}"#),
            ["a", "b"]
        );
        assert_eq!(
            stations_named(r#"{"station":"a","station":[[[1]]],"station":{"k":"c"}}"#),
            ["a"]
        );
        assert_eq!(
            stations_named(r#"{"station":"a","station":"b""#),
            ["a", "b"],
            "cut short"
        );
        assert_eq!(
            stations_named(r#"{"station":"a","y":[[[[[["#),
            ["a"],
            "broken after it"
        );
        assert_eq!(
            stations_named(r#"["a","station","b"]"#),
            Vec::<String>::new()
        );
        assert_eq!(
            stations_named(r#"{"nested":{"station":"b"}}"#),
            Vec::<String>::new()
        );
        assert_eq!(
            stations_named(r#"{"st\u0061tion":"b"}"#),
            ["b"],
            "an escaped key is the key"
        );
    }
}

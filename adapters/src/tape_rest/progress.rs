//! Where a file of a polled stage request stands: pure.

use serde_json::Value;

use super::config::TapeRestConfig;
use super::paths;
use crate::protocol::EventKind;
use crate::Progress;

/// Where a file of a stage request stands, from the request's `GET` answer, in either form the
/// v1 specification allows (pages 11 and 14):
///
/// - dCache's, with `state` (`SUBMITTED`, `STARTED`, `COMPLETED`, `FAILED`, `CANCELLED`; dCache/dcache
///   `providers/tape/StagedFileInfo.java`; gfal2 also reads `CANCELED`);
/// - EOS-CTA's `{path, onDisk?, error?}` with no `state` and no start (cern-eos/eos
///   `mgm/http/rest-api/json/tape/TapeJsonifiers.cc`, `GetStageBulkRequestJsonifier`).
///
/// As gfal2 does (cern-fts/gfal2 `src/plugins/http/gfal_http_plugin_tape.cpp`,
/// `gfal_http_bring_online_poll_list`), any `error` fails the file (retryable unless it matches
/// `fatal_patterns`), `onDisk: true` is done, and a file with neither is still waiting.
pub fn file_progress(
    cfg: &TapeRestConfig,
    request: &Value,
    path: &str,
    bytes: u64,
) -> Option<Progress> {
    let want = paths::normal(path);
    let file = request.get("files")?.as_array()?.iter().find(|f| {
        f.get("path")
            .and_then(Value::as_str)
            .is_some_and(|p| paths::normal(p) == want)
    })?;
    let error = file
        .get("error")
        .and_then(Value::as_str)
        .filter(|e| !e.is_empty());
    let state = file.get("state").and_then(Value::as_str);
    let on_disk = file.get("onDisk").and_then(Value::as_bool);
    Some(match (state, error) {
        (Some("CANCELLED" | "CANCELED"), _) => Progress::Finished(EventKind::Cancelled),
        (Some("FAILED"), _) | (_, Some(_)) => {
            let error = error.unwrap_or("no reason given");
            Progress::Finished(EventKind::Failed {
                reason: format!("staging failed: {error}"),
                retryable: !cfg.is_fatal(error),
            })
        }
        (Some("COMPLETED"), _) => Progress::Finished(EventKind::Done { bytes }),
        _ if on_disk == Some(true) => Progress::Finished(EventKind::Done { bytes }),
        (Some("STARTED"), _) => Progress::Running,
        _ => Progress::Queued,
    })
}

/// Whether every file of a polled stage request is final (so the request can be deleted).
pub(super) fn all_final(cfg: &TapeRestConfig, request: &Value) -> bool {
    let Some(files) = request.get("files").and_then(Value::as_array) else {
        return false;
    };
    files.iter().all(|f| {
        let path = f.get("path").and_then(Value::as_str).unwrap_or("");
        matches!(
            file_progress(cfg, request, path, 0),
            Some(Progress::Finished(_))
        )
    })
}

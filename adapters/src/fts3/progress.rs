//! Where a polled FTS3 job stands, and whether a failure FTS3 did not classify is worth
//! another attempt: pure.

use serde_json::Value;

use crate::protocol::EventKind;
use crate::Progress;

/// Reason texts after which FTS3 retries a transfer, then those after which it does not
/// (cern-fts/fts3 `src/url-copy/heuristics.cpp` `retryTransfer`), for failures whose
/// `recoverable` FTS3 left null (staging failures).
const REASONS_RETRYABLE: &[&str] = &[
    "performance marker",
    "Name or service not known",
    "Connection timed out",
    "end-of-file was reached",
    "end of file occurred",
    "SRM_INTERNAL_ERROR",
    "was forcefully killed",
    "operation timeout",
];
const REASONS_FATAL: &[&str] = &[
    "proxy expired",
    "with an error 550 File not found",
    "File exists and overwrite",
    "No such file or directory",
    "SRM_INVALID_PATH",
    "The certificate has expired",
    "The available CRL has expired",
    "SRM Authentication failed",
    "SRM_DUPLICATION_ERROR",
    "SRM_AUTHENTICATION_FAILURE",
    "SRM_NO_FREE_SPACE",
    "Permission denied",
    "File exists",
    "checksum do not match",
    "CHECKSUM MISMATCH",
    "The source file is not ONLINE",
    "Operation not permitted",
    "Is a directory",
];

/// Whether a failure FTS3 did not classify is worth another attempt, by its reason text.
pub fn retryable_by_reason(reason: &str) -> bool {
    if REASONS_RETRYABLE.iter().any(|r| reason.contains(r)) {
        return true;
    }
    !REASONS_FATAL.iter().any(|r| reason.contains(r))
}

/// Whether a polled job stages from tape (`bring_online` set), for a job followed after a
/// restart.
pub fn is_staging(job: &Value) -> bool {
    job.get("bring_online")
        .and_then(Value::as_i64)
        .is_some_and(|b| b > 0)
}

/// Where a transfer stands, from its file's state in a polled job, or the job's when no file is
/// given (a job of one file polled without `files`). `staging`: the job brings files online, so
/// `STARTED` (the request sent to tape) is a start; for other jobs it is still queued.
pub fn progress_of(
    job: &Value,
    file: Option<&Value>,
    declared_bytes: u64,
    staging: bool,
) -> Option<Progress> {
    let state = file
        .and_then(|f| f.get("file_state"))
        .or_else(|| job.get("job_state"))
        .and_then(Value::as_str)?;
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_string();
    Some(match state {
        "STARTED" if staging => Progress::Running,
        "ACTIVE" | "ARCHIVING" => Progress::Running,
        "FINISHED" => {
            let size = |field| file.and_then(|f| f.get(field)).and_then(Value::as_u64);
            let bytes = size("filesize")
                .filter(|&b| b > 0)
                .or_else(|| size("user_filesize").filter(|&b| b > 0))
                .unwrap_or(declared_bytes);
            Progress::Finished(EventKind::Done { bytes })
        }
        "FAILED" | "FINISHEDDIRTY" => {
            let mut reason = text(file.and_then(|f| f.get("reason")));
            // The job's reason is its file's only in a job of one file.
            let alone = job
                .get("files")
                .and_then(serde_json::Value::as_array)
                .is_none_or(|f| f.len() <= 1);
            if reason.is_empty() && alone {
                reason = text(job.get("reason"));
            }
            // Null for staging failures: not known, so the reason text decides.
            let recoverable = file
                .and_then(|f| f.get("recoverable"))
                .and_then(Value::as_bool)
                .unwrap_or_else(|| retryable_by_reason(&reason));
            Progress::Finished(EventKind::Failed {
                reason: format!("fts3 job failed: {reason}"),
                retryable: recoverable,
            })
        }
        "CANCELED" => Progress::Finished(EventKind::Cancelled),
        _ => Progress::Queued,
    })
}

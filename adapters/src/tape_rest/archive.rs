//! `POST /archiveinfo` before staging. The answer is a list of `{path, locality}` or
//! `{path, error}` (dCache/dcache `ArchiveInfoResources.java`, `ArchiveInfoCollector.java`,
//! `providers/tape/ArchiveInfo.java`: a file that cannot be looked up carries the exception's
//! message as `error`, and paths past `archiveinfo maxpaths`, 10 000, are left out without an
//! error; EOS the same shape, cern-eos/eos `TapeJsonifiers.cc`). `locality` is DISK, TAPE,
//! DISK_AND_TAPE, LOST, NONE or UNAVAILABLE; gfal2 treats LOST as ENOENT, NONE as EPERM and
//! UNAVAILABLE as EAGAIN (cern-fts/gfal2 `gfal_http_plugin_tape.cpp`, `get_file_locality`).

use serde_json::Value;

use super::paths;
use crate::protocol::EventKind;

/// What to do with a file before staging it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Before {
    /// Stage it (on tape only, or not listed in the answer).
    Stage,
    /// Already on disk: done without a stage request.
    Settled(EventKind),
}

/// The decision for `path` from an archiveinfo answer; `fatal` says whether an error text is
/// one staging again will not cure.
pub fn before_staging(
    answer: &Value,
    path: &str,
    bytes: u64,
    fatal: impl Fn(&str) -> bool,
) -> Before {
    let want = paths::normal(path);
    let Some(entry) = answer.as_array().and_then(|a| {
        a.iter().find(|e| {
            e.get("path")
                .and_then(Value::as_str)
                .is_some_and(|p| paths::normal(p) == want)
        })
    }) else {
        return Before::Stage;
    };
    // Only what staging cannot cure settles the file here. An error that may pass (EOS lists a
    // file with "Tape backend is unreachable" while it waits) and UNAVAILABLE (copies offline:
    // gfal2's EAGAIN) are staged as before archiveinfo was asked: the server queues the
    // recall and works it when it can, instead of a failure that spends an attempt each time.
    if let Some(error) = entry.get("error").and_then(Value::as_str) {
        if !fatal(error) {
            return Before::Stage;
        }
        return Before::Settled(EventKind::Failed {
            reason: format!("archiveinfo: {error}"),
            retryable: false,
        });
    }
    let failed = |what: &str| {
        Before::Settled(EventKind::Failed {
            reason: format!("archiveinfo: the file's locality is {what}"),
            retryable: false,
        })
    };
    match entry.get("locality").and_then(Value::as_str) {
        Some("DISK") | Some("DISK_AND_TAPE") => Before::Settled(EventKind::Done { bytes }),
        Some("LOST") => failed("LOST (its only copy is gone)"),
        Some("NONE") => failed("NONE (no copy on disk or tape)"),
        _ => Before::Stage,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn localities_decide_before_staging() {
        let answer = json!([
            {"path": "/d", "locality": "DISK"},
            {"path": "/dt", "locality": "DISK_AND_TAPE"},
            {"path": "/t", "locality": "TAPE"},
            {"path": "/l", "locality": "LOST"},
            {"path": "/n", "locality": "NONE"},
            {"path": "/u", "locality": "UNAVAILABLE"},
            {"path": "/e", "error": "No such file or directory"},
            {"path": "/w", "error": "Tape backend is unreachable"},
            {"path": "/a/b", "locality": "DISK"}
        ]);
        let b = |p| before_staging(&answer, p, 7, |e: &str| e.contains("No such"));
        let done = Before::Settled(EventKind::Done { bytes: 7 });
        assert_eq!(b("/d"), done);
        assert_eq!(b("/dt"), done);
        assert_eq!(b("//a/./b"), done);
        assert_eq!(b("/t"), Before::Stage);
        assert_eq!(b("/missing"), Before::Stage);
        let retryable = |p| match b(p) {
            Before::Settled(EventKind::Failed { retryable, .. }) => retryable,
            other => panic!("{p}: {other:?}"),
        };
        assert!(!retryable("/l"));
        assert!(!retryable("/n"));
        assert!(!retryable("/e"));
        // What staging may cure is staged: the server waits for it, no attempt is spent.
        assert_eq!(b("/u"), Before::Stage);
        assert_eq!(b("/w"), Before::Stage);
    }
}

//! A read whose output is already there when the adapter is about to run encp: pure but for
//! one `lstat` of the output.
//!
//! encp refuses an output that exists (`outputfile_check` in Enstore's `src/encp.py`:
//! USERERROR "[Errno 17] File exists", final), but only after it has asked the file and volume
//! clerks (`create_read_requests` runs before `verify_read_request_consistancy`), so a run can
//! fail retryably (a clerk's timeout, NET_ERROR) or die with the broker before it looks. The
//! adapter therefore looks itself, before every read, and decides as follows.
//!
//! - Attempt 1: an existing output is refused, final, without running encp (encp's own answer,
//!   given whatever encp would have met first). So a request reaches attempt 2 only if its
//!   output was absent when attempt 1 was submitted.
//! - A later attempt: the output was absent at attempt 1, and since then only this request's
//!   encp runs create it (`O_CREAT|O_EXCL`, `create_zero_length_local_files`); any other
//!   writer there is the station's error (two of its requests naming one `local_file`, or a
//!   file of its own put there meanwhile). What a run of this request leaves behind: nothing
//!   when encp cleaned up (a failure, a SIGTERM before the copy: `src/delete_at_exit.py`), the
//!   whole verified file when encp said "copied successfully" and then died before the broker
//!   recorded it (taken off the delete-at-exit list after the size and CRC checks,
//!   `read_hsm_file`), or a partial file when encp was SIGKILLed with nobody watching (the
//!   adapter removes what a run it watched left). So a regular file of exactly the declared
//!   size (not zero: encp creates the output empty before it queues) is the earlier attempt's
//!   copy, and the transfer is done, measured as any done is. Anything else (smaller, larger,
//!   not a regular file) is not a copy, and is refused as encp would refuse it; it is not
//!   removed, since nothing proves it is not the station's.
//!
//! Neither rule applies with `--put-cache` (dCache's mode, in which encp expects the output to
//! exist) or to the device outputs encp does not check (`/dev/null` and the like).

use std::path::Path;

use crate::protocol::{Direction, EventKind, Transfer};

/// Outputs encp neither checks nor creates (`outputfile_check`).
const DEVICES: [&str; 4] = ["/dev/null", "/dev/zero", "/dev/random", "/dev/urandom"];

/// What a read whose output `local` already exists ends as without running encp; `None`: run
/// encp (not a read, no output there, or one encp does not check).
pub(super) fn existing_output(t: &Transfer, args: &[String], local: &Path) -> Option<EventKind> {
    if t.direction != Direction::Read
        || args
            .iter()
            .any(|a| a == "--put-cache" || a.starts_with("--put-cache="))
        || DEVICES.iter().any(|d| local == Path::new(d))
    {
        return None;
    }
    // An output that cannot be looked at (a directory the broker may not search): encp decides.
    let meta = std::fs::symlink_metadata(local).ok()?;
    Some(decide(
        t.attempt,
        t.size_bytes,
        meta.file_type().is_file(),
        meta.len(),
        local,
    ))
}

/// The rule, on what `lstat` said of the output.
pub(super) fn decide(
    attempt: u32,
    size_bytes: u64,
    regular: bool,
    len: u64,
    local: &Path,
) -> EventKind {
    if attempt > 1 && regular && size_bytes > 0 && len == size_bytes {
        return EventKind::Done { bytes: len };
    }
    EventKind::Failed {
        reason: format!(
            "the local file `{}` exists ({}): encp refuses an existing output \
             (STATUS=USERERROR, [Errno 17] File exists), so it was not run",
            local.display(),
            if regular {
                format!("{len} bytes")
            } else {
                "not a regular file".into()
            }
        ),
        retryable: false,
    }
}

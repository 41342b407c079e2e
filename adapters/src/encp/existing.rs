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
//!
//! A write's output is the namespace entry (`/pnfs/...`), and the same holds of it
//! (Enstore-org/enstore `src/encp.py` at a154041): encp refuses one that exists
//! (`outputfile_check`, line 3680: EEXIST, USERERROR, final; called at 7589 from
//! `verify_write_request_consistancy`, after `create_write_requests` has asked the clerks), and
//! otherwise creates it empty before it queues (`prepare_write_to_hsm`, 8862, calling
//! `create_zero_length_pnfs_files`, 3927: registered for deletion at 3938, then
//! `O_CREAT|O_EXCL` at 3944). Only after the transfer does it set layer 1 (the bfid, 7768),
//! layer 4 and, last, the size (7933; `set_sfs_settings` from `write_post_transfer_update`),
//! then take the entry off its delete-at-exit list (`write_hsm_file`, 8730). A failure and a
//! caught signal remove the entry (`delete_at_exit.delete`: from `do_work` at 12287, and from
//! `quit` in `signal_handler`, `src/delete_at_exit.py` 203, 265); a SIGKILL cannot be caught,
//! so a write killed before 7933 leaves an entry of size 0, and one killed before 7768 one
//! with no bfid in layer 1 either. encp has no option that takes an existing entry for a user
//! write (only `--put-cache`, dCache's, whose empty-layers check is at 3715-3770: "the
//! filesize being zero trick doesn't work with dcache"), and its own retries within one run
//! reuse the entry only because it remembers having created it (`outputfile_check` runs "only
//! ... before the output file is created", while `wrapper['inode']` is unset, 7586-7589). So
//! the broker's retry would be refused for good.
//!
//! - Attempt 1: an existing entry is refused, final, without running encp (encp's own
//!   answer). So a later attempt knows the entry was absent when the request was first run.
//! - A later attempt: an entry that is a regular file of size 0 whose layers 1 and 4 are empty
//!   is what an earlier run of this request left (nothing else of this request creates it,
//!   and it holds neither data nor a file id): it is removed and encp runs. An entry with
//!   data, with a bfid or anything in layer 1 or 4 (another write's, or this request's own
//!   write that got as far as `set_sfs_settings`), or that cannot be read is refused, final,
//!   and left as it is. (What removing an empty entry can cost: a run killed between the
//!   mover's end and 7768 leaves a file clerk record whose namespace entry goes; the data is
//!   written again and that tape copy is an orphan, never a loss; a write killed after 7768
//!   is refused, its file on tape and the station's copy kept.)

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use tracing::{info, warn};

use crate::protocol::{Direction, EventKind, Transfer};

/// Outputs encp neither checks nor creates (`outputfile_check`).
const DEVICES: [&str; 4] = ["/dev/null", "/dev/zero", "/dev/random", "/dev/urandom"];

/// Whether encp runs in dCache's mode, which expects the output to exist.
fn put_cache(args: &[String]) -> bool {
    args.iter()
        .any(|a| a == "--put-cache" || a.starts_with("--put-cache="))
}

/// What a transfer whose output already exists ends as without running encp; `None`: run
/// encp (no output there, one encp does not check, or a write's empty leftover, removed).
/// `local` is the local side (a read's output).
pub(super) fn existing_output(t: &Transfer, args: &[String], local: &Path) -> Option<EventKind> {
    if put_cache(args) {
        return None;
    }
    match t.direction {
        Direction::Read => existing_read_output(t, local),
        Direction::Write => existing_write_output(t),
    }
}

fn existing_read_output(t: &Transfer, local: &Path) -> Option<EventKind> {
    if DEVICES.iter().any(|d| local == Path::new(d)) {
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

/// A write's namespace output: `file`, or under it the local file's name when it is a
/// directory (`get_oninfo`, `src/encp.py` 4186).
fn write_output(t: &Transfer) -> PathBuf {
    let out = PathBuf::from(&t.file);
    match (out.is_dir(), t.local_file.as_deref().map(Path::new)) {
        (true, Some(src)) => match src.file_name() {
            Some(name) => out.join(name),
            None => out,
        },
        _ => out,
    }
}

fn existing_write_output(t: &Transfer) -> Option<EventKind> {
    let out = write_output(t);
    if DEVICES.iter().any(|d| out == Path::new(d)) {
        return None;
    }
    // An output that cannot be looked at: encp decides.
    let meta = std::fs::symlink_metadata(&out).ok()?;
    let refuse = |what: &str| {
        Some(EventKind::Failed {
            reason: format!(
                "the namespace file `{}` exists ({what}): encp refuses an existing output \
                 (STATUS=USERERROR, [Errno 17] File exists), so it was not run",
                out.display()
            ),
            retryable: false,
        })
    };
    if t.attempt <= 1 {
        return refuse("before this request's first run");
    }
    if !meta.file_type().is_file() {
        return refuse("not a regular file");
    }
    if meta.len() > 0 {
        return refuse(&format!("{} bytes", meta.len()));
    }
    for n in [1, 4] {
        match layer_empty(&out, n) {
            Ok(true) => {}
            Ok(false) => return refuse(&format!("layer {n} is set")),
            Err(e) => return refuse(&format!("layer {n} cannot be read: {e}")),
        }
    }
    // Empty, no bfid, absent at attempt 1: the entry an earlier run of this request created
    // (`create_zero_length_pnfs_files`, src/encp.py 3927-3944) and, SIGKILLed before it set
    // layer 1 (7768) or the size (7933), could not remove (delete_at_exit). encp would refuse
    // it (3680) for good; removed so encp creates it again.
    match std::fs::remove_file(&out) {
        Ok(()) => {
            info!(key = %t.key, attempt = t.attempt, path = %out.display(),
                "removed the empty namespace entry a killed encp write left");
            None
        }
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => {
            warn!(key = %t.key, attempt = t.attempt, path = %out.display(), error = %e,
                "cannot remove the empty namespace entry a killed encp write left");
            refuse(&format!(
                "empty, left by an earlier run; cannot remove it: {e}"
            ))
        }
    }
}

/// Whether layer `n` of the namespace entry `path` is empty (whitespace only), read as encp
/// reads it (`.(use)(n)(name)` in its directory: `layer_file` in `src/namespace.py`,
/// `src/chimera.py`). A layer Chimera does not have is missing (ENOENT), which encp counts as
/// empty when the file itself is there (`readlayer` in `src/chimera.py`, 1391-1425).
fn layer_empty(path: &Path, n: u8) -> std::io::Result<bool> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(std::io::Error::other("no directory or name"));
    };
    let mut layer = std::ffi::OsString::from(format!(".(use)({n})("));
    layer.push(name);
    layer.push(")");
    let layer = dir.join(layer);
    match std::fs::read(&layer) {
        Ok(bytes) => Ok(bytes.iter().all(u8::is_ascii_whitespace)),
        Err(e) if e.kind() == ErrorKind::NotFound && path.symlink_metadata().is_ok() => Ok(true),
        Err(e) => Err(e),
    }
}

//! One `encp` process from spawn to end: its output read line by line (the start and the
//! ticket from stdout, the `STATUS=` line from stderr), the timeout and the stop, the outcome.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{Notify, OwnedSemaphorePermit};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::adapter::EncpState;
use super::commands::delete_ticket;
use super::invocation::Invocation;
use super::outcome::{done_unless_directory, outcome, Exit, RunOutput};
use super::status;
use crate::protocol::{EventKind, Transfer};

/// Start `encp` in its own process group, with SIGTERM on the broker's death.
pub(super) fn spawn(inv: &Invocation) -> std::io::Result<Child> {
    let mut cmd = Command::new(&inv.program);
    cmd.args(&inv.args)
        .envs(&inv.env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // On Linux the parent-death signal stops it with SIGTERM, so encp can clean up;
        // elsewhere, a run whose watcher is dropped (the broker exiting) is killed.
        .kill_on_drop(!cfg!(target_os = "linux"))
        .process_group(0);
    die_with_parent(&mut cmd);
    cmd.spawn()
}

#[cfg(target_os = "linux")]
fn die_with_parent(cmd: &mut Command) {
    let parent = std::process::id();
    // SAFETY: runs in the forked child before exec; prctl and getppid are async-signal-safe
    // and touch no memory of the parent.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before prctl: then nobody would stop this child.
            if libc::getppid() as u32 != parent {
                return Err(std::io::Error::other(
                    "the broker exited before encp started",
                ));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_cmd: &mut Command) {
    // No parent-death signal here: `kill_on_drop` (set in `spawn`) stops the run instead.
}

/// The local side of a run: the file whose size is the bytes transferred, and whether the run
/// created it (a read whose output was not there before encp started).
pub(super) struct Output {
    pub(super) path: PathBuf,
    pub(super) made_by_run: bool,
}

/// Watch one run to its end: report a start, enforce the timeout and cancellation, then
/// publish the outcome and free the slot.
pub(super) async fn watch(
    sh: Arc<EncpState>,
    mut child: Child,
    t: Transfer,
    output: Output,
    stop: Arc<Notify>,
    permit: OwnedSemaphorePermit,
) {
    let readers = Readers::start(&sh, &mut child, &t);
    let (exit, status) = tokio::select! {
        status = child.wait() => {
            let status = status.ok();
            (exit_of(status), status)
        }
        _ = stop.notified() => stopped(&mut child, sh.cfg.kill_grace, Exit::Cancelled).await,
        _ = tokio::time::sleep(sh.cfg.timeout) => {
            stopped(&mut child, sh.cfg.kill_grace, Exit::TimedOut).await
        }
    };
    let said = readers.said().await;
    if exit == Exit::Cancelled && !said.copied {
        delete_ticket(&sh, &t).await;
    }
    if output.made_by_run && !said.copied && died_uncleaned(status) {
        remove_leftover(&t, &output.path);
    }
    let local = output.path;
    let kind = ended(&sh, exit, &said, &local, t.size_bytes);
    match &kind {
        EventKind::Failed { reason, retryable } => {
            warn!(key = %t.key, attempt = t.attempt, %reason, retryable, "encp failed")
        }
        EventKind::Done { bytes } => info!(key = %t.key, attempt = t.attempt, bytes, "encp done"),
        _ => info!(key = %t.key, attempt = t.attempt, outcome = ?kind, "encp ended"),
    }
    sh.finish(&t.key, t.attempt, kind);
    drop(permit);
    sh.room.notify_one();
}

/// The tasks reading a run's standard output (the start, the ticket, a refused option) and
/// standard error (the `STATUS=` line), each keeping its last lines.
struct Readers {
    stdout: Option<JoinHandle<(StdoutSeen, String)>>,
    stderr: Option<JoinHandle<(StatusSeen, String)>>,
}

/// What a run's standard output said of its end: an option the build refused, the file copied.
#[derive(Debug, Default)]
struct StdoutSeen {
    refused: Option<String>,
    copied: bool,
}

impl Readers {
    fn start(sh: &Arc<EncpState>, child: &mut Child, t: &Transfer) -> Readers {
        let lines = sh.cfg.stderr_lines;
        let stdout = child.stdout.take().map(|out| {
            let sh = sh.clone();
            let (key, attempt) = (t.key.clone(), t.attempt);
            tokio::spawn(async move {
                let mut seen = StdoutSeen::default();
                let (_, tail) = read_lines(out, lines, |line| {
                    seen.copied |= status::copied(line);
                    if let Some(refused) = on_stdout(&sh, &key, attempt, line) {
                        seen.refused = Some(refused);
                    }
                    None
                })
                .await;
                (seen, tail)
            })
        });
        let stderr = child.stderr.take().map(|err| {
            tokio::spawn(async move {
                let mut seen = StatusSeen::default();
                let (_, tail) = read_lines(err, lines, |line| seen.push(line)).await;
                (seen, tail)
            })
        });
        Readers { stdout, stderr }
    }

    /// What the run said, once both streams have ended.
    async fn said(self) -> RunOutput {
        let (seen, err_tail) = match self.stderr {
            Some(h) => h.await.unwrap_or_default(),
            None => Default::default(),
        };
        let (out, out_tail) = match self.stdout {
            Some(h) => h.await.unwrap_or_default(),
            None => Default::default(),
        };
        RunOutput {
            status: seen.status,
            message: seen.after.join("\n"),
            refused: out.refused,
            copied: out.copied,
            tail: if err_tail.trim().is_empty() {
                out_tail
            } else {
                err_tail
            },
        }
    }
}

/// The run's event: a success measured on the local side, a failure's reason clipped.
fn ended(sh: &EncpState, exit: Exit, said: &RunOutput, local: &Path, size_bytes: u64) -> EventKind {
    let kind = if exit == Exit::Code(0) || said.copied {
        match std::fs::metadata(local) {
            Ok(m) => done_unless_directory(local, m.is_dir(), m.len()),
            Err(_) => outcome(&sh.cfg, exit, said, size_bytes),
        }
    } else {
        outcome(&sh.cfg, exit, said, 0)
    };
    match kind {
        EventKind::Failed { reason, retryable } => EventKind::Failed {
            reason: crate::answer::clip(&reason, crate::answer::MAX_MESSAGE_CHARS).into_owned(),
            retryable,
        },
        other => other,
    }
}

/// Whether encp died without its own cleanup: killed by a signal it cannot catch (SIGKILL, from
/// the adapter after `kill_grace_secs` or from anyone else). encp catches every other signal
/// it can, removes the outputs it registered for deletion and exits 128+signal
/// (Enstore-org/enstore `src/delete_at_exit.py`, `setup_signal_handling`, `signal_handler`,
/// `quit`); an unknown end (the wait failed) counts as uncleaned too.
fn died_uncleaned(status: Option<ExitStatus>) -> bool {
    use std::os::unix::process::ExitStatusExt;
    status.is_none_or(|s| s.signal().is_some())
}

/// Remove the output a killed read left. encp creates a read's output empty before it queues
/// and registers it for deletion at exit (`prepare_read_from_hsm`,
/// `create_zero_length_local_files` in `src/encp.py`), and refuses an output that exists
/// (`outputfile_check`: USERERROR, which is final); so what a killed run left would fail the
/// broker's retry for good. Only a regular file is removed, and only one the run created.
fn remove_leftover(t: &Transfer, path: &Path) {
    let is_file = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file());
    if !is_file {
        return;
    }
    match std::fs::remove_file(path) {
        Ok(()) => info!(key = %t.key, attempt = t.attempt, path = %path.display(),
            "removed the output a killed encp left"),
        Err(e) => warn!(key = %t.key, attempt = t.attempt, path = %path.display(), error = %e,
            "cannot remove the output a killed encp left; the next attempt's encp will refuse it"),
    }
}

/// How a run ended; `None`: the wait itself failed, the process is beyond reach (treated as
/// lost to a signal).
fn exit_of(status: Option<ExitStatus>) -> Exit {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => Exit::Code(code),
            (None, Some(sig)) => Exit::Signal(sig),
            (None, None) => Exit::Signal(0),
        },
        None => Exit::Signal(0),
    }
}

/// The adapter stops a run (`why`: a cancel or the timeout), and how the process ended. A run
/// that had already ended before the signal keeps its own outcome: a cancel that came too late
/// does not turn a done transfer into a cancelled one. Once signalled, the run is `why`
/// whatever its exit, unless it said its file was copied (see `outcome`).
async fn stopped(child: &mut Child, grace: Duration, why: Exit) -> (Exit, Option<ExitStatus>) {
    if let Ok(Some(status)) = child.try_wait() {
        return (exit_of(Some(status)), Some(status));
    }
    (why, terminate(child, grace).await)
}

/// SIGTERM to the process group (encp cleans up on it), then SIGKILL after the grace period;
/// how the process ended, if that is known.
async fn terminate(child: &mut Child, grace: Duration) -> Option<ExitStatus> {
    if let Some(pid) = child.id() {
        // SAFETY: kill(2) on the child's own process group; no memory is touched.
        unsafe {
            libc::kill(-(pid as i32), libc::SIGTERM);
        }
        if let Ok(status) = tokio::time::timeout(grace, child.wait()).await {
            return status.ok();
        }
        // SAFETY: as above.
        unsafe {
            libc::kill(-(pid as i32), libc::SIGKILL);
        }
    }
    let _ = child.kill().await;
    child.wait().await.ok()
}

/// Longest line of a run's output kept; the rest of a longer line is read and dropped, so a run
/// that prints without newlines cannot grow the broker's memory.
pub(super) const MAX_LINE_BYTES: usize = 64 * 1024;

/// Read a stream line by line, calling `each` on every line; returns the last thing `each`
/// returned (if any) and the last `n` lines.
pub(super) async fn read_lines<R: AsyncRead + Unpin>(
    stream: R,
    n: usize,
    mut each: impl FnMut(&str) -> Option<String>,
) -> (Option<String>, String) {
    let mut tail = Tail::default();
    let mut kept = None;
    let mut reader = BufReader::new(stream);
    let mut raw = Vec::new();
    while let Ok(true) = next_line(&mut reader, &mut raw, MAX_LINE_BYTES).await {
        let line = String::from_utf8_lossy(&raw);
        let line = line.strip_suffix('\r').unwrap_or(&line).to_string();
        if let Some(v) = each(&line) {
            kept = Some(v);
        }
        tail.push(line, n);
    }
    (kept, tail.text())
}

/// The next line of `reader` into `line` (without its newline), at most `max` bytes of it kept;
/// `false` at the end of the stream.
async fn next_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    line: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<bool> {
    line.clear();
    let mut read_any = false;
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(read_any);
        }
        read_any = true;
        let newline = buf.iter().position(|&b| b == b'\n');
        let chunk = &buf[..newline.unwrap_or(buf.len())];
        let room = max.saturating_sub(line.len());
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let used = newline.map_or(buf.len(), |i| i + 1);
        reader.consume(used);
        if newline.is_some() {
            return Ok(true);
        }
    }
}

/// One line of a run's standard output: the start, the ticket's unique id and library, or an
/// option the build refused (returned).
fn on_stdout(sh: &EncpState, key: &str, attempt: u32, line: &str) -> Option<String> {
    if status::refused_option(line) {
        return Some(line.to_string());
    }
    let started = !sh.cfg.started_pattern.is_empty() && line.contains(&sh.cfg.started_pattern);
    let unique_id = ticket_field(line, "unique_id");
    let library = ticket_field(line, "library");
    if !started && unique_id.is_none() && library.is_none() {
        return None;
    }
    let first_start = {
        let mut p = sh.lock();
        let run = p.running.get_mut(key).filter(|r| r.attempt == attempt)?;
        run.unique_id = unique_id.or(run.unique_id.take());
        run.library = library.or(run.library.take());
        let first = started && !run.started;
        run.started |= started;
        first
    };
    if first_start {
        sh.log.push(key, attempt, EventKind::Started);
    }
    None
}

/// The value of `'name': 'value'` in a line of a ticket encp printed with `pprint.pformat`.
pub(super) fn ticket_field(line: &str, name: &str) -> Option<String> {
    let start = line.find(&format!("'{name}': '"))? + name.len() + 5;
    let rest = &line[start..];
    let value = &rest[..rest.find('\'')?];
    (!value.is_empty()).then(|| value.to_string())
}

/// The `STATUS=` line of a run's standard error and the message after it.
#[derive(Debug, Default)]
pub(super) struct StatusSeen {
    pub(super) status: Option<String>,
    pub(super) after: Vec<String>,
}

impl StatusSeen {
    pub(super) fn push(&mut self, line: &str) -> Option<String> {
        if let Some(name) = status::status_of(line) {
            self.status = Some(name.to_string());
            self.after.clear();
        } else if self.status.is_some() && !line.trim().is_empty() && self.after.len() < 20 {
            self.after.push(line.trim().to_string());
        }
        None
    }
}

/// The last `n` lines of a stream, kept as they arrive.
#[derive(Debug, Default)]
pub(super) struct Tail {
    lines: VecDeque<String>,
}

impl Tail {
    pub(super) fn push(&mut self, line: String, n: usize) {
        if self.lines.len() == n {
            self.lines.pop_front();
        }
        self.lines.push_back(line);
    }

    pub(super) fn text(&self) -> String {
        self.lines.iter().cloned().collect::<Vec<_>>().join("\n")
    }
}

//! What an ended `encp` run means for its transfer: pure.

use std::path::Path;

use super::config::EncpConfig;
use crate::protocol::EventKind;

/// How an `encp` run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Exited with this code.
    Code(i32),
    /// Killed by this signal (not by the adapter).
    Signal(i32),
    /// Stopped by the adapter after `timeout_secs`.
    TimedOut,
    /// Stopped by the adapter on cancellation.
    Cancelled,
}

/// What a run said, read from its output as it ran.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunOutput {
    /// The name on its last `STATUS=` line (standard error).
    pub status: Option<String>,
    /// The lines after that STATUS line (encp's message).
    pub message: String,
    /// The line refusing an option of the build (standard output), if any.
    pub refused: Option<String>,
    /// encp said the file was copied ("File ... copied successfully.", standard output).
    pub copied: bool,
    /// The last lines of standard error (of standard output if stderr was empty).
    pub tail: String,
}

/// What an ended run means for the transfer. `bytes` is the local file's size after a success.
pub fn outcome(cfg: &EncpConfig, exit: Exit, said: &RunOutput, bytes: u64) -> EventKind {
    let reason = |what: String, text: &str| {
        if text.trim().is_empty() {
            what
        } else {
            format!("{what}: {}", text.trim())
        }
    };
    let tail = said.tail.as_str();
    // Once encp has said the file was copied, it is: a signal in encp's last moments (its
    // final statistics and logging) makes it exit 128+signal (`src/delete_at_exit.py`) with
    // the file no longer registered for deletion. Retried, the next encp would refuse the
    // read's output that is now there (or the write's file in the name space); cancelled,
    // the broker would refund a transferred file.
    if said.copied {
        return EventKind::Done { bytes };
    }
    match exit {
        Exit::Code(0) => EventKind::Done { bytes },
        Exit::Cancelled => EventKind::Cancelled,
        Exit::TimedOut => EventKind::Failed {
            reason: reason(
                format!(
                    "encp timed out after {} s and was stopped",
                    cfg.timeout.as_secs()
                ),
                tail,
            ),
            retryable: true,
        },
        Exit::Signal(sig) => EventKind::Failed {
            reason: reason(format!("encp was killed by signal {sig}"), tail),
            retryable: true,
        },
        Exit::Code(code) => match (&said.status, &said.refused) {
            (Some(status), _) => EventKind::Failed {
                reason: reason(
                    format!("encp exited with status {code}, STATUS={status}"),
                    &said.message,
                ),
                retryable: !cfg.fatal_statuses.iter().any(|f| f == status),
            },
            // The same command line would be refused again.
            (None, Some(line)) => EventKind::Failed {
                reason: format!("encp exited with status {code}: {line}"),
                retryable: false,
            },
            (None, None) => EventKind::Failed {
                reason: reason(format!("encp exited with status {code}"), tail),
                retryable: !cfg.fatal_exit_codes.contains(&code),
            },
        },
    }
}

/// A successful run whose local side is a directory did not transfer a file (its 4,096 bytes
/// are the directory's own): failed, and not retried, since it would end the same way.
pub fn done_unless_directory(local: &Path, is_dir: bool, bytes: u64) -> EventKind {
    if is_dir {
        return EventKind::Failed {
            reason: format!(
                "encp exited 0 but the local side `{}` is a directory, not the file",
                local.display()
            ),
            retryable: false,
        };
    }
    EventKind::Done { bytes }
}

//! The site's commands beside encp: `cancel_command` (delete a queued ticket) and the runner
//! both it and `reprioritize_command` use.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;
use tracing::{info, warn};

use super::adapter::EncpState;
use super::config::{LIBRARY, UNIQUE_ID};
use crate::protocol::Transfer;
use crate::MssError;

/// After a cancelled run is stopped (first: left waiting, encp would resubmit a deleted
/// ticket), delete its ticket from the library manager's queue with `cancel_command`, if it
/// was still queued there: encp printed its ticket (read to the end of its output, so a
/// ticket printed just before the stop is known) and no mover called back.
pub(super) async fn delete_ticket(sh: &EncpState, t: &Transfer) {
    let Some(template) = &sh.cfg.cancel_command else {
        return;
    };
    let queued = {
        let p = sh.lock();
        p.running
            .get(&t.key)
            .filter(|run| run.attempt == t.attempt && !run.started)
            .and_then(|run| Some((run.unique_id.clone()?, run.library.clone())))
    };
    let Some((unique_id, library)) = queued else {
        return;
    };
    let library = library
        .or_else(|| sh.cfg.library.clone())
        .unwrap_or_default();
    let args: Vec<String> = template
        .iter()
        .map(|a| {
            a.replace(UNIQUE_ID, &unique_id)
                .replace(LIBRARY, &library)
                .replace("{key}", &t.key)
                .replace("{attempt}", &t.attempt.to_string())
                .replace("{file}", &t.file)
        })
        .collect();
    match run_command(&args, &sh.cfg.env).await {
        Ok(()) => {
            info!(key = %t.key, %unique_id, %library, "encp ticket deleted from the library manager's queue")
        }
        // The ticket stays until a mover takes it and finds no encp to call back.
        Err(e) => {
            warn!(key = %t.key, %unique_id, error = %e, "cancel_command failed: the ticket stays in the library manager's queue")
        }
    }
}

/// Run a site command (re-prioritisation, cancellation) to its end, within a minute.
pub(super) async fn run_command(
    args: &[String],
    env: &BTreeMap<String, String>,
) -> Result<(), MssError> {
    let Some((program, rest)) = args.split_first() else {
        return Err(MssError::Rejected("an empty command".into()));
    };
    let out = Command::new(program)
        .args(rest)
        .envs(env)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .map_err(|_| MssError::Unavailable(format!("{program} timed out")))?
        .map_err(|e| MssError::Unavailable(format!("cannot run {program}: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(MssError::Rejected(format!(
            "{program} exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

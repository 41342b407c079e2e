//! The site's lookup command: run without a shell, the file's path its last argument, stdin
//! closed, within the timeout, its output bounded; killed when it overruns either.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::Command;

use super::layer4::tape_file_number;
use super::{check_label, Located, LookupError};

/// The most of the command's output read: one line is expected.
const MAX_OUTPUT_BYTES: u64 = 4096;

/// Run `argv` with `path` appended and read its answer.
pub(super) async fn run(
    argv: &[String],
    path: &str,
    timeout: Duration,
) -> Result<Located, LookupError> {
    let Some((program, args)) = argv.split_first() else {
        return Err(LookupError::Unreadable("an empty command".into()));
    };
    // Only the program's file name is ever shown (its arguments may carry a site's secrets).
    let shown = std::path::Path::new(program)
        .file_name()
        .map_or_else(|| "the lookup command".into(), |n| n.to_string_lossy());
    let mut child = Command::new(program)
        .args(args)
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| LookupError::Unreadable(format!("cannot run {shown}: {}", e.kind())))?;
    let Some(stdout) = child.stdout.take() else {
        return Err(LookupError::Unreadable(format!("{shown} has no output")));
    };
    let run = async {
        let mut out = Vec::new();
        let mut bounded = stdout.take(MAX_OUTPUT_BYTES + 1);
        bounded
            .read_to_end(&mut out)
            .await
            .map_err(|e| LookupError::Unreadable(format!("reading {shown}: {}", e.kind())))?;
        if out.len() as u64 > MAX_OUTPUT_BYTES {
            return Err(LookupError::Garbled(format!("{shown} printed too much")));
        }
        let status = child
            .wait()
            .await
            .map_err(|e| LookupError::Unreadable(format!("waiting for {shown}: {}", e.kind())))?;
        if !status.success() {
            return Err(LookupError::Unreadable(format!(
                "{shown} exited with {status}"
            )));
        }
        parse_output(&out)
    };
    // On a timeout or too much output the child is dropped, and killed (`kill_on_drop`).
    tokio::time::timeout(timeout, run)
        .await
        .unwrap_or(Err(LookupError::TimedOut(timeout)))
}

/// The command's answer: exactly one line `VOLUME POSITION` (blanks around the two words and a
/// final newline allowed), the position a decimal file number or an Enstore tape location
/// cookie. Anything else is garbled.
pub fn parse_output(out: &[u8]) -> Result<Located, LookupError> {
    let text = std::str::from_utf8(out)
        .map_err(|_| LookupError::Garbled("the answer is not text".into()))?;
    let text = text.strip_suffix('\n').unwrap_or(text);
    if text.contains('\n') {
        return Err(LookupError::Garbled(
            "the answer is more than one line".into(),
        ));
    }
    let words: Vec<&str> = text.split_whitespace().collect();
    let [volume, position] = words[..] else {
        return Err(LookupError::Garbled(
            "the answer is not `VOLUME POSITION`".into(),
        ));
    };
    check_label(volume)?;
    let position = tape_file_number(position)
        .or_else(|| {
            position
                .bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| position.parse().ok())
                .flatten()
        })
        .ok_or_else(|| {
            LookupError::Garbled("the position is not a file number or a tape cookie".into())
        })?;
    Ok(Located {
        volume: volume.to_string(),
        position,
    })
}

//! Reading an MSS's answers with bounds: a body is read in chunks up to [`MAX_ANSWER_BYTES`]
//! (an answer beyond that is refused without reading the rest), and the text kept of an answer
//! (in an error message, a log line, a request's `last_error`) is clipped to
//! [`MAX_MESSAGE_CHARS`].
//!
//! A body that cannot be read whole (over the cap, stalled past the call's timeout, cut off) is
//! an *unknown* outcome, not a refusal: the MSS may have done what it was asked.
//!
//! Reading MSS answers bounded (`read_body`, in chunks up to `MAX_ANSWER_BYTES`, 16 MiB; more is an
//! `Unknown` outcome) and `clip` (the MSS text kept in messages, logs and `last_error`:
//! `MAX_MESSAGE_CHARS`).

use std::borrow::Cow;

use crate::MssError;

/// Most bytes of one MSS answer read. The largest regular answers are event polls (10 000
/// events of the simulator, about 1.5 MB) and FTS3 job lists.
pub const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// Most characters of an MSS's text kept in an error message, a log line or `last_error`.
pub const MAX_MESSAGE_CHARS: usize = 300;

/// The whole body of `resp`, or `Unknown` when it is over `cap` bytes (by its `Content-Length`
/// or as it arrives) or cannot be read (timeout, connection lost).
pub async fn read_body(mut resp: reqwest::Response, cap: usize) -> Result<Vec<u8>, MssError> {
    if let Some(len) = resp.content_length() {
        if len > cap as u64 {
            return Err(too_big(format!("{len} bytes announced")));
        }
    }
    let mut body = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > cap {
                    return Err(too_big(format!("more than {cap} bytes")));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body),
            Err(e) => {
                return Err(MssError::Unknown(format!(
                    "the answer could not be read after {} bytes: {}",
                    body.len(),
                    crate::rest::shown(&e)
                )))
            }
        }
    }
}

fn too_big(what: String) -> MssError {
    MssError::Unknown(format!(
        "the answer is too large ({what}; at most {MAX_ANSWER_BYTES} are read)"
    ))
}

/// `text` cut to at most `max` characters (at a character boundary), with a marker of how many
/// bytes were cut.
pub fn clip(text: &str, max: usize) -> Cow<'_, str> {
    match text.char_indices().nth(max) {
        None => Cow::Borrowed(text),
        Some((end, _)) => Cow::Owned(format!(
            "{}... [{} more bytes cut]",
            &text[..end],
            text.len() - end
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_keeps_short_text_and_cuts_long_text_at_a_char_boundary() {
        assert_eq!(clip("short", 10), "short");
        assert_eq!(clip("exactly", 7), "exactly");
        let long = "é".repeat(500);
        let cut = clip(&long, 300);
        assert!(cut.starts_with(&"é".repeat(300)), "{cut}");
        assert!(cut.ends_with("... [400 more bytes cut]"), "{cut}");
    }
}

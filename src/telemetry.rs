//! Logging: structured `tracing` output to stderr, filtered by `RUST_LOG` (default `info`). (The
//! HTTP request id in scope for the work a request causes is `request_scope`'s.)
//!
//! Every field value of the text output goes through [`escaping_fields`], which escapes control
//! characters (newline, carriage return, ESC, ...), so text from outside (an MSS's error body, a
//! station's file name) can never forge a log line or a terminal sequence, whatever the call
//! site. The JSON output escapes them itself.
//!
//! Tracing subscriber (text or JSON lines, `RUST_LOG`); the text output's `escaping_fields` escapes
//! control characters and `hidden_text` characters (Cf, Zl, Zp) in every field value.

use std::fmt::{self, Write};
use std::io::IsTerminal;

use tracing_subscriber::field::MakeExt;
use tracing_subscriber::fmt::format::{self, Writer};
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::EnvFilter;

/// Install the global subscriber; `json` switches to one JSON object per line. The text is
/// coloured only when stderr is a terminal and `NO_COLOR` (<https://no-color.org>) is not set:
/// a log written to a file, a pipe or the journal holds no escape sequences.
pub fn init(json: bool) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal() && !no_color)
        .with_writer(std::io::stderr);
    // Already installed (a second call in tests) is fine.
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.fmt_fields(escaping_fields()).try_init()
    };
}

/// The text output's field formatter: `name=value` pairs (the message bare), separated by
/// spaces, with control characters in names and values escaped.
pub fn escaping_fields() -> impl for<'w> FormatFields<'w> + Send + Sync + 'static {
    format::debug_fn(
        |w: &mut Writer<'_>, field: &tracing::field::Field, value: &dyn fmt::Debug| {
            let mut out = Escaping(w);
            if field.name() == "message" {
                write!(out, "{value:?}")
            } else {
                write!(out, "{field}={value:?}")
            }
        },
    )
    .delimited(" ")
}

/// A writer that escapes control characters as Rust does (`\n`, `\r`, `\u{1b}`).
struct Escaping<'a, 'w>(&'a mut Writer<'w>);

impl Write for Escaping<'_, '_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut rest = s;
        while let Some(at) = rest.find(|c: char| c.is_control() || crate::hidden_text::is_hiding(c))
        {
            self.0.write_str(&rest[..at])?;
            let c = rest[at..].chars().next().unwrap_or_default();
            write!(self.0, "{}", c.escape_default())?;
            rest = &rest[at + c.len_utf8()..];
        }
        self.0.write_str(rest)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What the text log (with `escaping_fields`) writes while `log` runs.
    fn text_log_of(log: impl FnOnce()) -> String {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .fmt_fields(escaping_fields())
            .finish();
        tracing::subscriber::with_default(subscriber, log);
        let bytes = buffer.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn control_characters_in_any_field_are_escaped() {
        let text = text_log_of(|| {
            let from_mss = "refused\n2026-01-01T00:00:00Z  INFO forged\r\u{1b}[2K";
            tracing::warn!(error = %from_mss, file = from_mss, "mss said {from_mss}");
        });
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(!text.contains(['\r', '\u{1b}']), "{text:?}");
        assert!(
            text.contains(r"error=refused\n2026-01-01T00:00:00Z  INFO forged\r\u{1b}[2K"),
            "{text}"
        );
        assert!(text.contains(r"mss said refused\n2026"), "{text}");
    }

    #[test]
    fn characters_that_hide_text_are_escaped_too() {
        let text = text_log_of(|| {
            let from_mss = "ok\u{2028}forged\u{202E}desrever";
            tracing::warn!(error = %from_mss, "mss said {from_mss}");
        });
        assert!(!text.contains(['\u{2028}', '\u{202E}']), "{text:?}");
        assert!(
            text.contains(r"error=ok\u{2028}forged\u{202e}desrever"),
            "{text}"
        );
    }
}

//! Characters that hide or reorder text where a person reads it (a log line, a table, a page):
//! Unicode format characters (Cf: bidi overrides such as U+202E, zero-width characters) and
//! line or paragraph separators (Zl, Zp). Station strings containing them are refused
//! (`api::request`); text from elsewhere (an MSS's answer) has them escaped in logs (`telemetry`).
//!
//! Which characters hide or reorder text (refused in station strings, escaped in logs).

use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

/// Whether `c` is a Unicode format character or a line or paragraph separator.
pub fn is_hiding(c: char) -> bool {
    // No ASCII character is either (the table lookup cost 3% of the broker's CPU on single
    // requests, through the log formatter's escaping of every span field).
    !c.is_ascii()
        && matches!(
            c.general_category(),
            GeneralCategory::Format
                | GeneralCategory::LineSeparator
                | GeneralCategory::ParagraphSeparator
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_and_separator_characters_hide_text() {
        for c in ['\u{202E}', '\u{200B}', '\u{2028}', '\u{2029}', '\u{FEFF}'] {
            assert!(is_hiding(c), "U+{:04X}", c as u32);
        }
        for c in ['a', ' ', 'é', '\n'] {
            assert!(!is_hiding(c), "U+{:04X}", c as u32);
        }
    }

    #[test]
    fn no_ascii_character_is_in_a_hiding_category() {
        // What lets `is_hiding` skip the table for ASCII.
        for c in (0u8..128).map(char::from) {
            let category = c.general_category();
            assert!(
                !matches!(
                    category,
                    GeneralCategory::Format
                        | GeneralCategory::LineSeparator
                        | GeneralCategory::ParagraphSeparator
                ),
                "U+{:04X} is {category:?}",
                c as u32
            );
        }
    }
}

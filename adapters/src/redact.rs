//! URLs with their secrets taken out, wherever one may be shown: a log line, an API answer
//! (`/readyz`, a reload's refusal), an error, `check-config`'s output. An MSS URL may carry a
//! password (`https://user:password@host/`, sent as HTTP Basic) or a token in its query string
//! (`?authz=...`); [`urls`] replaces the password (or a user part without one, which may be a
//! token itself) and the whole query and fragment with [`HIDDEN`], keeping the scheme, the user
//! name, the host, the port and the path, which say where the broker talks to. It works on any
//! text (an error message that quotes a URL, reqwest's "error sending request for url (...)"),
//! so every place that shows text that may hold a URL calls this one function.
//!
//! `urls`, an MSS URL with its user, password and query replaced, for every log line, answer and
//! error (`/readyz`, start-up, `check-config`).

use std::borrow::Cow;

/// What stands where a secret was.
pub const HIDDEN: &str = "***";

/// `text` with every URL in it (`scheme://...`, up to the next blank or quote) redacted: the
/// password (`user:***@`), a user part without a password (`***@`), the query (`?***`) and the
/// fragment (`#***`). Text without `://` is returned as it is, without a copy.
pub fn urls(text: &str) -> Cow<'_, str> {
    if !text.contains("://") {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let after = at + 3;
        let len = rest[after..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>'))
            .unwrap_or(rest.len() - after);
        let (url, tail) = trailing_punctuation(&rest[after..after + len]);
        out.push_str(&rest[..after]);
        out.push_str(&redact_after_scheme(url));
        out.push_str(tail);
        rest = &rest[after + len..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// A URL quoted in prose ends before a closing bracket or a full stop that follows it:
/// `(http://h/?q=x):` keeps its `):` outside what is redacted.
fn trailing_punctuation(url: &str) -> (&str, &str) {
    let kept = url.trim_end_matches([')', ']', '.', ',', ';', ':']);
    url.split_at(kept.len())
}

/// The part of a URL after `scheme://`, redacted.
fn redact_after_scheme(url: &str) -> String {
    let authority_end = url.find(['/', '?', '#']).unwrap_or(url.len());
    let (authority, rest) = url.split_at(authority_end);
    let mut out = String::with_capacity(url.len());
    match authority.rfind('@') {
        Some(at) => {
            match authority[..at].split_once(':') {
                Some((user, _)) => out.push_str(&format!("{user}:{HIDDEN}")),
                None => out.push_str(HIDDEN),
            }
            out.push_str(&authority[at..]);
        }
        None => out.push_str(authority),
    }
    let path_end = rest.find(['?', '#']).unwrap_or(rest.len());
    out.push_str(&rest[..path_end]);
    let after_path = &rest[path_end..];
    if after_path.starts_with('?') {
        out.push('?');
        out.push_str(HIDDEN);
    }
    if after_path.contains('#') {
        out.push('#');
        out.push_str(HIDDEN);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_the_query_and_the_fragment_are_hidden() {
        for (text, want) in [
            (
                "http://user:secret@host:7070/?token=abc",
                "http://user:***@host:7070/?***",
            ),
            (
                "https://tok@host/api?x=1#frag",
                "https://***@host/api?***#***",
            ),
            ("https://host/api/v1/tape", "https://host/api/v1/tape"),
            ("http://h:1/p#only", "http://h:1/p#***"),
            ("http://a:b@c@h/", "http://a:***@h/"),
        ] {
            assert_eq!(urls(text), want, "{text}");
        }
    }

    #[test]
    fn urls_inside_text_are_found_and_the_rest_kept() {
        let text = "error sending request for url (http://u:pw@127.0.0.1:9/v1/events?token=abc&epoch=e1): \
                    connection refused; then `https://h/?k=v`, and \"ftp://x:y@z\"";
        let out = urls(text);
        assert!(!out.contains("pw") && !out.contains("abc") && !out.contains("k=v"));
        assert!(!out.contains("x:y"), "{out}");
        assert_eq!(
            out,
            "error sending request for url (http://u:***@127.0.0.1:9/v1/events?***): \
             connection refused; then `https://h/?***`, and \"ftp://x:***@z\""
        );
    }

    #[test]
    fn text_without_a_url_is_not_copied() {
        assert!(matches!(urls("no url here: a:b@c?d"), Cow::Borrowed(_)));
    }
}

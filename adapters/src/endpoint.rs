//! An MSS's base URL, parsed once, and the URL of each call built from it: the call's path
//! appended to the base's path (one `/` between them, whether the base ends in one or not), the
//! base's query string kept on every call (an MSS that takes a token in the query expects it on
//! each) with the call's own query after it, the base's user and password left to reqwest, which
//! sends them as HTTP Basic and never in the request line. Built by string formatting instead,
//! `http://host/?token=abc` gave `http://host/?token=abc/v1/transfers`: every call went to
//! `/` with a garbled query.
//!
//! `Endpoint`, a parsed base URL whose query is kept on every call built from it and whose user and
//! password go as Basic authentication.

use reqwest::Url;

use crate::redact;

/// A parsed base URL (`http`/`https`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    base: Url,
}

impl Endpoint {
    /// Parse `text`; the error names it redacted (see [`redact::urls`]).
    pub fn parse(text: &str) -> Result<Endpoint, String> {
        let shown = || redact::urls(text).into_owned();
        let base = Url::parse(text.trim()).map_err(|e| format!("`{}`: {e}", shown()))?;
        if !matches!(base.scheme(), "http" | "https") || base.host_str().is_none() {
            return Err(format!(
                "`{}` must be an http:// or https:// URL with a host",
                shown()
            ));
        }
        Ok(Endpoint { base })
    }

    /// The URL of the call at `path` (`/v1/transfers`, `/jobs?fields=a,b`).
    pub fn url(&self, path: &str) -> Url {
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        let mut url = self.base.clone();
        let joined = format!(
            "{}/{}",
            self.base.path().trim_end_matches('/'),
            path.trim_start_matches('/')
        );
        url.set_path(&joined);
        let query = match (self.base.query().filter(|q| !q.is_empty()), query) {
            (Some(base), "") => Some(base.to_string()),
            (Some(base), own) => Some(format!("{base}&{own}")),
            (None, "") => None,
            (None, own) => Some(own.to_string()),
        };
        url.set_query(query.as_deref());
        url.set_fragment(None);
        url
    }

    /// The base as it may be shown (password and query hidden).
    pub fn redacted(&self) -> String {
        redact::urls(self.base.as_str()).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_keeps_the_bases_path_and_query() {
        let e = Endpoint::parse("http://user:secret@host:7070/?token=abc").unwrap();
        assert_eq!(
            e.url("/v1/transfers").as_str(),
            "http://user:secret@host:7070/v1/transfers?token=abc"
        );
        assert_eq!(
            e.url("/jobs?fields=a,b").as_str(),
            "http://user:secret@host:7070/jobs?token=abc&fields=a,b"
        );
        let e = Endpoint::parse("https://h/api/v1/tape/").unwrap();
        assert_eq!(
            e.url("/stage/x%2Fy").as_str(),
            "https://h/api/v1/tape/stage/x%2Fy"
        );
        let e = Endpoint::parse("https://h/api/v1/tape").unwrap();
        assert_eq!(e.url("/stage").as_str(), "https://h/api/v1/tape/stage");
        assert_eq!(
            Endpoint::parse("http://h:1")
                .unwrap()
                .url("/v1/events")
                .as_str(),
            "http://h:1/v1/events"
        );
    }

    #[test]
    fn a_bad_base_is_refused_without_its_secrets() {
        let e = Endpoint::parse("ftp://u:secret@h/?token=abc").unwrap_err();
        assert!(!e.contains("secret") && !e.contains("abc"), "{e}");
        assert!(Endpoint::parse("http://u:secret@[bad/?token=abc")
            .is_err_and(|e| !e.contains("secret") && !e.contains("abc")));
        assert_eq!(
            Endpoint::parse("http://u:secret@h/?token=abc")
                .unwrap()
                .redacted(),
            "http://u:***@h/?***"
        );
    }
}

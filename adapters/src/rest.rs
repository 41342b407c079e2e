//! What the REST adapters share: authentication (a bearer token read from a file at every call,
//! so an external refresher can rotate it, or an X.509 client certificate), the reqwest client,
//! and how an HTTP answer maps to [`MssError`]: 5xx, 408 and 429 are `Unavailable` (try again
//! later), so are 401, 403 and 419 (credentials expired or about to: an operator renews them,
//! logged at warn with the server's text), another refusal is `Rejected` when the server's own JSON error says so, and an answer
//! that cannot be read (a proxy's page, a garbled, stalled or over-size body) is `Unknown`.
//! Bodies are read through [`Answer`], bounded by [`MAX_ANSWER_BYTES`].
//!
//! What the REST adapters share: `auth` (bearer token read from a file at every call, or an X.509
//! client certificate; a CA bundle), the reqwest client, and `Answer` (a response read bounded) to
//! `MssError`: 5xx/408/429 `Unavailable`; 401/403/419 (`is_credential_refusal`: an expired token,
//! FTS3's delegation) `Unavailable` and logged at warn; another 4xx with the server's own JSON
//! error `Rejected`; a proxy's page, an unparsable or unreadable body `Unknown`; `not_found` only
//! for the server's own 404.

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::{Client, RequestBuilder, StatusCode};
use serde::Deserialize;

use crate::answer::{self, MAX_ANSWER_BYTES, MAX_MESSAGE_CHARS};
use crate::protocol::ErrorBody;
use crate::MssError;

/// FTS3's "Authentication Timeout": the delegated proxy is missing, expired or has under an
/// hour left (cern-fts/fts-rest-flask `fts3rest/lib/http_exceptions.py`,
/// `fts3rest/controllers/jobs.py` `submit`).
pub const AUTHENTICATION_TIMEOUT: u16 = 419;

/// Whether a status says the credentials are not (or no longer) good: 401 and 403 (an expired
/// or rotated token), 419 (FTS3's delegation). Retryable: the call succeeds once renewed.
pub fn is_credential_refusal(status: StatusCode) -> bool {
    status == StatusCode::UNAUTHORIZED
        || status == StatusCode::FORBIDDEN
        || status.as_u16() == AUTHENTICATION_TIMEOUT
}

/// How a REST adapter authenticates, as configured: the `auth` sub-table (`method`,
/// `token_file`, `certificate`, `key`, `ca_file`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAuth {
    /// `"bearer"`, `"certificate"` or `"none"`.
    #[serde(default = "default_auth")]
    pub method: String,
    #[serde(default)]
    pub token_file: Option<String>,
    #[serde(default)]
    pub certificate: Option<String>,
    #[serde(default)]
    pub key: Option<String>,
    #[serde(default)]
    pub ca_file: Option<String>,
}

fn default_auth() -> String {
    "bearer".into()
}

impl Default for RawAuth {
    fn default() -> Self {
        RawAuth {
            method: default_auth(),
            token_file: None,
            certificate: None,
            key: None,
            ca_file: None,
        }
    }
}

/// Validated authentication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    None,
    /// `Authorization: Bearer <first line of the file>`, read at every call.
    Bearer {
        token_file: PathBuf,
    },
    /// A PEM client certificate and its PEM private key.
    Certificate {
        certificate: PathBuf,
        key: PathBuf,
    },
}

/// Validated REST connection settings: authentication and an optional CA bundle for the
/// server's certificate (on top of the system's roots).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestAuth {
    pub auth: Auth,
    pub ca_file: Option<PathBuf>,
}

/// One thing wrong with an adapter's table, by key relative to the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    pub key: String,
    pub message: String,
}

impl Issue {
    pub fn new(key: &str, message: impl Into<String>) -> Issue {
        Issue {
            key: key.to_string(),
            message: message.into(),
        }
    }
}

/// A path from the configuration, relative to the configuration file's directory, that must
/// name an existing file.
pub fn config_file(raw: &str, base: &Path, key: &str, issues: &mut Vec<Issue>) -> PathBuf {
    let path = base.join(raw);
    if raw.is_empty() {
        issues.push(Issue::new(key, "may not be empty"));
    } else if !path.is_file() {
        issues.push(Issue::new(
            key,
            format!("`{}` is not a readable file", path.display()),
        ));
    }
    path
}

impl RawAuth {
    /// Validate, resolving files against `base` (the configuration's directory).
    pub fn validate(&self, base: &Path, issues: &mut Vec<Issue>) -> RestAuth {
        let file = |v: &Option<String>, key: &str, issues: &mut Vec<Issue>| {
            v.as_ref().map(|s| config_file(s, base, key, issues))
        };
        let auth = match self.method.as_str() {
            "none" => Auth::None,
            "bearer" => match file(&self.token_file, "token_file", issues) {
                Some(token_file) => Auth::Bearer { token_file },
                None => {
                    issues.push(Issue::new(
                        "token_file",
                        "needed with method = \"bearer\": a file holding the token",
                    ));
                    Auth::None
                }
            },
            "certificate" => {
                let certificate = file(&self.certificate, "certificate", issues);
                let key = file(&self.key, "key", issues);
                match (certificate, key) {
                    (Some(certificate), Some(key)) => Auth::Certificate { certificate, key },
                    _ => {
                        issues.push(Issue::new(
                            "certificate",
                            "method = \"certificate\" needs both certificate and key (PEM files)",
                        ));
                        Auth::None
                    }
                }
            }
            other => {
                issues.push(Issue::new(
                    "method",
                    format!("`{other}` is not one of \"bearer\", \"certificate\", \"none\""),
                ));
                Auth::None
            }
        };
        RestAuth {
            auth,
            ca_file: file(&self.ca_file, "ca_file", issues),
        }
    }
}

impl RestAuth {
    /// A client with the configured identity and CA bundle, for calls bounded by `timeout`.
    pub fn client(&self, timeout: Duration) -> Result<Client, MssError> {
        let mut builder = Client::builder()
            .pool_max_idle_per_host(16)
            .connect_timeout(connect_timeout(timeout));
        if let Some(ca) = &self.ca_file {
            let pem = read(ca)?;
            for cert in reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| MssError::Protocol(format!("{}: {e}", ca.display())))?
            {
                builder = builder.add_root_certificate(cert);
            }
        }
        if let Auth::Certificate { certificate, key } = &self.auth {
            let mut pem = read(certificate)?;
            pem.push(b'\n');
            pem.extend(read(key)?);
            let identity = reqwest::Identity::from_pem(&pem).map_err(|e| {
                MssError::Protocol(format!(
                    "client certificate {} with key {}: {e}",
                    certificate.display(),
                    key.display()
                ))
            })?;
            builder = builder.identity(identity);
        }
        builder
            .build()
            .map_err(|e| MssError::Protocol(format!("cannot build the http client: {}", shown(&e))))
    }

    /// Add the bearer token (read now) to a request.
    pub fn authorize(&self, request: RequestBuilder) -> Result<RequestBuilder, MssError> {
        match &self.auth {
            Auth::Bearer { token_file } => {
                let text = std::fs::read_to_string(token_file).map_err(|e| {
                    MssError::Unavailable(format!(
                        "cannot read the token file {}: {e}",
                        token_file.display()
                    ))
                })?;
                let token = text.lines().next().unwrap_or("").trim();
                if token.is_empty() {
                    return Err(MssError::Unavailable(format!(
                        "the token file {} is empty",
                        token_file.display()
                    )));
                }
                Ok(request.bearer_auth(token))
            }
            Auth::None | Auth::Certificate { .. } => Ok(request),
        }
    }
}

fn read(path: &Path) -> Result<Vec<u8>, MssError> {
    std::fs::read(path)
        .map_err(|e| MssError::Protocol(format!("cannot read {}: {e}", path.display())))
}

/// Send a request, bounded by `timeout`, mapping transport failures by [`transport`].
pub async fn send(
    request: RequestBuilder,
    timeout: Duration,
) -> Result<reqwest::Response, MssError> {
    request.timeout(timeout).send().await.map_err(transport)
}

/// How long a client may take to connect (TLS included) for calls bounded by `timeout`: half
/// of it, so that a connection that hangs fails as a connect error (nothing was sent) before
/// the call's own timeout, which [`submission_transport`] reads as "sent, not answered".
pub fn connect_timeout(timeout: Duration) -> Duration {
    timeout / 2
}

/// A transport failure: the MSS could not be reached (`Unreachable`: no connection, nothing
/// sent), or the exchange broke off (`Unavailable`). The message names the call's URL with its
/// secrets hidden ([`crate::redact::urls`]).
pub fn transport(e: reqwest::Error) -> MssError {
    if e.is_connect() {
        MssError::Unreachable(shown(&e))
    } else {
        MssError::Unavailable(shown(&e))
    }
}

/// A reqwest error as it may be shown: reqwest's text names the URL, query string included.
pub fn shown(e: &reqwest::Error) -> String {
    crate::redact::urls(&e.to_string()).into_owned()
}

/// Send a submission, bounded by `timeout`. Unlike [`send`], a timeout after the connection
/// was made is an `Unknown` outcome: the MSS may have taken what it was sent without answering
/// in time, so the broker resends it with the same key and a cancel meanwhile goes to the MSS.
pub async fn send_submission(
    request: RequestBuilder,
    timeout: Duration,
) -> Result<reqwest::Response, MssError> {
    request
        .timeout(timeout)
        .send()
        .await
        .map_err(submission_transport)
}

/// A transport failure of a submission: as [`transport`], except that a timeout after the
/// connection was made is sent and not answered in time (`Unknown`).
pub fn submission_transport(e: reqwest::Error) -> MssError {
    if e.is_timeout() && !e.is_connect() {
        MssError::Unknown(format!(
            "no answer in time, the call may have taken effect: {}",
            shown(&e)
        ))
    } else {
        transport(e)
    }
}

/// An MSS answer read whole (within [`MAX_ANSWER_BYTES`]): its status and body.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: StatusCode,
    pub body: Vec<u8>,
}

impl Answer {
    /// Read `resp`'s body; `Unknown` when it is too large or cannot be read.
    pub async fn read(resp: reqwest::Response) -> Result<Answer, MssError> {
        let status = resp.status();
        let body = answer::read_body(resp, MAX_ANSWER_BYTES).await?;
        Ok(Answer { status, body })
    }

    /// The body as `T`; a body that does not parse is an `Unknown` outcome.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, MssError> {
        serde_json::from_slice(&self.body).map_err(|e| {
            MssError::Unknown(format!(
                "{}: unreadable answer ({e}): {}",
                self.status,
                self.text()
            ))
        })
    }

    /// The body as text, clipped for messages and logs.
    pub fn text(&self) -> String {
        let text = String::from_utf8_lossy(&self.body);
        answer::clip(text.trim(), MAX_MESSAGE_CHARS).into_owned()
    }

    /// The message of the server's own JSON error body (`error`, FTS3's `message` or
    /// `http_message`, RFC 7807's `detail` or `title`), clipped; `None` when the body is not
    /// one (a proxy's page).
    pub fn server_error(&self) -> Option<String> {
        error_message(&self.body).map(|m| answer::clip(&m, MAX_MESSAGE_CHARS).into_owned())
    }

    /// Whether this is the server itself saying it has no such thing (404 with its JSON error
    /// body), as opposed to a proxy's 404 page.
    pub fn not_found(&self) -> bool {
        self.status == StatusCode::NOT_FOUND && self.server_error().is_some()
    }

    /// The error an unsuccessful answer means: 5xx, 408 and 429 are `Unavailable`, and so are
    /// 401, 403 and 419 (logged at warn: an operator must renew the credentials); another
    /// refusal is `Rejected` only when the server's own JSON error says so, otherwise (a
    /// proxy's page, anything unreadable) the outcome is `Unknown`.
    pub fn error(&self) -> MssError {
        let status = self.status;
        if is_credential_refusal(status) {
            let message = self.server_error().unwrap_or_else(|| self.text());
            tracing::warn!(
                status = status.as_u16(),
                server = %message,
                "the MSS refuses the credentials: renew them (token, certificate or FTS3 \
                 delegation); the call is retried"
            );
            return MssError::Unavailable(format!("{status}: {message} (credentials to renew)"));
        }
        if status.is_server_error()
            || status == StatusCode::TOO_MANY_REQUESTS
            || status == StatusCode::REQUEST_TIMEOUT
        {
            let message = self.server_error().unwrap_or_else(|| self.text());
            return MssError::Unavailable(format!("{status}: {message}"));
        }
        match self.server_error() {
            Some(message) if status.is_client_error() => {
                MssError::Rejected(format!("{status}: {message}"))
            }
            _ => MssError::Unknown(format!(
                "{status} without the server's error: {}",
                self.text()
            )),
        }
    }
}

/// The body of a successful answer, or the error its status says.
pub async fn decode<T: serde::de::DeserializeOwned>(
    resp: reqwest::Response,
) -> Result<T, MssError> {
    let answer = Answer::read(resp).await?;
    if !answer.status.is_success() {
        return Err(answer.error());
    }
    answer.json()
}

/// Success with nothing to read, or the error the status says.
pub async fn no_content(resp: reqwest::Response) -> Result<(), MssError> {
    if resp.status().is_success() {
        return Ok(());
    }
    Err(status_error(resp).await)
}

/// The error an unsuccessful answer means (see [`Answer::error`]).
pub async fn status_error(resp: reqwest::Response) -> MssError {
    match Answer::read(resp).await {
        Ok(answer) => answer.error(),
        Err(e) => e,
    }
}

fn error_message(body: &[u8]) -> Option<String> {
    if let Ok(b) = serde_json::from_slice::<ErrorBody>(body) {
        return Some(b.error);
    }
    let v = serde_json::from_slice::<serde_json::Value>(body).ok()?;
    ["message", "http_message", "detail", "title"]
        .iter()
        .find_map(|field| v.get(field).and_then(|m| m.as_str()))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: &str) -> Answer {
        Answer {
            status: StatusCode::from_u16(status).unwrap(),
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn error_messages_come_from_each_servers_own_field() {
        assert_eq!(
            error_message(br#"{"error": "no such transfer"}"#).as_deref(),
            Some("no such transfer")
        );
        assert_eq!(
            error_message(br#"{"status": "400 Bad Request", "message": "Missing path"}"#)
                .as_deref(),
            Some("Missing path")
        );
        assert_eq!(error_message(b" plain text \n"), None);
    }

    #[test]
    fn only_the_servers_own_refusal_refuses() {
        let refused = answer(422, r#"{"error": "bad transfer"}"#).error();
        assert!(matches!(&refused, MssError::Rejected(m) if m.contains("bad transfer")));
        let proxy = answer(404, "<html><body>Not Found</body></html>");
        assert!(
            matches!(proxy.error(), MssError::Unknown(_)),
            "{:?}",
            proxy.error()
        );
        assert!(!proxy.not_found());
        assert!(answer(404, r#"{"error": "no such transfer"}"#).not_found());
        assert!(matches!(
            answer(503, "down").error(),
            MssError::Unavailable(_)
        ));
        let garbled = answer(200, "{\"mss_id\": ").json::<crate::protocol::SubmitResponse>();
        assert!(matches!(garbled, Err(MssError::Unknown(_))), "{garbled:?}");
    }

    #[test]
    fn credential_refusals_are_retried_with_the_servers_text() {
        for (status, body) in [
            (
                419,
                r#"{"status": "419 Authentication Timeout", "message": "The delegated credentials has less than one hour left (abc)"}"#,
            ),
            (401, r#"{"error": "token expired"}"#),
            (403, "<html>Forbidden</html>"),
        ] {
            let e = answer(status, body).error();
            assert!(
                matches!(&e, MssError::Unavailable(m) if m.starts_with(&status.to_string())
                    && m.contains("credentials to renew")),
                "{status}: {e:?}"
            );
        }
        let MssError::Unavailable(m) =
            answer(419, r#"{"message": "less than one hour left"}"#).error()
        else {
            panic!("retryable")
        };
        assert!(m.contains("less than one hour left"), "{m}");
        assert!(matches!(
            answer(400, r#"{"message": "bad"}"#).error(),
            MssError::Rejected(_)
        ));
    }

    #[test]
    fn a_long_error_body_is_clipped() {
        let long = format!(r#"{{"error": "{}"}}"#, "x\\n".repeat(100_000));
        let MssError::Rejected(m) = answer(422, &long).error() else {
            panic!("a refusal")
        };
        assert!(m.len() < 400, "{} chars", m.len());
        assert!(m.ends_with("bytes cut]"), "{m}");
    }

    #[test]
    fn bearer_needs_a_token_file_and_certificates_need_both_files() {
        let dir = std::env::temp_dir();
        let mut issues = Vec::new();
        RawAuth::default().validate(&dir, &mut issues);
        assert_eq!(issues[0].key, "token_file", "{issues:?}");
        let mut issues = Vec::new();
        RawAuth {
            method: "certificate".into(),
            certificate: Some("no-such-cert.pem".into()),
            ..RawAuth::default()
        }
        .validate(&dir, &mut issues);
        let keys: Vec<&str> = issues.iter().map(|i| i.key.as_str()).collect();
        assert_eq!(keys, ["certificate", "certificate"], "{issues:?}");
        assert!(issues[0].message.contains("not a readable file"));
        let mut issues = Vec::new();
        RawAuth {
            method: "kerberos".into(),
            ..RawAuth::default()
        }
        .validate(&dir, &mut issues);
        assert_eq!(issues[0].key, "method");
    }
}

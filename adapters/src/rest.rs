//! What the REST adapters share: authentication (a bearer token read from a file at every call,
//! so an external refresher can rotate it, or an X.509 client certificate), the reqwest client,
//! and how an HTTP answer maps to [`MssError`]: 5xx, 408 and 429 are `Unavailable` (try again
//! later), any other refusal is `Rejected`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::{Client, RequestBuilder, StatusCode};
use serde::Deserialize;

use crate::protocol::ErrorBody;
use crate::MssError;

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
    /// A client with the configured identity and CA bundle.
    pub fn client(&self) -> Result<Client, MssError> {
        let mut builder = Client::builder().pool_max_idle_per_host(16);
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
            .map_err(|e| MssError::Protocol(format!("cannot build the http client: {e}")))
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

/// Send a request, bounded by `timeout`, mapping transport failures to `Unavailable`.
pub async fn send(
    request: RequestBuilder,
    timeout: Duration,
) -> Result<reqwest::Response, MssError> {
    request.timeout(timeout).send().await.map_err(transport)
}

/// A transport failure: the MSS could not be reached.
pub fn transport(e: reqwest::Error) -> MssError {
    MssError::Unavailable(e.to_string())
}

/// The body of a successful answer, or the error its status says.
pub async fn decode<T: serde::de::DeserializeOwned>(
    resp: reqwest::Response,
) -> Result<T, MssError> {
    if !resp.status().is_success() {
        return Err(status_error(resp).await);
    }
    resp.json::<T>()
        .await
        .map_err(|e| MssError::Protocol(format!("bad answer: {e}")))
}

/// Success with nothing to read, or the error the status says.
pub async fn no_content(resp: reqwest::Response) -> Result<(), MssError> {
    if resp.status().is_success() {
        return Ok(());
    }
    Err(status_error(resp).await)
}

/// The error an unsuccessful answer means: its status and the message in its body (the
/// `error` field of a JSON body, FTS3's `message`, or the text).
pub async fn status_error(resp: reqwest::Response) -> MssError {
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    let message = error_message(&text);
    let message = format!("{status}: {message}");
    if status.is_server_error()
        || status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::REQUEST_TIMEOUT
    {
        MssError::Unavailable(message)
    } else {
        MssError::Rejected(message)
    }
}

fn error_message(text: &str) -> String {
    if let Ok(b) = serde_json::from_str::<ErrorBody>(text) {
        return b.error;
    }
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(text) {
        for field in ["message", "detail", "title"] {
            if let Some(m) = v.get(field).and_then(|m| m.as_str()) {
                return m.to_string();
            }
        }
    }
    text.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_come_from_each_servers_own_field() {
        assert_eq!(
            error_message(r#"{"error": "no such transfer"}"#),
            "no such transfer"
        );
        assert_eq!(
            error_message(r#"{"status": "400 Bad Request", "message": "Missing path"}"#),
            "Missing path"
        );
        assert_eq!(error_message(" plain text \n"), "plain text");
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

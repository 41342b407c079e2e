//! TLS to PostgreSQL: libpq's `sslmode=verify-full` with `sslrootcert=<CA file>` (and, for a
//! client certificate, `sslcert` and `sslkey`), in either form of the string. tokio-postgres
//! reads only `sslmode` `disable`, `prefer` and `require`, and neither file, so these four
//! settings are taken out of the string before it parses the rest; the parsed settings then
//! get `sslmode=require` (set on them, not written into the string), so that tokio-postgres
//! never falls back to plain text, and the connections are made through a rustls connector (`tokio-postgres-rustls`) that checks the
//! server's certificate against the given CA and its name against the host connected to.
//!
//! Only `verify-full` is taken: `require` and `verify-ca` encrypt without checking whom the
//! broker talks to (a man in the middle would be given the password and the ledger), and
//! `allow` may not encrypt at all; each is refused naming what to give instead. A CA file,
//! certificate or key that cannot be read is refused when the string is parsed (so at
//! `check-config` and at start), naming the setting and the path, never a value of the string.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::DatabaseUrlError;

/// The TLS of a connection string that asked for `sslmode=verify-full`.
#[derive(Clone)]
pub struct PgTls {
    connector: MakeRustlsConnect,
}

impl PgTls {
    /// The connector tokio-postgres (and the blocking client) connects through.
    pub fn connector(&self) -> MakeRustlsConnect {
        self.connector.clone()
    }
}

/// The TLS settings taken out of a string.
#[derive(Debug, Default, PartialEq, Eq)]
struct TlsKeys {
    mode: Option<String>,
    root_cert: Option<String>,
    cert: Option<String>,
    key: Option<String>,
}

const TAKEN: [&str; 4] = ["sslmode", "sslrootcert", "sslcert", "sslkey"];

/// `text` without its TLS settings, and the TLS they asked for. The caller makes a string
/// with TLS require it in the parsed settings (`ssl_mode(Require)`), never by adding text to
/// the string, whose escapes could swallow it.
pub(super) fn take_tls(text: &str) -> Result<(String, Option<PgTls>), DatabaseUrlError> {
    let (rest, keys) = if is_url(text) {
        take_from_url(text)
    } else {
        take_from_settings(text)?
    };
    Ok((rest, tls_of(keys)?))
}

fn is_url(text: &str) -> bool {
    text.starts_with("postgresql://") || text.starts_with("postgres://")
}

fn tls_of(keys: TlsKeys) -> Result<Option<PgTls>, DatabaseUrlError> {
    let refused = |what: &str| Err(DatabaseUrlError::Tls(what.to_string()));
    match keys.mode.as_deref() {
        Some("verify-full") => {}
        Some(mode @ ("require" | "verify-ca" | "allow")) => {
            return refused(&format!(
                "sslmode={mode} does not check the server's name (the broker would give its \
                 password and ledger to whoever answers): give sslmode=verify-full with \
                 sslrootcert=<the CA file>"
            ))
        }
        Some("disable" | "prefer") | None => {
            if keys.root_cert.is_some() || keys.cert.is_some() || keys.key.is_some() {
                return refused(
                    "sslrootcert, sslcert and sslkey are used only with sslmode=verify-full: \
                     give it, or leave them out",
                );
            }
            return Ok(None);
        }
        Some(_) => {
            return refused(
                "sslmode must be disable, prefer (both: no TLS, loopback or unix socket only) \
                 or verify-full",
            )
        }
    }
    let Some(root) = keys.root_cert else {
        return refused("sslmode=verify-full needs sslrootcert=<the CA file the server's certificate is checked against>");
    };
    let roots = read_roots(Path::new(&root))?;
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
    .map_err(|e| DatabaseUrlError::Tls(format!("the TLS versions: {e}")))?
    .with_root_certificates(roots);
    let config = match (keys.cert, keys.key) {
        (None, None) => builder.with_no_client_auth(),
        (Some(cert), Some(key)) => {
            let chain = read_certs(Path::new(&cert), "sslcert")?;
            let key = read_key(Path::new(&key))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| DatabaseUrlError::Tls(format!("sslcert and sslkey: {e}")))?
        }
        _ => return refused("sslcert and sslkey go together: give both, or neither"),
    };
    Ok(Some(PgTls {
        connector: MakeRustlsConnect::new(config),
    }))
}

fn read_roots(path: &Path) -> Result<rustls::RootCertStore, DatabaseUrlError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in read_certs(path, "sslrootcert")? {
        roots
            .add(cert)
            .map_err(|e| file_error("sslrootcert", path, e))?;
    }
    Ok(roots)
}

fn read_certs(path: &Path, key: &str) -> Result<Vec<CertificateDer<'static>>, DatabaseUrlError> {
    if path.to_str() == Some("system") {
        return Err(DatabaseUrlError::Tls(format!(
            "{key}=system is not taken: give the file of the CA that signed the server's certificate"
        )));
    }
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| file_error(key, path, format!("cannot read PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(file_error(key, path, "holds no PEM certificate"));
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, DatabaseUrlError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| {
        file_error(
            "sslkey",
            path,
            format!("cannot read a PEM private key: {e}"),
        )
    })
}

fn file_error(key: &str, path: &Path, message: impl std::fmt::Display) -> DatabaseUrlError {
    DatabaseUrlError::Tls(format!("{key} `{}`: {message}", path.display()))
}

/// The URL form: the TLS settings are parameters of the query, which begins at the first `?`
/// after the credentials (a password may hold a raw `?`; it ends at the first `@`, as
/// tokio-postgres reads it).
fn take_from_url(text: &str) -> (String, TlsKeys) {
    let after_scheme = text.find("://").map_or(0, |i| i + 3);
    let from = text[after_scheme..]
        .find('@')
        .map_or(after_scheme, |i| after_scheme + i + 1);
    let Some(at) = text[from..].find('?').map(|i| from + i) else {
        return (text.to_string(), TlsKeys::default());
    };
    let (head, query) = (&text[..at], &text[at + 1..]);
    let mut keys = TlsKeys::default();
    let mut kept = Vec::new();
    for pair in query.split('&') {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let name = decode(name);
        if TAKEN.contains(&name.as_str()) {
            keys.set(&name, decode(value));
        } else {
            kept.push(pair);
        }
    }
    match kept.is_empty() {
        true => (head.to_string(), keys),
        false => (format!("{head}?{}", kept.join("&")), keys),
    }
}

fn decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// The key=value form: whitespace-separated `key = value` pairs, a value quoted with `'` or
/// not, `\` escaping the next character (libpq's rules). Pairs this module takes are cut out
/// of the text; anything else it cannot read is left for tokio-postgres to refuse. A quote
/// left open in a value this module takes is refused here, quoting nothing: what follows it
/// may be a password.
fn take_from_settings(text: &str) -> Result<(String, TlsKeys), DatabaseUrlError> {
    let mut keys = TlsKeys::default();
    let mut rest = String::new();
    let bytes: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && bytes[i].is_whitespace() {
            i += 1;
        }
        let name_start = i;
        while i < bytes.len() && bytes[i] != '=' && !bytes[i].is_whitespace() {
            i += 1;
        }
        let name: String = bytes[name_start..i].iter().collect();
        while i < bytes.len() && bytes[i].is_whitespace() {
            i += 1;
        }
        let mut value = String::new();
        if i < bytes.len() && bytes[i] == '=' {
            i += 1;
            while i < bytes.len() && bytes[i].is_whitespace() {
                i += 1;
            }
            match read_value(&bytes, i, &mut value) {
                Some(end) => i = end,
                None if TAKEN.contains(&name.as_str()) => {
                    return Err(DatabaseUrlError::Tls(format!(
                        "{name}: a quoted value is never closed (a `'` without its pair)"
                    )))
                }
                // Not ours: tokio-postgres refuses the rest as it is.
                None => {
                    rest.extend(&bytes[start..]);
                    break;
                }
            }
        }
        if TAKEN.contains(&name.as_str()) {
            keys.set(&name, value);
        } else {
            rest.extend(&bytes[start..i]);
        }
    }
    Ok((rest.trim().to_string(), keys))
}

/// One value from `at`: quoted or up to whitespace; the index after it, or None for a quote
/// never closed.
fn read_value(chars: &[char], mut at: usize, value: &mut String) -> Option<usize> {
    let quoted = chars.get(at) == Some(&'\'');
    if quoted {
        at += 1;
    }
    while let Some(&c) = chars.get(at) {
        match c {
            '\\' => {
                if let Some(&next) = chars.get(at + 1) {
                    value.push(next);
                }
                at += 2;
                continue;
            }
            '\'' if quoted => return Some(at + 1),
            c if c.is_whitespace() && !quoted => return Some(at),
            c => value.push(c),
        }
        at += 1;
    }
    (!quoted).then_some(chars.len())
}

impl TlsKeys {
    fn set(&mut self, name: &str, value: String) {
        let slot = match name {
            "sslmode" => &mut self.mode,
            "sslrootcert" => &mut self.root_cert,
            "sslcert" => &mut self.cert,
            _ => &mut self.key,
        };
        *slot = Some(value);
    }
}

/// The string without its TLS settings, and those settings, as taken (for the tests).
#[cfg(test)]
pub(super) fn taken_keys(text: &str) -> (String, Vec<(String, String)>) {
    let (rest, k) = if is_url(text) {
        take_from_url(text)
    } else {
        take_from_settings(text).expect("readable")
    };
    let pairs = [
        ("sslmode", k.mode),
        ("sslrootcert", k.root_cert),
        ("sslcert", k.cert),
        ("sslkey", k.key),
    ];
    let pairs = pairs
        .into_iter()
        .filter_map(|(n, v)| v.map(|v| (n.to_string(), v)))
        .collect();
    (rest, pairs)
}

//! TLS for `serve` (rustls with the aws-lc-rs provider reqwest already links): the server's
//! certificate chain and key, TLS 1.2 and 1.3 only, and the client CAs (`client_ca`: a PEM
//! file, or a directory of hashed CA certificates and CRLs such as
//! `/etc/grid-security/certificates`). The files are read at start and again at every reload
//! ([`TlsSource::prepare`], [`TlsSource::install`]): a handshake takes the material in force
//! when it starts, connections already open keep theirs.
//!
//! Client certificates: the handshake asks for one, does not require it, and checks only that
//! the client holds the key of the certificate it presents; the certificate itself is verified
//! right after the handshake ([`ClientTrust::verify`]: chain to `client_ca`, validity dates,
//! CRLs when given), so a refused certificate is answered with a 401 saying why rather than a
//! bare TLS alert, and a caller presenting none may still use a token. RFC 3820 proxy
//! certificates are refused with a message saying so (see `verify`; over TLS 1.2 they get a
//! bare alert at the handshake).

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{
    CertificateDer, CertificateRevocationListDer, PrivateKeyDer, SubjectPublicKeyInfoDer, UnixTime,
};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig,
    SignatureScheme,
};
use tracing::{info, warn};

use crate::domain::server::TlsSettings;

/// Who is at the other end of a connection, put in every request's extensions: its address
/// and, over TLS with `client_ca`, its verified certificate's subject (or why it was refused).
#[derive(Debug, Clone)]
pub struct Peer {
    pub addr: SocketAddr,
    pub cert: Option<Arc<PeerCert>>,
}

/// Why the TLS files cannot be used; names the key whose file it is.
#[derive(Debug, thiserror::Error)]
#[error("{key} ({path}): {message}")]
pub struct TlsError {
    pub key: &'static str,
    pub path: String,
    pub message: String,
}

fn tls_error(key: &'static str, path: &Path, message: impl fmt::Display) -> TlsError {
    TlsError {
        key,
        path: path.display().to_string(),
        message: message.to_string(),
    }
}

/// A verified client certificate's subject (RFC 4514), or why it was refused.
pub type PeerCert = Result<String, String>;

/// The TLS material of one load of the files.
pub struct TlsMaterial {
    /// The listener's configuration; `None` behind a proxy (plain HTTP, `client_ca` only).
    pub server: Option<Arc<ServerConfig>>,
    /// The client CAs, when `client_ca` is set.
    pub clients: Option<Arc<ClientTrust>>,
}

/// The TLS material in force, replaced by a reload.
#[derive(Clone)]
pub struct TlsSource {
    settings: TlsSettings,
    current: Arc<RwLock<Arc<TlsMaterial>>>,
}

impl TlsSource {
    /// Read the files named by `settings`.
    pub fn load(settings: &TlsSettings) -> Result<TlsSource, TlsError> {
        let material = load_material(settings)?;
        Ok(TlsSource {
            settings: settings.clone(),
            current: Arc::new(RwLock::new(Arc::new(material))),
        })
    }

    /// The material in force now.
    pub fn current(&self) -> Arc<TlsMaterial> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Read the files again (a reload), without putting them in force.
    pub fn prepare(&self) -> Result<TlsMaterial, TlsError> {
        load_material(&self.settings)
    }

    /// Put `material` in force: handshakes from now on use it.
    pub fn install(&self, material: TlsMaterial) {
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(material);
        info!("tls certificate, key and client CAs read again");
    }
}

fn load_material(settings: &TlsSettings) -> Result<TlsMaterial, TlsError> {
    let clients = match &settings.client_ca {
        Some(ca) => Some(Arc::new(ClientTrust::load(ca, &settings.crl)?)),
        None => None,
    };
    let server = match &settings.cert {
        Some((cert, key)) => Some(Arc::new(server_config(cert, key, clients.as_deref())?)),
        None => None,
    };
    Ok(TlsMaterial { server, clients })
}

/// The provider reqwest's rustls links already: one crypto library in the binary.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

fn server_config(
    cert: &Path,
    key: &Path,
    clients: Option<&ClientTrust>,
) -> Result<ServerConfig, TlsError> {
    let chain = read_certs(cert, "server.tls.cert")?;
    let key_der = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| tls_error("server.tls.key", key, format!("no usable private key: {e}")))?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| tls_error("server.tls.cert", cert, e))?;
    let builder = match clients {
        Some(trust) => builder.with_client_cert_verifier(Arc::new(AskForClientCert {
            inner: trust.verifier.clone(),
            algorithms: provider().signature_verification_algorithms,
        })),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(chain, key_der).map_err(|e| {
        tls_error(
            "server.tls.key",
            key,
            format!("does not go with server.tls.cert: {e}"),
        )
    })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

fn read_certs(path: &Path, key: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| tls_error(key, path, format!("cannot read PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(tls_error(key, path, "holds no PEM certificate"));
    }
    Ok(certs)
}

fn read_crls(path: &Path) -> Result<Vec<CertificateRevocationListDer<'static>>, TlsError> {
    let pem = CertificateRevocationListDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| tls_error("server.tls.crl", path, format!("cannot read the CRL: {e}")))?;
    if !pem.is_empty() {
        return Ok(pem);
    }
    let der = std::fs::read(path).map_err(|e| tls_error("server.tls.crl", path, e))?;
    Ok(vec![CertificateRevocationListDer::from(der)])
}

/// The client CAs and CRLs, and the verifier built from them.
pub struct ClientTrust {
    verifier: Arc<dyn ClientCertVerifier>,
}

impl ClientTrust {
    /// `ca`: a PEM file, or a directory of `HASH.N` certificates and `HASH.rN` CRLs; `crls`:
    /// more CRL files.
    pub fn load(ca: &Path, crls: &[PathBuf]) -> Result<ClientTrust, TlsError> {
        let key = "server.tls.client_ca";
        let (certs, mut revoked) = if ca.is_dir() {
            read_ca_dir(ca)?
        } else {
            (read_certs(ca, key)?, Vec::new())
        };
        for crl in crls {
            revoked.extend(read_crls(crl)?);
        }
        let mut roots = RootCertStore::empty();
        let (added, skipped) = roots.add_parsable_certificates(certs);
        if added == 0 {
            return Err(tls_error(key, ca, "holds no usable CA certificate"));
        }
        if skipped > 0 {
            warn!(client_ca = %ca.display(), skipped, "CA certificates that cannot be used were skipped");
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
            .with_crls(revoked)
            .only_check_end_entity_revocation()
            .allow_unknown_revocation_status()
            .allow_unauthenticated()
            .build()
            .map_err(|e| tls_error(key, ca, e))?;
        Ok(ClientTrust { verifier })
    }

    /// Verify a presented chain (leaf first): the subject of a good one, else why not.
    /// An RFC 3820 proxy certificate is refused: its issuer is an end-entity certificate, which
    /// standard path validation does not accept, and accepting it would mean verifying the
    /// proxy chain's own rules (path length, policy language, key usage) too.
    pub fn verify(&self, chain: &[CertificateDer<'_>]) -> PeerCert {
        let Some((leaf, intermediates)) = chain.split_first() else {
            return Err("no client certificate".into());
        };
        if crate::auth::x509::is_proxy(leaf) {
            return Err(
                "RFC 3820 proxy certificates are not accepted: present your user \
                        certificate itself, or a token"
                    .into(),
            );
        }
        self.verifier
            .verify_client_cert(leaf, intermediates, UnixTime::now())
            .map_err(|e| format!("client certificate refused: {}", why(&e)))?;
        crate::auth::x509::subject_of(leaf)
    }

    /// Verify a PEM chain as a TLS proxy forwards it (`X-SSL-Client-Cert`).
    pub fn verify_pem(&self, pem: &[u8]) -> PeerCert {
        let chain = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("the forwarded client certificate is not PEM: {e}"))?;
        self.verify(&chain)
    }
}

/// `HASH.N` certificates and `HASH.rN` CRLs of a hashed CA directory (others are ignored:
/// `.signing_policy`, `.namespaces`, `.pem` copies of the same certificates).
type CaDir = (
    Vec<CertificateDer<'static>>,
    Vec<CertificateRevocationListDer<'static>>,
);

fn read_ca_dir(dir: &Path) -> Result<CaDir, TlsError> {
    let key = "server.tls.client_ca";
    let entries = std::fs::read_dir(dir).map_err(|e| tls_error(key, dir, e))?;
    let (mut certs, mut crls) = (Vec::new(), Vec::new());
    for entry in entries {
        let path = entry.map_err(|e| tls_error(key, dir, e))?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some((hash, suffix)) = name.split_once('.') else {
            continue;
        };
        if hash.len() != 8 || !hash.chars().all(|c| c.is_ascii_hexdigit()) {
            continue;
        }
        let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
        if digits(suffix) {
            match read_certs(&path, key) {
                Ok(c) => certs.extend(c),
                Err(e) => warn!(error = %e, "a CA file of server.tls.client_ca was skipped"),
            }
        } else if suffix.strip_prefix('r').is_some_and(digits) {
            match read_crls(&path) {
                Ok(c) => crls.extend(c),
                Err(e) => warn!(error = %e, "a CRL of server.tls.client_ca was skipped"),
            }
        }
    }
    Ok((certs, crls))
}

/// What a refused certificate's answer says.
fn why(e: &rustls::Error) -> String {
    match e {
        rustls::Error::InvalidCertificate(c) => match c {
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => "expired".into(),
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "not valid yet".into()
            }
            CertificateError::UnknownIssuer => "not issued by a CA of server.tls.client_ca".into(),
            CertificateError::Revoked => "revoked (listed in a CRL)".into(),
            CertificateError::BadSignature => "bad signature".into(),
            other => format!("{other:?}"),
        },
        other => other.to_string(),
    }
}

/// The handshake's client-certificate step: ask (naming the CAs), do not require, accept what
/// is presented and leave its verification to [`ClientTrust::verify`] after the handshake; the
/// client's proof that it holds the certificate's key is still checked here.
#[derive(Debug)]
struct AskForClientCert {
    inner: Arc<dyn ClientCertVerifier>,
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for AskForClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    /// A proxy certificate's critical ProxyCertInfo extension makes webpki refuse to read it,
    /// so its key's proof is checked on the raw key here (TLS 1.3), letting the refusal be a
    /// 401 that says why rather than a bare alert. Over TLS 1.2 a proxy gets the alert.
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        match crate::auth::x509::proxy_public_key(cert) {
            Some(spki) => rustls::crypto::verify_tls13_signature_with_raw_key(
                message,
                &SubjectPublicKeyInfoDer::from(spki),
                dss,
                &self.algorithms,
            ),
            None => self.inner.verify_tls13_signature(message, cert, dss),
        }
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

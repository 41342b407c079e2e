//! Client-certificate authentication for real: the FTS3 stand-in behind TLS that requires a
//! client certificate issued by a test CA. The adapter configured with `method =
//! "certificate"` and the CA as `ca_file` gets its job in; without its certificate, or without
//! trusting the server's CA, it does not reach FTS3 at all; a certificate renewed in place is
//! presented from the next call on.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use mss_adapters::fts3::{Fts3Adapter, RawFts3Config};
use mss_adapters::standin::{Fts3Standin, Plan};
use mss_adapters::{Direction, MssAdapter, MssError, Transfer};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// A TCP listener that completes a TLS handshake (client certificate required) before handing
/// a connection to axum; failed handshakes are dropped.
struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                continue;
            };
            if let Ok(tls) = self.acceptor.accept(tcp).await {
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

/// A certificate authority named `name`.
fn authority(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, name);
    CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap()
}

/// A client certificate issued by `ca`, written (in place) to `dir`'s client.pem and
/// client-key.pem.
fn client_files(dir: &Path, ca: &CertifiedIssuer<'static, KeyPair>) {
    let client_key = KeyPair::generate().unwrap();
    let mut client_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    client_params
        .distinguished_name
        .push(DnType::CommonName, "mssbroker.example.org");
    let client = client_params.signed_by(&client_key, ca).unwrap();
    std::fs::write(dir.join("client.pem"), client.pem()).unwrap();
    std::fs::write(dir.join("client-key.pem"), client_key.serialize_pem()).unwrap();
}

/// PEM files in `dir`: ca.pem, client.pem and client-key.pem; and the server's TLS acceptor.
fn pki(dir: &Path) -> TlsAcceptor {
    let ca = authority("mssbroker test CA");
    client_files(dir, &ca);
    acceptor(dir, &ca)
}

/// The server's TLS acceptor, its certificate and the clients it accepts from `ca` (written to
/// `dir`'s ca.pem).
fn acceptor(dir: &Path, ca: &CertifiedIssuer<'static, KeyPair>) -> TlsAcceptor {
    let server_key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&server_key, ca)
        .unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der().clone()).unwrap();
    let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots))
        .build()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(server_key.serialize_pem().as_bytes()).unwrap();
    let config = rustls::ServerConfig::builder()
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![CertificateDer::from(server.der().to_vec())], key)
        .unwrap();
    TlsAcceptor::from(Arc::new(config))
}

fn adapter(url: &str, dir: &Path, auth: serde_json::Value) -> Fts3Adapter {
    let raw: RawFts3Config = serde_json::from_value(serde_json::json!({
        "url": url,
        "vo": "cms",
        "tape_endpoint": "davs://tape.example.org:2880",
        "read_destination": "davs://disk.example.org:2880/stage",
        "poll_ms": 50,
        "timeout_ms": 5000,
        "auth": auth,
    }))
    .unwrap();
    Fts3Adapter::new(raw.validate(dir, Vec::new()).unwrap(), "tls").unwrap()
}

fn read(key: &str) -> Transfer {
    Transfer {
        key: key.into(),
        attempt: 1,
        file: "/cms/hold/f".into(),
        size_bytes: 1,
        priority: 10,
        volume: None,
        group: "analysis/higgs".into(),
        direction: Direction::Read,
        local_file: None,
        bfid: None,
        position: None,
        offset_bytes: None,
    }
}

#[tokio::test]
async fn a_client_certificate_gets_in_and_nothing_else_does() {
    let dir = tempfile::tempdir().unwrap();
    let acceptor = pki(dir.path());
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", tcp.local_addr().unwrap());
    let standin = Fts3Standin::serve(
        TlsListener { tcp, acceptor },
        url.clone(),
        "cms",
        None,
        Plan {
            queued: Duration::from_secs(60),
            active: Duration::from_secs(60),
        },
    );
    let certified = adapter(
        &url,
        dir.path(),
        serde_json::json!({"method": "certificate", "certificate": "client.pem",
                           "key": "client-key.pem", "ca_file": "ca.pem"}),
    );
    let s = certified.submit(&read("1")).await.unwrap();
    assert_eq!(standin.jobs().len(), 1);
    assert_eq!(standin.jobs()[0].job_id, s.mss_id);
    assert_eq!(
        standin.calls()[0].authorization,
        None,
        "no token: the certificate it is"
    );

    // No client certificate: the handshake fails, FTS3 is unreachable, the broker retries.
    let anonymous = adapter(
        &url,
        dir.path(),
        serde_json::json!({"method": "none", "ca_file": "ca.pem"}),
    );
    assert!(matches!(
        anonymous.submit(&read("2")).await,
        Err(MssError::Unavailable(_))
    ));
    // The server's CA not trusted: refused before anything is sent (no connection made:
    // unreachable, so the broker knows FTS3 holds nothing of it).
    let untrusting = adapter(
        &url,
        dir.path(),
        serde_json::json!({"method": "certificate", "certificate": "client.pem",
                           "key": "client-key.pem"}),
    );
    assert!(matches!(
        untrusting.submit(&read("3")).await,
        Err(MssError::Unreachable(_))
    ));
    // The certified adapter goes on polling its job; what matters is that no other submission
    // got through.
    let submissions = standin
        .calls()
        .iter()
        .filter(|c| c.method == "POST")
        .count();
    assert_eq!(submissions, 1, "only the certified submission arrived");
    assert_eq!(standin.jobs().len(), 1);
}

/// A client certificate renewed in place (as a grid proxy is every few hours) is presented from
/// the next call on, without a restart; a renewal caught half written is not used, and the
/// certificate in use until then goes on being presented. Started with a certificate of a CA
/// the server does not trust, the adapter gets nothing in; once the files hold one of the
/// server's CA, it does. Before, the client built at start was kept for good.
#[tokio::test]
async fn a_certificate_renewed_in_place_is_presented_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let trusted = authority("mssbroker test CA");
    let acceptor = acceptor(dir.path(), &trusted);
    client_files(dir.path(), &authority("a CA the server does not know"));
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", tcp.local_addr().unwrap());
    let standin = Fts3Standin::serve(
        TlsListener { tcp, acceptor },
        url.clone(),
        "cms",
        None,
        Plan {
            queued: Duration::from_secs(60),
            active: Duration::from_secs(60),
        },
    );
    let adapter = adapter(
        &url,
        dir.path(),
        serde_json::json!({"method": "certificate", "certificate": "client.pem",
                           "key": "client-key.pem", "ca_file": "ca.pem"}),
    );
    let refused = adapter.submit(&read("1")).await;
    assert!(refused.is_err(), "{refused:?}");
    assert!(standin.jobs().is_empty());

    // Renewed in place with a certificate of the server's CA: the next call presents it.
    client_files(dir.path(), &trusted);
    let s = adapter.submit(&read("2")).await.unwrap();
    assert_eq!(standin.jobs().len(), 1);
    assert_eq!(standin.jobs()[0].job_id, s.mss_id);

    // A renewal caught half written (the certificate cut short, the key not yet there): the
    // credentials in use are kept, and calls go on.
    let pem = std::fs::read(dir.path().join("client.pem")).unwrap();
    std::fs::write(dir.path().join("client.pem"), &pem[..pem.len() / 2]).unwrap();
    std::fs::remove_file(dir.path().join("client-key.pem")).unwrap();
    let s = adapter.submit(&read("3")).await.unwrap();
    assert_eq!(standin.jobs().len(), 2);
    assert_eq!(standin.jobs()[1].job_id, s.mss_id);
}

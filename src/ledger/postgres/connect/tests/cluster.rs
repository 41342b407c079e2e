//! The ledger's connection against a real server (pg-cluster).

use std::time::{Duration, Instant};

use pg_cluster::Cluster;

use crate::database_url::DatabaseUrl;
use crate::ledger::postgres::connect::{connect, ConnectError};

fn url(s: &str) -> DatabaseUrl {
    DatabaseUrl::parse(s).expect("a valid url")
}

#[test]
fn the_ledgers_connection_is_named_over_tcp_and_over_the_socket() {
    let cluster = Cluster::start().expect("a cluster");
    for settings in [cluster.url(), cluster.socket_settings()] {
        let mut client = connect(&url(&settings)).expect("a connection");
        let row = client
            .query_one(
                "SELECT application_name, client_addr IS NULL FROM pg_stat_activity \
                 WHERE pid = pg_backend_pid()",
                &[],
            )
            .expect("its session");
        assert_eq!(row.get::<_, String>(0), "mssbroker ledger", "{settings}");
        let over_socket = settings.starts_with("host=/");
        assert_eq!(row.get::<_, bool>(1), over_socket, "{settings}");
    }
    let mut named = connect(&url(&format!(
        "{}?application_name=broker-a",
        cluster.url()
    )))
    .expect("a connection");
    let name: String = named
        .query_one("SHOW application_name", &[])
        .expect("shown")
        .get(0);
    assert_eq!(name, "broker-a ledger");
}

/// Password authentication on TCP for every role but the superuser, in force once a wrong
/// password is refused.
fn require_passwords(cluster: &Cluster) {
    let hba = cluster.socket_dir().join("data").join("pg_hba.conf");
    std::fs::write(
        &hba,
        "local all all trust\n\
         host all postgres 127.0.0.1/32 trust\n\
         host all all 127.0.0.1/32 scram-sha-256\n",
    )
    .expect("pg_hba.conf");
    cluster
        .psql("CREATE ROLE broker LOGIN PASSWORD 'right-pw'; SELECT pg_reload_conf()")
        .expect("a role with a password");
}

fn is_auth_refusal(e: &ConnectError) -> bool {
    matches!(e, ConnectError::Connect { source, .. }
        if source.code() == Some(&postgres::error::SqlState::INVALID_PASSWORD))
}

#[test]
fn a_refused_or_failed_connection_never_shows_the_password() {
    let cluster = Cluster::start().expect("a cluster");
    require_passwords(&cluster);
    let secret = "Wr0ng-s3cret-pw";
    let wrong = url(&format!(
        "postgresql://broker:{secret}@127.0.0.1:{}/postgres",
        cluster.port()
    ));
    // The reload is in force once the server refuses the wrong password.
    let deadline = Instant::now() + Duration::from_secs(30);
    let refused = loop {
        match connect(&wrong) {
            Err(e) if is_auth_refusal(&e) => break e,
            other => {
                let other = other.err().map(|e| e.to_string());
                assert!(Instant::now() < deadline, "never refused: {other:?}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    let right = format!(
        "postgresql://broker:right-pw@127.0.0.1:{}/postgres",
        cluster.port()
    );
    connect(&url(&right)).expect("the right password is taken");

    // Nothing listening: a connection error, not an answer from the server.
    let port = cluster.port();
    cluster.stop_immediately().expect("stopped");
    let Err(failed) = connect(&wrong) else {
        panic!("connected with nothing listening")
    };
    for e in [&refused, &failed] {
        let mut shown = vec![e.to_string(), format!("{e:?}")];
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            shown.push(s.to_string());
            shown.push(format!("{s:?}"));
            source = s.source();
        }
        for text in &shown {
            assert!(!text.contains(secret), "the password shown: {text}");
        }
        assert!(
            shown[0].contains(&format!("postgresql://broker@127.0.0.1:{port}/postgres")),
            "{}",
            shown[0]
        );
    }
}

/// A CA and a certificate it signed for `names`, in PEM: (CA certificate, certificate, key).
fn signed_for(names: &[&str]) -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().expect("a key")).expect("a CA");
    let key = KeyPair::generate().expect("a key");
    let names: Vec<String> = names.iter().map(ToString::to_string).collect();
    let cert = CertificateParams::new(names)
        .expect("params")
        .signed_by(&key, &ca)
        .expect("signed");
    (ca.pem(), cert.pem(), key.serialize_pem())
}

/// A cluster serving TLS only, with a certificate for `localhost`, and the file of the CA
/// that signed it (in the directory returned with it).
fn serving_tls() -> (Cluster, tempfile::TempDir, std::path::PathBuf) {
    let cluster = Cluster::start().expect("a cluster");
    let (ca, cert, key) = signed_for(&["localhost"]);
    cluster.serve_tls(&cert, &key).expect("TLS on");
    let files = tempfile::tempdir().expect("a directory");
    let ca_file = files.path().join("ca.pem");
    std::fs::write(&ca_file, ca).expect("written");
    (cluster, files, ca_file)
}

/// `sslmode=verify-full`: the ledger's connection is TLS, the server's certificate checked
/// against `sslrootcert` and its name against the host; another CA, or a host the certificate
/// does not name, is refused, and no error shows the password. The server takes TCP only over
/// TLS here (`hostssl`), so a plain connection is refused by it too.
#[test]
fn with_verify_full_the_ledger_connects_over_tls_and_refuses_a_server_it_cannot_verify() {
    let (cluster, files, ca_file) = serving_tls();
    let (other_ca, _, _) = signed_for(&["localhost"]);
    let other_file = files.path().join("other.pem");
    std::fs::write(&other_file, other_ca).expect("written");
    let port = cluster.port();
    let with = |host: &str, ca: &std::path::Path| {
        url(&format!(
            "postgresql://postgres:pw-not-shown@{host}:{port}/postgres?sslmode=verify-full&sslrootcert={}",
            ca.display()
        ))
    };

    let mut client = connect(&with("localhost", &ca_file)).expect("a TLS connection");
    let over_tls: bool = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .expect("its session")
        .get(0);
    assert!(over_tls, "the ledger's session is not TLS");

    for (refused, why) in [
        (with("localhost", &other_file), "another CA"),
        (
            with("127.0.0.1", &ca_file),
            "a name the certificate does not hold",
        ),
        (url(&cluster.url()), "plain text"),
    ] {
        let Err(e) = connect(&refused) else {
            panic!("{why}: connected");
        };
        let e = e.to_string();
        assert!(!e.contains("pw-not-shown"), "{why}: {e}");
        assert!(e.contains(&format!(":{port}/postgres")), "{why}: {e}");
    }
}

/// The leadership's asynchronous connection takes the same TLS.
#[tokio::test]
async fn the_asynchronous_connection_is_tls_too() {
    let (cluster, _files, ca_file) = serving_tls();
    let url = url(&format!(
        "host=localhost port={} user=postgres dbname=postgres sslmode=verify-full sslrootcert={}",
        cluster.port(),
        ca_file.display()
    ));
    let (client, _driver) = url.connect_async().await.expect("a TLS connection");
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .expect("its session");
    assert!(row.get::<_, bool>(0), "the session is not TLS");
}

/// The role's `idle_session_timeout` (docs/ha.md: it ends a frozen leader's leadership session)
/// does not end the ledger's own idle connections: one opened beside a plain session of the
/// same role is still answering once the server has ended that session for idling.
#[test]
fn the_ledgers_connection_outlives_the_roles_idle_session_timeout() {
    let cluster = Cluster::start().expect("a cluster");
    cluster
        .psql("ALTER ROLE postgres SET idle_session_timeout = '1s'")
        .expect("the role's timeout");
    let mut ledger = connect(&url(&cluster.url())).expect("a ledger connection");
    let mut plain = postgres::Client::connect(&cluster.url(), postgres::NoTls).expect("a session");
    let shown = |c: &mut postgres::Client| -> String {
        c.query_one("SHOW idle_session_timeout", &[])
            .expect("shown")
            .get(0)
    };
    assert_eq!(shown(&mut plain), "1s", "the role's setting is in force");
    assert_eq!(shown(&mut ledger), "0", "the ledger's session is exempt");
    let pid: i32 = plain
        .query_one("SELECT pg_backend_pid()", &[])
        .expect("its pid")
        .get(0);
    // Wait for the server to end the plain session, looking from outside (a query on it would
    // make it busy again); the ledger's session idles as long.
    let deadline = Instant::now() + Duration::from_secs(30);
    let alive = format!("SELECT count(*) FROM pg_stat_activity WHERE pid = {pid}");
    while cluster.psql(&alive).expect("pg_stat_activity") != "0" {
        assert!(
            Instant::now() < deadline,
            "the plain session was never ended"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        shown(&mut ledger),
        "0",
        "the ledger's idle session still answers"
    );
}

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

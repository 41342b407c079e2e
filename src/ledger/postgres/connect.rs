//! The ledger's connection to PostgreSQL: a blocking [`postgres::Client`] (the writer is a plain
//! thread, as on SQLite), made from a checked [`DatabaseUrl`] with its timeouts and keepalives
//! (a dead server or network fails the writer's statements within seconds), named
//! `"<application_name> ledger"` in `pg_stat_activity` (beside the leadership's session).
//!
//! TLS when the string asks for `sslmode=verify-full` (the server's certificate and name
//! checked against `sslrootcert`); otherwise, as `serve` refuses plain HTTP beyond loopback,
//! the ledger connects only to loopback addresses (`localhost`, 127.0.0.0/8, `::1`) and unix
//! sockets, and refuses any other host with an error naming `database.url` before anything is
//! sent: the broker's queries, and its password if it has one, never cross a network in clear
//! text.
//!
//! Every error shows the URL as `DatabaseUrl` shows it: never the password.

use postgres::Client;

use crate::database_url::{BeyondLoopback, DatabaseUrl};

/// Why the ledger has no connection.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(transparent)]
    PlainTextBeyondLoopback(#[from] BeyondLoopback),
    #[error("connecting to {url}: {source}")]
    Connect {
        url: String,
        #[source]
        source: postgres::Error,
    },
}

/// A ledger connection to `url` (refused, before connecting, beyond loopback), exempt from
/// the role's `idle_session_timeout` (see [`NO_IDLE_SESSION_TIMEOUT`]).
pub fn connect(url: &DatabaseUrl) -> Result<Client, ConnectError> {
    url.only_loopback()?;
    let mut config = postgres::Config::from(url.config().clone());
    let name = url.config().get_application_name().unwrap_or("mssbroker");
    config.application_name(&format!("{name} ledger"));
    let failed = |source| ConnectError::Connect {
        url: url.to_string(),
        source,
    };
    let mut client = url.connect_blocking(&config).map_err(failed)?;
    client
        .batch_execute(NO_IDLE_SESSION_TIMEOUT)
        .map_err(failed)?;
    Ok(client)
}

/// `idle_session_timeout` off for this session. docs/ha.md asks for it on the broker's role,
/// so that the server ends a *frozen* leader's leadership session (and frees the lock); the
/// ledger's own connections are idle whenever the broker is (the writer's between groups, the
/// read pool's between reads), and a leader's connection ended under it would leave its writer
/// failing every group. They hold no lock while idle (the fence's row lock lives only inside a
/// transaction, which `idle_in_transaction_session_timeout` still ends), so only the
/// leadership session needs the timeout. The setting exists from PostgreSQL 14.
const NO_IDLE_SESSION_TIMEOUT: &str = "DO $$ BEGIN \
    IF current_setting('server_version_num')::int >= 140000 THEN \
        SET idle_session_timeout = 0; \
    END IF; \
    END $$";

#[cfg(test)]
mod tests {
    /// Against a real server.
    mod cluster;

    use super::*;

    fn url(s: &str) -> DatabaseUrl {
        DatabaseUrl::parse(s).expect("a valid url")
    }

    #[test]
    fn loopback_addresses_and_sockets_are_taken() {
        for ok in [
            "postgresql://broker@127.0.0.1:5432/mss",
            "postgresql://broker@127.8.9.1/mss",
            "postgresql://broker@[::1]:5432/mss",
            "postgresql://broker@localhost/mss",
            "postgresql://broker@LocalHost,127.0.0.1/mss",
            "host=/run/postgresql user=broker dbname=mss",
            "postgresql://broker@%2Frun%2Fpostgresql/mss",
            "host=db.example.org hostaddr=127.0.0.1 user=broker dbname=mss",
        ] {
            assert!(url(ok).only_loopback().is_ok(), "{ok}");
        }
    }

    #[test]
    fn any_other_host_is_refused_naming_the_key_and_host() {
        for (bad, host) in [
            (
                "postgresql://broker:pw@db.example.org/mss",
                "db.example.org",
            ),
            ("postgresql://broker@127.0.0.1,10.0.0.7/mss", "10.0.0.7"),
            ("host=192.168.1.5 user=broker dbname=mss", "192.168.1.5"),
            ("postgresql://broker@[2001:db8::1]/mss", "2001:db8::1"),
            (
                "host=localhost hostaddr=10.1.1.1 user=broker dbname=mss",
                "10.1.1.1",
            ),
        ] {
            let refused = url(bad).only_loopback().expect_err(bad);
            let shown = refused.to_string();
            assert!(
                shown.starts_with("database.url:") && shown.contains(host),
                "{shown}"
            );
            assert!(!shown.contains("pw@"), "{shown}");
            // connect() refuses the same before any connection is tried.
            assert!(matches!(
                connect(&url(bad)),
                Err(ConnectError::PlainTextBeyondLoopback(..))
            ));
        }
    }
}

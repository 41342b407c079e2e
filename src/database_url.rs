//! Where a PostgreSQL database is (issue 42): a libpq connection string, as a URL
//! (`postgresql://user@host:port/db?target_session_attrs=read-write`, several hosts as
//! `host1:5432,host2:5432`) or as key=value settings (`host=/run/postgresql user=broker
//! dbname=mss`, a unix socket's directory as the host), parsed by tokio-postgres's `Config`,
//! checked for what the broker needs, and given the connection timeouts a leader needs to learn
//! of a dead peer or server within seconds (below) where the string sets none of its own.
//!
//! It is shown (Display, Debug, every error) as `postgresql://user@hosts/dbname`: never the
//! password nor any other setting of the query part, whichever way the string gave them.
//!
//! Without TLS it may name only this machine (loopback, a unix socket): [`DatabaseUrl::only_loopback`].
//! With `sslmode=verify-full` and `sslrootcert` (the `tls` module) it may name any host, the
//! server's certificate and name checked: how brokers on two hosts reach one database.

use std::fmt;
use std::time::Duration;

use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};
use tokio_postgres::config::Host;
use tokio_postgres::Config;

/// Connecting gives up after this (per host: the next host of several is tried).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Unacknowledged data on a connection fails it after this (`TCP_USER_TIMEOUT`): a server or
/// network gone dead while the broker writes is noticed within this long.
pub const TCP_USER_TIMEOUT: Duration = Duration::from_secs(10);
/// TCP keepalives on an idle connection: the first probe after `KEEPALIVES_IDLE`, then every
/// `KEEPALIVES_INTERVAL`, the connection failed after `KEEPALIVES_RETRIES` unanswered ones
/// (8 s in all), for a connection that only waits (a standby's, between heartbeats).
pub const KEEPALIVES_IDLE: Duration = Duration::from_secs(5);
pub const KEEPALIVES_INTERVAL: Duration = Duration::from_secs(1);
pub const KEEPALIVES_RETRIES: u32 = 3;
/// The longest `tcp_user_timeout` taken: tokio-postgres reads the setting in seconds where
/// libpq reads milliseconds, so a libpq string's `tcp_user_timeout=10000` (10 s) would be
/// nearly three hours here; a value above this is refused as such a slip.
pub const MAX_TCP_USER_TIMEOUT_SECS: u64 = 600;
/// tokio-postgres's `keepalives_idle` when the string sets none (it has no "unset").
const LIBRARY_KEEPALIVES_IDLE: Duration = Duration::from_secs(2 * 60 * 60);

/// A checked PostgreSQL connection string; shown without its password or query.
#[derive(Clone)]
pub struct DatabaseUrl {
    config: Config,
    tls: Option<PgTls>,
}

/// What is wrong with a connection string (never quoting a value from it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DatabaseUrlError {
    #[error("database url: {0}")]
    Unreadable(String),
    #[error("database url: no host (give `host:port` in the URL or `host=` as a host name or a unix socket's directory)")]
    NoHost,
    #[error("database url: no user (give `user@` in the URL or `user=`)")]
    NoUser,
    #[error("database url: no database name (give `/dbname` in the URL or `dbname=`)")]
    NoDatabase,
    #[error(
        "database url: {hosts} hosts but {ports} ports (give one port for all or one per host)"
    )]
    PortsDoNotMatchHosts { hosts: usize, ports: usize },
    #[error("database url: tcp_user_timeout={seconds} is read as seconds (libpq reads milliseconds): give at most {MAX_TCP_USER_TIMEOUT_SECS} seconds, or leave it out for the broker's {TCP_USER_TIMEOUT:?}")]
    TcpUserTimeoutInMilliseconds { seconds: u64 },
    #[error("database url: {0}")]
    Tls(String),
}

impl DatabaseUrl {
    /// Parse and check `text`; see the module's documentation for the forms.
    pub fn parse(text: &str) -> Result<DatabaseUrl, DatabaseUrlError> {
        let (rest, tls) = tls::take_tls(text)?;
        let mut config: Config = rest.parse().map_err(|e| unreadable(&e))?;
        check(&config)?;
        if tls.is_some() {
            if config
                .get_hosts()
                .iter()
                .any(|h| matches!(h, Host::Unix(_)))
            {
                return Err(DatabaseUrlError::Tls(
                    "sslmode=verify-full with a unix socket's directory as a host: PostgreSQL \
                     offers no TLS on its socket; give TCP hosts, or leave TLS out for a socket"
                        .to_string(),
                ));
            }
            config.ssl_mode(tokio_postgres::config::SslMode::Require);
        }
        Ok(DatabaseUrl {
            config: with_timeouts(config),
            tls,
        })
    }

    /// The TLS the string asked for (`sslmode=verify-full`), or None: plain text, which
    /// [`DatabaseUrl::only_loopback`] allows only to this machine.
    pub fn tls(&self) -> Option<&PgTls> {
        self.tls.as_ref()
    }

    /// A connection through tokio-postgres (TLS or not, as the string asked), its driver
    /// spawned on the current runtime; the driver's handle ends when the connection does.
    pub async fn connect_async(
        &self,
    ) -> Result<(tokio_postgres::Client, tokio::task::JoinHandle<()>), tokio_postgres::Error> {
        fn drive<F>(connection: F) -> tokio::task::JoinHandle<()>
        where
            F: std::future::Future<Output = Result<(), tokio_postgres::Error>> + Send + 'static,
        {
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(error = %e, "a PostgreSQL connection ended");
                }
            })
        }
        match &self.tls {
            Some(tls) => {
                let (client, connection) = self.config.connect(tls.connector()).await?;
                Ok((client, drive(connection)))
            }
            None => {
                let (client, connection) = self.config.connect(tokio_postgres::NoTls).await?;
                Ok((client, drive(connection)))
            }
        }
    }

    /// A blocking connection (the ledger's) with `config` (this string's, perhaps renamed),
    /// TLS or not as the string asked.
    pub fn connect_blocking(
        &self,
        config: &postgres::Config,
    ) -> Result<postgres::Client, postgres::Error> {
        match &self.tls {
            Some(tls) => config.connect(tls.connector()),
            None => config.connect(postgres::NoTls),
        }
    }

    /// The settings to connect with: the string's, and this module's timeouts and keepalives
    /// where it set none, and `application_name` `mssbroker` unless it set one.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The same server, user and settings, naming the database `dbname` (`bench ingest`'s
    /// database of a round on the server it was given).
    pub fn with_dbname(&self, dbname: &str) -> DatabaseUrl {
        let mut config = self.config.clone();
        config.dbname(dbname);
        DatabaseUrl {
            config,
            tls: self.tls.clone(),
        }
    }
}

impl std::str::FromStr for DatabaseUrl {
    type Err = DatabaseUrlError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        DatabaseUrl::parse(text)
    }
}

/// tokio-postgres's complaint, kept only where it names an option and not a value: its other
/// messages can quote a character of the string, which may be the password's.
/// A host the broker would reach in plain text beyond this machine: the ledger and the
/// leadership contender both refuse such a string before connecting ("nothing beyond
/// loopback without TLS"), unless it asks for `sslmode=verify-full`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("database.url: host `{host}` is neither a loopback address nor a unix socket, and the string asks for no TLS: give sslmode=verify-full with sslrootcert=<the CA file>, or 127.0.0.1, ::1, localhost or a unix socket's directory (host=/run/postgresql)")]
pub struct BeyondLoopback {
    pub host: String,
}

impl DatabaseUrl {
    /// Refuse a host that is neither loopback nor a unix socket, unless every connection is
    /// TLS with the server's certificate and name checked (`sslmode=verify-full`). Where the
    /// string gives a `hostaddr` for a host, that address is where the connection goes, so it
    /// is judged instead.
    pub fn only_loopback(&self) -> Result<(), BeyondLoopback> {
        if self.tls.is_some() {
            return Ok(());
        }
        let (hosts, addrs) = (self.config.get_hosts(), self.config.get_hostaddrs());
        let beyond =
            (0..hosts.len().max(addrs.len())).find_map(|i| match (addrs.get(i), hosts.get(i)) {
                (Some(addr), _) => (!addr.is_loopback()).then(|| addr.to_string()),
                (None, Some(Host::Tcp(name))) => (!is_loopback_name(name)).then(|| name.clone()),
                (None, Some(Host::Unix(_)) | None) => None,
            });
        match beyond {
            Some(host) => Err(BeyondLoopback { host }),
            None => Ok(()),
        }
    }
}

/// `localhost` or a loopback IP address (`[::1]` as the URL writes it too). A name is not
/// resolved: another name for a loopback address is refused.
fn is_loopback_name(name: &str) -> bool {
    let bare = name.trim_start_matches('[').trim_end_matches(']');
    bare.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|a| a.is_loopback())
}

fn unreadable(e: &tokio_postgres::Error) -> DatabaseUrlError {
    let cause = std::error::Error::source(e)
        .map(ToString::to_string)
        .unwrap_or_default();
    let names_an_option =
        cause.starts_with("invalid value for option") || cause.starts_with("unknown option");
    DatabaseUrlError::Unreadable(if names_an_option {
        cause
    } else {
        "not a libpq connection string (`postgresql://user@host:port/dbname` or `host=... user=... dbname=...`)".to_string()
    })
}

fn check(config: &Config) -> Result<(), DatabaseUrlError> {
    let hosts = config.get_hosts().len().max(config.get_hostaddrs().len());
    if hosts == 0 {
        return Err(DatabaseUrlError::NoHost);
    }
    if config.get_user().is_none_or(str::is_empty) {
        return Err(DatabaseUrlError::NoUser);
    }
    if config.get_dbname().is_none_or(str::is_empty) {
        return Err(DatabaseUrlError::NoDatabase);
    }
    let ports = config.get_ports().len();
    if ports > 1 && ports != hosts {
        return Err(DatabaseUrlError::PortsDoNotMatchHosts { hosts, ports });
    }
    if let Some(t) = config.get_tcp_user_timeout() {
        if t.as_secs() > MAX_TCP_USER_TIMEOUT_SECS {
            return Err(DatabaseUrlError::TcpUserTimeoutInMilliseconds {
                seconds: t.as_secs(),
            });
        }
    }
    Ok(())
}

fn with_timeouts(mut config: Config) -> Config {
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(TCP_USER_TIMEOUT);
    }
    config.keepalives(true);
    if config.get_keepalives_idle() == LIBRARY_KEEPALIVES_IDLE {
        config.keepalives_idle(KEEPALIVES_IDLE);
    }
    if config.get_keepalives_interval().is_none() {
        config.keepalives_interval(KEEPALIVES_INTERVAL);
    }
    if config.get_keepalives_retries().is_none() {
        config.keepalives_retries(KEEPALIVES_RETRIES);
    }
    if config.get_application_name().is_none() {
        config.application_name("mssbroker");
    }
    config
}

/// What a host name or socket directory keeps unencoded when shown in the URL form.
const HOST_PART: &AsciiSet = &CONTROLS
    .add(b'/')
    .add(b'@')
    .add(b'?')
    .add(b'#')
    .add(b',')
    .add(b':')
    .add(b' ')
    .add(b'%');

/// `postgresql://user@host:port,.../dbname`: user, hosts, ports and database only.
impl fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        let user = c.get_user().unwrap_or_default();
        write!(f, "postgresql://{}@", utf8_percent_encode(user, HOST_PART))?;
        let ports = c.get_ports();
        let hosts: Vec<String> = match c.get_hosts() {
            [] => c.get_hostaddrs().iter().map(ToString::to_string).collect(),
            hosts => hosts.iter().map(shown_host).collect(),
        };
        for (i, host) in hosts.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(host)?;
            if let Some(port) = ports.get(i).or(ports.first()) {
                write!(f, ":{port}")?;
            }
        }
        let dbname = c.get_dbname().unwrap_or_default();
        write!(f, "/{}", utf8_percent_encode(dbname, HOST_PART))
    }
}

fn shown_host(host: &Host) -> String {
    match host {
        Host::Tcp(name) if name.contains(':') => format!("[{name}]"),
        Host::Tcp(name) => utf8_percent_encode(name, HOST_PART).to_string(),
        Host::Unix(dir) => utf8_percent_encode(&dir.to_string_lossy(), HOST_PART).to_string(),
    }
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DatabaseUrl({self})")
    }
}

mod tls;

pub use tls::PgTls;

#[cfg(test)]
mod tests;

//! `TestDb`: a fresh database for one test on either backend, so a test of the layer or of a
//! ledger reader is written once and run on both ([`on_both!`]).
//!
//! SQLite: a file in a temporary directory. PostgreSQL: a new database (`CREATE DATABASE tN`,
//! milliseconds) in a pg-cluster shared by the tests that run at the same time in this test
//! binary: the first starts it, the last to finish drops it (stopped and removed, so no server
//! outlives the binary), and a later test starts another.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};

use pg_cluster::Cluster;

use crate::database_url::DatabaseUrl;
use crate::ledger::db::DbConn;

/// Which backend a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    Sqlite,
    Postgres,
}

/// A database of its own for one test.
pub(crate) struct TestDb {
    place: Place,
}

enum Place {
    Sqlite {
        _dir: tempfile::TempDir,
        path: PathBuf,
    },
    Postgres {
        _cluster: Arc<Cluster>,
        url: Box<DatabaseUrl>,
    },
}

static SHARED: Mutex<Weak<Cluster>> = Mutex::new(Weak::new());
static DATABASES: AtomicU32 = AtomicU32::new(0);

/// The cluster the running tests share, started if none runs.
fn cluster() -> Arc<Cluster> {
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = shared.upgrade() {
        return c;
    }
    let c = Arc::new(Cluster::start().expect("a PostgreSQL cluster"));
    *shared = Arc::downgrade(&c);
    c
}

impl TestDb {
    /// An empty database.
    pub(crate) fn new(backend: Backend) -> TestDb {
        let place = match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("a directory");
                let path = dir.path().join("ledger.db");
                Place::Sqlite { _dir: dir, path }
            }
            Backend::Postgres => {
                let cluster = cluster();
                let name = format!("t{}", DATABASES.fetch_add(1, Ordering::Relaxed));
                let mut admin = postgres::Client::connect(&cluster.url(), postgres::NoTls)
                    .expect("the cluster's postgres database");
                admin
                    .batch_execute(&format!("CREATE DATABASE {name}"))
                    .expect("a database");
                let base = cluster.url();
                let url = format!("{}/{name}", base.trim_end_matches("/postgres"));
                Place::Postgres {
                    _cluster: cluster,
                    url: Box::new(DatabaseUrl::parse(&url).expect("the database's url")),
                }
            }
        };
        TestDb { place }
    }

    /// A plain connection (no ledger schema; SQLite's wide functions registered, as on every
    /// ledger connection).
    pub(crate) fn connect(&self) -> DbConn {
        match &self.place {
            Place::Sqlite { path, .. } => {
                let conn = rusqlite::Connection::open(path).expect("open");
                crate::ledger::wide::register(&conn).expect("the wide functions");
                DbConn::from_sqlite(conn)
            }
            Place::Postgres { url, .. } => DbConn::from_postgres(
                crate::ledger::postgres::connect::connect(url).expect("a connection"),
            ),
        }
    }

    /// A connection on the ledger's schema, created as the broker opens its ledger
    /// (`schema::open_writer`, `postgres::open`).
    pub(crate) fn ledger(&self) -> DbConn {
        self.open_ledger().expect("a ledger")
    }

    /// The ledger opened as the broker opens it, or why it was refused.
    pub(crate) fn open_ledger(&self) -> Result<DbConn, crate::ledger::LedgerError> {
        match &self.place {
            Place::Sqlite { path, .. } => {
                crate::ledger::schema::open_writer(path).map(DbConn::from_sqlite)
            }
            Place::Postgres { url, .. } => crate::ledger::postgres::open(url),
        }
    }

    /// The SQLite file (`None` on PostgreSQL).
    pub(crate) fn path(&self) -> Option<&std::path::Path> {
        match &self.place {
            Place::Sqlite { path, .. } => Some(path),
            Place::Postgres { .. } => None,
        }
    }

    /// The PostgreSQL database's URL (`None` on SQLite).
    pub(crate) fn url(&self) -> Option<&DatabaseUrl> {
        match &self.place {
            Place::Sqlite { .. } => None,
            Place::Postgres { url, .. } => Some(url),
        }
    }

    /// Where the database is, as the ledger's errors name it: the file, or the URL as
    /// `DatabaseUrl` shows it.
    pub(crate) fn shown(&self) -> String {
        match &self.place {
            Place::Sqlite { path, .. } => path.display().to_string(),
            Place::Postgres { url, .. } => url.to_string(),
        }
    }
}

/// `on_both!(a, b)`: for each test function `a(Backend)`, a module `a` with the tests `sqlite`
/// and `postgres` calling it.
macro_rules! on_both {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            #[test]
            fn sqlite() {
                super::$name($crate::ledger::db::tests::testdb::Backend::Sqlite)
            }
            #[test]
            fn postgres() {
                super::$name($crate::ledger::db::tests::testdb::Backend::Postgres)
            }
        }
    )+};
}
pub(crate) use on_both;

/// xorshift64 for the seeded random tests of the ledger: a stream per seed, so a failing seed
/// replays exactly.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

//! `Db`: the thin layer the ledger runs its SQL through instead of rusqlite (issue 42, step 3 of
//! the port, docs/ha.md). One SQL dialect for both backends (`?N` placeholders, the portable
//! spellings of step 2); what differs is here, behind one type:
//!
//! - [`Db`]: a handle on a connection ([`DbConn`], owned) or a transaction, with `execute`, `query_one` / `query_opt` /
//!   `query_rows` / `for_each`, `exists`, `execute_batch`, `insert_id`, `insert` and `update`
//!   (one-row writes whose row count is not needed: gathered on PostgreSQL, `db/pg/batch.rs`),
//!   and [`Db::prepare`], a statement from the connection's cache (`db/stmt.rs`; every call
//!   goes through the cache: a statement is compiled once per connection, and the SQL is never
//!   copied per call);
//! - [`Tx`]: a transaction. It derefs to its [`Db`], so a function taking `&Db` takes a
//!   transaction as well, and every method takes `&self` (the writer hands its transaction round
//!   by shared reference);
//! - [`Param`] / [`params!`] and [`Value`]: what a statement binds;
//! - [`Row`] / [`FromColumn`]: typed reads, an unreadable value a [`DbError::Column`].
//!
//! `Db` is an enum over the backends, `Sqlite` and `Postgres` (an enum rather than a trait: the
//! ledger's functions take `&Db` and stay non-generic, the closures over rows stay plain
//! `FnMut(&Row)`, which a trait with generic methods could not keep object-safe, and a
//! backend's own code is a `match` arm here, not a second impl the callers choose between). The
//! PostgreSQL arm (`db/pg.rs`) holds the `postgres` client in a `RefCell` (its queries take
//! `&mut`), runs `BEGIN`/`COMMIT` itself so a [`Tx`] still derefs to its `Db`, rewrites `?N` to
//! `$N` once per cached statement, gathers a transaction's one-row writes into statements over
//! arrays, and sends a transaction's first read with its `BEGIN` ([`DbConn::transaction_reading`],
//! the fence). Where the
//! two dialects spell a statement differently, [`spelled!`] makes both texts and
//! [`Db::dialect`] picks one (`db/dialect.rs`).
//!
//! SQLite-only code (schema migrations and PRAGMAs, backup, restore, the update hook, the
//! registration of `wide_add`/`wide_sum`) reaches the connection through one named escape
//! hatch, [`Db::sqlite`] (`None` on PostgreSQL); the tidy test `tidy::only_the_sqlite_files_name_rusqlite` keeps every
//! other file of `src/ledger` off rusqlite.

mod dialect;
mod error;
mod param;
mod pg;
mod row;
mod stmt;

pub(crate) use dialect::spelled;
pub use dialect::{Dialect, Spelled};
pub use error::DbError;

pub(crate) use param::params;
pub use param::{Param, Value};
#[allow(unused_imports)] // the rest of the layer's vocabulary, for its callers
pub use row::{ColumnIndex, ColumnValue, FromColumn, Mismatch, Row};
pub use stmt::Stmt;
use stmt::StmtInner;

pub type DbResult<T> = Result<T, DbError>;

impl From<rusqlite::Error> for super::LedgerError {
    fn from(e: rusqlite::Error) -> Self {
        super::LedgerError::Storage(e.to_string())
    }
}

/// A connection to the ledger's database, owned (and `Send`: the read pool keeps them). Its
/// statements run through [`DbConn::db`], the handle every ledger function takes.
pub struct DbConn {
    inner: Owned,
}

enum Owned {
    Sqlite(rusqlite::Connection),
    // Boxed: the client and its caches are four times a SQLite connection's size, and a
    // `DbConn` is moved in and out of the read pool.
    Postgres(Box<pg::PgConn>),
}

impl DbConn {
    /// The ledger's connection on a SQLite database opened and configured by `schema.rs`.
    pub fn from_sqlite(conn: rusqlite::Connection) -> DbConn {
        DbConn {
            inner: Owned::Sqlite(conn),
        }
    }

    /// The ledger's connection on a PostgreSQL database (`postgres::open` makes it, its schema
    /// brought to the latest version).
    pub fn from_postgres(client: postgres::Client) -> DbConn {
        DbConn {
            inner: Owned::Postgres(Box::new(pg::PgConn::new(client))),
        }
    }

    /// The handle statements run through.
    pub fn db(&self) -> Db<'_> {
        match &self.inner {
            Owned::Sqlite(c) => Db {
                inner: Inner::Sqlite(c),
            },
            Owned::Postgres(c) => Db {
                inner: Inner::Postgres(c),
            },
        }
    }

    /// Begin a transaction; it rolls back when dropped without [`Tx::commit`].
    pub fn transaction(&mut self) -> DbResult<Tx<'_>> {
        self.db().begin()
    }

    /// Begin a transaction whose first statement is `sql`, a read of one integer or of no row
    /// (the fence, `writer/fence.rs`), without parameters. PostgreSQL: sent with the BEGIN, in
    /// one round trip (the simple protocol), so every write transaction costs one round trip
    /// less. If the read fails, the transaction is rolled back and the error returned.
    pub fn transaction_reading(&mut self, sql: &str) -> DbResult<(Tx<'_>, Option<i64>)> {
        self.db().begin_reading(sql)
    }

    /// Whether the connection is known to have ended (PostgreSQL: the server or the network
    /// closed it, seen by a statement that failed; a SQLite connection never ends so). Such a
    /// connection fails every later statement: the read pool drops it, the writer stops.
    pub fn is_closed(&self) -> bool {
        match &self.inner {
            Owned::Sqlite(_) => false,
            Owned::Postgres(c) => c.is_closed(),
        }
    }

    /// Begin a read transaction whose snapshot is fixed when this returns, as
    /// [`Db::snapshot`], but left open on the connection rather than in a [`Tx`] borrowing it:
    /// the connection travels with its snapshot (the reload's preparation, `writer/reload.rs`)
    /// and the transaction ends with the connection. A later `transaction` on it is refused on
    /// PostgreSQL, as a nested one is.
    pub fn hold_snapshot(&self) -> DbResult<()> {
        match &self.inner {
            Owned::Sqlite(c) => {
                c.execute_batch("BEGIN")?;
                // SQLite takes the snapshot at the first read, not at BEGIN.
                c.query_row("SELECT COUNT(*) FROM sqlite_master", [], |_| Ok(()))?;
                Ok(())
            }
            Owned::Postgres(c) => {
                c.hold(SNAPSHOT)?;
                // PostgreSQL takes the snapshot at the first statement, not at BEGIN.
                c.batch("SELECT 1")
            }
        }
    }

    /// The escape hatch for SQLite-only code (see [`Db::sqlite`]); `None` on PostgreSQL.
    pub fn sqlite(&self) -> Option<&rusqlite::Connection> {
        match &self.inner {
            Owned::Sqlite(c) => Some(c),
            Owned::Postgres(_) => None,
        }
    }
}

/// A handle on a connection or a transaction: what the ledger's functions take (`&Db`) to run
/// statements. Cheap to copy; every method takes `&self`.
#[derive(Clone, Copy)]
pub struct Db<'c> {
    inner: Inner<'c>,
}

#[derive(Clone, Copy)]
enum Inner<'c> {
    Sqlite(&'c rusqlite::Connection),
    Postgres(&'c pg::PgConn),
}

impl<'c> Db<'c> {
    /// The escape hatch for SQLite-only code (schema, PRAGMAs, backup, restore, hooks, the
    /// wide functions): the rusqlite connection under this handle; `None` on PostgreSQL.
    pub fn sqlite(&self) -> Option<&'c rusqlite::Connection> {
        match self.inner {
            Inner::Sqlite(c) => Some(c),
            Inner::Postgres(_) => None,
        }
    }

    /// Which SQL dialect the connection speaks, for the few fragments that differ
    /// ([`Spelled`]).
    pub fn dialect(&self) -> Dialect {
        match self.inner {
            Inner::Sqlite(_) => Dialect::Sqlite,
            Inner::Postgres(_) => Dialect::Postgres,
        }
    }

    /// A statement from the connection's cache (compiled once, kept for the next call; on
    /// PostgreSQL prepared from its `$N` rewrite).
    pub fn prepare(&self, sql: &str) -> DbResult<Stmt<'c>> {
        match self.inner {
            Inner::Sqlite(c) => Ok(Stmt {
                inner: StmtInner::Sqlite(c.prepare_cached(sql)?),
            }),
            Inner::Postgres(c) => Ok(Stmt {
                inner: StmtInner::Postgres(c, c.statement(sql)?),
            }),
        }
    }

    /// Run a statement; returns how many rows it changed.
    pub fn execute(&self, sql: &str, params: &[&dyn Param]) -> DbResult<usize> {
        self.prepare(sql)?.execute(params)
    }

    /// Run an INSERT of one row into a table with an `id` key; returns the new row's id.
    /// SQLite: the statement, then `last_insert_rowid()` (measured a quarter faster on batch
    /// ingest than `RETURNING id`, docs/ha.md). PostgreSQL, inside a transaction and for a
    /// plain `INSERT INTO t (cols) VALUES (?1, .., ?N)`: the row gets an id reserved from the
    /// table's identity sequence and is gathered with the transaction's other rows of the
    /// statement, sent as one statement over arrays before the next other statement or the
    /// COMMIT (`db/pg/batch.rs`); otherwise the statement with ` RETURNING id`, cached apart.
    pub fn insert_id<'v>(
        &self,
        sql: &str,
        values: impl IntoIterator<Item = Value<'v>>,
    ) -> DbResult<i64> {
        match self.inner {
            Inner::Sqlite(c) => {
                self.prepare(sql)?.execute_values(values)?;
                Ok(c.last_insert_rowid())
            }
            Inner::Postgres(c) => {
                let values: Vec<Value<'v>> = values.into_iter().collect();
                if let Some(id) = c.insert_later_with_id(sql, values.iter().copied())? {
                    return Ok(id);
                }
                let rows = c.query(&c.returning_id(sql)?, &values)?;
                let row = rows.first().ok_or(DbError::NoRow)?;
                Row::from_postgres(row).get(0)
            }
        }
    }

    /// Run an INSERT of one row whose count of changed rows the caller does not need. SQLite:
    /// at once, as [`Db::execute`]. PostgreSQL, inside a transaction: gathered as
    /// [`Db::insert_id`] gathers (sent with the other gathered rows, as one statement).
    pub fn insert(&self, sql: &str, params: &[&dyn Param]) -> DbResult<()> {
        self.later(sql, params)
    }

    /// Run an UPDATE of one row by its key (`UPDATE t SET .. WHERE key = ?1`) whose count of
    /// changed rows the caller does not need. SQLite: at once, as [`Db::execute`].
    /// PostgreSQL, inside a transaction: gathered with the transaction's other rows of the
    /// statement and sent as one statement over arrays before the next other statement or the
    /// COMMIT, after every gathered row that touches the same row (`db/pg/batch.rs`).
    pub fn update(&self, sql: &str, params: &[&dyn Param]) -> DbResult<()> {
        self.later(sql, params)
    }

    fn later(&self, sql: &str, params: &[&dyn Param]) -> DbResult<()> {
        if let Inner::Postgres(c) = self.inner {
            if c.later(sql, pg::values(params)?)? {
                return Ok(());
            }
        }
        self.execute(sql, params).map(drop)
    }

    /// The transaction will give [`Db::insert_id`] up to `n` rows of `sql`: a backend that
    /// gives ids before the rows are written (PostgreSQL) reserves them now, in one round trip
    /// for the group rather than one per block. Nothing on SQLite.
    pub fn reserve_ids(&self, sql: &str, n: usize) -> DbResult<()> {
        match self.inner {
            Inner::Sqlite(_) => Ok(()),
            Inner::Postgres(c) => c.reserve_ids(sql, n),
        }
    }

    /// Round trips to the server this connection has made so far (statements prepared or run,
    /// BEGIN, COMMIT); `None` on SQLite, which has none.
    pub fn round_trips(&self) -> Option<u64> {
        match self.inner {
            Inner::Sqlite(_) => None,
            Inner::Postgres(c) => Some(c.round_trips()),
        }
    }

    /// The first row, read by `f`; no row is [`DbError::NoRow`].
    pub fn query_one<T>(
        &self,
        sql: &str,
        params: &[&dyn Param],
        f: impl FnOnce(&Row<'_>) -> DbResult<T>,
    ) -> DbResult<T> {
        self.prepare(sql)?.query_one(params, f)
    }

    /// The first row, read by `f`, if there is one.
    pub fn query_opt<T>(
        &self,
        sql: &str,
        params: &[&dyn Param],
        f: impl FnOnce(&Row<'_>) -> DbResult<T>,
    ) -> DbResult<Option<T>> {
        self.prepare(sql)?.query_opt(params, f)
    }

    /// Every row, each read by `f`.
    pub fn query_rows<T>(
        &self,
        sql: &str,
        params: &[&dyn Param],
        f: impl FnMut(&Row<'_>) -> DbResult<T>,
    ) -> DbResult<Vec<T>> {
        self.prepare(sql)?.query_rows(params, f)
    }

    /// Every row, one at a time, into `f` (nothing collected); an error from `f` stops it.
    pub fn for_each<E: From<DbError>>(
        &self,
        sql: &str,
        params: &[&dyn Param],
        f: impl FnMut(&Row<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        self.prepare(sql)?.for_each(params, f)
    }

    /// Whether the query returns a row.
    pub fn exists(&self, sql: &str, params: &[&dyn Param]) -> DbResult<bool> {
        self.prepare(sql)?
            .query_opt(params, |_| Ok(()))
            .map(|r| r.is_some())
    }

    /// Whether the database has a table `name` (a database from before it was added has not).
    pub fn has_table(&self, name: &str) -> DbResult<bool> {
        match self.inner {
            Inner::Sqlite(_) => self.exists(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
                params![name],
            ),
            // A name as the ledger writes it (unquoted): looked up as PostgreSQL folds it.
            Inner::Postgres(_) => self.exists(
                "SELECT 1 WHERE to_regclass(CAST(?1 AS TEXT)) IS NOT NULL",
                params![name],
            ),
        }
    }

    /// Whether `table` has a column `column` (a database from before it was added has not).
    pub fn has_column(&self, table: &str, column: &str) -> DbResult<bool> {
        match self.inner {
            Inner::Sqlite(_) => self.exists(
                "SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2",
                params![table, column],
            ),
            Inner::Postgres(_) => self.exists(
                "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() \
                 AND table_name::text = lower(?1) AND column_name::text = lower(?2)",
                params![table, column],
            ),
        }
    }

    /// Run several statements without parameters (not cached).
    pub fn execute_batch(&self, sql: &str) -> DbResult<()> {
        match self.inner {
            Inner::Sqlite(c) => Ok(c.execute_batch(sql)?),
            Inner::Postgres(c) => c.batch(sql),
        }
    }

    /// A read transaction whose snapshot is fixed when this returns (a first read is made):
    /// every later read in it sees the same commit (`live.rs`).
    pub fn snapshot(&self) -> DbResult<Tx<'c>> {
        match self.inner {
            Inner::Sqlite(_) => {
                let tx = self.begin()?;
                tx.query_one("SELECT COUNT(*) FROM sqlite_master", params![], |_| Ok(()))?;
                Ok(tx)
            }
            // PostgreSQL takes the snapshot at the transaction's first statement, not at BEGIN.
            Inner::Postgres(c) => {
                let tx = self.tx(TxInner::Postgres(c.begin(SNAPSHOT)?));
                tx.execute_batch("SELECT 1")?;
                Ok(tx)
            }
        }
    }

    /// [`DbConn::transaction_reading`].
    fn begin_reading(&self, sql: &str) -> DbResult<(Tx<'c>, Option<i64>)> {
        match self.inner {
            Inner::Postgres(c) => {
                let (tx, value) = c.begin_reading("BEGIN", sql)?;
                let tx = self.tx(TxInner::Postgres(tx));
                let value = (value.as_deref())
                    .map(|v| (v.parse::<i64>()).map_err(|e| DbError::column(0, e.to_string())))
                    .transpose()?;
                Ok((tx, value))
            }
            Inner::Sqlite(_) => {
                let tx = self.begin()?;
                let value = tx.query_opt(sql, params![], |r| r.get::<i64>(0))?;
                Ok((tx, value))
            }
        }
    }

    fn begin(&self) -> DbResult<Tx<'c>> {
        let inner = match self.inner {
            Inner::Sqlite(c) => TxInner::Sqlite(c.unchecked_transaction()?),
            Inner::Postgres(c) => TxInner::Postgres(c.begin("BEGIN")?),
        };
        Ok(self.tx(inner))
    }

    fn tx(&self, inner: TxInner<'c>) -> Tx<'c> {
        Tx { db: *self, inner }
    }
}

/// PostgreSQL's read transaction for a snapshot: every read in it sees one commit.
const SNAPSHOT: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";

/// A transaction; derefs to its [`Db`]. Dropped without [`Tx::commit`], it rolls back.
pub struct Tx<'a> {
    db: Db<'a>,
    inner: TxInner<'a>,
}

/// SQLite's transaction is rusqlite's; PostgreSQL's is `BEGIN`/`COMMIT` sent on the shared
/// client (a `postgres::Transaction` would borrow the client `&mut` for its whole life, and the
/// `Tx` could not lend its `Db`).
enum TxInner<'a> {
    Sqlite(rusqlite::Transaction<'a>),
    Postgres(pg::PgTx<'a>),
}

impl<'a> std::ops::Deref for Tx<'a> {
    type Target = Db<'a>;

    fn deref(&self) -> &Db<'a> {
        &self.db
    }
}

impl Tx<'_> {
    pub fn commit(self) -> DbResult<()> {
        match self.inner {
            TxInner::Sqlite(t) => Ok(t.commit()?),
            TxInner::Postgres(t) => t.commit(),
        }
    }

    pub fn rollback(self) -> DbResult<()> {
        match self.inner {
            TxInner::Sqlite(t) => Ok(t.rollback()?),
            TxInner::Postgres(t) => t.rollback(),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;

//! `Db`: the thin layer the ledger runs its SQL through instead of rusqlite (issue 42, step 3 of
//! the port, docs/ha.md). One SQL dialect for both backends (`?N` placeholders, the portable
//! spellings of step 2); what differs is here, behind one type:
//!
//! - [`Db`]: a handle on a connection ([`DbConn`], owned) or a transaction, with `execute`, `query_one` / `query_opt` /
//!   `query_rows` / `for_each`, `exists`, `execute_batch`, `insert_id`, and [`Db::prepare`], a
//!   statement from the connection's cache (every call goes through the cache: a statement is
//!   compiled once per connection, and the SQL is never copied per call);
//! - [`Tx`]: a transaction. It derefs to its [`Db`], so a function taking `&Db` takes a
//!   transaction as well, and every method takes `&self` (the writer hands its transaction round
//!   by shared reference);
//! - [`Param`] / [`params!`] and [`Value`]: what a statement binds;
//! - [`Row`] / [`FromColumn`]: typed reads, an unreadable value a [`DbError::Column`].
//!
//! `Db` is an enum over the backends, today `Sqlite` alone; step 4 adds `Postgres` beside it
//! (an enum rather than a trait: the ledger's functions take `&Db` and stay non-generic, the
//! closures over rows stay plain `FnMut(&Row)`, which a trait with generic methods could not
//! keep object-safe, and a backend's own code is a `match` arm here, not a second impl the
//! callers choose between). Its PostgreSQL arm will hold the `postgres` client in a `RefCell`
//! (its queries take `&mut`), run `BEGIN`/`COMMIT` itself so a [`Tx`] still derefs to its `Db`,
//! rewrite `?N` to `$N` once per cached statement, and give [`Db::insert_id`] its
//! `RETURNING id`.
//!
//! SQLite-only code (schema migrations and PRAGMAs, backup, restore, the update hook, the
//! registration of `wide_add`/`wide_sum`) reaches the connection through one named escape
//! hatch, [`Db::sqlite`]; the tidy test `tidy::only_the_sqlite_files_name_rusqlite` keeps every
//! other file of `src/ledger` off rusqlite.

mod param;
mod row;

pub(crate) use param::params;
pub use param::{Param, Value};
#[allow(unused_imports)] // the rest of the layer's vocabulary, for its callers
pub use row::{ColumnIndex, ColumnValue, FromColumn, Mismatch, Row};

use rusqlite::types::{ToSql, ToSqlOutput, ValueRef};

/// Why a statement failed.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The database refused or failed (busy, disk full, I/O, a constraint, bad SQL).
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    /// A column's value is not what the ledger stores there: a corrupt row.
    #[error("column {column}: {problem}")]
    Column { column: String, problem: String },
    /// A parameter cannot be bound (a `u64` past the largest INTEGER).
    #[error("parameter: {0}")]
    Param(String),
    /// The database file is no longer the one opened (`identity.rs`): an I/O failure.
    #[error("{0}")]
    FileGone(String),
    /// `query_one` found no row.
    #[error("the query returned no row")]
    NoRow,
}

impl DbError {
    /// A corrupt value in column `column` (a position or a name).
    pub fn column(column: impl std::fmt::Display, problem: impl Into<String>) -> DbError {
        DbError::Column {
            column: column.to_string(),
            problem: problem.into(),
        }
    }
}

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
}

impl DbConn {
    /// The ledger's connection on a SQLite database opened and configured by `schema.rs`.
    pub fn from_sqlite(conn: rusqlite::Connection) -> DbConn {
        DbConn {
            inner: Owned::Sqlite(conn),
        }
    }

    /// The handle statements run through.
    pub fn db(&self) -> Db<'_> {
        match &self.inner {
            Owned::Sqlite(c) => Db {
                inner: Inner::Sqlite(c),
            },
        }
    }

    /// Begin a transaction; it rolls back when dropped without [`Tx::commit`].
    pub fn transaction(&mut self) -> DbResult<Tx<'_>> {
        self.db().begin()
    }

    /// The escape hatch for SQLite-only code (see [`Db::sqlite`]).
    pub fn sqlite(&self) -> &rusqlite::Connection {
        match &self.inner {
            Owned::Sqlite(c) => c,
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
}

impl<'c> Db<'c> {
    /// The escape hatch for SQLite-only code (schema, PRAGMAs, backup, restore, hooks, the
    /// wide functions): the rusqlite connection under this handle.
    pub fn sqlite(&self) -> &'c rusqlite::Connection {
        match self.inner {
            Inner::Sqlite(c) => c,
        }
    }

    /// A statement from the connection's cache (compiled once, kept for the next call).
    pub fn prepare(&self, sql: &str) -> DbResult<Stmt<'c>> {
        match self.inner {
            Inner::Sqlite(c) => Ok(Stmt {
                inner: StmtInner::Sqlite(c.prepare_cached(sql)?),
            }),
        }
    }

    /// Run a statement; returns how many rows it changed.
    pub fn execute(&self, sql: &str, params: &[&dyn Param]) -> DbResult<usize> {
        self.prepare(sql)?.execute(params)
    }

    /// Run an INSERT of one row into a table with an `id` key; returns the new row's id.
    /// (SQLite: `last_insert_rowid()`, measured a quarter faster on batch ingest than
    /// `RETURNING id`, docs/ha.md; PostgreSQL will take `RETURNING id`.)
    pub fn insert_id<'v>(
        &self,
        sql: &str,
        values: impl IntoIterator<Item = Value<'v>>,
    ) -> DbResult<i64> {
        self.prepare(sql)?.execute_values(values)?;
        match self.inner {
            Inner::Sqlite(c) => Ok(c.last_insert_rowid()),
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
        }
    }

    /// Whether `table` has a column `column` (a database from before it was added has not).
    pub fn has_column(&self, table: &str, column: &str) -> DbResult<bool> {
        match self.inner {
            Inner::Sqlite(_) => self.exists(
                "SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2",
                params![table, column],
            ),
        }
    }

    /// Run several statements without parameters (not cached).
    pub fn execute_batch(&self, sql: &str) -> DbResult<()> {
        match self.inner {
            Inner::Sqlite(c) => Ok(c.execute_batch(sql)?),
        }
    }

    /// A read transaction whose snapshot is fixed when this returns (a first read is made):
    /// every later read in it sees the same commit (`live.rs`).
    pub fn snapshot(&self) -> DbResult<Tx<'c>> {
        let tx = self.begin()?;
        match self.inner {
            Inner::Sqlite(_) => {
                tx.query_one("SELECT COUNT(*) FROM sqlite_master", params![], |_| Ok(()))?
            }
        }
        Ok(tx)
    }

    fn begin(&self) -> DbResult<Tx<'c>> {
        match self.inner {
            Inner::Sqlite(c) => Ok(Tx {
                db: *self,
                sqlite: c.unchecked_transaction()?,
            }),
        }
    }
}

/// A transaction; derefs to its [`Db`]. Dropped without [`Tx::commit`], it rolls back.
pub struct Tx<'a> {
    db: Db<'a>,
    sqlite: rusqlite::Transaction<'a>,
}

impl<'a> std::ops::Deref for Tx<'a> {
    type Target = Db<'a>;

    fn deref(&self) -> &Db<'a> {
        &self.db
    }
}

impl Tx<'_> {
    pub fn commit(self) -> DbResult<()> {
        Ok(self.sqlite.commit()?)
    }

    pub fn rollback(self) -> DbResult<()> {
        Ok(self.sqlite.rollback()?)
    }
}

/// A cached statement; returned to the cache when dropped.
pub struct Stmt<'a> {
    inner: StmtInner<'a>,
}

enum StmtInner<'a> {
    Sqlite(rusqlite::CachedStatement<'a>),
}

/// A [`Param`] as rusqlite binds it.
struct Bind<'p>(&'p dyn Param);

impl ToSql for Bind<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        match self.0.value() {
            Ok(v) => Ok(output(v)),
            Err(e) => Err(rusqlite::Error::ToSqlConversionFailure(Box::new(e))),
        }
    }
}

impl ToSql for Value<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(output(*self))
    }
}

fn output(value: Value<'_>) -> ToSqlOutput<'_> {
    {
        match value {
            Value::Null => ToSqlOutput::Borrowed(ValueRef::Null),
            Value::Integer(i) => ToSqlOutput::Borrowed(ValueRef::Integer(i)),
            Value::Real(f) => ToSqlOutput::Borrowed(ValueRef::Real(f)),
            Value::Text(s) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
            Value::Blob(b) => ToSqlOutput::Borrowed(ValueRef::Blob(b)),
            // As `Wide` stores itself: the exact decimal, in TEXT.
            Value::Wide(w) => ToSqlOutput::from(w.to_string()),
        }
    }
}

fn binds<'p>(params: &'p [&'p dyn Param]) -> impl Iterator<Item = Bind<'p>> + 'p {
    params.iter().map(|p| Bind(*p))
}

impl Stmt<'_> {
    pub fn execute(&mut self, params: &[&dyn Param]) -> DbResult<usize> {
        match &mut self.inner {
            StmtInner::Sqlite(s) => Ok(s.execute(rusqlite::params_from_iter(binds(params)))?),
        }
    }

    /// [`Stmt::execute`] with the values given by an iterator (a whole record's columns).
    pub fn execute_values<'v>(
        &mut self,
        values: impl IntoIterator<Item = Value<'v>>,
    ) -> DbResult<usize> {
        match &mut self.inner {
            StmtInner::Sqlite(s) => Ok(s.execute(rusqlite::params_from_iter(values))?),
        }
    }

    pub fn query_one<T>(
        &mut self,
        params: &[&dyn Param],
        f: impl FnOnce(&Row<'_>) -> DbResult<T>,
    ) -> DbResult<T> {
        self.query_opt(params, f)?.ok_or(DbError::NoRow)
    }

    pub fn query_opt<T>(
        &mut self,
        params: &[&dyn Param],
        f: impl FnOnce(&Row<'_>) -> DbResult<T>,
    ) -> DbResult<Option<T>> {
        match &mut self.inner {
            StmtInner::Sqlite(s) => {
                let mut rows = s.query(rusqlite::params_from_iter(binds(params)))?;
                match rows.next()? {
                    Some(r) => f(&Row::from_sqlite(r)).map(Some),
                    None => Ok(None),
                }
            }
        }
    }

    pub fn query_rows<T>(
        &mut self,
        params: &[&dyn Param],
        mut f: impl FnMut(&Row<'_>) -> DbResult<T>,
    ) -> DbResult<Vec<T>> {
        let mut out = Vec::new();
        self.for_each(params, |r| {
            out.push(f(r)?);
            Ok::<_, DbError>(())
        })?;
        Ok(out)
    }

    /// The rows, each read by `f`, as an iterator (streamed: nothing collected).
    pub fn query_map<'s, T>(
        &'s mut self,
        params: &[&dyn Param],
        mut f: impl FnMut(&Row<'_>) -> DbResult<T> + 's,
    ) -> DbResult<impl Iterator<Item = DbResult<T>> + 's> {
        match &mut self.inner {
            StmtInner::Sqlite(s) => Ok(s
                .query_and_then(rusqlite::params_from_iter(binds(params)), move |r| {
                    f(&Row::from_sqlite(r))
                })?),
        }
    }

    pub fn for_each<E: From<DbError>>(
        &mut self,
        params: &[&dyn Param],
        mut f: impl FnMut(&Row<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        match &mut self.inner {
            StmtInner::Sqlite(s) => {
                let mut rows = s
                    .query(rusqlite::params_from_iter(binds(params)))
                    .map_err(DbError::from)?;
                while let Some(r) = rows.next().map_err(DbError::from)? {
                    f(&Row::from_sqlite(r))?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests;

//! The layer's error: why a statement failed, on either backend.

/// Why a statement failed.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The database refused or failed (busy, disk full, I/O, a constraint, bad SQL).
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    /// The PostgreSQL server refused or failed, or the connection is gone (shown with the
    /// server's SQLSTATE and message: the client's own text is only "db error").
    #[error("{}", pg_text(.0))]
    Postgres(#[from] postgres::Error),
    /// A statement the layer cannot run as given (a bad placeholder, a nested transaction).
    #[error("{0}")]
    Sql(String),
    /// A statement was started on a PostgreSQL connection while another still held it (one
    /// started from inside another's row reading, which the layer does not allow there).
    #[error("the connection is busy with another statement")]
    Busy,
    /// SQLite-only code was handed a PostgreSQL connection.
    #[error("a PostgreSQL connection cannot run SQLite-only code")]
    NotSqlite,
    /// A column's value is not what the ledger stores there: a corrupt row.
    #[error("column {column}: {problem}")]
    Column { column: String, problem: String },
    /// A parameter cannot be bound (a `u64` past the largest INTEGER).
    #[error("parameter: {0}")]
    Param(String),
    /// The database file is no longer the one opened (`identity.rs`): an I/O failure.
    #[error("{0}")]
    FileGone(String),
    /// No connection could be made (PostgreSQL's read pool): the reason, the URL without its
    /// password.
    #[error("{0}")]
    Connect(String),
    /// The write transaction's fence refused it (PostgreSQL: another broker leads at a later
    /// epoch, or none does): nothing of it is committed, and the writer takes no more groups.
    #[error("{0}")]
    Fenced(String),
    /// `query_one` found no row.
    #[error("the query returned no row")]
    NoRow,
}

/// A PostgreSQL error as the ledger's errors show it: the server's message and SQLSTATE when it
/// answered (a constraint's detail is left out; a message may quote a value it could not take,
/// which is ledger data: no secret is stored in the ledger), the client's text otherwise.
fn pg_text(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => e.to_string(),
    }
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

//! A result row, read by position or by name into typed values ([`FromColumn`]). Reads are
//! lenient the way the ledger stores things (a flag is an INTEGER, a count an INTEGER read as
//! `u32` or `usize`, a wide sum TEXT or INTEGER) and strict about the rest: a value that does not
//! fit its type (a negative attempt, text where a number belongs) is [`DbError::Column`], never
//! a panic and never a wrapped number.

use super::DbError;
use crate::ledger::wide::Wide;

/// A column's value as read, as neither backend spells it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ColumnValue<'a> {
    Null,
    Integer(i64),
    Real(f64),
    Text(&'a str),
    Blob(&'a [u8]),
    /// An exact integer past what SQLite's INTEGER holds as such: PostgreSQL's NUMERIC (the
    /// `wide` sums, and `SUM` over BIGINT).
    Wide(i128),
}

impl ColumnValue<'_> {
    fn kind(&self) -> &'static str {
        match self {
            ColumnValue::Null => "NULL",
            ColumnValue::Integer(_) => "an integer",
            ColumnValue::Real(_) => "a real",
            ColumnValue::Text(_) => "text",
            ColumnValue::Blob(_) => "a blob",
            ColumnValue::Wide(_) => "a wide decimal",
        }
    }
}

/// Why a column's value is not of the type asked for (the caller adds the column).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch(pub String);

impl Mismatch {
    fn expected(what: &str, found: &ColumnValue<'_>) -> Mismatch {
        Mismatch(format!("expected {what}, found {}", found.kind()))
    }
}

/// A Rust type a column reads into.
pub trait FromColumn: Sized {
    fn from_column(value: ColumnValue<'_>) -> Result<Self, Mismatch>;
}

impl<T: FromColumn> FromColumn for Option<T> {
    fn from_column(value: ColumnValue<'_>) -> Result<Self, Mismatch> {
        match value {
            ColumnValue::Null => Ok(None),
            v => T::from_column(v).map(Some),
        }
    }
}

impl FromColumn for i64 {
    fn from_column(value: ColumnValue<'_>) -> Result<Self, Mismatch> {
        match value {
            ColumnValue::Integer(i) => Ok(i),
            // PostgreSQL's SUM over BIGINT is a NUMERIC; SQLite's an INTEGER.
            ColumnValue::Wide(w) => {
                i64::try_from(w).map_err(|_| Mismatch(format!("{w} is out of range for i64")))
            }
            v => Err(Mismatch::expected("an integer", &v)),
        }
    }
}

/// Integer types read from an INTEGER with `try_from`: out of range is an error.
macro_rules! narrowed {
    ($($t:ty),*) => {$(
        impl FromColumn for $t {
            fn from_column(value: ColumnValue<'_>) -> Result<Self, Mismatch> {
                let i = i64::from_column(value)?;
                <$t>::try_from(i).map_err(|_| {
                    Mismatch(format!("{i} is out of range for {}", stringify!($t)))
                })
            }
        }
    )*};
}
narrowed!(i32, u32, u64, usize);

/// A flag: an INTEGER, true when not 0.
impl FromColumn for bool {
    fn from_column(value: ColumnValue<'_>) -> Result<Self, Mismatch> {
        Ok(i64::from_column(value)? != 0)
    }
}

impl FromColumn for f64 {
    fn from_column(value: ColumnValue<'_>) -> Result<Self, Mismatch> {
        match value {
            ColumnValue::Real(f) => Ok(f),
            ColumnValue::Integer(i) => Ok(i as f64),
            ColumnValue::Wide(w) => Ok(w as f64),
            v => Err(Mismatch::expected("a number", &v)),
        }
    }
}

impl FromColumn for String {
    fn from_column(value: ColumnValue<'_>) -> Result<Self, Mismatch> {
        match value {
            ColumnValue::Text(s) => Ok(s.to_owned()),
            v => Err(Mismatch::expected("text", &v)),
        }
    }
}

impl FromColumn for Vec<u8> {
    fn from_column(value: ColumnValue<'_>) -> Result<Self, Mismatch> {
        match value {
            ColumnValue::Blob(b) => Ok(b.to_vec()),
            v => Err(Mismatch::expected("a blob", &v)),
        }
    }
}

/// A wide sum: its TEXT decimal, or an INTEGER written before the columns were widened (SQLite);
/// a NUMERIC (PostgreSQL).
impl FromColumn for Wide {
    fn from_column(value: ColumnValue<'_>) -> Result<Self, Mismatch> {
        match value {
            ColumnValue::Integer(i) => Ok(Wide(i128::from(i))),
            ColumnValue::Wide(w) => Ok(Wide(w)),
            ColumnValue::Text(s) => s
                .parse()
                .map(Wide)
                .map_err(|_| Mismatch("text that is not an i128 decimal".into())),
            v => Err(Mismatch::expected("a wide decimal", &v)),
        }
    }
}

/// Which column: by position (`usize`) or by name (`&str`).
pub trait ColumnIndex: Copy {
    /// Its position in `row`.
    fn position(self, row: &Row<'_>) -> Result<usize, DbError>;
}

impl ColumnIndex for usize {
    fn position(self, _: &Row<'_>) -> Result<usize, DbError> {
        Ok(self)
    }
}

impl ColumnIndex for &str {
    fn position(self, row: &Row<'_>) -> Result<usize, DbError> {
        match row.inner {
            Inner::Sqlite(r) => r
                .as_ref()
                .column_index(self)
                .map_err(|_| DbError::column(self, "no such column in the result")),
            Inner::Postgres(r) => super::pg::position(r, self)
                .ok_or_else(|| DbError::column(self, "no such column in the result")),
        }
    }
}

/// One row of a result, borrowed while the statement steps.
pub struct Row<'r> {
    inner: Inner<'r>,
}

enum Inner<'r> {
    Sqlite(&'r rusqlite::Row<'r>),
    Postgres(&'r postgres::Row),
}

impl<'r> Row<'r> {
    /// A rusqlite row as the layer reads it.
    pub(super) fn from_sqlite(row: &'r rusqlite::Row<'r>) -> Row<'r> {
        Row {
            inner: Inner::Sqlite(row),
        }
    }

    /// A PostgreSQL row as the layer reads it.
    pub(super) fn from_postgres(row: &'r postgres::Row) -> Row<'r> {
        Row {
            inner: Inner::Postgres(row),
        }
    }

    /// Column `index` as a `T`; a value that is not a `T` is [`DbError::Column`].
    pub fn get<T: FromColumn>(&self, index: impl ColumnIndex) -> Result<T, DbError> {
        let i = index.position(self)?;
        let value = self.value(i)?;
        T::from_column(value).map_err(|Mismatch(problem)| DbError::column(i, problem))
    }

    /// The position of the column named `name`.
    pub fn index_of(&self, name: &str) -> Result<usize, DbError> {
        name.position(self)
    }

    /// How many columns the row has (a `SELECT *` read whole: the reload's debug check of
    /// un-noted rows, `writer/noted.rs`).
    pub fn column_count(&self) -> usize {
        match self.inner {
            Inner::Sqlite(r) => r.as_ref().column_count(),
            Inner::Postgres(r) => r.len(),
        }
    }

    fn value(&self, i: usize) -> Result<ColumnValue<'_>, DbError> {
        use rusqlite::types::ValueRef;
        match self.inner {
            Inner::Sqlite(r) => Ok(match r.get_ref(i)? {
                ValueRef::Null => ColumnValue::Null,
                ValueRef::Integer(n) => ColumnValue::Integer(n),
                ValueRef::Real(f) => ColumnValue::Real(f),
                ValueRef::Text(t) => ColumnValue::Text(
                    std::str::from_utf8(t)
                        .map_err(|_| DbError::column(i, "text that is not UTF-8"))?,
                ),
                ValueRef::Blob(b) => ColumnValue::Blob(b),
            }),
            Inner::Postgres(r) => super::pg::column(r, i),
        }
    }
}

//! What a statement binds: one [`Value`] type, and [`Param`], the trait every bound Rust type
//! implements (the ledger binds i64, u32, usize, bool, f64, text, `Option`s of those and
//! [`Wide`]). A value that does not fit the database's 64-bit INTEGER (a `u64` or `usize` past
//! `i64::MAX`) is a typed error, never a wrapped number.

use super::DbError;
use crate::ledger::wide::Wide;

/// A value bound to a statement, as neither backend spells it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    Null,
    Integer(i64),
    Real(f64),
    Text(&'a str),
    Blob(&'a [u8]),
    /// An exact wide sum: TEXT decimal on SQLite (`wide.rs`), NUMERIC on PostgreSQL.
    Wide(i128),
    /// A list of keys, for `[in_ids ..]` (`dialect.rs`): a JSON array in TEXT on SQLite (read
    /// by `json_each`), a BIGINT[] on PostgreSQL.
    Ids(&'a [i64]),
}

impl<'a> From<&'a str> for Value<'a> {
    fn from(s: &'a str) -> Value<'a> {
        Value::Text(s)
    }
}

impl From<i64> for Value<'_> {
    fn from(i: i64) -> Self {
        Value::Integer(i)
    }
}

impl From<f64> for Value<'_> {
    fn from(f: f64) -> Self {
        Value::Real(f)
    }
}

/// A Rust value a statement can bind.
pub trait Param {
    /// The value to bind; an error when it does not fit (a `u64` past `i64::MAX`).
    fn value(&self) -> Result<Value<'_>, DbError>;
}

/// `params![a, b, c]`: a statement's parameters, `?1`, `?2`, `?3`, as `&[&dyn Param]`.
macro_rules! params {
    () => {
        &[] as &[&dyn $crate::ledger::db::Param]
    };
    ($($p:expr),+ $(,)?) => {
        &[$(&$p as &dyn $crate::ledger::db::Param),+] as &[&dyn $crate::ledger::db::Param]
    };
}
pub(crate) use params;

fn out_of_range(what: &str) -> DbError {
    DbError::Param(format!("{what} past the largest INTEGER (i64::MAX)"))
}

impl Param for Value<'_> {
    fn value(&self) -> Result<Value<'_>, DbError> {
        Ok(*self)
    }
}

impl<T: Param + ?Sized> Param for &T {
    fn value(&self) -> Result<Value<'_>, DbError> {
        (**self).value()
    }
}

impl<T: Param> Param for Option<T> {
    fn value(&self) -> Result<Value<'_>, DbError> {
        match self {
            Some(v) => v.value(),
            None => Ok(Value::Null),
        }
    }
}

impl Param for i64 {
    fn value(&self) -> Result<Value<'_>, DbError> {
        Ok(Value::Integer(*self))
    }
}

impl Param for i32 {
    fn value(&self) -> Result<Value<'_>, DbError> {
        Ok(Value::Integer(i64::from(*self)))
    }
}

impl Param for u32 {
    fn value(&self) -> Result<Value<'_>, DbError> {
        Ok(Value::Integer(i64::from(*self)))
    }
}

impl Param for u64 {
    fn value(&self) -> Result<Value<'_>, DbError> {
        i64::try_from(*self)
            .map(Value::Integer)
            .map_err(|_| out_of_range("a u64"))
    }
}

impl Param for usize {
    fn value(&self) -> Result<Value<'_>, DbError> {
        i64::try_from(*self)
            .map(Value::Integer)
            .map_err(|_| out_of_range("a usize"))
    }
}

impl Param for bool {
    fn value(&self) -> Result<Value<'_>, DbError> {
        Ok(Value::Integer(i64::from(*self)))
    }
}

impl Param for f64 {
    fn value(&self) -> Result<Value<'_>, DbError> {
        Ok(Value::Real(*self))
    }
}

impl Param for str {
    fn value(&self) -> Result<Value<'_>, DbError> {
        Ok(Value::Text(self))
    }
}

impl Param for String {
    fn value(&self) -> Result<Value<'_>, DbError> {
        Ok(Value::Text(self))
    }
}

impl Param for [u8] {
    fn value(&self) -> Result<Value<'_>, DbError> {
        Ok(Value::Blob(self))
    }
}

impl Param for Vec<u8> {
    fn value(&self) -> Result<Value<'_>, DbError> {
        Ok(Value::Blob(self))
    }
}

impl Param for [i64] {
    fn value(&self) -> Result<Value<'_>, DbError> {
        Ok(Value::Ids(self))
    }
}

impl Param for Vec<i64> {
    fn value(&self) -> Result<Value<'_>, DbError> {
        Ok(Value::Ids(self))
    }
}

impl Param for Wide {
    fn value(&self) -> Result<Value<'_>, DbError> {
        Ok(Value::Wide(self.0))
    }
}

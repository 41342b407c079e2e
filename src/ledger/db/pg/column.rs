//! Reading a PostgreSQL row's column as the `Db` layer reads every backend's
//! ([`ColumnValue`]).

use std::error::Error;

use postgres::types::Type;

use super::base;
use crate::ledger::db::row::ColumnValue;
use crate::ledger::db::{DbError, DbResult};
use crate::ledger::wide::Wide;

/// Column `i` of `row` as the layer reads it: the integers as integers (a BOOLEAN as 0 or 1,
/// as SQLite stores a flag), a NUMERIC that is an integer as a wide decimal, text, bytea, the
/// reals; any other type, or a NUMERIC that is not a `Wide`, is a [`DbError::Column`].
pub(in crate::ledger::db) fn column(row: &postgres::Row, i: usize) -> DbResult<ColumnValue<'_>> {
    let ty = row
        .columns()
        .get(i)
        .ok_or_else(|| DbError::column(i, "no such column in the result"))?
        .type_();
    let bad = |e: postgres::Error| {
        let problem = match e.source() {
            Some(source) => source.to_string(),
            None => e.to_string(),
        };
        DbError::column(i, problem)
    };
    let value = match *base(ty) {
        Type::INT8 => row
            .try_get::<_, Option<i64>>(i)
            .map(|v| v.map(ColumnValue::Integer)),
        Type::INT4 => row
            .try_get::<_, Option<i32>>(i)
            .map(|v| v.map(|n| ColumnValue::Integer(n.into()))),
        Type::INT2 => row
            .try_get::<_, Option<i16>>(i)
            .map(|v| v.map(|n| ColumnValue::Integer(n.into()))),
        Type::BOOL => row
            .try_get::<_, Option<bool>>(i)
            .map(|v| v.map(|b| ColumnValue::Integer(b.into()))),
        Type::FLOAT8 => row
            .try_get::<_, Option<f64>>(i)
            .map(|v| v.map(ColumnValue::Real)),
        Type::FLOAT4 => row
            .try_get::<_, Option<f32>>(i)
            .map(|v| v.map(|f| ColumnValue::Real(f.into()))),
        Type::NUMERIC => row
            .try_get::<_, Option<Wide>>(i)
            .map(|v| v.map(|w| ColumnValue::Wide(w.0))),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => row
            .try_get::<_, Option<&str>>(i)
            .map(|v| v.map(ColumnValue::Text)),
        Type::BYTEA => row
            .try_get::<_, Option<&[u8]>>(i)
            .map(|v| v.map(ColumnValue::Blob)),
        _ => {
            return Err(DbError::column(
                i,
                format!("a {ty}, which the ledger does not read"),
            ))
        }
    };
    Ok(value.map_err(bad)?.unwrap_or(ColumnValue::Null))
}

/// The position of the column named `name` (compared as SQLite compares names: ASCII case
/// ignored; PostgreSQL folds unquoted names to lower case).
pub(in crate::ledger::db) fn position(row: &postgres::Row, name: &str) -> Option<usize> {
    row.columns()
        .iter()
        .position(|c| c.name().eq_ignore_ascii_case(name))
}

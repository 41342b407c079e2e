//! Wide sums: figures a client's input can drive past `i64` (SQLite's INTEGER), stored in TEXT
//! columns as the exact decimal of an `i128`, and the SQL functions that add them (`wide_add`,
//! `wide_sum`), registered on every connection the ledger opens.

use rusqlite::functions::{Aggregate, Context, FunctionFlags};
use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, ValueRef};
use rusqlite::Connection;

/// An exact sum stored in a TEXT column as its decimal (read back from an INTEGER too, so a
/// value written before the columns were widened still reads).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Wide(pub i128);

impl FromSql for Wide {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        match value {
            ValueRef::Integer(i) => Ok(Wide(i128::from(i))),
            ValueRef::Text(t) => std::str::from_utf8(t)
                .ok()
                .and_then(|s| s.parse().ok())
                .map(Wide)
                .ok_or(FromSqlError::InvalidType),
            _ => Err(FromSqlError::InvalidType),
        }
    }
}

impl ToSql for Wide {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.0.to_string()))
    }
}

fn wide_arg(ctx: &Context<'_>, i: usize) -> rusqlite::Result<i128> {
    Ok(ctx.get::<Wide>(i)?.0)
}

fn wide_overflow() -> rusqlite::Error {
    rusqlite::Error::UserFunctionError("wide sum overflows i128".into())
}

/// `wide_sum(x)`: the exact sum of wide values (`'0'` over no rows).
struct WideSum;

impl Aggregate<i128, Wide> for WideSum {
    fn init(&self, _: &mut Context<'_>) -> rusqlite::Result<i128> {
        Ok(0)
    }

    fn step(&self, ctx: &mut Context<'_>, acc: &mut i128) -> rusqlite::Result<()> {
        *acc = acc
            .checked_add(wide_arg(ctx, 0)?)
            .ok_or_else(wide_overflow)?;
        Ok(())
    }

    fn finalize(&self, _: &mut Context<'_>, acc: Option<i128>) -> rusqlite::Result<Wide> {
        Ok(Wide(acc.unwrap_or(0)))
    }
}

/// Register `wide_add(a, b)` and `wide_sum(x)` on a connection.
pub(super) fn register(conn: &Connection) -> rusqlite::Result<()> {
    let flags = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    conn.create_scalar_function("wide_add", 2, flags, |ctx| {
        wide_arg(ctx, 0)?
            .checked_add(wide_arg(ctx, 1)?)
            .map(Wide)
            .ok_or_else(wide_overflow)
    })?;
    conn.create_aggregate_function("wide_sum", 1, flags, WideSum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_past_i64_stay_exact_in_sql() {
        let c = Connection::open_in_memory().unwrap();
        register(&c).unwrap();
        c.execute_batch(
            "CREATE TABLE t (v TEXT NOT NULL); \
             INSERT INTO t VALUES ('9223372036854775807'), (1), ('18446744073709551616');",
        )
        .unwrap();
        let sum: Wide = c
            .query_row("SELECT wide_sum(v) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(sum, Wide(i128::from(i64::MAX) + 1 + (1i128 << 64)));
        let empty: Wide = c
            .query_row("SELECT wide_sum(v) FROM t WHERE 0", [], |r| r.get(0))
            .unwrap();
        assert_eq!(empty, Wide(0));
        let added: String = c
            .query_row(
                "SELECT wide_add(?1, ?2)",
                rusqlite::params![Wide(i128::from(i64::MAX)), Wide(-5)],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(added, (i128::from(i64::MAX) - 5).to_string());
        // SQL's own arithmetic is what this replaces: past i64 it is a REAL.
        let real: String = c
            .query_row("SELECT typeof(9223372036854775807 + 1)", [], |r| r.get(0))
            .unwrap();
        assert_eq!(real, "real");
        let overflow = c.query_row("SELECT wide_add(?1, ?1)", [Wide(i128::MAX)], |r| {
            r.get::<_, Wide>(0)
        });
        assert!(overflow.is_err(), "{overflow:?}");
        let not_a_sum = c.query_row("SELECT 1.5", [], |r| r.get::<_, Wide>(0));
        assert!(not_a_sum.is_err());
    }
}

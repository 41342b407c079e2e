//! The `Db` layer's PostgreSQL arm: a blocking [`postgres::Client`] in a `RefCell` (its
//! statements take `&mut`, the layer's handles are shared), a statement cache keyed by the
//! ledger's `?N` text holding the statement prepared from its `$N` rewrite
//! (`postgres/placeholders.rs`), the binding of a [`Value`] as the type the server inferred for
//! its parameter, and the reading of a column as a [`ColumnValue`].
//!
//! Each statement borrows the client for one round trip and gives it back before any row is
//! read by the caller (rows are collected first), so a closure over rows may run statements of
//! its own. A borrow that still fails (a statement started from inside another) is
//! [`DbError::Busy`], never a panic.
//!
//! Binding follows the server's inference, as SQLite's loose typing would take the value: an
//! integer binds as BIGINT, INTEGER or SMALLINT (out of range: an error, never wrapped), as
//! BOOLEAN (not 0) or as NUMERIC (the `wide` domain); a real as DOUBLE PRECISION or REAL; text
//! as TEXT, VARCHAR, NAME or a domain over them; a blob as BYTEA; a wide sum as NUMERIC or the
//! `wide` domain (as BIGINT when it fits); NULL as any type. A value where the server expects
//! another kind (text for a number) is refused, naming the parameter: PostgreSQL does not
//! convert, and a silent conversion would hide a statement that reads differently on the two
//! backends.

use std::cell::{Cell, RefCell, RefMut};
use std::collections::HashMap;
use std::error::Error;

use bytes::BytesMut;
use postgres::types::{to_sql_checked, IsNull, Kind, ToSql, Type};
use postgres::{Client, Statement};

use super::row::ColumnValue;
use super::{DbError, DbResult, Param, Value};
use crate::ledger::postgres::placeholders;
use crate::ledger::wide::Wide;

/// A ledger connection to PostgreSQL, owned (`Send`: a `RefCell` is).
pub struct PgConn {
    client: RefCell<Client>,
    /// By the ledger's `?N` text: the statement prepared from its `$N` rewrite.
    statements: RefCell<HashMap<String, Statement>>,
    /// By the ledger's `?N` text of an INSERT: the statement of its rewrite with `RETURNING id`.
    returning: RefCell<HashMap<String, Statement>>,
    /// Whether a transaction is open (begun by the layer): PostgreSQL only warns on a nested
    /// BEGIN, and the inner COMMIT would commit the outer transaction.
    in_transaction: Cell<bool>,
}

impl PgConn {
    pub fn new(client: Client) -> PgConn {
        PgConn {
            client: RefCell::new(client),
            statements: RefCell::default(),
            returning: RefCell::default(),
            in_transaction: Cell::new(false),
        }
    }

    /// Whether the connection has ended (a client in use is not).
    pub(super) fn is_closed(&self) -> bool {
        self.client.try_borrow().is_ok_and(|c| c.is_closed())
    }

    /// The client, for one round trip.
    pub(super) fn client(&self) -> DbResult<RefMut<'_, Client>> {
        self.client.try_borrow_mut().map_err(|_| DbError::Busy)
    }

    /// The statement for the ledger's `sql`, prepared on first use.
    pub(super) fn statement(&self, sql: &str) -> DbResult<Statement> {
        self.cached(&self.statements, sql, "")
    }

    /// The statement for `sql` (an INSERT) with ` RETURNING id`, prepared on first use.
    pub(super) fn returning_id(&self, sql: &str) -> DbResult<Statement> {
        self.cached(&self.returning, sql, " RETURNING id")
    }

    fn cached(
        &self,
        cache: &RefCell<HashMap<String, Statement>>,
        sql: &str,
        suffix: &str,
    ) -> DbResult<Statement> {
        if let Some(s) = cache.borrow().get(sql) {
            return Ok(s.clone());
        }
        let mut text = placeholders::rewrite(sql).map_err(|e| DbError::Sql(e.to_string()))?;
        text.push_str(suffix);
        let statement = self.client()?.prepare(&text)?;
        cache.borrow_mut().insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    /// Run `statement` with `values`; the rows it changed.
    pub(super) fn execute(&self, statement: &Statement, values: &[Value<'_>]) -> DbResult<usize> {
        let binds = binds(values);
        let n = self.client()?.execute(statement, &refs(&binds))?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    /// Every row of `statement` with `values`, collected (the client is free again after).
    pub(super) fn query(
        &self,
        statement: &Statement,
        values: &[Value<'_>],
    ) -> DbResult<Vec<postgres::Row>> {
        let binds = binds(values);
        Ok(self.client()?.query(statement, &refs(&binds))?)
    }

    /// Run statements without parameters (the simple protocol: several at once).
    pub(super) fn batch(&self, sql: &str) -> DbResult<()> {
        Ok(self.client()?.batch_execute(sql)?)
    }

    /// Open a transaction (`begin`: `BEGIN` or a stronger one); one at a time.
    pub(super) fn begin(&self, begin: &str) -> DbResult<PgTx<'_>> {
        self.hold(begin)?;
        Ok(PgTx {
            conn: self,
            open: true,
        })
    }

    /// Open a transaction that no guard ends: it lasts as long as the connection
    /// (`DbConn::hold_snapshot`); one at a time.
    pub(super) fn hold(&self, begin: &str) -> DbResult<()> {
        if self.in_transaction.get() {
            return Err(DbError::Sql(
                "a transaction is already open on this connection".into(),
            ));
        }
        self.batch(begin)?;
        self.in_transaction.set(true);
        Ok(())
    }
}

/// An open transaction; dropped while open, it sends `ROLLBACK`.
pub struct PgTx<'c> {
    conn: &'c PgConn,
    open: bool,
}

impl PgTx<'_> {
    pub fn commit(mut self) -> DbResult<()> {
        self.end("COMMIT")
    }

    pub fn rollback(mut self) -> DbResult<()> {
        self.end("ROLLBACK")
    }

    fn end(&mut self, how: &str) -> DbResult<()> {
        self.open = false;
        self.conn.in_transaction.set(false);
        self.conn.batch(how)
    }
}

impl Drop for PgTx<'_> {
    fn drop(&mut self) {
        if self.open {
            // A connection that cannot even roll back is broken: its session ends, and the
            // server rolls the transaction back then. Nothing else to do here.
            let _ = self.end("ROLLBACK");
        }
    }
}

/// Every parameter's value, or the first that cannot be bound (nothing is sent then).
pub(super) fn values<'p>(params: &'p [&'p dyn Param]) -> DbResult<Vec<Value<'p>>> {
    params.iter().map(|p| p.value()).collect()
}

/// A [`Value`] as PostgreSQL binds it, for the type the server inferred for its parameter.
#[derive(Debug)]
struct Bind<'a>(Value<'a>);

fn binds<'a>(values: &[Value<'a>]) -> Vec<Bind<'a>> {
    values.iter().map(|v| Bind(*v)).collect()
}

fn refs<'b>(binds: &'b [Bind<'_>]) -> Vec<&'b (dyn ToSql + Sync)> {
    binds.iter().map(|b| b as &(dyn ToSql + Sync)).collect()
}

/// A domain's base type (the `wide` domain is NUMERIC), any other type itself.
fn base(ty: &Type) -> &Type {
    match ty.kind() {
        Kind::Domain(inner) => base(inner),
        _ => ty,
    }
}

type BoxError = Box<dyn Error + Sync + Send>;

fn mismatch(value: &Value<'_>, ty: &Type) -> BoxError {
    let kind = match value {
        Value::Null => "NULL",
        Value::Integer(_) => "an integer",
        Value::Real(_) => "a real",
        Value::Text(_) => "text",
        Value::Blob(_) => "a blob",
        Value::Wide(_) => "a wide decimal",
    };
    format!("{kind} where PostgreSQL expects {ty}").into()
}

fn narrowed<T: TryFrom<i64> + ToSql>(
    i: i64,
    ty: &Type,
    out: &mut BytesMut,
) -> Result<IsNull, BoxError> {
    T::try_from(i)
        .map_err(|_| BoxError::from(format!("{i} is out of range for {ty}")))?
        .to_sql(ty, out)
}

impl ToSql for Bind<'_> {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
        let base = base(ty);
        match self.0 {
            Value::Null => Ok(IsNull::Yes),
            Value::Integer(i) => match *base {
                Type::INT8 => i.to_sql(base, out),
                Type::INT4 => narrowed::<i32>(i, base, out),
                Type::INT2 => narrowed::<i16>(i, base, out),
                Type::BOOL => (i != 0).to_sql(base, out),
                Type::NUMERIC => Wide(i128::from(i)).to_sql(base, out),
                Type::FLOAT8 => (i as f64).to_sql(base, out),
                _ => Err(mismatch(&self.0, ty)),
            },
            Value::Real(f) => match *base {
                Type::FLOAT8 => f.to_sql(base, out),
                Type::FLOAT4 => (f as f32).to_sql(base, out),
                _ => Err(mismatch(&self.0, ty)),
            },
            Value::Text(s) => match *base {
                Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
                    // &str's own check would refuse a domain over text; its encoding is the same.
                    s.to_sql(&Type::TEXT, out)
                }
                _ => Err(mismatch(&self.0, ty)),
            },
            Value::Blob(b) => match *base {
                Type::BYTEA => b.to_sql(base, out),
                _ => Err(mismatch(&self.0, ty)),
            },
            Value::Wide(w) => match *base {
                Type::NUMERIC => Wide(w).to_sql(base, out),
                Type::INT8 => match i64::try_from(w) {
                    Ok(i) => i.to_sql(base, out),
                    Err(_) => Err(format!("{w} is out of range for {ty}").into()),
                },
                _ => Err(mismatch(&self.0, ty)),
            },
        }
    }

    fn accepts(_: &Type) -> bool {
        // Every type: `to_sql` decides by the value and the type together.
        true
    }

    to_sql_checked!();
}

/// Column `i` of `row` as the layer reads it: the integers as integers (a BOOLEAN as 0 or 1,
/// as SQLite stores a flag), a NUMERIC that is an integer as a wide decimal, text, bytea, the
/// reals; any other type, or a NUMERIC that is not a `Wide`, is a [`DbError::Column`].
pub(super) fn column(row: &postgres::Row, i: usize) -> DbResult<ColumnValue<'_>> {
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
pub(super) fn position(row: &postgres::Row, name: &str) -> Option<usize> {
    row.columns()
        .iter()
        .position(|c| c.name().eq_ignore_ascii_case(name))
}

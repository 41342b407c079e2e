//! The `Db` layer's PostgreSQL arm: a blocking [`postgres::Client`] in a `RefCell` (its
//! statements take `&mut`, the layer's handles are shared), a statement cache keyed by the
//! ledger's `?N` text holding the statement prepared from its `$N` rewrite
//! (`postgres/placeholders.rs`), the binding of a [`Value`] as the type the server inferred for
//! its parameter, the reading of a column as a `ColumnValue` (`pg/column.rs`), and a
//! transaction's gathered writes (`pg/batch.rs`), sent over arrays or, for a large plain
//! INSERT, by binary COPY.
//!
//! Each statement borrows the client for one round trip and gives it back before any row is
//! read by the caller (rows are collected first), so a closure over rows may run statements of
//! its own. A borrow that still fails (a statement started from inside another) is
//! [`DbError::Busy`], never a panic.
//!
//! Binding follows the server's inference, as SQLite's loose typing would take the value: an
//! integer binds as BIGINT, INTEGER or SMALLINT (out of range: an error, never wrapped), as
//! BOOLEAN (not 0) or as NUMERIC (the `wide` domain); a real as DOUBLE PRECISION or REAL; text
//! as TEXT, VARCHAR, NAME or a domain over them; a blob as BYTEA; a list of keys as BIGINT[]; a wide sum as NUMERIC or the
//! `wide` domain (as BIGINT when it fits); NULL as any type. A value where the server expects
//! another kind (text for a number) is refused, naming the parameter: PostgreSQL does not
//! convert, and a silent conversion would hide a statement that reads differently on the two
//! backends.

use std::cell::{Cell, RefCell, RefMut};
use std::collections::{HashMap, VecDeque};
use std::error::Error;

use bytes::BytesMut;
use postgres::binary_copy::BinaryCopyInWriter;
use postgres::types::{to_sql_checked, IsNull, Kind, ToSql, Type};
use postgres::{Client, Statement};

use super::{DbError, DbResult, Param, Value};
use crate::ledger::postgres::placeholders;
use crate::ledger::wide::Wide;

mod batch;
mod column;

pub(super) use column::{column, position};

/// Ids reserved at least this many at a time from a table's identity sequence
/// ([`PgConn::reserve_ids`]): a reservation is a round trip, so a block lasts a single
/// request's group tens of commits; the ids of a block a term leaves unused are a gap.
const ID_BLOCK: usize = 1024;

/// A gathered plain INSERT of at least this many rows goes by COPY (`PgConn::copy_in`).
const COPY_ROWS: usize = 256;

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
    /// The one-row INSERTs gathered in the open transaction (`batch.rs`), sent before the next
    /// other statement or the COMMIT.
    pending: RefCell<batch::Pending>,
    /// By the ledger's `?N` text of an INSERT: whether it can be gathered, and its shape.
    shapes: RefCell<HashMap<String, Option<batch::Shape>>>,
    /// By the `$N` text of a gathered statement: the statement prepared from it.
    gathered: RefCell<HashMap<String, Statement>>,
    /// By table: ids reserved from its identity sequence and not used yet, in order.
    ids: RefCell<HashMap<String, VecDeque<i64>>>,
    /// The ids the open transaction took from `ids`: back to the front of the reserve when it
    /// does not commit, so a rolled-back group leaves no gap (as SQLite's rowid does not).
    taken: RefCell<Vec<(String, i64)>>,
    /// Round trips to the server so far (statements prepared or run, BEGIN and COMMIT).
    trips: Cell<u64>,
}

impl PgConn {
    pub fn new(client: Client) -> PgConn {
        PgConn {
            client: RefCell::new(client),
            statements: RefCell::default(),
            returning: RefCell::default(),
            in_transaction: Cell::new(false),
            pending: RefCell::default(),
            shapes: RefCell::default(),
            gathered: RefCell::default(),
            ids: RefCell::default(),
            taken: RefCell::default(),
            trips: Cell::new(0),
        }
    }

    /// Whether the connection has ended (a client in use is not).
    pub(super) fn is_closed(&self) -> bool {
        self.client.try_borrow().is_ok_and(|c| c.is_closed())
    }

    /// Round trips to the server so far.
    pub(super) fn round_trips(&self) -> u64 {
        self.trips.get()
    }

    /// The client, for one round trip (counted).
    fn trip(&self) -> DbResult<RefMut<'_, Client>> {
        let client = self.client()?;
        self.trips.set(self.trips.get() + 1);
        Ok(client)
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
        let statement = self.trip()?.prepare(&text)?;
        cache.borrow_mut().insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    /// Run `statement` with `values`; the rows it changed.
    pub(super) fn execute(&self, statement: &Statement, values: &[Value<'_>]) -> DbResult<usize> {
        self.flush()?;
        let binds = binds(values);
        let n = self.trip()?.execute(statement, &refs(&binds))?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    /// Every row of `statement` with `values`, collected (the client is free again after).
    pub(super) fn query(
        &self,
        statement: &Statement,
        values: &[Value<'_>],
    ) -> DbResult<Vec<postgres::Row>> {
        self.flush()?;
        let binds = binds(values);
        Ok(self.trip()?.query(statement, &refs(&binds))?)
    }

    /// Run statements without parameters (the simple protocol: several at once).
    pub(super) fn batch(&self, sql: &str) -> DbResult<()> {
        self.flush()?;
        self.batch_now(sql)
    }

    fn batch_now(&self, sql: &str) -> DbResult<()> {
        Ok(self.trip()?.batch_execute(sql)?)
    }

    /// The shape of `sql` if it is a one-row INSERT or UPDATE that can be gathered
    /// (`batch.rs`), and a transaction is open to gather it in.
    fn gatherable(&self, sql: &str) -> Option<batch::Shape> {
        if !self.in_transaction.get() {
            return None;
        }
        if let Some(shape) = self.shapes.borrow().get(sql) {
            return shape.clone();
        }
        let shape = batch::shape(sql);
        self.shapes
            .borrow_mut()
            .insert(sql.to_owned(), shape.clone());
        shape
    }

    /// Gather one row of `sql` to be sent with the others (`batch.rs`); false when it cannot be
    /// (no transaction, or not a plain one-row INSERT or UPDATE by a key): the caller runs it
    /// at once.
    pub(super) fn later<'v>(
        &self,
        sql: &str,
        values: impl IntoIterator<Item = Value<'v>>,
    ) -> DbResult<bool> {
        let Some(shape) = self.gatherable(sql) else {
            return Ok(false);
        };
        self.pending.borrow_mut().push(sql, &shape, None, values)?;
        Ok(true)
    }

    /// [`PgConn::later`] for a row of a table with an identity `id`: the id it will have
    /// (reserved from the table's sequence), or `None` when it cannot be gathered.
    pub(super) fn insert_later_with_id<'v>(
        &self,
        sql: &str,
        values: impl IntoIterator<Item = Value<'v>>,
    ) -> DbResult<Option<i64>> {
        let Some(shape) = self.gatherable(sql) else {
            return Ok(None);
        };
        // A plain INSERT only: an upsert's row may keep the id it had, or not be written.
        if !matches!(&shape.kind, batch::Kind::Insert { conflict, .. } if conflict.is_empty()) {
            return Ok(None);
        }
        let id = match self.next_id(&shape.table) {
            Some(id) => id,
            None => {
                self.reserve(&shape.table, ID_BLOCK)?;
                self.next_id(&shape.table).ok_or(DbError::NoRow)?
            }
        };
        self.pending
            .borrow_mut()
            .push(sql, &shape, Some(id), values)?;
        Ok(Some(id))
    }

    fn next_id(&self, table: &str) -> Option<i64> {
        let id = self.ids.borrow_mut().get_mut(table)?.pop_front()?;
        self.taken.borrow_mut().push((table.to_owned(), id));
        Some(id)
    }

    /// The ids the transaction took, kept (it committed) or given back to the reserve in
    /// their order (it did not: they were never written).
    fn settle_taken(&self, committed: bool) {
        let taken = std::mem::take(&mut *self.taken.borrow_mut());
        if committed {
            return;
        }
        let mut ids = self.ids.borrow_mut();
        for (table, id) in taken.into_iter().rev() {
            ids.entry(table).or_default().push_front(id);
        }
    }

    /// Have at least `n` ids of the table `sql` inserts into reserved (one round trip when
    /// fewer are: `n` or [`ID_BLOCK`] more, whichever is larger); nothing when `sql` is not
    /// gathered.
    pub(super) fn reserve_ids(&self, sql: &str, n: usize) -> DbResult<()> {
        let Some(shape) = self.gatherable(sql) else {
            return Ok(());
        };
        let have = self.ids.borrow().get(&shape.table).map_or(0, VecDeque::len);
        if have < n {
            self.reserve(&shape.table, (n - have).max(ID_BLOCK))?;
        }
        Ok(())
    }

    /// Reserve `n` more ids from `table`'s identity sequence, in one step: the sequence is
    /// moved past a block of `n` (`setval(s, nextval(s) + n - 1)`) rather than asked `n` times
    /// (each `nextval` costs the server microseconds; a batch of 1000 requests paid more for
    /// its ids than for its rows). No other broker moves the sequence meanwhile: the ledger
    /// reserves inside its write transactions, which are fenced (`writer/fence.rs`), so two
    /// terms' transactions never overlap. (Someone else's `nextval` on the sequence meanwhile,
    /// a hand-made INSERT, would take an id of the block and break the group that reaches it;
    /// the broker's role owns its tables, so `setval` needs no grant `nextval` did not.) Not
    /// sent with the gathered rows: it reads no table.
    fn reserve(&self, table: &str, n: usize) -> DbResult<()> {
        let statement = self.statement(
            "SELECT setval(pg_get_serial_sequence(?1, 'id'), \
             nextval(pg_get_serial_sequence(?1, 'id')) + ?2 - 1)",
        )?;
        let n = i64::try_from(n.max(1)).map_err(|_| DbError::Param(format!("{n} ids")))?;
        let values = [Value::Text(table), Value::Integer(n)];
        let binds = binds(&values);
        let rows = self.trip()?.query(&statement, &refs(&binds))?;
        let last: i64 = rows.first().ok_or(DbError::NoRow)?.try_get(0)?;
        (self.ids.borrow_mut().entry(table.to_owned()).or_default()).extend(last - n + 1..=last);
        Ok(())
    }

    /// Send the gathered rows, in as few statements as their order allows (nothing when none
    /// are gathered).
    fn flush(&self) -> DbResult<()> {
        if self.pending.borrow().is_empty() {
            return Ok(());
        }
        let pending = std::mem::take(&mut *self.pending.borrow_mut());
        for run in pending.statements() {
            // The batches of a run touch no row in common, so they may go in any order: the
            // large plain INSERTs by COPY first, the rest as one statement.
            let (copies, rest): (Vec<usize>, Vec<usize>) = run
                .iter()
                .partition(|&&i| pending.copy(i, COPY_ROWS).is_some());
            for i in copies {
                self.copy_in(&pending, i)?;
            }
            if rest.is_empty() {
                continue;
            }
            let types = (pending.sqls(&rest))
                .map(|sql| Ok(self.statement(sql)?.params().to_vec()))
                .collect::<DbResult<Vec<_>>>()?;
            let text = pending.text(&rest, &types)?;
            let statement = self.gathered_statement(&text)?;
            let arrays = pending.arrays(&rest);
            let params: Vec<&(dyn ToSql + Sync)> =
                arrays.iter().map(|a| a as &(dyn ToSql + Sync)).collect();
            self.trip()?.execute(&statement, &params)?;
        }
        Ok(())
    }

    /// Send batch `i`'s rows by `COPY .. FROM STDIN (FORMAT binary)`, each value of the type
    /// the server inferred for the one-row INSERT's parameter (two round trips: the COPY
    /// asked for, the rows and their end).
    fn copy_in(&self, pending: &batch::Pending, i: usize) -> DbResult<()> {
        let one = [i];
        let (Some(text), Some(sql)) = (pending.copy(i, COPY_ROWS), pending.sqls(&one).next())
        else {
            return Ok(());
        };
        let mut types = Vec::new();
        if pending.with_id(i) {
            types.push(Type::INT8);
        }
        types.extend(self.statement(sql)?.params().iter().cloned());
        self.trips.set(self.trips.get() + 1);
        let mut client = self.trip()?;
        let mut writer = BinaryCopyInWriter::new(client.copy_in(&text)?, &types);
        for row in pending.rows(i) {
            writer.write(&refs(&row))?;
        }
        writer.finish()?;
        Ok(())
    }

    fn gathered_statement(&self, text: &str) -> DbResult<Statement> {
        if let Some(s) = self.gathered.borrow().get(text) {
            return Ok(s.clone());
        }
        let statement = self.trip()?.prepare(text)?;
        (self.gathered.borrow_mut()).insert(text.to_owned(), statement.clone());
        Ok(statement)
    }

    /// Open a transaction (`begin`: `BEGIN` or a stronger one); one at a time.
    pub(super) fn begin(&self, begin: &str) -> DbResult<PgTx<'_>> {
        self.hold(begin)?;
        Ok(PgTx {
            conn: self,
            open: true,
        })
    }

    /// Open a transaction (`begin`) and run `sql` in it, in one round trip (the simple
    /// protocol: no parameters); the first column of its first row, as text (`None`: no row or
    /// NULL). If either fails, whatever was begun is rolled back and the error returned.
    pub(super) fn begin_reading(
        &self,
        begin: &str,
        sql: &str,
    ) -> DbResult<(PgTx<'_>, Option<String>)> {
        if self.in_transaction.get() {
            return Err(DbError::Sql(
                "a transaction is already open on this connection".into(),
            ));
        }
        self.flush()?;
        let answer = self.trip()?.simple_query(&format!("{begin}; {sql}"));
        let messages = match answer {
            Ok(messages) => messages,
            Err(e) => {
                // The BEGIN may have run before the read failed.
                let _ = self.batch_now("ROLLBACK");
                return Err(e.into());
            }
        };
        self.in_transaction.set(true);
        let value = messages.iter().find_map(|m| match m {
            postgres::SimpleQueryMessage::Row(row) => Some(row.get(0).map(str::to_owned)),
            _ => None,
        });
        Ok((
            PgTx {
                conn: self,
                open: true,
            },
            value.flatten(),
        ))
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
    /// Send the gathered rows, then COMMIT; if they fail, the transaction is rolled back.
    pub fn commit(mut self) -> DbResult<()> {
        if let Err(e) = self.conn.flush() {
            let _ = self.end("ROLLBACK");
            return Err(e);
        }
        self.end("COMMIT")
    }

    pub fn rollback(mut self) -> DbResult<()> {
        self.end("ROLLBACK")
    }

    fn end(&mut self, how: &str) -> DbResult<()> {
        self.open = false;
        self.conn.in_transaction.set(false);
        self.conn.pending.borrow_mut().clear();
        let ended = self.conn.batch_now(how);
        self.conn.settle_taken(how == "COMMIT" && ended.is_ok());
        ended
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
        Value::Ids(_) => "a list of keys",
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
            Value::Ids(ids) => match *ty {
                Type::INT8_ARRAY => ids.to_sql(ty, out),
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

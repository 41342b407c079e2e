//! The PostgreSQL arm's gathered statements (issue 42, docs/ha.md "The ingest form on
//! PostgreSQL"): inside a transaction, a one-row `INSERT INTO t (cols) VALUES (?1, .., ?N)`
//! given to [`Db::insert_id`](super::super::Db::insert_id) or
//! [`Db::insert`](super::super::Db::insert), and a one-row `UPDATE t SET .. WHERE key = ?1`
//! given to [`Db::update`](super::super::Db::update) (`shape.rs`), is not sent at once. Its
//! values join the other rows of the same statement, and the gathered statements go to the
//! server over arrays (`INSERT INTO t (cols) SELECT unnest($1::type[]), ...`, `UPDATE t
//! SET c = gathered.p2 FROM unnest(...) AS gathered(p1, ..) WHERE t.key = gathered.p1`), as
//! few statements as their order allows (several as data-modifying `WITH` parts of one), before
//! the connection's next other statement or the COMMIT. So a group of N new requests, or N
//! answers of the MSS, costs one round trip, not N.
//!
//! **Order.** Every other statement sees what it would have seen (the rows are sent before
//! it), so the ledger's logic reads as on SQLite. Among the gathered rows, two that touch the
//! same row of a table (they agree on its key column; or their key columns differ, or a key is
//! not a plain integer or text, and they might) keep their order: the later goes to a later
//! batch, and two batches that touch the same row never share a statement (the parts of one
//! statement see one snapshot, and PostgreSQL updates a row once per statement). Rows that
//! touch different rows commute, and are gathered in the first batch of their statement that
//! follows everything they must follow. What differs from SQLite: an error (a broken key) is
//! reported by the statement that sends the rows or by COMMIT, and the whole group is rolled
//! back either way.
//!
//! A row gathered by `insert_id` gets its id before it is written, from ids reserved from its
//! table's identity sequence (`nextval`, in blocks; an id reserved and not used is a gap, as a
//! rolled-back INSERT leaves one).

use std::collections::HashSet;

use postgres::types::Type;

use super::Bind;
use crate::ledger::db::{DbError, DbResult, Value};
use crate::ledger::postgres::placeholders;

mod shape;

pub(in crate::ledger::db) use shape::{shape, Kind, Shape};

/// A bound value kept until the rows are sent.
#[derive(Debug, Clone, PartialEq)]
enum Owned {
    Null,
    Integer(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
    Wide(i128),
    Ids(Vec<i64>),
}

impl Owned {
    fn of(v: Value<'_>) -> Owned {
        match v {
            Value::Null => Owned::Null,
            Value::Integer(i) => Owned::Integer(i),
            Value::Real(f) => Owned::Real(f),
            Value::Text(s) => Owned::Text(s.to_owned()),
            Value::Blob(b) => Owned::Blob(b.to_vec()),
            Value::Wide(w) => Owned::Wide(w),
            Value::Ids(ids) => Owned::Ids(ids.to_vec()),
        }
    }

    fn value(&self) -> Value<'_> {
        match self {
            Owned::Null => Value::Null,
            Owned::Integer(i) => Value::Integer(*i),
            Owned::Real(f) => Value::Real(*f),
            Owned::Text(s) => Value::Text(s),
            Owned::Blob(b) => Value::Blob(b),
            Owned::Wide(w) => Value::Wide(*w),
            Owned::Ids(ids) => Value::Ids(ids),
        }
    }

    /// The value as a row's key, when it is one that can be compared (an integer or text).
    fn key(&self) -> Option<Key> {
        match self {
            Owned::Integer(i) => Some(Key::Integer(*i)),
            Owned::Text(s) => Some(Key::Text(s.clone())),
            _ => None,
        }
    }
}

/// One value of what a gathered row is known by in its table.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Integer(i64),
    Text(String),
}

/// Which rows of a table a row or a batch touches: those with these values (`keys`) in these
/// columns (`Shape::key`), or any row when a value could not be compared or a column was not
/// given (`any`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Touch {
    table: String,
    columns: Vec<String>,
    keys: HashSet<Vec<Key>>,
    any: bool,
}

impl Touch {
    fn of(shape: &Shape, with_id: bool, row: &[Owned]) -> Touch {
        let (columns, at) = shape.key(with_id);
        let key = at.and_then(|at| {
            (at.iter())
                .map(|&i| row.get(i).and_then(Owned::key))
                .collect::<Option<Vec<Key>>>()
        });
        Touch {
            table: shape.table.clone(),
            columns,
            any: key.is_none(),
            keys: key.into_iter().collect(),
        }
    }

    /// Whether the two may touch one row: same table, and a key in common, key columns that
    /// differ, or a key that could not be compared.
    fn meets(&self, other: &Touch) -> bool {
        self.table == other.table
            && (self.columns != other.columns
                || self.any
                || other.any
                || !self.keys.is_disjoint(&other.keys))
    }

    fn add(&mut self, other: Touch) {
        self.any |= other.any;
        self.keys.extend(other.keys);
    }
}

/// The gathered rows of one statement (with the id column first when `insert_id` gave the ids),
/// column by column, and the rows of tables they touch.
#[derive(Debug)]
struct Batch {
    sql: String,
    shape: Shape,
    with_id: bool,
    columns: Vec<Vec<Owned>>,
    touch: Touch,
}

impl Batch {
    /// Its part of a statement, its arrays numbered from `$next` (advanced past them), each of
    /// the type the server inferred for its one-row form (`types`).
    fn text(&self, types: &[Type], next: &mut usize) -> DbResult<String> {
        let arrays: Vec<String> = (self.with_id.then_some(&Type::INT8).into_iter())
            .chain(types)
            .map(|ty| {
                let p = format!("${next}::\"{}\".\"{}\"[]", ty.schema(), ty.name());
                *next += 1;
                p
            })
            .collect();
        let table = &self.shape.table;
        Ok(match &self.shape.kind {
            // Each array unnested in the select list, in step: the server reads them element
            // by element, where `FROM unnest(a, b, ..)` first copies each into a store of its
            // own (the form measured a third slower on the 29 columns of a request, docs/ha.md).
            Kind::Insert { columns, conflict } => {
                let id = if self.with_id { "id, " } else { "" };
                let unnested: Vec<String> = arrays.iter().map(|a| format!("unnest({a})")).collect();
                let unnested = unnested.join(", ");
                format!("INSERT INTO {table} ({id}{columns}) SELECT {unnested}{conflict}")
            }
            Kind::Update { set, key } => {
                let set = placeholders::rename(set, |n| format!("gathered.p{n}"))
                    .map_err(|e| DbError::Sql(e.to_string()))?;
                let names: Vec<String> = (1..=self.shape.params).map(|n| format!("p{n}")).collect();
                format!(
                    "UPDATE {table} SET {set} FROM unnest({}) AS gathered({}) \
                     WHERE {table}.{key} = gathered.p1",
                    arrays.join(", "),
                    names.join(", ")
                )
            }
        })
    }
}

/// The rows gathered in the open transaction, in batches whose order keeps the order of rows
/// that touch one row.
#[derive(Debug, Default)]
pub(in crate::ledger::db) struct Pending {
    batches: Vec<Batch>,
}

impl Pending {
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    pub fn clear(&mut self) {
        self.batches.clear();
    }

    /// Gather one row of `sql` (of shape `shape`), with `id` as its first column when given.
    pub fn push<'v>(
        &mut self,
        sql: &str,
        shape: &Shape,
        id: Option<i64>,
        values: impl IntoIterator<Item = Value<'v>>,
    ) -> DbResult<()> {
        let row: Vec<Owned> = (id.map(Value::Integer).into_iter())
            .chain(values)
            .map(Owned::of)
            .collect();
        let with_id = id.is_some();
        let want = shape.params + usize::from(with_id);
        if row.len() != want {
            return Err(DbError::Sql(format!(
                "{} values for the {} parameters of a statement on {}",
                row.len() - usize::from(with_id),
                shape.params,
                shape.table
            )));
        }
        let touch = Touch::of(shape, with_id, &row);
        // After every batch that touches the same row: the first of its statement there.
        let after = (self.batches.iter())
            .rposition(|b| b.touch.meets(&touch))
            .map_or(0, |i| i + 1);
        let found = (self.batches[after..].iter())
            .position(|b| b.sql == sql && b.with_id == with_id)
            .map(|i| after + i);
        let i = match found {
            Some(i) => i,
            None => {
                self.batches.push(Batch {
                    sql: sql.to_owned(),
                    shape: shape.clone(),
                    with_id,
                    columns: vec![Vec::new(); want],
                    touch: Touch {
                        keys: HashSet::new(),
                        any: false,
                        ..touch.clone()
                    },
                });
                self.batches.len() - 1
            }
        };
        let batch = &mut self.batches[i];
        batch.touch.add(touch);
        for (column, v) in batch.columns.iter_mut().zip(row) {
            column.push(v);
        }
        Ok(())
    }

    /// The statements to send, in order: runs of batches (by index) of which no two touch one
    /// row, so that within a run they may go in any order.
    pub fn statements(&self) -> Vec<Vec<usize>> {
        let mut out: Vec<Vec<usize>> = Vec::new();
        for (i, b) in self.batches.iter().enumerate() {
            let joins = out.last().is_some_and(|run| {
                (run.iter()).all(|&other| !self.batches[other].touch.meets(&b.touch))
            });
            match out.last_mut() {
                Some(run) if joins => run.push(i),
                _ => out.push(vec![i]),
            }
        }
        out
    }

    /// The one-row statements (their `?N` text) of these batches, in order.
    pub fn sqls<'a>(&'a self, batches: &'a [usize]) -> impl Iterator<Item = &'a str> {
        batches.iter().map(|&i| self.batches[i].sql.as_str())
    }

    /// The text of the statement that writes these batches' rows, given each batch's parameter
    /// types (as the server inferred them for its one-row form, in [`Pending::sqls`]' order).
    pub fn text(&self, batches: &[usize], types: &[Vec<Type>]) -> DbResult<String> {
        let mut next = 1;
        let parts: Vec<String> = (batches.iter().zip(types))
            .map(|(&i, types)| self.batches[i].text(types, &mut next))
            .collect::<DbResult<_>>()?;
        Ok(match parts.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, first)) => {
                let with: Vec<String> = (first.iter().enumerate())
                    .map(|(i, p)| format!("gathered_{i} AS ({p})"))
                    .collect();
                format!("WITH {} {last}", with.join(", "))
            }
            None => String::new(),
        })
    }

    /// Each column's values of these batches, as arrays to bind in [`Pending::text`]'s order.
    pub fn arrays(&self, batches: &[usize]) -> Vec<Vec<Bind<'_>>> {
        (batches.iter())
            .flat_map(|&i| self.batches[i].columns.iter())
            .map(|c| c.iter().map(|v| Bind(v.value())).collect())
            .collect()
    }

    /// The `COPY .. FROM STDIN (FORMAT binary)` of batch `i` when it is a plain INSERT of at
    /// least `rows` rows (the server reads COPY's rows for less than an INSERT's arrays, and a
    /// large group pays COPY's extra round trip once); `None` otherwise.
    pub fn copy(&self, i: usize, rows: usize) -> Option<String> {
        let b = &self.batches[i];
        match &b.shape.kind {
            Kind::Insert { columns, conflict }
                if conflict.is_empty() && b.columns.first().is_some_and(|c| c.len() >= rows) =>
            {
                let id = if b.with_id { "id, " } else { "" };
                let table = &b.shape.table;
                Some(format!(
                    "COPY {table} ({id}{columns}) FROM STDIN (FORMAT binary)"
                ))
            }
            _ => None,
        }
    }

    /// Whether batch `i`'s rows begin with the id the layer gave them.
    pub fn with_id(&self, i: usize) -> bool {
        self.batches[i].with_id
    }

    /// Batch `i`'s rows, each as its values to bind, in order.
    pub fn rows(&self, i: usize) -> impl Iterator<Item = Vec<Bind<'_>>> {
        let columns = &self.batches[i].columns;
        let n = columns.first().map_or(0, Vec::len);
        (0..n).map(move |r| columns.iter().map(|c| Bind(c[r].value())).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REQUEST: &str = "INSERT INTO requests (station, size) VALUES (?1, ?2)";
    const KEY: &str = "INSERT INTO idempotency (id, fingerprint) VALUES (?1, ?2)";
    const SENT: &str = "UPDATE requests SET sent = ?2 WHERE id = ?1";
    const STATE: &str = "UPDATE requests SET state = ?2, at = COALESCE(at, ?3) WHERE id = ?1";

    fn push(p: &mut Pending, sql: &str, id: Option<i64>, values: &[Value<'_>]) {
        let shape = shape(sql).expect("gathered");
        p.push(sql, &shape, id, values.iter().copied())
            .expect("a row");
    }

    /// Each statement's batches as (its one-row statement, how many rows).
    fn plan(p: &Pending) -> Vec<Vec<(&str, usize)>> {
        (p.statements().into_iter())
            .map(|run| {
                (run.iter())
                    .map(|&i| (p.batches[i].sql.as_str(), p.batches[i].columns[0].len()))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn rows_of_two_statements_become_one_statement_over_arrays() {
        let mut p = Pending::default();
        for id in [7, 8] {
            push(
                &mut p,
                REQUEST,
                Some(id),
                &[Value::Text("st"), Value::Integer(id)],
            );
            push(&mut p, KEY, None, &[Value::Integer(id), Value::Null]);
        }
        let [statement] = &p.statements()[..] else {
            panic!("one statement: {:?}", p.statements());
        };
        let types = [vec![Type::TEXT, Type::INT8], vec![Type::INT8, Type::INT8]];
        assert_eq!(
            p.text(statement, &types).expect("text"),
            "WITH gathered_0 AS (INSERT INTO requests (id, station, size) SELECT \
             unnest($1::\"pg_catalog\".\"int8\"[]), unnest($2::\"pg_catalog\".\"text\"[]), \
             unnest($3::\"pg_catalog\".\"int8\"[])) INSERT INTO idempotency (id, fingerprint) \
             SELECT unnest($4::\"pg_catalog\".\"int8\"[]), unnest($5::\"pg_catalog\".\"int8\"[])"
        );
        let arrays = p.arrays(statement);
        let ids: Vec<Value<'_>> = arrays[0].iter().map(|b| b.0).collect();
        assert_eq!(ids, [Value::Integer(7), Value::Integer(8)]);
        assert_eq!(arrays.len(), 5);
        let sa = shape(REQUEST).expect("a");
        let wrong = p.push(REQUEST, &sa, Some(9), [Value::Text("only one")]);
        assert!(matches!(wrong, Err(DbError::Sql(_))), "{wrong:?}");
    }

    #[test]
    fn updates_of_other_rows_join_the_inserts_and_name_their_rows_by_key() {
        let mut p = Pending::default();
        push(
            &mut p,
            REQUEST,
            Some(10),
            &[Value::Text("st"), Value::Integer(1)],
        );
        for id in [3, 4] {
            push(
                &mut p,
                STATE,
                None,
                &[
                    Value::Integer(id),
                    Value::Text("submitted"),
                    Value::Integer(5),
                ],
            );
        }
        push(
            &mut p,
            REQUEST,
            Some(11),
            &[Value::Text("st"), Value::Integer(1)],
        );
        assert_eq!(plan(&p), [vec![(REQUEST, 2), (STATE, 2)]]);
        let types = [
            vec![Type::TEXT, Type::INT8],
            vec![Type::INT8, Type::TEXT, Type::INT8],
        ];
        let text = p.text(&[0, 1], &types).expect("text");
        assert!(
            text.ends_with(
                "UPDATE requests SET state = gathered.p2, at = COALESCE(at, gathered.p3) FROM \
                 unnest($4::\"pg_catalog\".\"int8\"[], $5::\"pg_catalog\".\"text\"[], \
                 $6::\"pg_catalog\".\"int8\"[]) AS gathered(p1, p2, p3) WHERE requests.id = \
                 gathered.p1"
            ),
            "{text}"
        );
    }

    #[test]
    fn upserts_are_known_by_their_whole_conflict_target() {
        const WAITS: &str = "INSERT INTO w (path, hour, bin, count) VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT(path, hour, bin) DO UPDATE SET count = w.count + excluded.count";
        const BY_B: &str = "INSERT INTO v (a, b, n) VALUES (?1, ?2, ?3) \
             ON CONFLICT(b) DO UPDATE SET n = v.n + excluded.n";
        let mut p = Pending::default();
        let (g, h) = (Value::Text("g"), Value::Integer(7));
        for bin in [1, 2, 3] {
            push(
                &mut p,
                WAITS,
                None,
                &[g, h, Value::Integer(bin), Value::Integer(1)],
            );
        }
        // The same (path, hour, bin) again: a row changed twice, so a statement of its own.
        push(
            &mut p,
            WAITS,
            None,
            &[g, h, Value::Integer(2), Value::Integer(1)],
        );
        // Known by `b`, not by its first column: the second row with b = 5 waits.
        push(
            &mut p,
            BY_B,
            None,
            &[Value::Integer(1), Value::Integer(5), Value::Integer(1)],
        );
        push(
            &mut p,
            BY_B,
            None,
            &[Value::Integer(2), Value::Integer(5), Value::Integer(1)],
        );
        assert_eq!(
            plan(&p),
            [
                vec![(WAITS, 3)],
                vec![(WAITS, 1), (BY_B, 1)],
                vec![(BY_B, 1)]
            ]
        );
    }

    #[test]
    fn rows_that_touch_one_row_keep_their_order_in_statements_of_their_own() {
        let mut p = Pending::default();
        push(
            &mut p,
            REQUEST,
            Some(10),
            &[Value::Text("st"), Value::Integer(1)],
        );
        // Row 10's update waits for its insert; row 3's joins the first batch of its statement.
        push(&mut p, SENT, None, &[Value::Integer(10), Value::Integer(1)]);
        push(&mut p, SENT, None, &[Value::Integer(3), Value::Integer(1)]);
        // Row 3 again: after its first update, in a batch of its own.
        push(&mut p, SENT, None, &[Value::Integer(3), Value::Integer(2)]);
        // Row 4 goes with the first batch of SENT that nothing of row 4 precedes.
        push(&mut p, SENT, None, &[Value::Integer(4), Value::Integer(1)]);
        // A key that cannot be compared (NULL) touches every row of its table.
        push(
            &mut p,
            STATE,
            None,
            &[Value::Null, Value::Text("x"), Value::Null],
        );
        push(&mut p, KEY, None, &[Value::Integer(10), Value::Integer(0)]);
        assert_eq!(
            plan(&p),
            [
                vec![(REQUEST, 1)],
                vec![(SENT, 3)],
                vec![(SENT, 1)],
                // Another table's row: it touches none of these, so shares the last statement.
                vec![(STATE, 1), (KEY, 1)],
            ]
        );
        let rows: Vec<Value<'_>> = p.arrays(&[1])[0].iter().map(|b| b.0).collect();
        assert_eq!(
            rows,
            [Value::Integer(10), Value::Integer(3), Value::Integer(4)]
        );
    }
}

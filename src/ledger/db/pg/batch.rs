//! The PostgreSQL arm's gathered INSERTs (issue 42, docs/ha.md "The ingest form on
//! PostgreSQL"): inside a transaction, a one-row `INSERT INTO t (cols) VALUES (?1, .., ?N)`
//! given to [`Db::insert_id`](super::super::Db::insert_id) or
//! [`Db::insert`](super::super::Db::insert) is not sent at once. Its values join the other rows
//! of the same statement, and every gathered statement goes to the server as **one** statement
//! over arrays (`INSERT INTO t (cols) SELECT * FROM unnest($1::type[], ...)`, several tables as
//! data-modifying `WITH` parts of one statement) before the connection's next other statement
//! or the COMMIT. So a group of N new requests costs one round trip, not 2N.
//!
//! Every other statement sees what it would have seen (the rows are sent before it), so the
//! ledger's logic reads as on SQLite. What differs: an INSERT's error (a broken key) is reported
//! by the statement that sends the rows, and the rows of two tables are written in the order of
//! each statement's first row (the ledger's schema has no foreign keys; a second table's rows
//! would see the first's in any case, since the constraint checks run at the statement's end).
//!
//! A row gathered by `insert_id` gets its id before it is written, from ids reserved from its
//! table's identity sequence (`nextval`, in blocks; an id reserved and not used is a gap, as a
//! rolled-back INSERT leaves one).

use postgres::types::Type;

use super::Bind;
use crate::ledger::db::{DbError, DbResult, Value};

/// A one-row INSERT that can be gathered: its table, its column list as written, and how many
/// parameters (`?1` .. `?N`, in order, one per column) it takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::ledger::db) struct Shape {
    pub table: String,
    pub columns: String,
    pub params: usize,
}

/// The shape of `sql` if it is exactly `INSERT INTO table (columns) VALUES (?1, ?2, .., ?N)`
/// (N the number of columns); anything else (a literal, a conflict clause, RETURNING) is run as
/// it is, at once.
pub(in crate::ledger::db) fn shape(sql: &str) -> Option<Shape> {
    let rest = sql.trim().strip_prefix("INSERT INTO ")?.trim_start();
    let table_end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    let (table, rest) = rest.split_at(table_end);
    let rest = rest.trim_start().strip_prefix('(')?;
    let (columns, rest) = rest.split_once(')')?;
    let values = rest.trim_start().strip_prefix("VALUES")?.trim_start();
    let values = values.strip_prefix('(')?.trim_end().strip_suffix(')')?;
    let n = columns.split(',').count();
    let numbered = values
        .split(',')
        .map(str::trim)
        .enumerate()
        .all(|(i, p)| p.strip_prefix('?') == Some((i + 1).to_string().as_str()));
    let params = values.split(',').count();
    (!table.is_empty() && numbered && params == n && !columns.contains(['(', '\'', ';'])).then(
        || Shape {
            table: table.to_string(),
            columns: columns.trim().to_string(),
            params,
        },
    )
}

/// A bound value kept until the rows are sent.
#[derive(Debug, Clone, PartialEq)]
enum Owned {
    Null,
    Integer(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
    Wide(i128),
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
        }
    }
}

/// The gathered rows of one statement (with the id column first when `insert_id` gave the ids),
/// column by column.
#[derive(Debug)]
struct Batch {
    sql: String,
    shape: Shape,
    with_id: bool,
    columns: Vec<Vec<Owned>>,
}

/// The rows gathered in the open transaction, by statement, in the order of each one's first
/// row.
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
        let want = shape.params + usize::from(id.is_some());
        if row.len() != want {
            return Err(DbError::Sql(format!(
                "{} values for the {} parameters of an INSERT into {}",
                row.len() - usize::from(id.is_some()),
                shape.params,
                shape.table
            )));
        }
        let with_id = id.is_some();
        let i = match (self.batches.iter()).position(|b| b.sql == sql && b.with_id == with_id) {
            Some(i) => i,
            None => {
                self.batches.push(Batch {
                    sql: sql.to_owned(),
                    shape: shape.clone(),
                    with_id,
                    columns: vec![Vec::new(); want],
                });
                self.batches.len() - 1
            }
        };
        for (column, v) in self.batches[i].columns.iter_mut().zip(row) {
            column.push(v);
        }
        Ok(())
    }

    /// The statements gathered (their `?N` text), each with whether its ids were given.
    pub fn statements(&self) -> impl Iterator<Item = (&str, bool)> {
        self.batches.iter().map(|b| (b.sql.as_str(), b.with_id))
    }

    /// The one statement that writes every gathered row, given each batch's parameter types
    /// (as the server inferred them for its one-row form, in [`Pending::statements`]' order).
    pub fn text(&self, types: &[Vec<Type>]) -> String {
        let mut next = 1;
        let parts: Vec<String> = (self.batches.iter().zip(types))
            .map(|(b, types)| {
                let id = if b.with_id { "id, " } else { "" };
                let arrays: Vec<String> = (b.with_id.then_some(&Type::INT8).into_iter())
                    .chain(types)
                    .map(|ty| {
                        let p = format!("${next}::\"{}\".\"{}\"[]", ty.schema(), ty.name());
                        next += 1;
                        p
                    })
                    .collect();
                format!(
                    "INSERT INTO {} ({id}{}) SELECT * FROM unnest({})",
                    b.shape.table,
                    b.shape.columns,
                    arrays.join(", ")
                )
            })
            .collect();
        match parts.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, first)) => {
                let with: Vec<String> = (first.iter().enumerate())
                    .map(|(i, p)| format!("gathered_{i} AS ({p})"))
                    .collect();
                format!("WITH {} {last}", with.join(", "))
            }
            None => String::new(),
        }
    }

    /// Each column's values, as arrays to bind in [`Pending::text`]'s order.
    pub fn arrays(&self) -> Vec<Vec<Bind<'_>>> {
        (self.batches.iter())
            .flat_map(|b| b.columns.iter())
            .map(|c| c.iter().map(|v| Bind(v.value())).collect())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_one_row_insert_of_numbered_parameters_is_gathered() {
        assert_eq!(
            shape("INSERT INTO idempotency (id, fingerprint) VALUES (?1, ?2)"),
            Some(Shape {
                table: "idempotency".into(),
                columns: "id, fingerprint".into(),
                params: 2,
            })
        );
        let ledger = crate::ledger::columns::insert_sql();
        let s = shape(ledger).expect("the accept path's INSERT");
        assert_eq!((s.table.as_str(), s.params), ("requests", 28));
        for other in [
            "INSERT INTO t (a, b) VALUES (?1, 'x')",
            "INSERT INTO t (a, b) VALUES (?2, ?1)",
            "INSERT INTO t (a, b) VALUES (?1)",
            "INSERT INTO t (a) VALUES (?1) ON CONFLICT DO NOTHING",
            "INSERT INTO t (a) VALUES (?1) RETURNING id",
            "INSERT INTO t (a) SELECT ?1",
            "INSERT INTO t (a) VALUES (?1), (?2)",
            "UPDATE t SET a = ?1",
        ] {
            assert_eq!(shape(other), None, "{other}");
        }
    }

    #[test]
    fn rows_of_two_statements_become_one_statement_over_arrays() {
        let mut p = Pending::default();
        let a = "INSERT INTO requests (station, size) VALUES (?1, ?2)";
        let b = "INSERT INTO idempotency (id, fingerprint) VALUES (?1, ?2)";
        let (sa, sb) = (shape(a).expect("a"), shape(b).expect("b"));
        for id in [7, 8] {
            p.push(a, &sa, Some(id), [Value::Text("st"), Value::Integer(id)])
                .expect("a row");
            p.push(b, &sb, None, [Value::Integer(id), Value::Null])
                .expect("a row");
        }
        let text = p.text(&[vec![Type::TEXT, Type::INT8], vec![Type::INT8, Type::INT8]]);
        assert_eq!(
            text,
            "WITH gathered_0 AS (INSERT INTO requests (id, station, size) SELECT * FROM \
             unnest($1::\"pg_catalog\".\"int8\"[], $2::\"pg_catalog\".\"text\"[], \
             $3::\"pg_catalog\".\"int8\"[])) INSERT INTO idempotency (id, fingerprint) \
             SELECT * FROM unnest($4::\"pg_catalog\".\"int8\"[], $5::\"pg_catalog\".\"int8\"[])"
        );
        let arrays = p.arrays();
        let ids: Vec<Value<'_>> = arrays[0].iter().map(|b| b.0).collect();
        assert_eq!(ids, [Value::Integer(7), Value::Integer(8)]);
        assert_eq!(arrays.len(), 5);
        let wrong = p.push(a, &sa, Some(9), [Value::Text("only one")]);
        assert!(matches!(wrong, Err(DbError::Sql(_))), "{wrong:?}");
    }
}

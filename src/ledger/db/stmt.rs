//! A cached statement of the `Db` layer ([`Stmt`]), and how SQLite binds the layer's values
//! (a list of keys, `Value::Ids`, as a JSON array for `json_each`).

use rusqlite::types::{ToSql, ToSqlOutput, ValueRef};

use super::{pg, row::Row, DbError, DbResult, Param, Value};

/// A cached statement; returned to the cache when dropped.
pub struct Stmt<'a> {
    pub(super) inner: StmtInner<'a>,
}

pub(super) enum StmtInner<'a> {
    Sqlite(rusqlite::CachedStatement<'a>),
    Postgres(&'a pg::PgConn, postgres::Statement),
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
            Value::Ids(ids) => ToSqlOutput::from(ids_json(ids)),
        }
    }
}

/// `[1,2,3]`: a list of keys as SQLite's `json_each` reads it.
fn ids_json(ids: &[i64]) -> String {
    let items: Vec<String> = ids.iter().map(i64::to_string).collect();
    format!("[{}]", items.join(","))
}

fn binds<'p>(params: &'p [&'p dyn Param]) -> impl Iterator<Item = Bind<'p>> + 'p {
    params.iter().map(|p| Bind(*p))
}

impl Stmt<'_> {
    pub fn execute(&mut self, params: &[&dyn Param]) -> DbResult<usize> {
        match &mut self.inner {
            StmtInner::Sqlite(s) => Ok(s.execute(rusqlite::params_from_iter(binds(params)))?),
            StmtInner::Postgres(c, s) => c.execute(s, &pg::values(params)?),
        }
    }

    /// [`Stmt::execute`] with the values given by an iterator (a whole record's columns).
    pub fn execute_values<'v>(
        &mut self,
        values: impl IntoIterator<Item = Value<'v>>,
    ) -> DbResult<usize> {
        match &mut self.inner {
            StmtInner::Sqlite(s) => Ok(s.execute(rusqlite::params_from_iter(values))?),
            StmtInner::Postgres(c, s) => c.execute(s, &values.into_iter().collect::<Vec<_>>()),
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
            StmtInner::Postgres(c, s) => match c.query(s, &pg::values(params)?)?.first() {
                Some(r) => f(&Row::from_postgres(r)).map(Some),
                None => Ok(None),
            },
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
        use itertools::Either;
        match &mut self.inner {
            StmtInner::Sqlite(s) => Ok(Either::Left(
                s.query_and_then(rusqlite::params_from_iter(binds(params)), move |r| {
                    f(&Row::from_sqlite(r))
                })?,
            )),
            // Collected first (the client is free for the caller's own statements meanwhile).
            StmtInner::Postgres(c, s) => {
                let rows = c.query(s, &pg::values(params)?)?;
                Ok(Either::Right(
                    rows.into_iter().map(move |r| f(&Row::from_postgres(&r))),
                ))
            }
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
            // Collected first, as `query_map`; a portal could stream a large export later.
            StmtInner::Postgres(c, s) => {
                for r in &c.query(s, &pg::values(params)?)? {
                    f(&Row::from_postgres(r))?;
                }
                Ok(())
            }
        }
    }
}

//! Which statements can be gathered, and what each one's row touches: a one-row INSERT of
//! numbered parameters (an upsert too: its conflict clause names no parameter), or a one-row
//! UPDATE by a key (`WHERE key = ?1`) whose assignments name only the other parameters.
//! Anything else (a literal among the values, RETURNING, a subquery, a WHERE with more in it)
//! is run as it is, at once.

/// A statement that can be gathered: its table, what it does, and how many parameters (`?1` ..
/// `?N`) it takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::ledger::db) struct Shape {
    pub table: String,
    pub kind: Kind,
    pub params: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::ledger::db) enum Kind {
    /// `INSERT INTO table (columns) VALUES (?1, .., ?N)`, one parameter per column, in order;
    /// then `conflict` (empty, or ` ON CONFLICT ..` without parameters).
    Insert { columns: String, conflict: String },
    /// `UPDATE table SET set WHERE key = ?1`, `set` naming `?2` .. `?N`, each at least once.
    Update { set: String, key: String },
}

impl Shape {
    /// The columns a row of this statement is known by, and where each is among the row's
    /// values (`with_id`: the layer gives the row's id as its first value): an UPDATE's key
    /// (`?1`); an upsert's conflict target; else the first column inserted. Two rows of one
    /// table touch the same row when they agree on them. `None` when a column of the conflict
    /// target is not among those inserted (the row is then taken to touch any row).
    pub fn key(&self, with_id: bool) -> (Vec<String>, Option<Vec<usize>>) {
        match &self.kind {
            Kind::Insert { .. } if with_id => (vec!["id".into()], Some(vec![0])),
            Kind::Insert { columns, conflict } => {
                let names: Vec<&str> = columns.split(',').map(str::trim).collect();
                let target: Vec<String> = match conflict.split_once('(') {
                    Some((_, rest)) => (rest.split(')').next().unwrap_or(""))
                        .split(',')
                        .map(|c| c.trim().to_string())
                        .collect(),
                    None => names.first().map(|c| c.to_string()).into_iter().collect(),
                };
                let at = (target.iter())
                    .map(|t| names.iter().position(|n| n == t))
                    .collect::<Option<Vec<usize>>>();
                (target, at)
            }
            Kind::Update { key, .. } => (vec![key.clone()], Some(vec![0])),
        }
    }
}

/// The shape of `sql` if it can be gathered.
pub(in crate::ledger::db) fn shape(sql: &str) -> Option<Shape> {
    insert(sql).or_else(|| update(sql))
}

fn insert(sql: &str) -> Option<Shape> {
    let rest = sql.trim().strip_prefix("INSERT INTO ")?.trim_start();
    let (table, rest) = identifier(rest);
    let rest = rest.trim_start().strip_prefix('(')?;
    let (columns, rest) = rest.split_once(')')?;
    let values = rest.trim_start().strip_prefix("VALUES")?.trim_start();
    let (values, conflict) = values.strip_prefix('(')?.split_once(')')?;
    let conflict = conflict.trim_end();
    if !(conflict.is_empty() || conflict.trim_start().starts_with("ON CONFLICT"))
        || !plain(conflict)
        || conflict.contains('?')
    {
        return None;
    }
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
            kind: Kind::Insert {
                columns: columns.trim().to_string(),
                conflict: conflict.to_string(),
            },
            params,
        },
    )
}

fn update(sql: &str) -> Option<Shape> {
    let rest = sql.trim().strip_prefix("UPDATE ")?.trim_start();
    let (table, rest) = identifier(rest);
    let rest = rest.trim_start().strip_prefix("SET ")?;
    let (set, condition) = rest.rsplit_once(" WHERE ")?;
    let (key, rest) = identifier(condition.trim_start());
    let rest = rest.trim_start().strip_prefix('=')?.trim();
    let params = parameters(set)?;
    let upper = set.to_ascii_uppercase();
    // Only the row's own columns: no second table, and the key itself is never assigned
    // (the row would be known by a key it no longer has).
    let plain = plain(set)
        && !set.contains('"')
        && !upper.contains(" WHERE ")
        && !upper.contains(" FROM ")
        && !assigns(set, key);
    (!table.is_empty() && !key.is_empty() && rest == "?1" && plain && params >= 2).then(|| Shape {
        table: table.to_string(),
        kind: Kind::Update {
            set: set.trim().to_string(),
            key: key.to_string(),
        },
        params,
    })
}

/// Whether `text` is plain code: no literal, quoted name, comment, second statement, subquery
/// or RETURNING, so its parameters can be renamed by a scan and its rows read by a key.
fn plain(text: &str) -> bool {
    let upper = text.to_ascii_uppercase();
    !text.contains(['\'', ';'])
        && !text.contains("--")
        && !text.contains("/*")
        && !upper.contains("SELECT")
        && !upper.contains("RETURNING")
}

/// Whether `set` assigns `column` (`column = ..` at its start or after a comma).
fn assigns(set: &str, column: &str) -> bool {
    set.split(',').any(|part| {
        (part.trim_start().strip_prefix(column))
            .is_some_and(|rest| rest.trim_start().starts_with('='))
    })
}

/// The leading SQL identifier of `text` (letters, digits, `_`), and the rest.
fn identifier(text: &str) -> (&str, &str) {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    text.split_at(end)
}

/// N when `set` names exactly the parameters `?2` .. `?N` (each at least once, none other).
fn parameters(set: &str) -> Option<usize> {
    let mut seen = Vec::new();
    let mut rest = set;
    while let Some(at) = rest.find('?') {
        let digits: String = rest[at + 1..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if digits.starts_with('0') {
            return None;
        }
        let n: usize = digits.parse().ok()?;
        if !(2..=64).contains(&n) {
            return None;
        }
        seen.push(n);
        rest = &rest[at + 1 + digits.len()..];
    }
    let max = *seen.iter().max()?;
    (2..=max).all(|k| seen.contains(&k)).then_some(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_one_row_insert_of_numbered_parameters_is_gathered() {
        assert_eq!(
            shape("INSERT INTO idempotency (id, fingerprint) VALUES (?1, ?2)"),
            Some(Shape {
                table: "idempotency".into(),
                kind: Kind::Insert {
                    columns: "id, fingerprint".into(),
                    conflict: String::new(),
                },
                params: 2,
            })
        );
        let ledger = crate::ledger::columns::insert_sql();
        let s = shape(ledger).expect("the accept path's INSERT");
        assert_eq!((s.table.as_str(), s.params), ("requests", 28));
        let names = |v: &[&str]| v.iter().map(|c| c.to_string()).collect::<Vec<_>>();
        assert_eq!(s.key(true), (names(&["id"]), Some(vec![0])));
        assert_eq!(s.key(false), (names(&["station"]), Some(vec![0])));
        // An upsert is known by its whole conflict target, each column where it is inserted.
        let upsert = shape(
            "INSERT INTO report_waits (path, hour, bin, count) VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT(hour, path, bin) DO UPDATE SET count = report_waits.count + excluded.count",
        )
        .expect("an upsert");
        assert_eq!(upsert.params, 4);
        assert_eq!(
            upsert.key(false),
            (names(&["hour", "path", "bin"]), Some(vec![1, 0, 2]))
        );
        let windows = shape(
            "INSERT INTO usage_windows(path, \"window\", usage) VALUES (?1, ?2, ?3) \
             ON CONFLICT(path, \"window\") DO UPDATE SET usage = wide_add(usage_windows.usage, excluded.usage)",
        )
        .expect("a quoted column");
        assert_eq!(windows.key(false).1, Some(vec![0, 1]));
        let elsewhere = shape("INSERT INTO f (a, b) VALUES (?1, ?2) ON CONFLICT(c) DO NOTHING");
        assert_eq!(elsewhere.expect("a target not inserted").key(false).1, None);
        let nothing = shape("INSERT INTO f (a, b) VALUES (?1, ?2) ON CONFLICT DO NOTHING");
        assert_eq!(nothing.expect("do nothing").key(false).0, names(&["a"]));
    }

    #[test]
    fn a_one_row_update_by_its_key_is_gathered() {
        let s = shape(
            "UPDATE requests SET state = ?2, mss_id = COALESCE(mss_id, ?3), \
             submitted_ms = COALESCE(submitted_ms, ?4), checked_ms = ?4 WHERE id = ?1",
        )
        .expect("the submitted UPDATE");
        assert_eq!((s.table.as_str(), s.params), ("requests", 4));
        assert_eq!(s.key(false), (vec!["id".to_string()], Some(vec![0])));
        let by_path = shape("UPDATE groups SET decayed = ?2 WHERE path = ?1").expect("by path");
        assert_eq!(by_path.params, 2);
        assert_eq!(by_path.key(false).0, ["path"]);
    }

    #[test]
    fn anything_else_is_run_at_once() {
        for other in [
            "INSERT INTO t (a, b) VALUES (?1, 'x')",
            "INSERT INTO t (a, b) VALUES (?2, ?1)",
            "INSERT INTO t (a, b) VALUES (?1)",
            "INSERT INTO t (a) VALUES (?1) ON CONFLICT(a) DO UPDATE SET b = ?2",
            "INSERT INTO t (a) VALUES (?1) ON CONFLICT(a) DO UPDATE SET b = 'x'",
            "INSERT INTO t (a) VALUES (?1) ON CONFLICT(a) DO NOTHING RETURNING a",
            "INSERT INTO t (a) VALUES (?1) ; DELETE FROM t",
            "INSERT INTO t (a) VALUES (?1) RETURNING id",
            "INSERT INTO t (a) SELECT ?1",
            "INSERT INTO t (a) VALUES (?1), (?2)",
            "UPDATE t SET a = ?1",
            "UPDATE t SET a = ?2 WHERE id = ?1 AND state = 'accepted'",
            "UPDATE t SET a = ?2 WHERE id = ?1 RETURNING a",
            "UPDATE t SET a = ?3 WHERE id = ?1",
            "UPDATE t SET a = 'x' WHERE id = ?1",
            "UPDATE t SET a = ?2, b = 'x' WHERE id = ?1",
            "UPDATE t SET a = (SELECT MAX(b) FROM t) + ?2 WHERE id = ?1",
            "UPDATE t SET a = ?2 WHERE id > ?1",
            "UPDATE t SET a = a + 1 WHERE id = ?1",
            "DELETE FROM t WHERE id = ?1",
            "UPDATE t SET a = ?2 FROM u WHERE id = ?1",
            "UPDATE t SET id = ?2 WHERE id = ?1",
            "UPDATE t SET a = ?2, id = ?3 WHERE id = ?1",
            "UPDATE t SET a = ?02 WHERE id = ?1",
            "UPDATE t SET \"a\" = ?2 WHERE id = ?1",
        ] {
            assert_eq!(shape(other), None, "{other}");
        }
    }
}

//! The few places the ledger's SQL is spelled differently on the two backends, kept here rather
//! than as `if postgres` in the ledger: a statement that needs one is written once with
//! [`spelled!`], which makes both texts at compile time (so, as every other statement, it is
//! `&'static str`, cached by its text, never built per call), and run as
//! `db.dialect().pick(&STATEMENT)`.
//!
//! The fragments:
//!
//! - `[indexed_by NAME]`: SQLite's `INDEXED BY NAME` (the planner told which partial index to
//!   read); nothing on PostgreSQL, whose planner matches a partial index's predicate itself
//!   and has no such clause.
//! - `[greatest "A", "B"]`: the larger of two values: SQLite's scalar `MAX(A, B)`, PostgreSQL's
//!   `GREATEST(A, B)` (PostgreSQL's `MAX` is only the aggregate, SQLite has no `GREATEST`).
//!   One difference: `GREATEST` ignores a NULL, `MAX` gives NULL; use it on NOT NULL values.
//! - `[is "A", "B"]` / `[is_not "A", "B"]`: null-safe (in)equality of two values: SQLite's
//!   `A IS B` / `A IS NOT B`, PostgreSQL's `A IS NOT DISTINCT FROM B` / `A IS DISTINCT FROM B`
//!   (PostgreSQL's `IS` takes only NULL, TRUE, FALSE). SQLite keeps its own text, so its plans
//!   do not change.
//! - `[in_ids "A", "?N"]`: whether A is one of a list of keys bound as `Value::Ids` (a
//!   `Vec<i64>`): SQLite's `A IN (SELECT value FROM json_each(?N))` over the list as JSON,
//!   PostgreSQL's `A = ANY(?N)` over a BIGINT[] (one statement reads a group's rows by key,
//!   each by its index, instead of one round trip per row).

/// Which SQL a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

/// A statement as each backend spells it (made by [`spelled!`]).
#[derive(Debug, Clone, Copy)]
pub struct Spelled {
    pub sqlite: &'static str,
    pub postgres: &'static str,
}

impl Dialect {
    /// The statement's text in this dialect.
    pub fn pick(self, statement: &Spelled) -> &'static str {
        match self {
            Dialect::Sqlite => statement.sqlite,
            Dialect::Postgres => statement.postgres,
        }
    }
}

/// `spelled!("SELECT ... FROM requests", [indexed_by requests_unlocated], " WHERE ...")`: a
/// [`Spelled`] whose texts are the parts concatenated, each fragment in its dialect's spelling.
macro_rules! spelled {
    ($($part:tt),+ $(,)?) => {
        $crate::ledger::db::Spelled {
            sqlite: concat!($($crate::ledger::db::spelled!(@sqlite $part)),+),
            postgres: concat!($($crate::ledger::db::spelled!(@postgres $part)),+),
        }
    };
    (@$dialect:ident $text:literal) => { $text };
    // A text shared by several statements: a macro giving a literal, in parentheses.
    (@$dialect:ident ($text:expr)) => { $text };
    (@sqlite [indexed_by $index:ident]) => { concat!(" INDEXED BY ", stringify!($index)) };
    (@postgres [indexed_by $index:ident]) => { "" };
    (@sqlite [greatest $a:literal, $b:literal]) => { concat!("MAX(", $a, ", ", $b, ")") };
    (@postgres [greatest $a:literal, $b:literal]) => { concat!("GREATEST(", $a, ", ", $b, ")") };
    (@sqlite [is $a:literal, $b:literal]) => { concat!($a, " IS ", $b) };
    (@postgres [is $a:literal, $b:literal]) => { concat!($a, " IS NOT DISTINCT FROM ", $b) };
    (@sqlite [in_ids $a:literal, $b:literal]) => {
        concat!($a, " IN (SELECT value FROM json_each(", $b, "))")
    };
    (@postgres [in_ids $a:literal, $b:literal]) => { concat!($a, " = ANY(", $b, ")") };
    (@sqlite [is_not $a:literal, $b:literal]) => { concat!($a, " IS NOT ", $b) };
    (@postgres [is_not $a:literal, $b:literal]) => { concat!($a, " IS DISTINCT FROM ", $b) };
}
pub(crate) use spelled;

#[cfg(test)]
mod tests {
    use super::*;

    const BOTH: Spelled = spelled!(
        "SELECT id FROM requests",
        [indexed_by requests_unlocated],
        " WHERE id > ",
        [greatest "?1", "next_attempt_ms"],
        " AND ",
        [is "local_file", "?2"],
        " AND ",
        [is_not "sent_attempt", "?3"],
        " AND ",
        [in_ids "id", "?4"],
    );

    #[test]
    fn each_dialect_gets_its_own_spelling_of_one_text() {
        assert_eq!(
            Dialect::Sqlite.pick(&BOTH),
            "SELECT id FROM requests INDEXED BY requests_unlocated WHERE id > MAX(?1, next_attempt_ms) \
             AND local_file IS ?2 AND sent_attempt IS NOT ?3 AND id IN (SELECT value FROM json_each(?4))"
        );
        assert_eq!(
            Dialect::Postgres.pick(&BOTH),
            "SELECT id FROM requests WHERE id > GREATEST(?1, next_attempt_ms) \
             AND local_file IS NOT DISTINCT FROM ?2 AND sent_attempt IS DISTINCT FROM ?3 \
             AND id = ANY(?4)"
        );
    }
}

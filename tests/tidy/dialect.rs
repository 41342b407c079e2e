//! The ledger's SQL spellings that only SQLite takes, found in the text of its string literals
//! (and `last_insert_rowid` in its code), so the statements a PostgreSQL ledger will share stay
//! portable (docs/ha.md, "The port": step 2 changed each in place on SQLite).

use crate::lex::is_ident;
use crate::source::{tree, Hit};

/// The ledger's files that stay SQLite's alone (docs/ha.md: the schema and its migrations, the
/// online backup, the restore's file swap), the `Db` layer (each backend's own arm) and the
/// PostgreSQL ledger's own.
pub const SQLITE_ONLY: &[&str] = &[
    "src/ledger/db.rs",
    "src/ledger/db/",
    "src/ledger/schema.rs",
    "src/ledger/backup.rs",
    "src/ledger/restore.rs",
    "src/ledger/postgres.rs",
    "src/ledger/postgres/",
];

/// The ledger's files that may name `rusqlite`: the `Db` layer itself, and the SQLite-only code
/// that reaches the connection through its escape hatch `Db::sqlite()` (docs/ha.md, step 3:
/// schema and PRAGMAs, backup, restore, the `wide_add`/`wide_sum` registration), and the
/// ingest measurement's SQLite side (`postgres/ingest_form.rs`: one group commit written with
/// the ledger's SQLite settings, beside PostgreSQL's forms, for `examples/pg_ingest.rs`).
pub const NAMES_RUSQLITE: &[&str] = &[
    "src/ledger/db.rs",
    "src/ledger/db/",
    "src/ledger/schema.rs",
    "src/ledger/backup.rs",
    "src/ledger/restore.rs",
    "src/ledger/wide.rs",
    "src/ledger/postgres/ingest_form.rs",
];

/// Product lines of `src/ledger` outside [`NAMES_RUSQLITE`] whose code names `rusqlite` (the
/// writer included: docs/ha.md, step 3).
pub fn rusqlite_outside_the_db_layer() -> Vec<Hit<'static>> {
    let allowed = |h: &Hit<'_>| NAMES_RUSQLITE.iter().any(|p| h.file.path.starts_with(p));
    tree()
        .product("src/ledger")
        .filter(|h| !allowed(h))
        .filter(|h| names_rusqlite(&h.line.code))
        .collect()
}

/// Whether a line's code view (comments and literals blanked) names the crate `rusqlite`.
pub fn names_rusqlite(code: &str) -> bool {
    word_starts(code, "rusqlite").next().is_some()
}

/// SQLite-only spellings kept on purpose in a shared file, each with why: `(file, spelling)`.
/// `last_insert_rowid` in the accept path: `INSERT ... RETURNING id` made batch ingest about a
/// quarter slower on SQLite (docs/ha.md, step 2); the `Db` layer will give each backend its own.
pub const KEPT_ON_PURPOSE: &[(&str, &str)] =
    &[("src/ledger/writer/accept.rs", "last_insert_rowid")];

/// A check of a line's literal text (lowercased), and what to write instead when it fires.
type Check = (fn(&str) -> bool, &'static str);

/// Product lines of `src/ledger` outside [`SQLITE_ONLY`] with a SQLite-only spelling, each
/// with what to write instead.
pub fn sqlite_only_spellings() -> Vec<(Hit<'static>, &'static str)> {
    let shared = |h: &Hit<'_>| !SQLITE_ONLY.iter().any(|p| h.file.path.starts_with(p));
    tree()
        .product("src/ledger")
        .filter(shared)
        .filter(|h| {
            !KEPT_ON_PURPOSE
                .iter()
                .any(|(file, word)| h.file.path == *file && h.line.code.contains(word))
        })
        .filter_map(|h| spelling(&h.line.raw, &h.line.code).map(|fix| (h, fix)))
        .collect()
}

/// The first SQLite-only spelling of a line (`raw` as written, `code` its code view), as what
/// to write instead.
pub fn spelling(raw: &str, code: &str) -> Option<&'static str> {
    if raw.trim_start().starts_with("//") {
        return None;
    }
    if code.contains("last_insert_rowid") {
        return Some("`INSERT ... RETURNING id`, not `last_insert_rowid()`");
    }
    let sql = literal_text(raw, code).to_ascii_lowercase();
    let checks: [Check; 4] = [
        (
            |s| s.contains("insert or "),
            "`INSERT ... ON CONFLICT DO NOTHING` (or `DO UPDATE`), not `INSERT OR IGNORE/REPLACE`",
        ),
        (|s| has_word(s, "rowid"), "`id`, not `rowid`"),
        (
            |s| unquoted_word(s, "window"),
            "`\"window\"` quoted (a reserved word in PostgreSQL)",
        ),
        (
            unqualified_target,
            "the target column qualified beside `excluded` (`t.x + excluded.x`)",
        ),
    ];
    checks
        .into_iter()
        .find(|(bad, _)| bad(&sql))
        .map(|(_, fix)| fix)
}

/// The line's string literals' contents, other characters as spaces (columns kept).
fn literal_text(raw: &str, code: &str) -> String {
    raw.chars()
        .zip(code.chars().chain(std::iter::repeat(' ')))
        .map(|(r, c)| if c == ' ' && r != ' ' { r } else { ' ' })
        .collect()
}

/// Starts of `word` in `s` as a whole identifier.
fn word_starts<'a>(s: &'a str, word: &'a str) -> impl Iterator<Item = usize> + 'a {
    s.match_indices(word).map(|(at, _)| at).filter(move |&at| {
        let before = s[..at].chars().next_back().is_some_and(is_ident);
        let after = s[at + word.len()..].chars().next().is_some_and(is_ident);
        !before && !after
    })
}

fn has_word(s: &str, word: &str) -> bool {
    word_starts(s, word).next().is_some()
}

/// `word` as an identifier not inside double quotes.
fn unquoted_word(s: &str, word: &str) -> bool {
    word_starts(s, word).any(|at| !s[..at].ends_with('"'))
}

/// `x + excluded.` or `wide_add(x, excluded.`: a target column named bare in `DO UPDATE`,
/// which PostgreSQL calls ambiguous.
fn unqualified_target(s: &str) -> bool {
    s.match_indices("excluded.").any(|(at, _)| {
        let before = s[..at].trim_end();
        let Some(before) = before.strip_suffix(['+', ',', '-']) else {
            return false;
        };
        let before = before.trim_end();
        let start = (before.char_indices().rev())
            .take_while(|&(_, c)| is_ident(c))
            .last()
            .map_or(before.len(), |(i, _)| i);
        let (rest, name) = before.split_at(start);
        !name.is_empty() && !rest.ends_with('.') && !name.starts_with(|c: char| c.is_ascii_digit())
    })
}

/// Whether `line` has a SQLite-only spelling, its code view made as the tree's is.
fn found(line: &str) -> bool {
    let chars: Vec<char> = line.chars().collect();
    let code: String = crate::lex::blank(&chars).into_iter().collect();
    spelling(line, &code).is_some()
}

// The reader's own test (in `NOT_INVARIANTS`): each spelling is told from its portable one.
#[test]
fn each_sqlite_only_spelling_is_found_and_its_portable_one_is_not() {
    let pairs = [
        (
            r#"    "INSERT OR IGNORE INTO groups(path) VALUES (?1)","#,
            r#"    "INSERT INTO groups(path) VALUES (?1) ON CONFLICT DO NOTHING","#,
        ),
        (
            r#"    Ok(self.tx.last_insert_rowid())"#,
            r#"    .query_row(params, |r| r.get(0))"#,
        ),
        (
            r#"    "SELECT id FROM requests ORDER BY rowid","#,
            r#"    "SELECT id FROM requests ORDER BY id","#,
        ),
        (
            r#"    "SELECT path, window FROM usage_windows","#,
            r#"    "SELECT path, \"window\" FROM usage_windows","#,
        ),
        (
            r#"    "DO UPDATE SET pending = pending + excluded.pending","#,
            r#"    "DO UPDATE SET pending = groups.pending + excluded.pending","#,
        ),
        (
            r#"    "DO UPDATE SET usage = wide_add(usage, excluded.usage)","#,
            r#"    "DO UPDATE SET usage = wide_add(groups.usage, excluded.usage)","#,
        ),
    ];
    for (sqlite, portable) in pairs {
        assert!(found(sqlite), "not found: {sqlite}");
        assert!(!found(portable), "found in a portable spelling: {portable}");
    }
    assert!(
        !found("    let (path, window) = row?;"),
        "Rust code is not SQL"
    );
    assert!(!found(
        "    \"ON CONFLICT(key) DO UPDATE SET value = excluded.value\","
    ));
}

// The reader's own test (in `NOT_INVARIANTS`): `rusqlite` in code, not in a comment or text.
#[test]
fn rusqlite_is_found_in_code_and_not_in_comments_or_literals() {
    let view = |line: &str| -> String {
        let chars: Vec<char> = line.chars().collect();
        crate::lex::blank(&chars).into_iter().collect()
    };
    for named in [
        "use rusqlite::{params, Connection};",
        "fn f(c: &rusqlite::Connection) -> rusqlite::Result<()> {",
        "    let n = x.map_err(|e: rusqlite::Error| e)?;",
    ] {
        assert!(names_rusqlite(&view(named)), "not found: {named}");
    }
    for not in [
        "// rusqlite's cache",
        "    let s = \"rusqlite\";",
        "    my_rusqlite_shim(x);",
    ] {
        assert!(!names_rusqlite(&view(not)), "found: {not}");
    }
}

//! SQLite's numbered parameters (`?1` .. `?N`) as PostgreSQL's (`$1` .. `$N`): the ledger's
//! statements are written once, for SQLite, and rewritten once per prepared statement for
//! PostgreSQL (docs/ha.md, "The interface").
//!
//! A pure scan over the SQL text. It leaves alone what is not code: string literals (`'...'`,
//! `''` inside being a quote), quoted identifiers (`"..."`, with `""`), line comments (`--` to
//! the end of the line) and block comments (`/* ... */`). A bare `?` (SQLite's next-number
//! parameter) is refused: the ledger always numbers its parameters, so a bare one is a slip
//! that would bind the wrong value on one backend. So is a `/*` inside a block comment:
//! PostgreSQL nests block comments and SQLite does not, so the two backends would read the
//! rest of the statement differently (the test on a real server found it).

/// Why a statement's text cannot be rewritten (the byte offset is into the SQL text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlaceholderError {
    #[error(
        "SQL at byte {at}: a bare `?` (the ledger numbers its parameters: write `?1`, `?2`, ...)"
    )]
    Bare { at: usize },
    #[error("SQL at byte {at}: `?0` (parameters are numbered from 1)")]
    Zero { at: usize },
    #[error("SQL at byte {at}: a {what} that never ends")]
    Unterminated { at: usize, what: &'static str },
    #[error("SQL at byte {at}: `/*` inside a block comment (PostgreSQL nests block comments, SQLite does not)")]
    NestedComment { at: usize },
}

/// `sql` with every `?N` outside literals, quoted identifiers and comments written `$N`.
pub fn rewrite(sql: &str) -> Result<String, PlaceholderError> {
    rename(sql, |n| format!("${n}"))
}

/// `sql` with every `?N` outside literals, quoted identifiers and comments written as `to`
/// spells it, given N's digits (a gathered UPDATE's `?3` becomes a column of its rows,
/// `db/pg/batch.rs`).
pub fn rename(sql: &str, to: impl Fn(&str) -> String) -> Result<String, PlaceholderError> {
    let bytes = sql.as_bytes();
    let mut out = String::with_capacity(sql.len());
    // `copied`: where the text not yet copied to `out` starts.
    let (mut i, mut copied) = (0, 0);
    while i < bytes.len() {
        let next = match bytes[i] {
            b'\'' => quoted(bytes, i, b'\'', "string literal")?,
            b'"' => quoted(bytes, i, b'"', "quoted identifier")?,
            b'-' if bytes.get(i + 1) == Some(&b'-') => line_comment(bytes, i),
            b'/' if bytes.get(i + 1) == Some(&b'*') => block_comment(bytes, i)?,
            b'?' => {
                let end = digits_end(bytes, i + 1);
                if end == i + 1 {
                    return Err(PlaceholderError::Bare { at: i });
                }
                if sql[i + 1..end].bytes().all(|d| d == b'0') {
                    return Err(PlaceholderError::Zero { at: i });
                }
                out.push_str(&sql[copied..i]);
                out.push_str(&to(&sql[i + 1..end]));
                copied = end;
                end
            }
            _ => i + 1,
        };
        i = next;
    }
    out.push_str(&sql[copied..]);
    Ok(out)
}

/// The end (one past the closing quote) of the literal or identifier opened at `start`; a
/// doubled quote inside is the quote itself.
fn quoted(
    bytes: &[u8],
    start: usize,
    quote: u8,
    what: &'static str,
) -> Result<usize, PlaceholderError> {
    let mut i = start + 1;
    while i < bytes.len() {
        if bytes[i] == quote {
            if bytes.get(i + 1) == Some(&quote) {
                i += 2;
                continue;
            }
            return Ok(i + 1);
        }
        i += 1;
    }
    Err(PlaceholderError::Unterminated { at: start, what })
}

/// The end of the `--` comment at `start`: after its newline, or the end of the text.
fn line_comment(bytes: &[u8], start: usize) -> usize {
    bytes[start..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(bytes.len(), |p| start + p + 1)
}

/// The end (past `*/`) of the block comment at `start`.
/// A `/*` before the end is refused: PostgreSQL would read it as a nested comment.
fn block_comment(bytes: &[u8], start: usize) -> Result<usize, PlaceholderError> {
    let body = &bytes[start + 2..];
    let end = (body.windows(2).position(|w| w == b"*/")).ok_or(PlaceholderError::Unterminated {
        at: start,
        what: "block comment",
    })?;
    match body.windows(2).position(|w| w == b"/*") {
        Some(p) if p < end => Err(PlaceholderError::NestedComment { at: start + 2 + p }),
        _ => Ok(start + 2 + end + 2),
    }
}

/// One past the last ASCII digit of the run starting at `start`.
fn digits_end(bytes: &[u8], start: usize) -> usize {
    bytes[start..]
        .iter()
        .position(|b| !b.is_ascii_digit())
        .map_or(bytes.len(), |p| start + p)
}

#[cfg(test)]
mod tests {
    /// Against a real server.
    mod cluster;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn numbered_parameters_become_dollars() {
        assert_eq!(
            rewrite("UPDATE groups SET decayed = ?2 WHERE path = ?1").as_deref(),
            Ok("UPDATE groups SET decayed = $2 WHERE path = $1")
        );
        assert_eq!(rewrite("VALUES (?10,?2)").as_deref(), Ok("VALUES ($10,$2)"));
        assert_eq!(rewrite("?1").as_deref(), Ok("$1"));
        assert_eq!(rewrite("").as_deref(), Ok(""));
    }

    #[test]
    fn literals_identifiers_and_comments_are_left_alone() {
        let sql = "SELECT 'a ?1 ''?2'' b', \"c ?3 \"\"?4\"\"\" -- ?5 '\n\
                   /* ?6 ' \" */ FROM t WHERE x = ?7 -- end ?8";
        let expected = "SELECT 'a ?1 ''?2'' b', \"c ?3 \"\"?4\"\"\" -- ?5 '\n\
                        /* ?6 ' \" */ FROM t WHERE x = $7 -- end ?8";
        assert_eq!(rewrite(sql).as_deref(), Ok(expected));
        // Non-ASCII text around and inside literals is copied as it is.
        assert_eq!(
            rewrite("SELECT 'é?1', ?1 || 'ü'").as_deref(),
            Ok("SELECT 'é?1', $1 || 'ü'")
        );
    }

    #[test]
    fn a_bare_or_zero_parameter_and_an_unended_quote_are_refused() {
        assert_eq!(
            rewrite("SELECT ?1, ?"),
            Err(PlaceholderError::Bare { at: 11 })
        );
        assert_eq!(
            rewrite("WHERE a = ? AND b = ?1"),
            Err(PlaceholderError::Bare { at: 10 })
        );
        assert_eq!(rewrite("x = ?00"), Err(PlaceholderError::Zero { at: 4 }));
        assert!(matches!(
            rewrite("SELECT 'open ?1"),
            Err(PlaceholderError::Unterminated { at: 7, .. })
        ));
        assert!(matches!(
            rewrite("SELECT \"open"),
            Err(PlaceholderError::Unterminated { at: 7, .. })
        ));
        assert!(matches!(
            rewrite("SELECT 1 /* ?1 *"),
            Err(PlaceholderError::Unterminated { at: 9, .. })
        ));
        // `/*` in a comment: a nested comment to PostgreSQL, text to SQLite.
        assert_eq!(
            rewrite("SELECT ?1 /* a /* b */, ?2"),
            Err(PlaceholderError::NestedComment { at: 15 })
        );
        assert_eq!(
            rewrite("SELECT ?1 /*a/*/, ?2"),
            Err(PlaceholderError::NestedComment { at: 13 })
        );
        assert_eq!(
            rewrite("SELECT /*/ a */ ?1").as_deref(),
            Ok("SELECT /*/ a */ $1")
        );
        // The message names the place and the fix, not the statement's values.
        let shown = PlaceholderError::Bare { at: 3 }.to_string();
        assert!(shown.contains("byte 3") && shown.contains("?1"), "{shown}");
    }

    /// A piece of a statement: what the rewrite must leave as it is, or a parameter.
    #[derive(Debug, Clone)]
    enum Piece {
        Code(String),
        Literal(String),
        Identifier(String),
        LineComment(String),
        BlockComment(String),
        Parameter(u16),
    }

    impl Piece {
        /// The piece as SQLite text, and as the rewrite must give it.
        fn texts(&self) -> (String, String) {
            let same = |s: String| (s.clone(), s);
            match self {
                Piece::Code(s) => same(format!(" {s} ")),
                Piece::Literal(s) => same(format!("'{}'", s.replace('\'', "''"))),
                Piece::Identifier(s) => same(format!("\"{}\"", s.replace('"', "\"\""))),
                Piece::LineComment(s) => same(format!("--{s}\n")),
                Piece::BlockComment(s) => same(format!("/*{s}*/")),
                Piece::Parameter(n) => (format!("?{n}"), format!("${n}")),
            }
        }
    }

    fn piece() -> impl Strategy<Value = Piece> {
        // Text that tries the scanner: quotes, question marks, comment starts, digits.
        let tricky = "[a-z0-9 ?'\"*/\\-\n$é]{0,12}";
        prop_oneof![
            "[A-Za-z_(),=<>+.0-9 ]{1,8}".prop_map(Piece::Code),
            tricky.prop_map(Piece::Literal),
            tricky.prop_map(Piece::Identifier),
            "[a-z0-9 ?'\"*/\\-$]{0,12}".prop_map(Piece::LineComment),
            tricky
                .prop_filter("no comment end or nested start", |s| {
                    let body = format!("{s}*/");
                    body.find("*/") == Some(s.len()) && !body.contains("/*")
                })
                .prop_map(Piece::BlockComment),
            (1u16..=999).prop_map(Piece::Parameter),
        ]
    }

    proptest! {
        /// Every piece comes back as it was, each parameter renumbered `$N` in place and in
        /// order.
        #[test]
        fn statements_keep_their_text_and_parameters(pieces in prop::collection::vec(piece(), 0..24)) {
            let (sqlite, expected): (String, String) = pieces.iter().map(Piece::texts).unzip();
            prop_assert_eq!(rewrite(&sqlite), Ok(expected));
        }

        /// A bare `?` in code is refused wherever it is.
        #[test]
        fn a_bare_parameter_anywhere_in_code_is_refused(
            pieces in prop::collection::vec(piece(), 0..12),
            at in any::<prop::sample::Index>(),
        ) {
            let mut texts: Vec<String> = pieces.iter().map(|p| p.texts().0).collect();
            let place = at.index(texts.len() + 1);
            texts.insert(place, " ? ".to_string());
            let sqlite: String = texts.concat();
            let refused = matches!(rewrite(&sqlite), Err(PlaceholderError::Bare { .. }));
            prop_assert!(refused);
        }
    }
}

//! The code's size, as `scripts/code-shape` measures it (issues 14 and 41): each product file's
//! product lines, and each product function's lines from its `fn` line to its closing brace.
//! Test code (`#[cfg(test)]` items and the files they bring in, the stand-ins, `tests/`) is not
//! counted; a file all of whose lines are test code is not a product file.

use crate::source::{tree, SourceFile};

/// Most product lines one file may hold: past this it holds more than one job.
pub const FILE_MAX: usize = 600;
/// Most lines one product function may span: past this its steps want names.
pub const FN_MAX: usize = 80;

/// The product files of both crates (`src/`, `adapters/src/`), test-only files left out.
fn product_files() -> impl Iterator<Item = &'static SourceFile> {
    tree()
        .files
        .iter()
        .filter(|f| f.path.starts_with("src/") || f.path.starts_with("adapters/src/"))
        .filter(|f| f.lines.iter().any(|l| !l.test))
}

/// `path: N lines` for each product file over `FILE_MAX` product lines.
pub fn long_files() -> Vec<String> {
    product_files()
        .map(|f| (f, f.lines.iter().filter(|l| !l.test).count()))
        .filter(|&(_, n)| n > FILE_MAX)
        .map(|(f, n)| format!("{}: {n} lines", f.path))
        .collect()
}

/// `path:line fn name: N lines` for each product function over `FN_MAX` lines.
pub fn long_functions() -> Vec<String> {
    let mut out = Vec::new();
    for file in product_files() {
        for (i, line) in file.lines.iter().enumerate() {
            let Some(name) = fn_defined(&line.code).filter(|_| !line.test) else {
                continue;
            };
            let indent = &line.raw[..line.raw.len() - line.raw.trim_start().len()];
            let close = format!("{indent}}}");
            let end = file.lines[i + 1..].iter().position(|l| l.raw == close);
            if let Some(n) = end.map(|e| e + 2).filter(|&n| n > FN_MAX) {
                out.push(format!(
                    "{}:{} fn {name}: {n} lines",
                    file.path, line.number
                ));
            }
        }
    }
    out
}

/// `name` of a line that opens a function with a body: after its indent, optional `pub`
/// (`pub(..)`), `const`, `async`, `unsafe`, then `fn name`; not a declaration ending in `;`.
fn fn_defined(code: &str) -> Option<&str> {
    if code.trim_end().ends_with(';') {
        return None;
    }
    let mut rest = code.trim_start();
    if let Some(after) = rest.strip_prefix("pub") {
        rest = match after.strip_prefix('(') {
            Some(scoped) => scoped.split_once(')')?.1,
            None => after,
        }
        .trim_start();
    }
    for qualifier in ["const ", "async ", "unsafe "] {
        rest = rest.strip_prefix(qualifier).unwrap_or(rest).trim_start();
    }
    let rest = rest.strip_prefix("fn ")?;
    let end = rest
        .find(|c: char| !crate::lex::is_ident(c))
        .unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

#[test]
fn the_reader_finds_a_functions_name_as_the_shape_script_does() {
    let names: Vec<Option<&str>> = [
        "    pub(crate) async fn run(self) {",
        "pub const fn new() -> Self {",
        "fn declared(&self);",
        "    let f = |x: fn(u8)| x;",
        "impl Fn(u8) for X {",
    ]
    .into_iter()
    .map(fn_defined)
    .collect();
    assert_eq!(names, [Some("run"), Some("new"), None, None, None]);
}

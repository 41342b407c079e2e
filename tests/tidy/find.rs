//! The searches the invariant tests are written with: lines of the tree (`source.rs`) by scope
//! and text, the broker modules a line imports, a function's lines, and the two failures (an
//! offending line, or something an invariant points at gone), each naming the invariant.

use crate::source::{fn_name, tree, Hit};

/// Fails naming the invariant and every offending line, when there is one.
pub fn assert_none(invariant: &str, hits: Vec<Hit<'_>>) {
    if !hits.is_empty() {
        let lines: Vec<String> = hits.iter().map(|h| format!("  {h}")).collect();
        panic!("invariant broken: {invariant}\n{}", lines.join("\n"));
    }
}

/// Fails naming the invariant when `hits` is empty: what it points at is gone.
pub fn assert_found(invariant: &str, what: &str, hits: &[Hit<'_>]) {
    assert!(
        !hits.is_empty(),
        "invariant broken: {invariant}\n  not found: {what}"
    );
}

/// Product lines of `scope` whose code (comments and literals blanked) contains `needle`.
pub fn code<'a>(scope: &'a str, needle: &'a str) -> Vec<Hit<'a>> {
    tree()
        .product(scope)
        .filter(|h| h.line.code.contains(needle))
        .collect()
}

/// Product lines of `scope` whose text (SQL and messages included) contains `needle`.
pub fn text<'a>(scope: &'a str, needle: &'a str) -> Vec<Hit<'a>> {
    tree()
        .product(scope)
        .filter(|h| h.line.raw.contains(needle))
        .collect()
}

/// The top-level module of the broker a path of `src/` is in (`main` for `src/main.rs`).
pub fn top_module(path: &str) -> &str {
    let rest = path.strip_prefix("src/").unwrap_or(path);
    let first = rest.split('/').next().unwrap_or(rest);
    first.strip_suffix(".rs").unwrap_or(first)
}

/// The broker modules a line names as `crate::m` (or inside `crate::{m, ..}` on that line).
pub fn crate_modules(code: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        if at > 0 && code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue; // `mss_adapters::` and the like end in `crate::` only by accident
        }
        let rest = &code[at + 7..];
        let names = match rest.strip_prefix('{') {
            Some(group) => group.split([',', '}']).collect(),
            None => vec![rest],
        };
        for name in names {
            let name = name.trim_start();
            let end = name
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(name.len());
            if end > 0 {
                out.push(&name[..end]);
            }
        }
    }
    out
}

/// Product lines of `scope` that use `crate::m` for an `m` in `modules`.
pub fn imports<'a>(scope: &'a str, modules: &'a [&'a str]) -> Vec<Hit<'a>> {
    tree()
        .product(scope)
        .filter(|h| {
            crate_modules(&h.line.code)
                .iter()
                .any(|m| modules.contains(m))
        })
        .collect()
}

/// The lines of `fn name` in `path`, from its `fn` line to its closing brace.
pub fn fn_body<'a>(invariant: &str, path: &str, name: &str) -> Vec<Hit<'a>> {
    let file = tree().file(path);
    let start = file
        .lines
        .iter()
        .position(|l| !l.test && fn_name(&l.code) == Some(name));
    let Some(start) = start else {
        panic!("invariant broken: {invariant}\n  not found: fn {name} in {path}");
    };
    let indent = &file.lines[start].raw
        [..file.lines[start].raw.len() - file.lines[start].raw.trim_start().len()];
    let close = format!("{indent}}}");
    let end = file.lines[start..]
        .iter()
        .position(|l| l.raw == close)
        .map_or(file.lines.len(), |n| start + n + 1);
    file.lines[start..end]
        .iter()
        .map(|line| Hit { file, line })
        .collect()
}

/// The hits that are in none of the `(file, fn)` places.
pub fn outside<'a>(hits: Vec<Hit<'a>>, places: &[(&str, &str)]) -> Vec<Hit<'a>> {
    hits.into_iter()
        .filter(|h| {
            !places
                .iter()
                .any(|&(path, f)| h.file.path == path && h.enclosing_fn() == Some(f))
        })
        .collect()
}

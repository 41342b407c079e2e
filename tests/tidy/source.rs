//! The source tree as the tidy checks read it: every `.rs` file of the two crates, found by
//! following `mod` declarations from each crate root (`#[path]` honoured), and for each line
//! whether it is test-only code. That is known by structure, never by a file's name:
//!
//! - an item under `#[cfg(test)]` (an inline `mod tests { .. }`, a helper `fn`, a `use`) is test
//!   code from its attribute to its end;
//! - a file declared by `#[cfg(test)] mod x;` (`x.rs`, `x/mod.rs`, or its `#[path]`), and every
//!   module below it, is test code;
//! - `#[cfg(feature = "standin")]` counts as `cfg(test)`: the stand-ins are test-only
//!   (`the_stand_ins_are_not_compiled_into_the_product` checks that only tests enable it);
//! - the integration tests (`tests/`, `adapters/tests/`) are test code.
//!
//! A file brought in by `#[cfg(test)] mod x;` (or below one) is also marked `unit_test`, which
//! the `standin` feature's files are not: the test-naming check reads that.
//!
//! Each line also has its `code` view (`lex::blank`): comments and literals' contents blanked.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::lex::{blank, is_ident};
use crate::scan::{ModDecl, Scan};

/// One source file, its path relative to the repository with `/` separators.
pub struct SourceFile {
    pub path: String,
    pub lines: Vec<Line>,
    /// Brought in by a `#[cfg(test)] mod x;`, or below one: a unit test module's file.
    pub unit_test: bool,
}

pub struct Line {
    /// 1-based.
    pub number: usize,
    /// As written.
    pub raw: String,
    /// Comments and literal contents blanked (quotes kept).
    pub code: String,
    /// Test-only code (see the module's doc).
    pub test: bool,
}

pub struct Tree {
    pub files: Vec<SourceFile>,
    /// `.rs` files under a crate's `src/` that no `mod` declaration reaches.
    pub unreached: Vec<String>,
}

/// The roots of the module trees this repository builds into its product and tests.
const CRATE_ROOTS: &[&str] = &["src/lib.rs", "src/main.rs", "adapters/src/lib.rs"];
/// Whole directories of test code (integration tests).
const TEST_DIRS: &[&str] = &["tests", "adapters/tests"];
/// Where every `.rs` file must be reached from a crate root.
const SOURCE_DIRS: &[&str] = &["src", "adapters/src"];

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The tree, read once for all the checks.
pub fn tree() -> &'static Tree {
    static TREE: OnceLock<Tree> = OnceLock::new();
    TREE.get_or_init(|| Tree::load(&repo()))
}

impl Tree {
    fn load(repo: &Path) -> Tree {
        let mut tree = Tree {
            files: Vec::new(),
            unreached: Vec::new(),
        };
        for root in CRATE_ROOTS {
            tree.walk(repo, root.to_string(), Walked::default());
        }
        for dir in TEST_DIRS {
            for path in rs_files(repo, dir) {
                let text = read(repo, &path);
                let code = blank(&text.chars().collect::<Vec<_>>());
                let test = Walked {
                    test: true,
                    unit_test: false,
                };
                tree.files
                    .push(SourceFile::new(path, &text, &code, &[], test));
            }
        }
        let reached: BTreeSet<&str> = tree.files.iter().map(|f| f.path.as_str()).collect();
        let unreached = SOURCE_DIRS
            .iter()
            .flat_map(|dir| rs_files(repo, dir))
            .filter(|p| !reached.contains(p.as_str()))
            .collect();
        tree.unreached = unreached;
        tree
    }

    /// Reads one module file and, depth first, the module files it declares.
    fn walk(&mut self, repo: &Path, path: String, parent: Walked) {
        let text = read(repo, &path);
        let chars: Vec<char> = text.chars().collect();
        let code = blank(&chars);
        let scan = Scan::of(&chars, &code);
        let whole = Walked {
            test: parent.test || scan.inner_test,
            unit_test: parent.unit_test || scan.inner_unit_test,
        };
        let children: Vec<(String, Walked)> = scan
            .decls
            .iter()
            .filter(|d| !d.inline)
            .map(|d| {
                let child = Walked {
                    test: whole.test || scan.in_test(d.at),
                    unit_test: whole.unit_test || scan.in_unit_test(d.at),
                };
                (child_path(repo, &path, d, &scan), child)
            })
            .collect();
        self.files.push(SourceFile::new(
            path,
            &text,
            &code,
            &scan.line_spans(&chars),
            whole,
        ));
        for (child, walked) in children {
            self.walk(repo, child, walked);
        }
    }

    /// Every line of the files whose path starts with `scope` (a directory or a file).
    pub fn lines<'a>(&'a self, scope: &'a str) -> impl Iterator<Item = Hit<'a>> + 'a {
        self.files
            .iter()
            .filter(move |f| in_scope(&f.path, scope))
            .flat_map(|f| f.lines.iter().map(move |line| Hit { file: f, line }))
    }

    /// The product (not test-only) lines of `scope`.
    pub fn product<'a>(&'a self, scope: &'a str) -> impl Iterator<Item = Hit<'a>> + 'a {
        self.lines(scope).filter(|h| !h.line.test)
    }

    pub fn file(&self, path: &str) -> &SourceFile {
        self.files
            .iter()
            .find(|f| f.path == path)
            .unwrap_or_else(|| panic!("{path} is not in the module tree (moved or renamed?)"))
    }
}

/// What the declarations that reach a file say of all of it.
#[derive(Clone, Copy, Default)]
struct Walked {
    /// Test-only code (see the module's doc).
    test: bool,
    /// Under a `#[cfg(test)] mod` (not only the `standin` feature).
    unit_test: bool,
}

fn in_scope(path: &str, scope: &str) -> bool {
    path == scope || (path.starts_with(scope) && path[scope.len()..].starts_with('/'))
}

/// One line of one file, displayed as `path:line: text`.
#[derive(Clone, Copy)]
pub struct Hit<'a> {
    pub file: &'a SourceFile,
    pub line: &'a Line,
}

impl std::fmt::Display for Hit<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}: {}",
            self.file.path,
            self.line.number,
            self.line.raw.trim()
        )
    }
}

impl Hit<'_> {
    /// The name of the `fn`, `const` or `static` this line is in: the nearest line above it,
    /// indented less, that declares one.
    pub fn enclosing_fn(&self) -> Option<&str> {
        let indent = |s: &str| s.len() - s.trim_start().len();
        let own = indent(&self.line.raw);
        let lines = &self.file.lines[..self.line.number - 1];
        lines
            .iter()
            .rev()
            .filter(|l| indent(&l.raw) < own)
            .find_map(|l| item_name(&l.code))
    }
}

/// `name` of a line declaring `fn name`.
pub fn fn_name(code: &str) -> Option<&str> {
    declared(code, "fn ")
}

/// `name` of a line declaring `fn name`, `const name` or `static name`.
fn item_name(code: &str) -> Option<&str> {
    ["fn ", "const ", "static "]
        .into_iter()
        .find_map(|k| declared(code, k))
}

/// The name after the keyword `keyword` (with its trailing space) on a line, if any.
fn declared<'a>(code: &'a str, keyword: &str) -> Option<&'a str> {
    let at = code
        .match_indices(keyword)
        .map(|(at, _)| at)
        .find(|&at| at == 0 || !is_ident(code[..at].chars().next_back().unwrap_or(' ')))?;
    let rest = &code[at + keyword.len()..];
    let end = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

impl SourceFile {
    fn new(
        path: String,
        text: &str,
        code: &[char],
        tests: &[(usize, usize)],
        whole: Walked,
    ) -> Self {
        let code: String = code.iter().collect();
        let lines = text
            .split('\n')
            .zip(code.split('\n'))
            .enumerate()
            .map(|(i, (raw, code))| Line {
                number: i + 1,
                raw: raw.to_string(),
                code: code.to_string(),
                test: whole.test || tests.iter().any(|&(a, b)| (a..=b).contains(&(i + 1))),
            })
            .collect();
        SourceFile {
            path,
            lines,
            unit_test: whole.unit_test,
        }
    }
}

fn read(repo: &Path, path: &str) -> String {
    fs::read_to_string(repo.join(path)).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// Every `.rs` file under `dir` (relative to the repository), sorted.
fn rs_files(repo: &Path, dir: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_string()];
    while let Some(d) = todo.pop() {
        let entries = fs::read_dir(repo.join(&d)).unwrap_or_else(|e| panic!("listing {d}: {e}"));
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel = format!("{d}/{name}");
            if entry.path().is_dir() {
                todo.push(rel);
            } else if name.ends_with(".rs") {
                out.push(rel);
            }
        }
    }
    out.sort();
    out
}

/// Where a `mod name;` declared in `parent` lives: its `#[path]` (relative to the parent's
/// directory), else `name.rs` or `name/mod.rs` in the parent's module directory (the parent's
/// own directory for `mod.rs`, `lib.rs` and `main.rs`, else beside it under the parent's stem),
/// below any inline modules the declaration is in.
fn child_path(repo: &Path, parent: &str, decl: &ModDecl, scan: &Scan) -> String {
    let (dir, file) = parent.rsplit_once('/').unwrap_or(("", parent));
    let mut base = if let Some(path) = &decl.path_attr {
        format!("{dir}/{path}")
    } else if matches!(file, "mod.rs" | "lib.rs" | "main.rs") {
        dir.to_string()
    } else {
        format!("{dir}/{}", file.trim_end_matches(".rs"))
    };
    if decl.path_attr.is_some() {
        return normalise(&base);
    }
    for inline in scan
        .decls
        .iter()
        .filter(|m| m.inline && m.at < decl.at && decl.at < m.end)
    {
        base = format!("{base}/{}", inline.name);
    }
    let flat = format!("{base}/{}.rs", decl.name);
    if repo.join(&flat).is_file() {
        flat
    } else {
        format!("{base}/{}/mod.rs", decl.name)
    }
}

fn normalise(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "." | "" => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

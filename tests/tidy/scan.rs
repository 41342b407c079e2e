//! What one file says about its structure: its `mod` declarations (with `#[path]`) and the
//! spans of its test-only items (`#[cfg(test)]`, `#[cfg(feature = "standin")]`), read from the
//! code view (`lex::blank`).

use crate::lex::is_ident;

/// A `mod` declaration: `mod name;` (a file) or `mod name { .. }` (inline).
pub struct ModDecl {
    pub name: String,
    /// Offset of the `mod` keyword; for an inline module, `end` is its closing brace.
    pub at: usize,
    pub end: usize,
    pub inline: bool,
    pub path_attr: Option<String>,
}

/// What one file says about its structure: its test-only spans (offsets) and its modules.
pub struct Scan {
    test_spans: Vec<(usize, usize)>,
    /// The spans under `#[cfg(test)]` itself (unit tests; not the `standin` feature).
    unit_test_spans: Vec<(usize, usize)>,
    pub decls: Vec<ModDecl>,
    /// `#![cfg(test)]` (or `#![cfg(feature = "standin")]`) at the top of the file.
    pub inner_test: bool,
    /// `#![cfg(test)]` itself at the top of the file.
    pub inner_unit_test: bool,
}

impl Scan {
    pub fn of(raw: &[char], code: &[char]) -> Scan {
        let mut scan = Scan {
            test_spans: Vec::new(),
            unit_test_spans: Vec::new(),
            decls: Vec::new(),
            inner_test: false,
            inner_unit_test: false,
        };
        let mut i = 0;
        while i < code.len() {
            if code[i] == '#' && attribute_at(code, i).is_some() {
                i = scan.attributes(raw, code, i);
            } else if code[i] == 'm' && word_at(code, i, "mod") {
                if let Some(decl) = mod_decl(code, i, None) {
                    scan.decls.push(decl);
                }
                i += 3;
            } else {
                i += 1;
            }
        }
        scan
    }

    /// Reads the attributes starting at `i` and the item they are on; returns where to go on.
    fn attributes(&mut self, raw: &[char], code: &[char], start: usize) -> usize {
        let (mut i, mut test, mut unit_test, mut path) = (start, false, false, None);
        while let Some((inner, end)) = attribute_at(code, i) {
            let text: String = raw[i..=end].iter().collect();
            let squeezed: String = text.chars().filter(|c| !c.is_whitespace()).collect();
            let test_only = is_test_cfg(&squeezed);
            let unit_test_only = is_unit_test_cfg(&squeezed);
            if inner && depth_at(code, i) == 0 {
                self.inner_test |= test_only;
                self.inner_unit_test |= unit_test_only;
            }
            test |= test_only && !inner;
            unit_test |= unit_test_only && !inner;
            if let Some(p) = squeezed
                .strip_prefix("#[path=\"")
                .and_then(|p| p.strip_suffix("\"]"))
            {
                path = Some(p.to_string());
            }
            i = skip_space(code, end + 1);
        }
        let item = i;
        let mut visibility_end = item;
        if word_at(code, item, "pub") {
            visibility_end = skip_space(code, item + 3);
            if code.get(visibility_end) == Some(&'(') {
                visibility_end = skip_space(code, matching(code, visibility_end) + 1);
            }
        }
        if word_at(code, visibility_end, "mod") {
            if let Some(decl) = mod_decl(code, visibility_end, path) {
                self.decls.push(decl);
            }
        }
        if test {
            self.test_spans.push((start, item_end(code, item)));
        }
        if unit_test {
            self.unit_test_spans.push((start, item_end(code, item)));
        }
        // Go on inside the item: it may hold more attributes and modules.
        if word_at(code, visibility_end, "mod") {
            visibility_end + 3
        } else {
            item
        }
    }

    pub fn in_test(&self, at: usize) -> bool {
        self.test_spans.iter().any(|&(a, b)| a <= at && at <= b)
    }

    /// Under `#[cfg(test)]` itself: unit test code, not the `standin` feature's.
    pub fn in_unit_test(&self, at: usize) -> bool {
        self.unit_test_spans
            .iter()
            .any(|&(a, b)| a <= at && at <= b)
    }

    /// The test spans as 1-based line ranges.
    pub fn line_spans(&self, chars: &[char]) -> Vec<(usize, usize)> {
        let line_of = |at: usize| {
            1 + chars[..at.min(chars.len())]
                .iter()
                .filter(|&&c| c == '\n')
                .count()
        };
        self.test_spans
            .iter()
            .map(|&(a, b)| (line_of(a), line_of(b)))
            .collect()
    }
}

/// `cfg(test)`, `cfg(feature = "standin")` or an `all(..)` holding one (whitespace removed).
fn is_test_cfg(attr: &str) -> bool {
    cfg_holds(attr, |p| {
        p.starts_with("test") || p.starts_with("feature=\"standin\"")
    })
}

/// `cfg(test)` or an `all(..)` holding it (whitespace removed): unit tests only.
fn is_unit_test_cfg(attr: &str) -> bool {
    cfg_holds(attr, |p| p.starts_with("test"))
}

/// Whether a `cfg` attribute's predicate, or one of its `all(..)`'s, is `test_only`.
fn cfg_holds(attr: &str, test_only: impl Fn(&str) -> bool) -> bool {
    let Some(pred) = attr
        .strip_prefix("#[cfg(")
        .or_else(|| attr.strip_prefix("#![cfg("))
    else {
        return false;
    };
    test_only(pred) || (pred.starts_with("all(") && pred[4..].split(',').any(test_only))
}

/// At `#[` or `#![`: (inner, index of the closing `]`).
fn attribute_at(code: &[char], i: usize) -> Option<(bool, usize)> {
    let inner = code.get(i + 1) == Some(&'!');
    let open = if inner { i + 2 } else { i + 1 };
    (code.get(open) == Some(&'[')).then(|| (inner, matching(code, open)))
}

/// The index of the bracket closing the one at `open`.
fn matching(code: &[char], open: usize) -> usize {
    let mut depth = 0i64;
    for (j, &c) in code.iter().enumerate().skip(open) {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => {
                depth -= 1;
                if depth == 0 {
                    return j;
                }
            }
            _ => {}
        }
    }
    code.len().saturating_sub(1)
}

/// Brace depth at `at` (0: the file's top level).
fn depth_at(code: &[char], at: usize) -> i64 {
    code[..at]
        .iter()
        .map(|&c| i64::from(c == '{') - i64::from(c == '}'))
        .sum()
}

/// The last index of the item starting at `start`: its `;` or `,`, the brace closing its body,
/// or just before the bracket closing what holds it.
fn item_end(code: &[char], start: usize) -> usize {
    let mut depth = 0i64;
    for (j, &c) in code.iter().enumerate().skip(start) {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' => depth -= 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return j;
                }
            }
            ';' | ',' if depth == 0 => return j,
            _ => {}
        }
        if depth < 0 {
            return j.saturating_sub(1);
        }
    }
    code.len().saturating_sub(1)
}

fn skip_space(code: &[char], mut i: usize) -> usize {
    while i < code.len() && code[i].is_whitespace() {
        i += 1;
    }
    i
}

/// Whether the word `word` (not part of a longer identifier) starts at `i`.
fn word_at(code: &[char], i: usize, word: &str) -> bool {
    let n = word.chars().count();
    let before_ok = i == 0 || !is_ident(code[i - 1]);
    let after_ok = code.get(i + n).is_none_or(|&c| !is_ident(c));
    before_ok && after_ok && code.len() >= i + n && code[i..i + n].iter().copied().eq(word.chars())
}

/// `mod name;` or `mod name {` at `at` (the `mod` keyword).
fn mod_decl(code: &[char], at: usize, path_attr: Option<String>) -> Option<ModDecl> {
    let name_start = skip_space(code, at + 3);
    let name_end = (name_start..code.len()).find(|&j| !is_ident(code[j]))?;
    let name: String = code[name_start..name_end].iter().collect();
    let next = skip_space(code, name_end);
    let (inline, end) = match code.get(next)? {
        ';' => (false, next),
        '{' => (true, matching(code, next)),
        _ => return None,
    };
    (!name.is_empty()).then_some(ModDecl {
        name,
        at,
        end,
        inline,
        path_attr,
    })
}

#[test]
fn the_reader_knows_test_code_by_its_attribute() {
    let text = "#[cfg(test)]\n#[path = \"x_tests.rs\"]\nmod a;\npub(crate) mod b;\n\
                #[cfg(test)]\nmod t {\n    fn f() {}\n}\nfn g() { let m = \"mod c;\"; }\n\
                #[cfg(all(test, unix))]\nuse crate::config;\n#[cfg(unix)]\nmod d;\n";
    let chars: Vec<char> = text.chars().collect();
    let scan = Scan::of(&chars, &crate::lex::blank(&chars));
    let decls: Vec<(&str, bool, bool)> = scan
        .decls
        .iter()
        .map(|d| (d.name.as_str(), d.inline, scan.in_test(d.at)))
        .collect();
    let expected = [
        ("a", false, true),
        ("b", false, false),
        ("t", true, true),
        ("d", false, false),
    ];
    assert_eq!(decls, expected);
    assert_eq!(scan.decls[0].path_attr.as_deref(), Some("x_tests.rs"));
    assert_eq!(scan.line_spans(&chars), [(1, 3), (5, 8), (10, 11)]);
}

#[test]
fn the_reader_tells_unit_tests_from_the_stand_ins() {
    let text = "#[cfg(feature = \"standin\")]\nmod s;\n#[cfg(all(test, unix))]\nmod u;\n";
    let chars: Vec<char> = text.chars().collect();
    let scan = Scan::of(&chars, &crate::lex::blank(&chars));
    let decls: Vec<(&str, bool, bool)> = scan
        .decls
        .iter()
        .map(|d| (d.name.as_str(), scan.in_test(d.at), scan.in_unit_test(d.at)))
        .collect();
    assert_eq!(decls, [("s", true, false), ("u", true, true)]);
}

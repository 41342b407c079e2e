//! The code view of a source file: comments blanked and the contents of string and character
//! literals blanked (their quotes kept), newlines kept, so a check on code is not fooled by a
//! comment, a doc link or a message, and offsets and lines agree with the text.

pub fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The code view: comments blanked, string and character literals' contents blanked; newlines
/// kept, so lines and offsets agree with the text.
pub fn blank(src: &[char]) -> Vec<char> {
    let mut out = src.to_vec();
    let at = |i: usize| src.get(i).copied().unwrap_or('\0');
    let wipe = |from: usize, to: usize, out: &mut Vec<char>| {
        for c in &mut out[from.min(to)..to.min(src.len())] {
            if *c != '\n' {
                *c = ' ';
            }
        }
    };
    let mut i = 0;
    while i < src.len() {
        let prev = if i > 0 { at(i - 1) } else { ' ' };
        let end = match (at(i), at(i + 1)) {
            ('/', '/') => {
                let end = (i..src.len())
                    .find(|&j| src[j] == '\n')
                    .unwrap_or(src.len());
                wipe(i, end, &mut out);
                end
            }
            ('/', '*') => {
                let end = block_comment_end(src, i);
                wipe(i, end, &mut out);
                end
            }
            ('"', _) => {
                let end = string_end(src, i + 1);
                wipe(i + 1, end - 1, &mut out);
                end
            }
            ('r', '"' | '#')
                if !is_ident(prev) || (prev == 'b' && !is_ident(at(i.wrapping_sub(2)))) =>
            {
                match raw_string_end(src, i + 1) {
                    Some((open, end, hashes)) => {
                        wipe(open, end - 1 - hashes, &mut out);
                        end
                    }
                    None => i + 1,
                }
            }
            ('\'', '\\') => {
                let mut j = i + 2;
                j += 1; // the escaped character
                while j < src.len() && src[j] != '\'' {
                    j += 1;
                }
                wipe(i + 1, j, &mut out);
                j + 1
            }
            ('\'', _) if at(i + 2) == '\'' => {
                wipe(i + 1, i + 2, &mut out);
                i + 3
            }
            _ => i + 1,
        };
        i = end;
    }
    out
}

fn block_comment_end(src: &[char], start: usize) -> usize {
    let (mut depth, mut j) = (0usize, start);
    while j + 1 < src.len() {
        match (src[j], src[j + 1]) {
            ('/', '*') => {
                depth += 1;
                j += 2;
            }
            ('*', '/') => {
                depth -= 1;
                j += 2;
                if depth == 0 {
                    return j;
                }
            }
            _ => j += 1,
        }
    }
    src.len()
}

/// The index after the closing quote of a string whose contents start at `from`.
fn string_end(src: &[char], from: usize) -> usize {
    let mut j = from;
    while j < src.len() {
        match src[j] {
            '\\' => j += 2,
            '"' => return j + 1,
            _ => j += 1,
        }
    }
    src.len()
}

/// For `r#"..."#` with `from` just after the `r`: (contents start, index after the end, hashes).
fn raw_string_end(src: &[char], from: usize) -> Option<(usize, usize, usize)> {
    let hashes = src[from..].iter().take_while(|&&c| c == '#').count();
    let open = from + hashes;
    if src.get(open) != Some(&'"') {
        return None;
    }
    let mut j = open + 1;
    while j < src.len() {
        if src[j] == '"'
            && src[j + 1..]
                .iter()
                .take(hashes)
                .filter(|&&c| c == '#')
                .count()
                == hashes
        {
            return Some((open + 1, j + 1 + hashes, hashes));
        }
        j += 1;
    }
    Some((open + 1, src.len(), hashes))
}

#[test]
fn the_code_view_blanks_comments_and_literals() {
    let text = "a // crate::x\nb /* c /* d */ e */ \"s\\\"t\" r#\"u\"# '\\'' 'v' &'w x";
    let code: String = blank(&text.chars().collect::<Vec<_>>())
        .into_iter()
        .collect();
    assert_eq!(code.len(), text.len());
    let squeezed: String = code.split_whitespace().collect::<Vec<_>>().join(" ");
    assert_eq!(squeezed, "a b \" \" r#\" \"# ' ' ' ' &'w x");
}

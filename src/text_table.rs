//! Plain-text tables for the CLI: the first column left-aligned, the others right-aligned,
//! two spaces apart, each column as wide as its widest cell.
//!
//! Aligned plain-text tables for the CLI (`shares`, `report`, `simulate`).

/// `header` and `rows` as aligned lines, each ending in a newline.
pub fn aligned<S: AsRef<str>>(header: &[&str], rows: &[Vec<S>]) -> String {
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|v| v.as_ref().chars().count())
                .chain([header[c].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &mut dyn Iterator<Item = &str>| -> String {
        let mut l = cells
            .enumerate()
            .map(|(c, v)| {
                let w = widths.get(c).copied().unwrap_or(0);
                if c == 0 {
                    format!("{v:<w$}")
                } else {
                    format!("{v:>w$}")
                }
            })
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string();
        l.push('\n');
        l
    };
    let mut out = line(&mut header.iter().copied());
    for r in rows {
        out.push_str(&line(&mut r.iter().map(|v| v.as_ref())));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn columns_align() {
        let t = super::aligned(&["name", "n"], &[vec!["a", "10"], vec!["long name", "2"]]);
        assert_eq!(t, "name        n\na          10\nlong name   2\n");
    }
}

//! Reading a configuration's TOML table (the file, with any layers merged over it) into the raw
//! structs. serde stops at the first problem; an unknown key (most often a misspelling) is taken
//! out of the table and the reading tried again, so every unknown key is reported at once, each
//! with its line in the file or the layer (environment variable, flag) that set it, and the
//! rest of the file is still read and validated. Any other problem (a wrong type, a missing
//! key) ends the reading: it is reported as before, from the file's text with its line, or
//! naming the layer.

use serde_path_to_error::Segment;

use super::layers::{quoted, Source, Sourced};
use super::raw::RawConfig;
use super::{ConfigError, ConfigIssue};

/// One step of a key's path: a table key or an index into an array of tables.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

/// The raw structs read from `table` (`text` is the file's, `origin` names it, `sources` says
/// which keys a layer set), with one issue per unknown key left out of them.
pub(super) fn read_raw(
    mut table: toml::Table,
    text: &str,
    origin: &str,
    sources: &[Sourced],
) -> Result<(RawConfig, Vec<ConfigIssue>), ConfigError> {
    let mut unknown = Vec::new();
    // Each turn takes one key out of the table, so the loop ends.
    loop {
        let error = match serde_path_to_error::deserialize(toml::Value::Table(table.clone())) {
            Ok(raw) => return Ok((raw, unknown)),
            Err(e) => e,
        };
        // The first line: toml adds where it was (`in \`server\``), which the key says.
        let message = error.inner().to_string();
        let message = message.lines().next().unwrap_or_default().to_string();
        let mut path = steps(error.path());
        let name = unknown_field(&message);
        // An unknown key may be reported at its table: then add its name.
        if let Some(name) = &name {
            if path.last() != Some(&Step::Key(name.clone())) {
                path.push(Step::Key(name.clone()));
            }
        }
        let key = dotted(&path);
        let where_ = match layer_of(&key, sources) {
            Some(s) => format!("set by {s}"),
            None => {
                line_of(text, &path).map_or_else(|| "in the file".into(), |l| format!("line {l}"))
            }
        };
        if name.is_some() && remove(&mut table, &path) {
            unknown.push(ConfigIssue {
                key,
                message: format!("{message} ({where_})"),
            });
            continue;
        }
        let from_layer = layer_of(&key, sources).is_some();
        if unknown.is_empty() && !from_layer {
            // Alone and in the file: toml's own message, with the line and the text there.
            return Err(ConfigError::Syntax {
                origin: origin.to_string(),
                message: match toml::from_str::<RawConfig>(text) {
                    Err(e) => e.to_string().trim_end().to_string(),
                    Ok(_) => format!("{key}: {message}"),
                },
            });
        }
        unknown.push(ConfigIssue {
            key,
            message: format!("{message} ({where_})"),
        });
        return Err(ConfigError::Invalid {
            origin: origin.to_string(),
            issues: unknown,
        });
    }
}

/// The name serde gives in "unknown field `name`, expected ...".
fn unknown_field(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    Some(rest[..rest.find('`')?].to_string())
}

fn steps(path: &serde_path_to_error::Path) -> Vec<Step> {
    path.iter()
        .filter_map(|s| match s {
            Segment::Map { key } => Some(Step::Key(key.clone())),
            Segment::Seq { index } => Some(Step::Index(*index)),
            Segment::Enum { .. } | Segment::Unknown => None,
        })
        .collect()
}

/// The path as the rest of the configuration names keys: `server.listen`,
/// `targets."analysis/higgs".cap_percent`, `classification.rules[1].group`.
fn dotted(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Key(k) if out.is_empty() => out.push_str(&quoted(k)),
            Step::Key(k) => out.push_str(&format!(".{}", quoted(k))),
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// The layer that set `key`, or a table or value it is in.
fn layer_of<'a>(key: &str, sources: &'a [Sourced]) -> Option<&'a Source> {
    let under =
        |a: &str, b: &str| a.starts_with(&format!("{b}.")) || a.starts_with(&format!("{b}["));
    (sources.iter())
        .filter(|s| !matches!(s.source, Source::File(_)))
        .find(|s| key == s.key || under(key, &s.key) || under(&s.key, key))
        .map(|s| &s.source)
}

/// Take the key at `path` out of `table`; false if it is not there.
fn remove(table: &mut toml::Table, path: &[Step]) -> bool {
    let Some((Step::Key(last), parents)) = path.split_last() else {
        return false;
    };
    let mut at = table;
    let mut parents = parents.iter().peekable();
    while let Some(step) = parents.next() {
        let Step::Key(k) = step else { return false };
        let mut value = at.get_mut(k);
        if let Some(Step::Index(i)) = parents.peek() {
            value = match value {
                Some(toml::Value::Array(items)) => items.get_mut(*i),
                _ => None,
            };
            parents.next();
        }
        at = match value {
            Some(toml::Value::Table(t)) => t,
            _ => return false,
        };
    }
    at.remove(last).is_some()
}

/// The line (from 1) of the key at `path` in the file's `text`, if the file has it.
fn line_of(text: &str, path: &[Step]) -> Option<usize> {
    let document = toml::de::DeTable::parse(text).ok()?;
    let mut table = document.get_ref();
    let (last, parents) = path.split_last()?;
    let mut parents = parents.iter().peekable();
    while let Some(step) = parents.next() {
        let Step::Key(k) = step else { return None };
        let mut value = table.get(k.as_str())?.get_ref();
        if let Some(Step::Index(i)) = parents.peek() {
            let toml::de::DeValue::Array(items) = value else {
                return None;
            };
            value = items.get(*i)?.get_ref();
            parents.next();
        }
        let toml::de::DeValue::Table(t) = value else {
            return None;
        };
        table = t;
    }
    let Step::Key(last) = last else { return None };
    let (key, _) = table.get_key_value(last.as_str())?;
    Some(text[..key.span().start].matches('\n').count() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_of_a_key_in_a_table_and_in_an_array_of_tables() {
        let text = "[server]\nlisten = \"x\"\n\n[[rules]]\na = 1\n[[rules]]\nb = 2\n";
        let key = |s: &str| Step::Key(s.into());
        assert_eq!(line_of(text, &[key("server"), key("listen")]), Some(2));
        assert_eq!(
            line_of(text, &[key("rules"), Step::Index(1), key("b")]),
            Some(7)
        );
        assert_eq!(line_of(text, &[key("server"), key("nope")]), None);
    }
}

//! The stand-in `encp` (the script `adapters/tests/stand-ins/encp`): where it is, how to tell
//! it what a run does, and what its runs recorded.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The stand-in script.
pub fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/stand-ins/encp")
}

/// Tell the stand-in how the run for file `name` (the source's basename, or the bfid)
/// behaves: lines such as `queued 0.5`, `sleep 1`, `bytes 4321`, `stderr ERROR: ...`,
/// `exit 2`, `finish 30` (see the script's header, which also says what the script does as
/// Enstore's encp does: a read's output created empty before it queues and refused if it
/// exists, removed on failure and on SIGTERM, exit 143 on SIGTERM; the same of a write's
/// namespace entry under `ENCP_STANDIN_PNFS`, with its layers 1 and 4 set after the transfer).
pub fn control(dir: &Path, name: &str, lines: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(dir.join("control"))?;
    std::fs::write(dir.join("control").join(name), lines)
}

/// One run of the stand-in, as it recorded it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Run {
    pub pid: u32,
    pub args: Vec<String>,
    /// Its `ENCP_*` and `ENSTORE_*` environment.
    pub env: BTreeMap<String, String>,
    /// The unique id of the ticket it printed (at `--verbose` 11 and above).
    pub ticket: Option<String>,
    /// `exit <status>` or `killed TERM`; `None` while it runs.
    pub end: Option<String>,
    /// It printed "File ... copied successfully." (a read's output is complete; a write is on
    /// tape), and may still be finishing.
    pub copied: bool,
}

impl Run {
    /// The value after `--priority`.
    pub fn priority(&self) -> Option<i64> {
        let i = self.args.iter().position(|a| a == "--priority")?;
        self.args.get(i + 1)?.parse().ok()
    }

    /// The source argument (the second to last), or the bfid of a `--get-bfid` run.
    pub fn source(&self) -> Option<&str> {
        match self.args.iter().position(|a| a == "--get-bfid") {
            Some(i) => self.args.get(i + 1).map(String::as_str),
            None => self
                .args
                .len()
                .checked_sub(2)
                .and_then(|i| self.args.get(i))
                .map(String::as_str),
        }
    }
}

/// Every run recorded in `dir`, in start order.
pub fn runs(dir: &Path) -> Vec<Run> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("runs"))
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    files
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .map(|text| parse(&text))
        .collect()
}

fn parse(text: &str) -> Run {
    let mut run = Run::default();
    for line in text.lines() {
        let (tag, rest) = line.split_once(' ').unwrap_or((line, ""));
        match tag {
            "pid" => run.pid = rest.parse().unwrap_or(0),
            "arg" => run.args.push(rest.to_string()),
            "env" => {
                if let Some((k, v)) = rest.split_once('=') {
                    run.env.insert(k.to_string(), v.to_string());
                }
            }
            "ticket" => run.ticket = Some(rest.to_string()),
            "copied" => run.copied = true,
            "exit" | "killed" => run.end = Some(line.to_string()),
            _ => {}
        }
    }
    run
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back() {
        let run = parse(
            "pid 12\narg --priority\narg 20\narg /pnfs/a\narg /tmp/a\nenv ENCP_DAQ=1\nkilled TERM\n",
        );
        assert_eq!(run.pid, 12);
        assert_eq!(run.priority(), Some(20));
        assert_eq!(run.source(), Some("/pnfs/a"));
        assert_eq!(run.env.get("ENCP_DAQ").map(String::as_str), Some("1"));
        assert_eq!(run.end.as_deref(), Some("killed TERM"));
        assert!(script().is_file());
    }
}

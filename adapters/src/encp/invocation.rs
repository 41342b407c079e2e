//! The `encp` command line for a transfer: pure.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::config::EncpConfig;
use super::local::has_dot_segment;
use crate::protocol::{Direction, Transfer};
use crate::{MssError, ReadOutput};

/// One `encp` run: what to execute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// The file on the local side (the destination of a read, the source of a write): its size
    /// after a success is the bytes transferred.
    pub local: PathBuf,
}

/// The `encp` command line for a transfer.
pub fn invocation(cfg: &EncpConfig, t: &Transfer) -> Result<Invocation, MssError> {
    let class = cfg.classes.get(&t.group);
    let priority = class.and_then(|c| c.priority).unwrap_or(t.priority);
    let mut args = vec![
        "--priority".to_string(),
        priority.to_string(),
        "--delpri".into(),
        "0".into(),
        "--age-time".into(),
        "0".into(),
    ];
    if let Some(m) = cfg.delayed_dismount_minutes {
        args.extend(["--delayed-dismount".into(), m.to_string()]);
    }
    if cfg.verbose > 0 {
        args.extend(["--verbose".into(), cfg.verbose.to_string()]);
    }
    if t.direction == Direction::Write {
        for (flag, v) in [
            ("--storage-group", &cfg.storage_group),
            ("--file-family", &cfg.file_family),
            ("--library", &cfg.library),
        ] {
            if let Some(v) = v {
                args.extend([flag.to_string(), v.clone()]);
            }
        }
    }
    args.extend(cfg.args.iter().cloned());
    if let Some(c) = class {
        args.extend(c.args.iter().cloned());
    }
    let local = match t.direction {
        Direction::Read => {
            let Some(dest) = cfg.read_dest(&t.file, t.local_file.as_deref()) else {
                return Err(MssError::Rejected(
                    "a read needs local_file (where to put it): mss.encp.read_dir is not set"
                        .into(),
                ));
            };
            match &t.bfid {
                Some(bfid) => args.extend(["--get-bfid".into(), operand("bfid", bfid)?]),
                None => args.push(operand("file", &t.file)?),
            }
            args.push(operand("local_file", &dest.display().to_string())?);
            dest
        }
        Direction::Write => {
            let Some(src) = &t.local_file else {
                return Err(MssError::Rejected(
                    "a write needs local_file (the file to store)".into(),
                ));
            };
            args.extend([operand("local_file", src)?, operand("file", &t.file)?]);
            PathBuf::from(src)
        }
    };
    let mut env = cfg.env.clone();
    if let Some(c) = class {
        env.extend(c.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    Ok(Invocation {
        program: cfg.command.clone(),
        args,
        env,
        local,
    })
}

/// An operand of the command line: encp's option parser (Enstore's `src/option.py`,
/// `Interface.parse_options`) does not honour `--`: `split_on_equals` splits every argument
/// that looks like an option before `getopt` runs, and after `getopt` stops at `--`, the loop
/// parses a following argument that starts with `-` as an option again. So nothing that starts
/// with `-` may reach the command line as a file or bfid; the broker refuses it on arrival, and
/// this refuses it again here.
fn operand(what: &str, value: &str) -> Result<String, MssError> {
    if value.starts_with('-') || has_dot_segment(value) || value.is_empty() {
        return Err(MssError::Rejected(format!(
            "{what} `{value}` would be read by encp as an option or leaves its directory"
        )));
    }
    Ok(value.to_string())
}

fn basename(path: &str) -> &str {
    path.rsplit('/').find(|s| !s.is_empty()).unwrap_or(path)
}

impl EncpConfig {
    /// Where a read of `file` goes: its `local_file`, else the file's basename in `read_dir`.
    fn read_dest(&self, file: &str, local_file: Option<&str>) -> Option<PathBuf> {
        match (local_file, &self.read_dir) {
            (Some(f), _) => Some(PathBuf::from(f)),
            (None, Some(dir)) => Some(dir.join(basename(file))),
            (None, None) => None,
        }
    }
}

impl ReadOutput for EncpConfig {
    fn read_output(&self, file: &str, local_file: Option<&str>) -> Option<String> {
        let dest = self.read_dest(file, local_file)?;
        Some(dest.display().to_string())
    }
}

//! The Enstore adapter: one `encp` process per transfer.
//!
//! `encp` blocks until its transfer ends, so the adapter runs at most `max_processes` of them at
//! once and tells the dispatcher how much room is left. Each runs with the broker's priority as
//! `--priority N` and `--delpri 0 --age-time 0`, the configured Enstore options
//! (`--storage-group`, `--file-family`, `--library` for writes, `--delayed-dismount`), then the
//! files: `SRC DEST` for reads and writes, `--get-bfid BFID DEST` for a read whose bfid the
//! station gave. The library manager ignores the ticket's `--delpri`/`--age-time`: it ages
//! each of its queues by `DELTA_PRI` = 1 every `AGE_TIME` = 30 minutes (Enstore-org/enstore
//! `src/manage_queue.py`, `SortedList`), so the MSS does age, slowly.
//!
//! Which options a run may have depends on the encp build (`build`: see [`build`]); a
//! configuration passing one the build refuses is refused at load, naming it.
//!
//! What happened is read from the process:
//! - a line of its standard output containing `started_pattern` (encp prints "Mover called
//!   back" once a mover has connected, at `--verbose` 4 and above: `TRANSFER_LEVEL` in
//!   `src/encp.py`) means the transfer started;
//! - exit 0 is done, with the bytes of the file on the local side (the declared size if it
//!   cannot be read);
//! - anything else failed. encp exits 1 for every ordinary failure, so whether it is retried
//!   comes from the `STATUS=<name>` line it writes on standard error (see [`status`]): a name
//!   in `fatal_statuses` fails the request, any other is retried. Without a STATUS line, an
//!   option the build refused is fatal, an exit code in `fatal_exit_codes` too, anything else
//!   is retried;
//! - a transfer past `timeout_secs` is stopped (SIGTERM, then SIGKILL after
//!   `kill_grace_secs`) and fails retryably; a cancelled one is stopped the same way.
//!
//! Stopping encp does not take its ticket out of the library manager's queue (its SIGTERM
//! handler only exits: `src/delete_at_exit.py`). With `cancel_command` (an admin command, e.g.
//! `enstore library --delete-work {unique_id} {library}`: `src/library_manager_client.py`),
//! a cancelled run still queued is also deleted there; its unique id is read from the ticket
//! encp prints at `--verbose` 11 (`TICKET_1_LEVEL`, "LM SUBMISSION TICKET").
//!
//! Enstore grants *admin* priority (its library manager serves the admin queue before any
//! regular request) in two ways, both available per priority class in `classes`: a library
//! manager `adminpri` rule matching fields of the request ticket (a site setting in Enstore's
//! configuration; the broker can only send matching fields, through `args` such as
//! `--storage-group`), or `ENCP_DAQ` set in encp's environment together with a regular priority
//! of 1000001 or more, which the library manager caps at 1000001 and turns the excess into
//! admin priority `priority / 1000001 - 1`. The latter works only where the library manager
//! has an entry in Enstore's `priority` configuration (without one `PriSelector.priority`
//! returns the ticket's priorities untouched: `src/priority_selector.py`), and any non-empty
//! `ENCP_DAQ` enables it (encp sends its value, the selector tests it for truth; "0" enables
//! it too). So `ENCP_DAQ` is set only per priority class, never for every run.
//!
//! Every child gets SIGTERM when the broker dies (Linux `PR_SET_PDEATHSIG`): a transfer the
//! broker no longer watches is stopped, and the broker submits it again as a new attempt after
//! its restart, so it is never run twice at once.

pub mod build;
pub mod status;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tracing::{debug, info, warn};

use crate::event_log::EventLog;
use crate::protocol::{Direction, EventKind, Transfer};
use crate::rest::Issue;
use crate::{
    Capabilities, EventBatch, EventCursor, MssAdapter, MssError, PriorityScale, Progress,
    Submitted, TransferRef, TransferStatus,
};

/// The largest regular priority Enstore's library manager keeps (`MAX_REG_PRIORITY`); above it,
/// only `ENCP_DAQ` turns the excess into admin priority.
pub const MAX_REGULAR_PRIORITY: i64 = 1_000_001;

/// Finished transfers remembered for status queries.
const FINISHED_KEPT: usize = 65_536;

pub use build::Build;
pub use status::DEFAULT_FATAL_STATUSES;

/// encp's verbosity at which it prints "Mover called back" (`TRANSFER_LEVEL`, `src/encp.py`).
pub const MOVER_CALLBACK_VERBOSE: i64 = 4;

/// encp's verbosity at which it prints the ticket sent to the library manager, with its
/// `unique_id` (`TICKET_1_LEVEL`, `src/encp.py`).
pub const TICKET_VERBOSE: i64 = 11;

/// The highest verbosity encp has a level for (`TRANS_ID_LEVEL`).
const MAX_VERBOSE: i64 = 13;

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

/// `[mss.encp]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEncpConfig {
    #[serde(default = "d_command")]
    pub command: String,
    /// The encp build the site runs: which options it takes.
    #[serde(default)]
    pub build: Build,
    #[serde(default = "d_max_processes")]
    pub max_processes: i64,
    #[serde(default = "d_timeout")]
    pub timeout_secs: i64,
    #[serde(default = "d_grace")]
    pub kill_grace_secs: i64,
    #[serde(default = "d_verbose")]
    pub verbose: i64,
    #[serde(default = "d_started")]
    pub started_pattern: String,
    #[serde(default)]
    pub storage_group: Option<String>,
    #[serde(default)]
    pub file_family: Option<String>,
    #[serde(default)]
    pub library: Option<String>,
    #[serde(default)]
    pub delayed_dismount_minutes: Option<i64>,
    #[serde(default)]
    pub read_dir: Option<String>,
    #[serde(default)]
    pub local_roots: Vec<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default = "d_fatal_codes")]
    pub fatal_exit_codes: Vec<i64>,
    #[serde(default = "d_fatal_statuses")]
    pub fatal_statuses: Vec<String>,
    #[serde(default = "d_stderr_lines")]
    pub stderr_lines: i64,
    #[serde(default)]
    pub reprioritize_command: Option<Vec<String>>,
    #[serde(default)]
    pub cancel_command: Option<Vec<String>>,
    #[serde(default)]
    pub classes: BTreeMap<String, RawClass>,
}

impl Default for RawEncpConfig {
    fn default() -> Self {
        RawEncpConfig {
            command: d_command(),
            build: Build::default(),
            max_processes: d_max_processes(),
            timeout_secs: d_timeout(),
            kill_grace_secs: d_grace(),
            verbose: d_verbose(),
            started_pattern: d_started(),
            storage_group: None,
            file_family: None,
            library: None,
            delayed_dismount_minutes: None,
            read_dir: None,
            local_roots: Vec::new(),
            args: Vec::new(),
            env: BTreeMap::new(),
            fatal_exit_codes: d_fatal_codes(),
            fatal_statuses: d_fatal_statuses(),
            stderr_lines: d_stderr_lines(),
            reprioritize_command: None,
            cancel_command: None,
            classes: BTreeMap::new(),
        }
    }
}

/// `[mss.encp.classes."<priority class>"]`: how a priority class's transfers are run.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawClass {
    /// `--priority` for this class instead of the broker's.
    #[serde(default)]
    pub priority: Option<i64>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub args: Vec<String>,
}

fn d_command() -> String {
    "encp".into()
}
fn d_max_processes() -> i64 {
    8
}
fn d_timeout() -> i64 {
    86_400
}
fn d_grace() -> i64 {
    10
}
fn d_verbose() -> i64 {
    4
}
fn d_started() -> String {
    "Mover called back".into()
}
fn d_fatal_codes() -> Vec<i64> {
    vec![2]
}
fn d_fatal_statuses() -> Vec<String> {
    DEFAULT_FATAL_STATUSES
        .iter()
        .map(|s| s.to_string())
        .collect()
}
fn d_stderr_lines() -> i64 {
    20
}

/// A validated `[mss.encp]`.
#[derive(Debug, Clone, PartialEq)]
pub struct EncpConfig {
    pub command: PathBuf,
    pub build: Build,
    pub max_processes: usize,
    pub timeout: Duration,
    pub kill_grace: Duration,
    pub verbose: u32,
    /// Empty: never report a start.
    pub started_pattern: String,
    pub storage_group: Option<String>,
    pub file_family: Option<String>,
    pub library: Option<String>,
    pub delayed_dismount_minutes: Option<u32>,
    pub read_dir: Option<PathBuf>,
    /// Directories a request's `local_file` must be under (empty: any absolute path).
    pub local_roots: Vec<PathBuf>,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub fatal_exit_codes: Vec<i32>,
    /// `STATUS=` names that fail a request for good; any other is retried.
    pub fatal_statuses: Vec<String>,
    pub stderr_lines: usize,
    pub reprioritize_command: Option<Vec<String>>,
    pub cancel_command: Option<Vec<String>>,
    pub classes: BTreeMap<String, ClassSettings>,
}

/// How one priority class's transfers are run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClassSettings {
    pub priority: Option<i64>,
    pub env: BTreeMap<String, String>,
    pub args: Vec<String>,
}

impl RawEncpConfig {
    /// Validate; relative paths are taken from `base` (the configuration's directory) when they
    /// name a file there, else looked up on `PATH` at run time (a bare `encp`).
    pub fn validate(&self, base: &Path) -> Result<EncpConfig, Vec<Issue>> {
        let mut issues = Vec::new();
        let positive = |v: i64, key: &str, issues: &mut Vec<Issue>| -> u64 {
            if v <= 0 {
                issues.push(Issue::new(
                    key,
                    format!("must be a positive integer, got {v}"),
                ));
                1
            } else {
                v as u64
            }
        };
        if self.command.is_empty() {
            issues.push(Issue::new("command", "may not be empty"));
        }
        let command = if self.command.contains('/') {
            base.join(&self.command)
        } else {
            PathBuf::from(&self.command)
        };
        let max_processes = positive(self.max_processes, "max_processes", &mut issues) as usize;
        let timeout = Duration::from_secs(positive(self.timeout_secs, "timeout_secs", &mut issues));
        let kill_grace = Duration::from_secs(positive(
            self.kill_grace_secs,
            "kill_grace_secs",
            &mut issues,
        ));
        self.check_verbose(&mut issues);
        self.check_build(&mut issues);
        self.check_daq(&mut issues);
        self.check_status_stream(&mut issues);
        self.check_cancel_command(&mut issues);
        let delayed = match self.delayed_dismount_minutes {
            Some(m) if m < 0 => {
                issues.push(Issue::new("delayed_dismount_minutes", "must be 0 or more"));
                None
            }
            Some(m) => Some(m as u32),
            None => None,
        };
        for (key, v) in [
            ("storage_group", &self.storage_group),
            ("file_family", &self.file_family),
            ("library", &self.library),
        ] {
            if v.as_deref().is_some_and(str::is_empty) {
                issues.push(Issue::new(key, "may not be empty (leave it out instead)"));
            }
        }
        let read_dir = self.read_dir.as_ref().map(|d| base.join(d));
        if let Some(d) = &read_dir {
            if !d.is_dir() {
                issues.push(Issue::new(
                    "read_dir",
                    format!("`{}` is not a directory", d.display()),
                ));
            }
        }
        let local_roots: Vec<PathBuf> = self.local_roots.iter().map(PathBuf::from).collect();
        for root in &local_roots {
            let text = root.to_string_lossy();
            if !root.is_absolute() || has_parent_dir(root) || has_dot_segment(&text) {
                issues.push(Issue::new(
                    "local_roots",
                    format!("`{}` must be an absolute directory", root.display()),
                ));
            }
        }
        let fatal_exit_codes = self
            .fatal_exit_codes
            .iter()
            .filter_map(|&c| match c {
                1..=255 => Some(c as i32),
                _ => {
                    issues.push(Issue::new(
                        "fatal_exit_codes",
                        format!("{c} is not an exit code (1..255)"),
                    ));
                    None
                }
            })
            .collect();
        if self.fatal_statuses.iter().any(String::is_empty) {
            issues.push(Issue::new(
                "fatal_statuses",
                "an empty name matches no STATUS line: leave it out",
            ));
        }
        let stderr_lines = positive(self.stderr_lines, "stderr_lines", &mut issues) as usize;
        if let Some(cmd) = &self.reprioritize_command {
            if cmd.first().is_none_or(|c| c.is_empty()) {
                issues.push(Issue::new(
                    "reprioritize_command",
                    "must name a program first, e.g. [\"enstore-reprioritize\", \"{pid}\", \"{priority}\"]",
                ));
            }
            if !cmd.iter().any(|a| a.contains("{priority}")) {
                issues.push(Issue::new(
                    "reprioritize_command",
                    "must pass the new priority ({priority})",
                ));
            }
        }
        let mut classes = BTreeMap::new();
        for (name, c) in &self.classes {
            let key = format!("classes.\"{name}\".priority");
            if let Some(p) = c.priority {
                if p < 1 {
                    issues.push(Issue::new(
                        &key,
                        "must be 1 or more (encp's lowest priority is 1)",
                    ));
                } else if p > MAX_REGULAR_PRIORITY && !c.env.contains_key("ENCP_DAQ") {
                    issues.push(Issue::new(
                        &key,
                        format!(
                            "{p} is above Enstore's largest regular priority {MAX_REGULAR_PRIORITY}: \
                             the library manager caps it unless ENCP_DAQ is set, which turns the \
                             excess into admin priority; set env.ENCP_DAQ for this class"
                        ),
                    ));
                }
            }
            classes.insert(
                name.clone(),
                ClassSettings {
                    priority: c.priority,
                    env: c.env.clone(),
                    args: c.args.clone(),
                },
            );
        }
        if !issues.is_empty() {
            return Err(issues);
        }
        Ok(EncpConfig {
            command,
            build: self.build,
            max_processes,
            timeout,
            kill_grace,
            verbose: self.verbose.clamp(0, MAX_VERBOSE) as u32,
            started_pattern: self.started_pattern.clone(),
            storage_group: self.storage_group.clone(),
            file_family: self.file_family.clone(),
            library: self.library.clone(),
            delayed_dismount_minutes: delayed,
            read_dir,
            local_roots,
            args: self.args.clone(),
            env: self.env.clone(),
            fatal_exit_codes,
            fatal_statuses: self.fatal_statuses.clone(),
            stderr_lines,
            reprioritize_command: self.reprioritize_command.clone(),
            cancel_command: self.cancel_command.clone(),
            classes,
        })
    }
}

impl RawEncpConfig {
    /// encp prints "Mover called back" only at `--verbose` 4 and above, so 1 to 3 would never
    /// report a start (0 passes no `--verbose`; the start is then never reported either, which
    /// an empty `started_pattern` says on purpose).
    fn check_verbose(&self, issues: &mut Vec<Issue>) {
        if !(0..=MAX_VERBOSE).contains(&self.verbose) {
            issues.push(Issue::new(
                "verbose",
                format!("must be 0 (not passed) to {MAX_VERBOSE}"),
            ));
        } else if (1..MOVER_CALLBACK_VERBOSE).contains(&self.verbose)
            && !self.started_pattern.is_empty()
        {
            issues.push(Issue::new(
                "verbose",
                format!(
                    "{} is below {MOVER_CALLBACK_VERBOSE}: encp prints \"Mover called back\" only at \
                     --verbose {MOVER_CALLBACK_VERBOSE} and above (TRANSFER_LEVEL), so no start would \
                     ever be seen; use {MOVER_CALLBACK_VERBOSE} or more (or set started_pattern = \"\")",
                    self.verbose
                ),
            ));
        }
    }

    /// Every option a run would pass must be one the configured encp build takes.
    fn check_build(&self, issues: &mut Vec<Issue>) {
        let mut refuse = |key: String, option: &str| {
            issues.push(Issue::new(
                &key,
                format!(
                    "passes {option}, which the {} build of encp refuses (\"option {option} is an \
                     administrator option\"): remove it, or set build = \"{}\" if the site runs \
                     that build",
                    self.build.as_str(),
                    build::level_of(option).unwrap_or(Build::Admin).as_str()
                ),
            ))
        };
        for (key, flag, value) in [
            ("storage_group", "--storage-group", &self.storage_group),
            ("library", "--library", &self.library),
        ] {
            if value.is_some() && !build::refused(self.build, &[flag.to_string()]).is_empty() {
                refuse(key.to_string(), flag);
            }
        }
        for option in build::refused(self.build, &self.args) {
            refuse("args".into(), option);
        }
        for (name, c) in &self.classes {
            for option in build::refused(self.build, &c.args) {
                refuse(format!("classes.\"{name}\".args"), option);
            }
        }
    }

    /// `--data-access-layer` sends encp's STATUS block to stdout, failures included
    /// (`print_data_access_layer_format` in Enstore's `src/encp.py`: stderr only when it was
    /// not requested), where the adapter does not read it: every fatal status would be retried.
    fn check_status_stream(&self, issues: &mut Vec<Issue>) {
        let dal = |args: &[String]| args.iter().any(|a| a == "--data-access-layer");
        let mut keys = Vec::new();
        if dal(&self.args) {
            keys.push("args".to_string());
        }
        for (name, c) in &self.classes {
            if dal(&c.args) {
                keys.push(format!("classes.\"{name}\".args"));
            }
        }
        for key in keys {
            issues.push(Issue::new(
                &key,
                "may not pass --data-access-layer: encp then prints its STATUS= line on stdout, \
                 failures included, and the adapter reads the outcome from stderr (it asks \
                 nothing more of encp than the STATUS line it always writes there)",
            ));
        }
    }

    /// `ENCP_DAQ` turns a priority of 1000001 or more into admin priority for every run that
    /// has it, whatever its value (`src/priority_selector.py` tests it for truth): only a
    /// priority class may set it, and to something non-empty (empty is off).
    fn check_daq(&self, issues: &mut Vec<Issue>) {
        if self.env.contains_key("ENCP_DAQ") {
            issues.push(Issue::new(
                "env",
                "may not set ENCP_DAQ: it would give every run admin priority where the library \
                 manager has a priority configuration; set it per priority class \
                 (classes.\"<class>\".env)",
            ));
        }
        for (name, c) in &self.classes {
            if c.env.get("ENCP_DAQ").is_some_and(String::is_empty) {
                issues.push(Issue::new(
                    &format!("classes.\"{name}\".env"),
                    "sets ENCP_DAQ empty, which Enstore reads as unset: any non-empty value \
                     (\"0\" included) enables it",
                ));
            }
        }
    }

    /// `enstore library --delete-work` is an admin option (`src/library_manager_client.py`), and
    /// the unique id of a run is known only from the ticket encp prints at `--verbose` 11.
    fn check_cancel_command(&self, issues: &mut Vec<Issue>) {
        let Some(cmd) = &self.cancel_command else {
            return;
        };
        if cmd.first().is_none_or(|c| c.is_empty()) {
            issues.push(Issue::new(
                "cancel_command",
                "must name a program first, e.g. [\"enstore\", \"library\", \"--delete-work\", \
                 \"{unique_id}\", \"{library}\"]",
            ));
        }
        if self.build != Build::Admin {
            issues.push(Issue::new(
                "cancel_command",
                "deletes work from the library manager's queue, an administrator command: it \
                 needs build = \"admin\"",
            ));
        }
        let uses = |p: &str| cmd.iter().any(|a| a.contains(p));
        if (uses(UNIQUE_ID) || uses(LIBRARY)) && self.verbose < TICKET_VERBOSE {
            issues.push(Issue::new(
                "cancel_command",
                format!(
                    "uses {UNIQUE_ID} or {LIBRARY}, which encp prints only at --verbose \
                     {TICKET_VERBOSE} and above (its LM submission ticket): set verbose = \
                     {TICKET_VERBOSE}"
                ),
            ));
        }
    }
}

/// The placeholders of `cancel_command` read from encp's ticket.
const UNIQUE_ID: &str = "{unique_id}";
const LIBRARY: &str = "{library}";

impl EncpConfig {
    /// Whether `station` may name this local file: an absolute path without `.` or `..`
    /// segments that, with its symbolic links resolved, is under one of `local_roots` (where
    /// `{station}` is the station's own name) when any are set, and is not a directory.
    pub fn check_local_file_for(&self, station: &str, local_file: &str) -> Result<(), String> {
        if station.contains('/') || station == "." || station == ".." {
            return Err("cannot be placed: the station's name is not a directory name".into());
        }
        self.check_local(local_file, Some(station))
    }

    /// The same check when the station is not known (a transfer about to run): a `{station}`
    /// segment of a root then matches any one directory. Run again before every `encp`, since a
    /// symbolic link may have changed since the request arrived.
    pub fn check_local_file(&self, local_file: &str) -> Result<(), String> {
        self.check_local(local_file, None)
    }

    fn check_local(&self, local_file: &str, station: Option<&str>) -> Result<(), String> {
        let path = Path::new(local_file);
        if !path.is_absolute() || has_dot_segment(local_file) {
            return Err("must be an absolute path without `.` or `..` segments".into());
        }
        let resolved = resolve(path)?;
        if resolved.is_dir() {
            return Err(format!(
                "`{}` is a directory: name a file",
                resolved.display()
            ));
        }
        if self.local_roots.is_empty() {
            return Ok(());
        }
        let under = |root: &PathBuf| {
            let root = match station {
                Some(st) => PathBuf::from(root.to_string_lossy().replace(STATION, st)),
                None => root.clone(),
            };
            under_root(&resolved, &root)
        };
        if self.local_roots.iter().any(under) {
            return Ok(());
        }
        let roots: Vec<String> = self
            .local_roots
            .iter()
            .map(|r| r.display().to_string())
            .collect();
        let shown = if resolved == path {
            String::new()
        } else {
            format!(" (it leads to {})", resolved.display())
        };
        Err(format!(
            "must be under one of {}{shown} (mss.encp.local_roots)",
            roots.join(", ")
        ))
    }

    /// What Enstore through `encp` can do under this configuration.
    pub fn capabilities(&self) -> Capabilities {
        Capabilities {
            priority: PriorityScale::Direct {
                min: 1,
                max: MAX_REGULAR_PRIORITY,
            },
            reprioritize: self.reprioritize_command.is_some(),
            cancel: true,
            release: false,
            writes: true,
            reads_need_local_file: self.read_dir.is_none(),
            writes_need_local_file: true,
            // `--get-bfid` is a user2 option.
            bfid: self.build.allows(Build::User2),
            max_outstanding: Some(self.max_processes),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The command line and the outcome: pure
// ---------------------------------------------------------------------------------------------

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
            let dest =
                match (&t.local_file, &cfg.read_dir) {
                    (Some(f), _) => PathBuf::from(f),
                    (None, Some(dir)) => dir.join(basename(&t.file)),
                    (None, None) => return Err(MssError::Rejected(
                        "a read needs local_file (where to put it): mss.encp.read_dir is not set"
                            .into(),
                    )),
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

fn has_parent_dir(path: &Path) -> bool {
    path.components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
}

/// The placeholder of a `local_roots` entry for the requesting station's name.
pub const STATION: &str = "{station}";

/// Whether a path has a `.` or `..` segment (`Path::components` drops inner `.` segments, so
/// the text is read).
fn has_dot_segment(path: &str) -> bool {
    path.split('/').any(|seg| seg == "." || seg == "..")
}

/// A path with its symbolic links resolved: the longest prefix that exists, canonicalized, then
/// the rest as written. An entry that exists but cannot be resolved (a link to nothing, which
/// encp would write through wherever it points later) is refused.
fn resolve(path: &Path) -> Result<PathBuf, String> {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            return Ok(rest.iter().rev().fold(real, |p, name| p.join(name)));
        }
        if existing.symlink_metadata().is_ok() {
            return Err(format!(
                "`{}` is a symbolic link that leads nowhere, or cannot be read",
                existing.display()
            ));
        }
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_os_string());
                existing = parent.to_path_buf();
            }
            _ => return Ok(path.to_path_buf()),
        }
    }
}

/// Whether `path` (resolved) is under `root`, whose existing part is resolved too (a root may
/// itself be a symbolic link); a segment of `root` with `{station}` matches any one name.
fn under_root(path: &Path, root: &Path) -> bool {
    let segments: Vec<String> = root
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let fixed = segments
        .iter()
        .position(|s| s.contains(STATION))
        .unwrap_or(segments.len());
    let literal: PathBuf = segments[..fixed].iter().collect();
    let head = resolve(&literal).unwrap_or(literal);
    let pattern: Vec<String> = head
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .chain(segments[fixed..].iter().cloned())
        .collect();
    let mut names = path
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned());
    pattern.iter().all(|want| {
        names
            .next()
            .is_some_and(|name| segment_matches(want, &name))
    })
}

/// One root segment against one path segment: equal, or `pre{station}post` around a name.
fn segment_matches(want: &str, name: &str) -> bool {
    match want.split_once(STATION) {
        None => want == name,
        Some((pre, post)) => {
            name.len() > pre.len() + post.len() && name.starts_with(pre) && name.ends_with(post)
        }
    }
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

/// How an `encp` run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Exited with this code.
    Code(i32),
    /// Killed by this signal (not by the adapter).
    Signal(i32),
    /// Stopped by the adapter after `timeout_secs`.
    TimedOut,
    /// Stopped by the adapter on cancellation.
    Cancelled,
}

/// What a run said, read from its output as it ran.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Said {
    /// The name on its last `STATUS=` line (standard error).
    pub status: Option<String>,
    /// The lines after that STATUS line (encp's message).
    pub message: String,
    /// The line refusing an option of the build (standard output), if any.
    pub refused: Option<String>,
    /// The last lines of standard error (of standard output if stderr was empty).
    pub tail: String,
}

/// What an ended run means for the transfer. `bytes` is the local file's size after a success.
pub fn outcome(cfg: &EncpConfig, exit: Exit, said: &Said, bytes: u64) -> EventKind {
    let reason = |what: String, text: &str| {
        if text.trim().is_empty() {
            what
        } else {
            format!("{what}: {}", text.trim())
        }
    };
    let tail = said.tail.as_str();
    match exit {
        Exit::Code(0) => EventKind::Done { bytes },
        Exit::Cancelled => EventKind::Cancelled,
        Exit::TimedOut => EventKind::Failed {
            reason: reason(
                format!(
                    "encp timed out after {} s and was stopped",
                    cfg.timeout.as_secs()
                ),
                tail,
            ),
            retryable: true,
        },
        Exit::Signal(sig) => EventKind::Failed {
            reason: reason(format!("encp was killed by signal {sig}"), tail),
            retryable: true,
        },
        Exit::Code(code) => match (&said.status, &said.refused) {
            (Some(status), _) => EventKind::Failed {
                reason: reason(
                    format!("encp exited with status {code}, STATUS={status}"),
                    &said.message,
                ),
                retryable: !cfg.fatal_statuses.iter().any(|f| f == status),
            },
            // The same command line would be refused again.
            (None, Some(line)) => EventKind::Failed {
                reason: format!("encp exited with status {code}: {line}"),
                retryable: false,
            },
            (None, None) => EventKind::Failed {
                reason: reason(format!("encp exited with status {code}"), tail),
                retryable: !cfg.fatal_exit_codes.contains(&code),
            },
        },
    }
}

/// A successful run whose local side is a directory did not transfer a file (its 4,096 bytes
/// are the directory's own): failed, and not retried, since it would end the same way.
pub fn done_unless_directory(local: &Path, is_dir: bool, bytes: u64) -> EventKind {
    if is_dir {
        return EventKind::Failed {
            reason: format!(
                "encp exited 0 but the local side `{}` is a directory, not the file",
                local.display()
            ),
            retryable: false,
        };
    }
    EventKind::Done { bytes }
}

/// The last `n` lines of a stream, kept as they arrive.
#[derive(Debug, Default)]
struct Tail {
    lines: VecDeque<String>,
}

impl Tail {
    fn push(&mut self, line: String, n: usize) {
        if self.lines.len() == n {
            self.lines.pop_front();
        }
        self.lines.push_back(line);
    }

    fn text(&self) -> String {
        self.lines.iter().cloned().collect::<Vec<_>>().join("\n")
    }
}

// ---------------------------------------------------------------------------------------------
// The adapter
// ---------------------------------------------------------------------------------------------

/// The Enstore adapter.
pub struct EncpAdapter {
    shared: Arc<Shared>,
}

struct Shared {
    cfg: EncpConfig,
    log: EventLog,
    slots: Arc<Semaphore>,
    room: Notify,
    procs: Mutex<Procs>,
}

#[derive(Default)]
struct Procs {
    running: HashMap<String, Proc>,
    finished: HashMap<String, (u32, EventKind)>,
    finished_order: VecDeque<String>,
}

struct Proc {
    attempt: u32,
    pid: u32,
    started: bool,
    /// The library manager's id of its ticket, and its library (from the printed ticket).
    unique_id: Option<String>,
    library: Option<String>,
    file: String,
    stop: Arc<Notify>,
}

impl EncpAdapter {
    pub fn new(cfg: EncpConfig) -> EncpAdapter {
        let slots = Arc::new(Semaphore::new(cfg.max_processes));
        EncpAdapter {
            shared: Arc::new(Shared {
                cfg,
                log: EventLog::new("encp"),
                slots,
                room: Notify::new(),
                procs: Mutex::new(Procs::default()),
            }),
        }
    }

    /// Processes running now.
    pub fn running(&self) -> usize {
        self.shared.lock().running.len()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Procs> {
        self.procs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Record the end of a run and publish it.
    fn finish(&self, key: &str, attempt: u32, kind: EventKind) {
        {
            let mut p = self.lock();
            p.running.remove(key);
            if p.finished
                .insert(key.to_string(), (attempt, kind.clone()))
                .is_none()
            {
                p.finished_order.push_back(key.to_string());
            }
            while p.finished_order.len() > FINISHED_KEPT {
                if let Some(old) = p.finished_order.pop_front() {
                    p.finished.remove(&old);
                }
            }
        }
        self.log.push(key, attempt, kind);
    }
}

#[async_trait]
impl MssAdapter for EncpAdapter {
    fn name(&self) -> &'static str {
        "encp"
    }

    fn capabilities(&self) -> Capabilities {
        self.shared.cfg.capabilities()
    }

    fn cancel_reaches_mss(&self) -> bool {
        self.shared.cfg.cancel_command.is_some()
    }

    fn room(&self) -> Option<usize> {
        Some(self.shared.slots.available_permits())
    }

    fn check_local_file(&self, local_file: &str) -> Result<(), String> {
        self.shared.cfg.check_local_file(local_file)
    }

    fn check_local_file_for(&self, station: &str, local_file: &str) -> Result<(), String> {
        self.shared.cfg.check_local_file_for(station, local_file)
    }

    async fn room_freed(&self) {
        self.shared.room.notified().await
    }

    async fn submit(&self, t: &Transfer) -> Result<Submitted, MssError> {
        let sh = &self.shared;
        // Checked and started under one lock (spawning does not wait), so one key never runs
        // twice at once.
        let mut p = sh.lock();
        if let Some(run) = p.running.get(&t.key) {
            if run.attempt == t.attempt {
                return Ok(Submitted {
                    mss_id: format!("encp:{}", run.pid),
                    duplicate: true,
                });
            }
            return Err(MssError::Unavailable(format!(
                "attempt {} of this transfer is still running",
                run.attempt
            )));
        }
        if p.finished.get(&t.key).is_some_and(|(a, _)| *a >= t.attempt) {
            return Ok(Submitted {
                mss_id: "encp:finished".into(),
                duplicate: true,
            });
        }
        let inv = invocation(&sh.cfg, t)?;
        if let Some(f) = &t.local_file {
            // Links may have changed since the request arrived: the file must still be where
            // the roots allow, and not a directory.
            sh.cfg
                .check_local_file(f)
                .map_err(|why| MssError::Rejected(format!("local_file `{f}` {why}")))?;
        }
        let permit = sh.slots.clone().try_acquire_owned().map_err(|_| {
            MssError::Unavailable(format!(
                "all {} encp processes are busy",
                sh.cfg.max_processes
            ))
        })?;
        let child = spawn(&inv).map_err(|e| {
            MssError::Unavailable(format!("cannot run {}: {e}", inv.program.display()))
        })?;
        let pid = child.id().unwrap_or(0);
        let stop = Arc::new(Notify::new());
        p.running.insert(
            t.key.clone(),
            Proc {
                attempt: t.attempt,
                pid,
                started: false,
                unique_id: None,
                library: None,
                file: t.file.clone(),
                stop: stop.clone(),
            },
        );
        drop(p);
        debug!(key = %t.key, attempt = t.attempt, pid, args = ?inv.args, "encp started");
        tokio::spawn(watch(sh.clone(), child, t.clone(), inv.local, stop, permit));
        Ok(Submitted {
            mss_id: format!("encp:{pid}"),
            duplicate: false,
        })
    }

    async fn cancel(&self, t: &TransferRef) -> Result<(), MssError> {
        let p = self.shared.lock();
        match p.running.get(&t.key) {
            Some(run) if run.attempt == t.attempt => {
                // The watcher stops encp, then deletes its ticket (`cancel_command`).
                run.stop.notify_one();
                Ok(())
            }
            _ => Err(MssError::Rejected(
                "no encp of this transfer is running".into(),
            )),
        }
    }

    async fn reprioritize(&self, t: &TransferRef, priority: i64) -> Result<(), MssError> {
        let Some(template) = &self.shared.cfg.reprioritize_command else {
            return Err(MssError::Rejected(
                "mss.encp.reprioritize_command is not set".into(),
            ));
        };
        let (pid, file) = {
            let p = self.shared.lock();
            match p.running.get(&t.key) {
                Some(run) if run.attempt == t.attempt && !run.started => {
                    (run.pid, run.file.clone())
                }
                Some(run) if run.attempt == t.attempt => {
                    return Err(MssError::Rejected("the transfer has started".into()))
                }
                _ => {
                    return Err(MssError::Rejected(
                        "no encp of this transfer is running".into(),
                    ))
                }
            }
        };
        let args: Vec<String> = template
            .iter()
            .map(|a| {
                a.replace("{pid}", &pid.to_string())
                    .replace("{priority}", &priority.to_string())
                    .replace("{key}", &t.key)
                    .replace("{attempt}", &t.attempt.to_string())
                    .replace("{file}", &file)
            })
            .collect();
        run_command(&args, &self.shared.cfg.env).await
    }

    async fn status(&self, t: &TransferRef) -> Result<Option<TransferStatus>, MssError> {
        let p = self.shared.lock();
        if let Some(run) = p.running.get(&t.key) {
            return Ok(Some(TransferStatus {
                attempt: run.attempt,
                progress: if run.started {
                    Progress::Running
                } else {
                    Progress::Queued
                },
            }));
        }
        Ok(p.finished
            .get(&t.key)
            .map(|(attempt, kind)| TransferStatus {
                attempt: *attempt,
                progress: Progress::Finished(kind.clone()),
            }))
    }

    async fn events(&self, cursor: &EventCursor, wait: Duration) -> Result<EventBatch, MssError> {
        Ok(self.shared.log.read(cursor, wait).await)
    }
}

/// After a cancelled run is stopped (first: left waiting, encp would resubmit a deleted
/// ticket), delete its ticket from the library manager's queue with `cancel_command`, if it
/// was still queued there: encp printed its ticket (read to the end of its output, so a
/// ticket printed just before the stop is known) and no mover called back.
async fn delete_ticket(sh: &Shared, t: &Transfer) {
    let Some(template) = &sh.cfg.cancel_command else {
        return;
    };
    let queued = {
        let p = sh.lock();
        p.running
            .get(&t.key)
            .filter(|run| run.attempt == t.attempt && !run.started)
            .and_then(|run| Some((run.unique_id.clone()?, run.library.clone())))
    };
    let Some((unique_id, library)) = queued else {
        return;
    };
    let library = library
        .or_else(|| sh.cfg.library.clone())
        .unwrap_or_default();
    let args: Vec<String> = template
        .iter()
        .map(|a| {
            a.replace(UNIQUE_ID, &unique_id)
                .replace(LIBRARY, &library)
                .replace("{key}", &t.key)
                .replace("{attempt}", &t.attempt.to_string())
                .replace("{file}", &t.file)
        })
        .collect();
    match run_command(&args, &sh.cfg.env).await {
        Ok(()) => {
            info!(key = %t.key, %unique_id, %library, "encp ticket deleted from the library manager's queue")
        }
        // The ticket stays until a mover takes it and finds no encp to call back.
        Err(e) => {
            warn!(key = %t.key, %unique_id, error = %e, "cancel_command failed: the ticket stays in the library manager's queue")
        }
    }
}

/// Run a site command (re-prioritisation, cancellation) to its end, within a minute.
async fn run_command(args: &[String], env: &BTreeMap<String, String>) -> Result<(), MssError> {
    let Some((program, rest)) = args.split_first() else {
        return Err(MssError::Rejected("an empty command".into()));
    };
    let out = Command::new(program)
        .args(rest)
        .envs(env)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .map_err(|_| MssError::Unavailable(format!("{program} timed out")))?
        .map_err(|e| MssError::Unavailable(format!("cannot run {program}: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(MssError::Rejected(format!(
            "{program} exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Start `encp` in its own process group, with SIGTERM on the broker's death.
fn spawn(inv: &Invocation) -> std::io::Result<Child> {
    let mut cmd = Command::new(&inv.program);
    cmd.args(&inv.args)
        .envs(&inv.env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // On Linux the parent-death signal stops it with SIGTERM, so encp can clean up;
        // elsewhere, a run whose watcher is dropped (the broker exiting) is killed.
        .kill_on_drop(!cfg!(target_os = "linux"))
        .process_group(0);
    die_with_parent(&mut cmd);
    cmd.spawn()
}

#[cfg(target_os = "linux")]
fn die_with_parent(cmd: &mut Command) {
    let parent = std::process::id();
    // SAFETY: runs in the forked child before exec; prctl and getppid are async-signal-safe
    // and touch no memory of the parent.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before prctl: then nobody would stop this child.
            if libc::getppid() as u32 != parent {
                return Err(std::io::Error::other(
                    "the broker exited before encp started",
                ));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_cmd: &mut Command) {}

/// Watch one run to its end: report a start, enforce the timeout and cancellation, then
/// publish the outcome and free the slot.
async fn watch(
    sh: Arc<Shared>,
    mut child: Child,
    t: Transfer,
    local: PathBuf,
    stop: Arc<Notify>,
    permit: OwnedSemaphorePermit,
) {
    let lines = sh.cfg.stderr_lines;
    let stdout = child.stdout.take().map(|out| {
        let sh = sh.clone();
        let (key, attempt) = (t.key.clone(), t.attempt);
        tokio::spawn(read_lines(out, lines, move |line| {
            on_stdout(&sh, &key, attempt, line)
        }))
    });
    let stderr = child.stderr.take().map(|err| {
        tokio::spawn(async move {
            let mut seen = StatusSeen::default();
            let (_, tail) = read_lines(err, lines, |line| seen.push(line)).await;
            (seen, tail)
        })
    });
    let exit = tokio::select! {
        status = child.wait() => exit_of(status),
        _ = stop.notified() => {
            terminate(&mut child, sh.cfg.kill_grace).await;
            Exit::Cancelled
        }
        _ = tokio::time::sleep(sh.cfg.timeout) => {
            terminate(&mut child, sh.cfg.kill_grace).await;
            Exit::TimedOut
        }
    };
    let (seen, err_tail) = match stderr {
        Some(h) => h.await.unwrap_or_default(),
        None => Default::default(),
    };
    let (refused, out_tail) = match stdout {
        Some(h) => h.await.unwrap_or_default(),
        None => Default::default(),
    };
    let said = Said {
        status: seen.status,
        message: seen.after.join("\n"),
        refused,
        tail: if err_tail.trim().is_empty() {
            out_tail
        } else {
            err_tail
        },
    };
    if exit == Exit::Cancelled {
        delete_ticket(&sh, &t).await;
    }
    let kind = match exit {
        Exit::Code(0) => match std::fs::metadata(&local) {
            Ok(m) => done_unless_directory(&local, m.is_dir(), m.len()),
            Err(_) => outcome(&sh.cfg, exit, &said, t.size_bytes),
        },
        _ => outcome(&sh.cfg, exit, &said, 0),
    };
    let kind = match kind {
        EventKind::Failed { reason, retryable } => EventKind::Failed {
            reason: crate::answer::clip(&reason, crate::answer::MAX_MESSAGE_CHARS).into_owned(),
            retryable,
        },
        other => other,
    };
    match &kind {
        EventKind::Failed { reason, retryable } => {
            warn!(key = %t.key, attempt = t.attempt, %reason, retryable, "encp failed")
        }
        EventKind::Done { bytes } => info!(key = %t.key, attempt = t.attempt, bytes, "encp done"),
        _ => info!(key = %t.key, attempt = t.attempt, outcome = ?kind, "encp ended"),
    }
    sh.finish(&t.key, t.attempt, kind);
    drop(permit);
    sh.room.notify_one();
}

fn exit_of(status: std::io::Result<ExitStatus>) -> Exit {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(code), _) => Exit::Code(code),
            (None, Some(sig)) => Exit::Signal(sig),
            (None, None) => Exit::Signal(0),
        },
        // The wait itself failed: the process is beyond reach; treat it as lost to a signal.
        Err(_) => Exit::Signal(0),
    }
}

/// SIGTERM to the process group (encp cleans up on it), then SIGKILL after the grace period.
async fn terminate(child: &mut Child, grace: Duration) {
    if let Some(pid) = child.id() {
        // SAFETY: kill(2) on the child's own process group; no memory is touched.
        unsafe {
            libc::kill(-(pid as i32), libc::SIGTERM);
        }
        if tokio::time::timeout(grace, child.wait()).await.is_ok() {
            return;
        }
        // SAFETY: as above.
        unsafe {
            libc::kill(-(pid as i32), libc::SIGKILL);
        }
    }
    let _ = child.kill().await;
}

/// Longest line of a run's output kept; the rest of a longer line is read and dropped, so a run
/// that prints without newlines cannot grow the broker's memory.
const MAX_LINE_BYTES: usize = 64 * 1024;

/// Read a stream line by line, calling `each` on every line; returns the last thing `each`
/// returned (if any) and the last `n` lines.
async fn read_lines<R: AsyncRead + Unpin>(
    stream: R,
    n: usize,
    mut each: impl FnMut(&str) -> Option<String>,
) -> (Option<String>, String) {
    let mut tail = Tail::default();
    let mut kept = None;
    let mut reader = BufReader::new(stream);
    let mut raw = Vec::new();
    while let Ok(true) = next_line(&mut reader, &mut raw, MAX_LINE_BYTES).await {
        let line = String::from_utf8_lossy(&raw);
        let line = line.strip_suffix('\r').unwrap_or(&line).to_string();
        if let Some(v) = each(&line) {
            kept = Some(v);
        }
        tail.push(line, n);
    }
    (kept, tail.text())
}

/// The next line of `reader` into `line` (without its newline), at most `max` bytes of it kept;
/// `false` at the end of the stream.
async fn next_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    line: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<bool> {
    line.clear();
    let mut read_any = false;
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(read_any);
        }
        read_any = true;
        let newline = buf.iter().position(|&b| b == b'\n');
        let chunk = &buf[..newline.unwrap_or(buf.len())];
        let room = max.saturating_sub(line.len());
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let used = newline.map_or(buf.len(), |i| i + 1);
        reader.consume(used);
        if newline.is_some() {
            return Ok(true);
        }
    }
}

/// One line of a run's standard output: the start, the ticket's unique id and library, or an
/// option the build refused (returned).
fn on_stdout(sh: &Shared, key: &str, attempt: u32, line: &str) -> Option<String> {
    if status::refused_option(line) {
        return Some(line.to_string());
    }
    let started = !sh.cfg.started_pattern.is_empty() && line.contains(&sh.cfg.started_pattern);
    let unique_id = ticket_field(line, "unique_id");
    let library = ticket_field(line, "library");
    if !started && unique_id.is_none() && library.is_none() {
        return None;
    }
    let first_start = {
        let mut p = sh.lock();
        let run = p.running.get_mut(key).filter(|r| r.attempt == attempt)?;
        run.unique_id = unique_id.or(run.unique_id.take());
        run.library = library.or(run.library.take());
        let first = started && !run.started;
        run.started |= started;
        first
    };
    if first_start {
        sh.log.push(key, attempt, EventKind::Started);
    }
    None
}

/// The value of `'name': 'value'` in a line of a ticket encp printed with `pprint.pformat`.
fn ticket_field(line: &str, name: &str) -> Option<String> {
    let start = line.find(&format!("'{name}': '"))? + name.len() + 5;
    let rest = &line[start..];
    let value = &rest[..rest.find('\'')?];
    (!value.is_empty()).then(|| value.to_string())
}

/// The `STATUS=` line of a run's standard error and the message after it.
#[derive(Debug, Default)]
struct StatusSeen {
    status: Option<String>,
    after: Vec<String>,
}

impl StatusSeen {
    fn push(&mut self, line: &str) -> Option<String> {
        if let Some(name) = status::status_of(line) {
            self.status = Some(name.to_string());
            self.after.clear();
        } else if self.status.is_some() && !line.trim().is_empty() && self.after.len() < 20 {
            self.after.push(line.trim().to_string());
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> EncpConfig {
        let raw: RawEncpConfig = toml_like(
            r#"{"build": "admin", "storage_group": "cms", "file_family": "raw", "library": "LTO8",
                "delayed_dismount_minutes": 5, "args": ["--threaded"],
                "classes": {"datataking": {"priority": 2000002, "env": {"ENCP_DAQ": "1"},
                                           "args": ["--ignore-fair-share"]}}}"#,
        );
        raw.validate(Path::new("/")).unwrap()
    }

    fn toml_like(json: &str) -> RawEncpConfig {
        serde_json::from_str(json).unwrap()
    }

    fn transfer(direction: Direction) -> Transfer {
        Transfer {
            key: "42".into(),
            attempt: 1,
            file: "/pnfs/cms/run42/f1.root".into(),
            size_bytes: 100,
            priority: 20,
            volume: None,
            group: "analysis/higgs".into(),
            direction,
            local_file: Some("/data/stage/f1.root".into()),
            bfid: None,
        }
    }

    #[test]
    fn a_read_passes_the_priority_no_aging_and_source_then_destination() {
        let inv = invocation(&cfg(), &transfer(Direction::Read)).unwrap();
        assert_eq!(
            inv.args,
            [
                "--priority",
                "20",
                "--delpri",
                "0",
                "--age-time",
                "0",
                "--delayed-dismount",
                "5",
                "--verbose",
                "4",
                "--threaded",
                "/pnfs/cms/run42/f1.root",
                "/data/stage/f1.root"
            ]
        );
        assert_eq!(inv.local, PathBuf::from("/data/stage/f1.root"));
        assert!(inv.env.is_empty());
    }

    #[test]
    fn a_write_adds_the_enstore_tags_and_stores_the_local_file() {
        let inv = invocation(&cfg(), &transfer(Direction::Write)).unwrap();
        let tail: Vec<&str> = inv.args.iter().map(String::as_str).skip(10).collect();
        assert_eq!(
            tail,
            [
                "--storage-group",
                "cms",
                "--file-family",
                "raw",
                "--library",
                "LTO8",
                "--threaded",
                "/data/stage/f1.root",
                "/pnfs/cms/run42/f1.root"
            ]
        );
    }

    #[test]
    fn a_bfid_read_uses_get_bfid() {
        let mut t = transfer(Direction::Read);
        t.bfid = Some("CDMS105770745000000".into());
        let inv = invocation(&cfg(), &t).unwrap();
        let n = inv.args.len();
        assert_eq!(
            inv.args[n - 3..],
            ["--get-bfid", "CDMS105770745000000", "/data/stage/f1.root"]
        );
    }

    #[test]
    fn a_priority_class_gets_its_own_priority_environment_and_options() {
        let mut t = transfer(Direction::Read);
        t.group = "datataking".into();
        t.priority = 100;
        let inv = invocation(&cfg(), &t).unwrap();
        assert_eq!(inv.args[1], "2000002");
        assert_eq!(inv.env.get("ENCP_DAQ").map(String::as_str), Some("1"));
        assert!(inv.args.contains(&"--ignore-fair-share".to_string()));
    }

    #[test]
    fn a_read_without_a_destination_uses_read_dir_or_is_refused() {
        let mut t = transfer(Direction::Read);
        t.local_file = None;
        let err = invocation(&cfg(), &t).unwrap_err();
        assert!(matches!(err, MssError::Rejected(ref m) if m.contains("local_file")));
        let mut c = cfg();
        c.read_dir = Some(PathBuf::from("/stage"));
        let inv = invocation(&c, &t).unwrap();
        assert_eq!(inv.args.last().unwrap(), "/stage/f1.root");
        assert!(!c.capabilities().reads_need_local_file);
    }

    fn failed(c: &EncpConfig, exit: Exit, said: &Said) -> (bool, String) {
        match outcome(c, exit, said, 0) {
            EventKind::Failed { retryable, reason } => (retryable, reason),
            other => panic!("{other:?}"),
        }
    }

    fn status(name: &str, message: &str) -> Said {
        Said {
            status: Some(name.into()),
            message: message.into(),
            ..Said::default()
        }
    }

    #[test]
    fn the_status_line_decides_retries_not_the_exit_code_or_the_tail() {
        let c = cfg();
        let done = outcome(&c, Exit::Code(0), &Said::default(), 7);
        assert_eq!(done, EventKind::Done { bytes: 7 });
        // encp exits 1 for every ordinary failure: the STATUS name decides.
        let (retryable, reason) = failed(&c, Exit::Code(1), &status("NOACCESS", "volume VR1234"));
        assert!(!retryable);
        assert_eq!(
            reason,
            "encp exited with status 1, STATUS=NOACCESS: volume VR1234"
        );
        assert!(!failed(&c, Exit::Code(1), &status("NO SUCH FILE/BFID", "")).0);
        assert!(failed(&c, Exit::Code(1), &status("NET_ERROR", "mover timed out")).0);
        assert!(failed(&c, Exit::Code(1), &status("TOO MANY RETRIES", "")).0);
        assert!(failed(&c, Exit::Code(1), &status("locked", "")).0);
        // A path naming an error elsewhere in the output changes nothing.
        let mut said = status("NET_ERROR", "");
        said.tail = "INFILE=/pnfs/DELETED/NOACCESS/f\nSTATUS=NET_ERROR".into();
        assert!(failed(&c, Exit::Code(1), &said).0);
        // No STATUS line: exit 2 is encp's "should never happen", the rest is retried, and an
        // option the build refused is refused again on every try.
        let tail = |t: &str| Said {
            tail: t.into(),
            ..Said::default()
        };
        assert!(!failed(&c, Exit::Code(2), &tail("Traceback")).0);
        assert!(failed(&c, Exit::Code(1), &tail("ERROR: DELETED")).0);
        let refused = Said {
            refused: Some("option --library is an administrator option".into()),
            ..Said::default()
        };
        let (retryable, reason) = failed(&c, Exit::Code(1), &refused);
        assert!(!retryable);
        assert!(reason.ends_with("option --library is an administrator option"));
        let (retryable, reason) = failed(&c, Exit::TimedOut, &tail("last line"));
        assert!(retryable);
        assert!(reason.contains("timed out after 86400 s"), "{reason}");
        assert!(reason.ends_with("last line"));
        assert!(failed(&c, Exit::Signal(9), &Said::default()).0);
        let cancelled = outcome(&c, Exit::Cancelled, &Said::default(), 0);
        assert_eq!(cancelled, EventKind::Cancelled);
    }

    #[test]
    fn the_status_seen_is_the_last_status_line_and_the_message_after_it() {
        let mut seen = StatusSeen::default();
        for line in [
            "INFILE=/pnfs/a",
            "STATUS=USERERROR",
            "",
            "no such file /pnfs/a",
        ] {
            seen.push(line);
        }
        assert_eq!(seen.status.as_deref(), Some("USERERROR"));
        assert_eq!(seen.after, ["no such file /pnfs/a"]);
        let line = " 'unique_id': 'node1.fnal.gov-1700000000-4242-0',";
        let id = ticket_field(line, "unique_id");
        assert_eq!(id.as_deref(), Some("node1.fnal.gov-1700000000-4242-0"));
        let lib = ticket_field(" 'vc': {'library': 'LTO8', 'x': 'y'},", "library");
        assert_eq!(lib.as_deref(), Some("LTO8"));
    }

    fn issues_of(json: &str) -> Vec<(String, String)> {
        match toml_like(json).validate(Path::new("/")) {
            Ok(_) => Vec::new(),
            Err(issues) => issues.into_iter().map(|i| (i.key, i.message)).collect(),
        }
    }

    #[test]
    fn a_user_build_refuses_the_options_it_does_not_take_naming_key_and_option() {
        let found = issues_of(
            r#"{"storage_group": "cms", "file_family": "raw", "library": "LTO8",
                "args": ["--threaded", "--max-retry=5"],
                "classes": {"datataking": {"args": ["--ignore-fair-share"]}}}"#,
        );
        let keys: Vec<&str> = found.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "storage_group",
                "library",
                "args",
                "classes.\"datataking\".args"
            ]
        );
        assert!(found[0].1.contains("--storage-group"), "{found:?}");
        assert!(found[0].1.contains("build = \"user2\""), "{found:?}");
        assert!(found[2].1.contains("--max-retry=5"), "{found:?}");
        // The user2 build (dCache's) takes the tags but not the admin options.
        let user2 = issues_of(r#"{"build": "user2", "storage_group": "cms", "library": "LTO8"}"#);
        assert!(user2.is_empty(), "{user2:?}");
        // A bfid read needs --get-bfid, a user2 option.
        let user = toml_like("{}").validate(Path::new("/")).unwrap();
        assert!(!user.capabilities().bfid);
        assert!(cfg().capabilities().bfid);
    }

    #[test]
    fn verbose_below_4_is_refused_since_no_start_would_be_seen() {
        for v in 1..=3 {
            let found = issues_of(&format!(r#"{{"verbose": {v}}}"#));
            assert_eq!(found.len(), 1, "{found:?}");
            assert_eq!(found[0].0, "verbose");
            assert!(found[0].1.contains("--verbose 4 and above"), "{found:?}");
        }
        assert!(issues_of(r#"{"verbose": 2, "started_pattern": ""}"#).is_empty());
        assert!(issues_of(r#"{"verbose": 0}"#).is_empty());
        assert!(issues_of(r#"{"verbose": 4}"#).is_empty());
    }

    #[test]
    fn encp_daq_is_only_for_priority_classes_and_never_empty() {
        let found = issues_of(r#"{"env": {"ENCP_DAQ": "1"}}"#);
        assert_eq!(found[0].0, "env", "{found:?}");
        assert!(found[0].1.contains("per priority class"));
        let found = issues_of(r#"{"classes": {"dt": {"env": {"ENCP_DAQ": ""}}}}"#);
        assert_eq!(found[0].0, "classes.\"dt\".env", "{found:?}");
        let found =
            issues_of(r#"{"env": {"ENCP_DAQ": "1"}, "classes": {"dt": {"priority": 2000002}}}"#);
        let keys: Vec<&str> = found.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["env", "classes.\"dt\".priority"], "{found:?}");
    }

    #[test]
    fn the_data_access_layer_option_is_refused() {
        let found = issues_of(r#"{"args": ["--data-access-layer"]}"#);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, "args");
        assert!(found[0].1.contains("stdout"), "{found:?}");
        let found = issues_of(r#"{"classes": {"dt": {"args": ["--data-access-layer"]}}}"#);
        assert_eq!(found[0].0, "classes.\"dt\".args", "{found:?}");
    }

    #[test]
    fn a_cancel_command_needs_the_admin_build_and_the_ticket_verbosity() {
        let cmd = r#"["enstore", "library", "--delete-work", "{unique_id}", "{library}"]"#;
        let found = issues_of(&format!(r#"{{"cancel_command": {cmd}}}"#));
        let keys: Vec<&str> = found.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["cancel_command", "cancel_command"], "{found:?}");
        assert!(found[0].1.contains("build = \"admin\""));
        assert!(found[1].1.contains("verbose = 11"));
        let ok = issues_of(&format!(
            r#"{{"build": "admin", "verbose": 11, "cancel_command": {cmd}}}"#
        ));
        assert!(ok.is_empty(), "{ok:?}");
    }

    #[test]
    fn validation_names_the_key_at_fault() {
        let raw = toml_like(
            r#"{"max_processes": 0, "verbose": 14,
                "classes": {"datataking": {"priority": 3000003}},
                "reprioritize_command": ["x"], "fatal_exit_codes": [300]}"#,
        );
        let issues = raw.validate(Path::new("/")).unwrap_err();
        let keys: Vec<&str> = issues.iter().map(|i| i.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "max_processes",
                "verbose",
                "fatal_exit_codes",
                "reprioritize_command",
                "classes.\"datataking\".priority"
            ],
            "{issues:?}"
        );
        assert!(issues[4].message.contains("ENCP_DAQ"));
    }

    #[test]
    fn local_files_are_absolute_and_under_the_configured_roots() {
        let mut c = cfg();
        assert!(c.check_local_file("/anywhere/f").is_ok());
        assert!(c.check_local_file("relative/f").is_err());
        assert!(c.check_local_file("/data/stage/../../etc/passwd").is_err());
        c.local_roots = vec![PathBuf::from("/data/stage"), PathBuf::from("/scratch")];
        assert!(c.check_local_file("/data/stage/run1/f").is_ok());
        assert!(c.check_local_file("/scratch/f").is_ok());
        let err = c.check_local_file("/data/stagefoo/f").unwrap_err();
        assert_eq!(
            err,
            "must be under one of /data/stage, /scratch (mss.encp.local_roots)"
        );
        assert!(c.check_local_file("/etc/passwd").is_err());
    }

    #[tokio::test]
    async fn a_line_without_end_is_kept_bounded_and_the_next_read_whole() {
        let mut long = vec![b'x'; 1 << 20];
        long.extend_from_slice(b"\r\nSTATUS=NOACCESS\n");
        let mut lines = Vec::new();
        let (kept, _) = read_lines(&long[..], 5, |l| {
            lines.push(l.len());
            l.starts_with("STATUS=").then(|| l.to_string())
        })
        .await;
        assert_eq!(lines, vec![MAX_LINE_BYTES, "STATUS=NOACCESS".len()]);
        assert_eq!(kept.as_deref(), Some("STATUS=NOACCESS"));
    }

    #[test]
    fn the_tail_keeps_the_last_lines() {
        let mut t = Tail::default();
        for i in 0..5 {
            t.push(format!("line {i}"), 2);
        }
        assert_eq!(t.text(), "line 3\nline 4");
    }
}

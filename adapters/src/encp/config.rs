//! `[mss.encp]`: as written (`RawEncpConfig`, with its defaults) and validated (`EncpConfig`),
//! each refusal naming its key, and what the adapter can do under it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::build::Build;
use super::local::{has_dot_segment, has_parent_dir};
use super::status::DEFAULT_FATAL_STATUSES;
use crate::check::positive;
use crate::rest::Issue;
use crate::{Capabilities, PriorityScale, Settling};

mod args;
use args::ArgLists;

/// The largest regular priority Enstore's library manager keeps (`MAX_REG_PRIORITY`); above it,
/// only `ENCP_DAQ` turns the excess into admin priority.
pub const MAX_REGULAR_PRIORITY: i64 = 1_000_001;

/// encp's verbosity at which it prints "Mover called back" (`TRANSFER_LEVEL`, `src/encp.py`).
pub const MOVER_CALLBACK_VERBOSE: i64 = 4;

/// encp's verbosity at which it prints the ticket sent to the library manager, with its
/// `unique_id` (`TICKET_1_LEVEL`, `src/encp.py`).
pub const TICKET_VERBOSE: i64 = 11;

/// The highest verbosity encp has a level for (`TRANS_ID_LEVEL`).
const MAX_VERBOSE: i64 = 13;

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
    /// The configured options at the full names encp reads them by (`--prio=5` is `--priority
    /// 5`: `options`).
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
    /// Its options at their full names, as `EncpConfig::args`.
    pub args: Vec<String>,
}

impl RawEncpConfig {
    /// Validate; relative paths are taken from `base` (the configuration's directory) when they
    /// name a file there, else looked up on `PATH` at run time (a bare `encp`). The issues come
    /// in the order of the keys checked, which `check-config` shows as it is.
    pub fn validate(&self, base: &Path) -> Result<EncpConfig, Vec<Issue>> {
        let mut issues = Vec::new();
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
        let lists = self.arg_lists(&mut issues);
        self.check_build(&lists, &mut issues);
        self.check_daq(&mut issues);
        self.check_run_options(&lists, &mut issues);
        self.check_cancel_command(&mut issues);
        let delayed = self.delayed_dismount(&mut issues);
        self.check_tags(&mut issues);
        let read_dir = self.read_dir(base, &mut issues);
        let local_roots = self.local_roots(&mut issues);
        let fatal_exit_codes = self.fatal_exit_codes(&mut issues);
        if self.fatal_statuses.iter().any(String::is_empty) {
            issues.push(Issue::new(
                "fatal_statuses",
                "an empty name matches no STATUS line: leave it out",
            ));
        }
        let stderr_lines = positive(self.stderr_lines, "stderr_lines", &mut issues) as usize;
        self.check_reprioritize_command(&mut issues);
        let classes = self.classes(&lists, &mut issues);
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
            args: ArgLists::canonical(&lists.top),
            env: self.env.clone(),
            fatal_exit_codes,
            fatal_statuses: self.fatal_statuses.clone(),
            stderr_lines,
            reprioritize_command: self.reprioritize_command.clone(),
            cancel_command: self.cancel_command.clone(),
            classes,
        })
    }

    fn delayed_dismount(&self, issues: &mut Vec<Issue>) -> Option<u32> {
        match self.delayed_dismount_minutes {
            Some(m) if m < 0 => {
                issues.push(Issue::new("delayed_dismount_minutes", "must be 0 or more"));
                None
            }
            Some(m) => Some(m as u32),
            None => None,
        }
    }

    /// The Enstore tags of a write: left out, or not empty.
    fn check_tags(&self, issues: &mut Vec<Issue>) {
        for (key, v) in [
            ("storage_group", &self.storage_group),
            ("file_family", &self.file_family),
            ("library", &self.library),
        ] {
            if v.as_deref().is_some_and(str::is_empty) {
                issues.push(Issue::new(key, "may not be empty (leave it out instead)"));
            }
        }
    }

    fn read_dir(&self, base: &Path, issues: &mut Vec<Issue>) -> Option<PathBuf> {
        let read_dir = self.read_dir.as_ref().map(|d| base.join(d));
        if let Some(d) = &read_dir {
            if !d.is_dir() {
                issues.push(Issue::new(
                    "read_dir",
                    format!("`{}` is not a directory", d.display()),
                ));
            }
        }
        read_dir
    }

    fn local_roots(&self, issues: &mut Vec<Issue>) -> Vec<PathBuf> {
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
        local_roots
    }

    fn fatal_exit_codes(&self, issues: &mut Vec<Issue>) -> Vec<i32> {
        self.fatal_exit_codes
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
            .collect()
    }

    fn check_reprioritize_command(&self, issues: &mut Vec<Issue>) {
        let Some(cmd) = &self.reprioritize_command else {
            return;
        };
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

    /// The priority classes; a priority above Enstore's regular range needs `ENCP_DAQ`.
    fn classes(
        &self,
        lists: &ArgLists,
        issues: &mut Vec<Issue>,
    ) -> BTreeMap<String, ClassSettings> {
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
                    args: ArgLists::canonical(lists.classes.get(name).unwrap_or(&None)),
                },
            );
        }
        classes
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
pub(super) const UNIQUE_ID: &str = "{unique_id}";
pub(super) const LIBRARY: &str = "{library}";
impl EncpConfig {
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
            // The runs and their ends are known to the adapter's memory alone: a broker that
            // starts after another had run encp cannot ask about them, and a resend runs encp
            // again (or refuses the output the first run left, at attempt 1: `existing.rs`).
            settling: Settling::NONE,
        }
    }
}

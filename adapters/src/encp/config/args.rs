//! The configured options (`args`, each class's `args`) as encp reads them
//! ([`crate::encp::options`]), and what is refused of them at load, naming the key: what encp
//! would refuse (a misspelt or ambiguous option, a missing value, a word it would take for a
//! file), what the build refuses at the option's full name, and options that would make every
//! run end otherwise than in its one transfer. A run passes them at their full names.

use std::collections::BTreeMap;

use super::RawEncpConfig;
use crate::encp::build;
use crate::encp::options::{self, OptionError, Parsed, ParsedOption};
use crate::rest::Issue;

/// `args` and each class's `args` as encp reads them; `None` where encp would refuse the list
/// (an issue names its key).
pub(super) struct ArgLists {
    pub top: Option<Parsed>,
    pub classes: BTreeMap<String, Option<Parsed>>,
}

impl ArgLists {
    /// The options of `parsed` at their full names (empty where the list was refused: the
    /// configuration is refused then).
    pub fn canonical(parsed: &Option<Parsed>) -> Vec<String> {
        parsed.as_ref().map(Parsed::canonical).unwrap_or_default()
    }

    /// Each list read, with its key.
    fn each(&self) -> impl Iterator<Item = (String, &Parsed)> {
        let top = self.top.iter().map(|p| ("args".to_string(), p));
        let classes =
            (self.classes.iter()).filter_map(|(name, p)| Some((class_key(name), p.as_ref()?)));
        top.chain(classes)
    }
}

fn class_key(name: &str) -> String {
    format!("classes.\"{name}\".args")
}

/// Options that make encp print, or only check, and exit 0 without transferring: the adapter
/// would take every run for done (`print_help`, `print_usage`, `print_version` in
/// `src/option.py` and `src/encp.py`; `--check` returns from `write_to_hsm`/`read_from_hsm`
/// once the library manager answered).
const NO_TRANSFER: &[&str] = &["check", "help", "usage", "version"];

impl RawEncpConfig {
    /// Read every list of options as encp would; a list encp would refuse is an issue.
    pub(super) fn arg_lists(&self, issues: &mut Vec<Issue>) -> ArgLists {
        let mut read = |key: String, args: &[String]| match options::parse(args, self.build) {
            Ok(parsed) => {
                for operand in &parsed.operands {
                    issues.push(Issue::new(
                        &key,
                        format!(
                            "`{operand}` is neither an option nor an option's value: encp would \
                             take it for a file to copy (a value given with `=` to an option that \
                             takes none, as in `--threaded=1`, is left behind so)"
                        ),
                    ));
                }
                parsed.operands.is_empty().then_some(parsed)
            }
            Err(e) => {
                issues.push(Issue::new(&key, refusal(&e)));
                None
            }
        };
        ArgLists {
            top: read("args".into(), &self.args),
            classes: (self.classes.iter())
                .map(|(name, c)| (name.clone(), read(class_key(name), &c.args)))
                .collect(),
        }
    }

    /// Every option a run would pass must be one the configured encp build takes, at the name
    /// encp reads it by.
    pub(super) fn check_build(&self, lists: &ArgLists, issues: &mut Vec<Issue>) {
        let mut refuse = |key: String, g: &ParsedOption| {
            let option = g.flag();
            issues.push(Issue::new(
                &key,
                format!(
                    "passes {}, which the {} build of encp refuses (\"option {option} is an \
                     administrator option\"): remove it, or set build = \"{}\" if the site runs \
                     that build",
                    g.shown(),
                    self.build.as_str(),
                    g.spec.level.as_str()
                ),
            ))
        };
        for (key, name, value) in [
            ("storage_group", "storage-group", &self.storage_group),
            ("library", "library", &self.library),
        ] {
            let Some(spec) = options::named(name).filter(|s| !self.build.allows(s.level)) else {
                continue;
            };
            if value.is_some() {
                let written = format!("--{name}");
                let value = value.clone();
                refuse(
                    key.to_string(),
                    &ParsedOption {
                        spec,
                        value,
                        written,
                    },
                );
            }
        }
        for (key, parsed) in lists.each() {
            for g in build::refused(self.build, &parsed.options) {
                refuse(key.clone(), g);
            }
        }
    }

    /// `--data-access-layer` sends encp's STATUS block to stdout, failures included
    /// (`print_data_access_layer_format` in Enstore's `src/encp.py`: stderr only when it was
    /// not requested), where the adapter does not read it: every fatal status would be retried.
    /// And an option of [`NO_TRANSFER`] ends every run at once with exit 0.
    pub(super) fn check_run_options(&self, lists: &ArgLists, issues: &mut Vec<Issue>) {
        for (key, parsed) in lists.each() {
            let passes = |name: &str| parsed.options.iter().any(|g| g.spec.name == name);
            if passes("data-access-layer") {
                issues.push(Issue::new(
                    &key,
                    "may not pass --data-access-layer: encp then prints its STATUS= line on \
                     stdout, failures included, and the adapter reads the outcome from stderr (it \
                     asks nothing more of encp than the STATUS line it always writes there)",
                ));
            }
            for name in NO_TRANSFER.iter().filter(|n| passes(n)) {
                issues.push(Issue::new(
                    &key,
                    format!(
                        "may not pass --{name}: encp then exits 0 without transferring, and the \
                         adapter would take every run for done"
                    ),
                ));
            }
        }
    }
}

/// What an issue says of a list encp refuses.
fn refusal(e: &OptionError) -> String {
    let could = e.candidates();
    let could = if could.is_empty() {
        String::new()
    } else {
        let names: Vec<String> = could.iter().map(|n| format!("--{n}")).collect();
        format!(" (it could be {})", names.join(", "))
    };
    match e {
        OptionError::Crash(_) => format!("{e}; every run would fail"),
        _ => format!(
            "encp refuses it: \"{e}\"{could} (Enstore's src/option.py, which reads `_` as `-` and \
             a unique prefix as the option: the names are those of src/encp.py's \
             EncpInterface.encp_options); every run would fail"
        ),
    }
}

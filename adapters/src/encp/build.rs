//! Which `encp` options each build of encp takes.
//!
//! Enstore builds encp three ways (Enstore-org/enstore `src/Makefile`: `encp_cmd` freezes
//! `src/encp_user.py`, which calls `encp.start(1)`; `encp_cmd_for_dcache` freezes
//! `encp_user2.py`, `start(2)`; `encp.py` run directly is `start(0)`, the admin build). Each
//! option in encp's table (`EncpInterface.encp_options` in `src/encp.py`) has a user level, and
//! `option.Interface.parse` (`src/option.py`) refuses an option above the build's level: it
//! prints "option --NAME is an administrator option" and the usage line on standard output and
//! exits 1. It checks the option at the full name its parser resolved (`--stor` is
//! `--storage-group`: see [`super::options`]). So the adapter must never pass one: the
//! configuration is refused instead.

use serde::Deserialize;

use super::options::ParsedOption;

/// The encp build the site runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Build {
    /// `encp_user.py`: what users run (Enstore's `make encp`).
    #[default]
    User,
    /// `encp_user2.py`: the build made for dCache (`make encp_cmd_for_dcache`).
    User2,
    /// `encp.py` itself: every option.
    Admin,
}

impl Build {
    pub fn as_str(self) -> &'static str {
        match self {
            Build::User => "user",
            Build::User2 => "user2",
            Build::Admin => "admin",
        }
    }

    /// Whether this build takes an option of `level`.
    pub fn allows(self, level: Build) -> bool {
        level <= self
    }
}

/// The options among `given` (as encp read them: [`super::options::parse`]) that `build`
/// refuses, each by its full name and level (`options::TABLE`), as encp checks them.
pub fn refused(build: Build, given: &[ParsedOption]) -> Vec<&ParsedOption> {
    given
        .iter()
        .filter(|g| !build.allows(g.spec.level))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encp::options::parse;

    #[test]
    fn the_user_build_refuses_user2_and_admin_options_and_keeps_file_family() {
        let args: Vec<String> = [
            "--storage-group",
            "cms",
            "--file-family=raw",
            "--library=LTO8",
            "--ignore-fair-share",
            "--threaded",
        ]
        .map(String::from)
        .to_vec();
        let given = parse(&args, Build::Admin).unwrap().options;
        let flags = |b| -> Vec<String> { refused(b, &given).iter().map(|g| g.flag()).collect() };
        assert_eq!(
            flags(Build::User),
            ["--storage-group", "--library", "--ignore-fair-share"]
        );
        assert_eq!(flags(Build::User2), ["--ignore-fair-share"]);
        assert!(flags(Build::Admin).is_empty());
        // Checked at the name encp reads: a prefix or underscores are the same option.
        let given = parse(
            &["--stor".into(), "cms".into(), "--ignore_fair".into()],
            Build::User,
        )
        .unwrap()
        .options;
        let flags: Vec<String> = refused(Build::User, &given)
            .iter()
            .map(|g| g.flag())
            .collect();
        assert_eq!(flags, ["--storage-group", "--ignore-fair-share"]);
    }
}

//! Which `encp` options each build of encp takes.
//!
//! Enstore builds encp three ways (Enstore-org/enstore `src/Makefile`: `encp_cmd` freezes
//! `src/encp_user.py`, which calls `encp.start(1)`; `encp_cmd_for_dcache` freezes
//! `encp_user2.py`, `start(2)`; `encp.py` run directly is `start(0)`, the admin build). Each
//! option in encp's table (`EncpInterface.encp_options` in `src/encp.py`) has a user level, and
//! `option.Interface.parse` (`src/option.py`) refuses an option above the build's level: it
//! prints "option --NAME is an administrator option" and the usage line on standard output and
//! exits 1. So the adapter must never pass one: the configuration is refused instead.

use serde::Deserialize;

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

/// The options of encp's table that a user build refuses, with their level (`option.USER2` or
/// `option.ADMIN` in `src/encp.py`); every other option of the table is `option.USER`.
const ABOVE_USER: &[(&str, Build)] = &[
    ("file-family-wrapper", Build::User2),
    ("file-family-width", Build::User2),
    ("get-bfid", Build::User2),
    ("get-bfids", Build::User2),
    ("get-cache", Build::User2),
    ("ignore-fair-share", Build::Admin),
    ("library", Build::User2),
    ("max-retry", Build::Admin),
    ("max-resubmit", Build::Admin),
    ("mover-timeout", Build::User2),
    ("override-deleted", Build::Admin),
    ("override-notallowed", Build::Admin),
    ("override-path", Build::User2),
    ("override-ro-mount", Build::Admin),
    ("pnfs-mount-point", Build::User2),
    ("put-cache", Build::User2),
    ("resubmit-timeout", Build::User2),
    ("config-timeout", Build::User2),
    ("shortcut", Build::User2),
    ("skip-pnfs", Build::User2),
    ("storage-group", Build::User2),
];

/// The level of a long option (`--name` or `--name=value`); `None` for anything else.
pub fn level_of(arg: &str) -> Option<Build> {
    let name = arg.strip_prefix("--")?;
    let name = name.split_once('=').map_or(name, |(n, _)| n);
    Some(
        ABOVE_USER
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(Build::User, |(_, level)| *level),
    )
}

/// The options among `args` that `build` refuses, as encp would name them.
pub fn refused(build: Build, args: &[String]) -> Vec<&str> {
    args.iter()
        .map(String::as_str)
        .filter(|a| level_of(a).is_some_and(|level| !build.allows(level)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(
            refused(Build::User, &args),
            ["--storage-group", "--library=LTO8", "--ignore-fair-share"]
        );
        assert_eq!(refused(Build::User2, &args), ["--ignore-fair-share"]);
        assert!(refused(Build::Admin, &args).is_empty());
        assert_eq!(level_of("cms"), None);
    }
}

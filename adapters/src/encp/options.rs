//! encp's options as encp's own parser reads them, so that configured options are checked at
//! the names encp resolves them to, and refused at start when encp would refuse them.
//!
//! The parser is Enstore's `option.Interface.parse_options` (Enstore-org/enstore `src/option.py`
//! at a154041a1e969ea247a3298e74bebbc3188e5763) over the table of `src/encp.py`
//! (`EncpInterface.encp_options`, with option.py's `help_options`: `valid_dictionaries`), with
//! Python 2.7's `getopt`. Its steps, each kept here:
//!
//! 1. `split_on_equals`: a switch (`--x`, `-x`) whose part before its first `=`, with `_` read
//!    as `-`, is a prefix of an option's name (or a short option) is split there into two
//!    arguments, `--prio=5` into `--prio` `5`. So a switch that takes no value given one
//!    (`--threaded=1`) leaves the value behind as an operand: encp takes it for a file.
//! 2. `convert_underscores`: an argument with `_` that, with `-` instead, starts with `--` and
//!    is a prefix of an option's name is rewritten so: `--file_family` is `--file-family`.
//! 3. A loop: arguments that are not switches are operands; `getopt` reads the switches up to
//!    the next one (a `--` is dropped and only ends that run, so the next switch is read as an
//!    option again: `invocation::operand`). A long option is looked up by prefix among *every*
//!    option of the table whatever the build (`getopt_long_options`): its exact name wins, else
//!    a unique prefix (`--prio` is `--priority`), else "not a unique prefix" (`--ver`:
//!    `--verbose`, `--version`) or "not recognized"; one that requires a value takes the next
//!    argument, whatever it is ("requires argument" when none is left). A short option is one
//!    of the build's (`getopt_short_options`; encp has only `-h`).
//! 4. Every option read is checked against the build at its full name (`build`).
//!
//! A `getopt` refusal is printed on standard output before the usage line, and encp exits 1
//! (`print_usage`). A bare `-` (or an argument such as `_` that reads as one) makes option.py's
//! `trim_short_option` index past its end: encp dies with a traceback.

use std::collections::VecDeque;

use super::build::Build;

/// One option of encp's table.
#[derive(Debug, PartialEq, Eq)]
pub struct Spec {
    /// Its full name, without the dashes.
    pub name: &'static str,
    /// Whether it takes a value (`VALUE_USAGE: REQUIRED`; every other option takes none).
    pub takes_value: bool,
    /// The least build that takes it (`USER_LEVEL`; `USER` when not given).
    pub level: Build,
    /// Its one-letter form (`SHORT_OPTION`).
    pub short: Option<char>,
}

const fn spec(name: &'static str, takes_value: bool, level: Build, short: Option<char>) -> Spec {
    Spec {
        name,
        takes_value,
        level,
        short,
    }
}

/// encp's options (`EncpInterface.encp_options` of `src/encp.py` and `help_options` of
/// `src/option.py`, a154041), by name.
pub const TABLE: &[Spec] = &[
    spec("age-time", true, Build::User, None),
    spec("array-size", true, Build::User, None),
    spec("buffer-size", true, Build::User, None),
    spec("buffered-tape-marks", false, Build::User, None),
    spec(
        "bypass-filesystem-max-filesize-check",
        false,
        Build::User,
        None,
    ),
    spec("check", false, Build::User, None),
    spec("cksm-seed", true, Build::User, None),
    spec("cksm-value", true, Build::User, None),
    spec("config-timeout", true, Build::User2, None),
    spec("copies", true, Build::User, None),
    spec("copy", true, Build::User, None),
    spec("data-access-layer", false, Build::User, None),
    spec("delayed-dismount", true, Build::User, None),
    spec("delpri", true, Build::User, None),
    spec("direct-io", false, Build::User, None),
    spec("ecrc", false, Build::User, None),
    spec("enable-redirection", false, Build::User, None),
    spec("ephemeral", false, Build::User, None),
    spec("file-family", true, Build::User, None),
    spec("file-family-width", true, Build::User2, None),
    spec("file-family-wrapper", true, Build::User2, None),
    spec("get-bfid", true, Build::User2, None),
    spec("get-bfids", false, Build::User2, None),
    spec("get-cache", true, Build::User2, None),
    spec("help", false, Build::User, Some('h')),
    spec("ignore-fair-share", false, Build::Admin, None),
    spec("library", true, Build::User2, None),
    spec("max-resubmit", true, Build::Admin, None),
    spec("max-retry", true, Build::Admin, None),
    spec("mmap-io", false, Build::User, None),
    spec("mmap-size", true, Build::User, None),
    spec("mover-timeout", true, Build::User2, None),
    spec("no-crc", false, Build::User, None),
    spec("override-deleted", false, Build::Admin, None),
    spec("override-notallowed", false, Build::Admin, None),
    spec("override-path", true, Build::User2, None),
    spec("override-ro-mount", false, Build::Admin, None),
    spec("pnfs-is-automounted", false, Build::User, None),
    spec("pnfs-mount-point", true, Build::User2, None),
    spec("priority", true, Build::User, None),
    spec("put-cache", true, Build::User2, None),
    spec("resubmit-timeout", true, Build::User2, None),
    spec("shortcut", false, Build::User2, None),
    spec("skip-deleted-files", false, Build::User, None),
    spec("skip-pnfs", false, Build::User2, None),
    spec("storage-group", true, Build::User2, None),
    spec("threaded", false, Build::User, None),
    spec("usage", false, Build::User, None),
    spec("verbose", true, Build::User, None),
    spec("version", false, Build::User, None),
    spec("volume", true, Build::User, None),
];

/// The option of that exact name.
pub fn named(name: &str) -> Option<&'static Spec> {
    TABLE.iter().find(|s| s.name == name)
}

/// One option as encp read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedOption {
    pub spec: &'static Spec,
    /// Its value, for an option that takes one.
    pub value: Option<String>,
    /// The argument it was written as (`--prio=5`, `--file_family`).
    pub written: String,
}

impl ParsedOption {
    /// `--NAME`, as encp names the option it read (in "option --NAME is an administrator
    /// option").
    pub fn flag(&self) -> String {
        format!("--{}", self.spec.name)
    }

    /// How a message names it: as written, and by the name encp reads when that differs.
    pub fn shown(&self) -> String {
        let flag = self.flag();
        if self.written == flag {
            flag
        } else {
            format!("`{}` ({flag} to encp)", self.written)
        }
    }
}

/// What encp read of a command line: its options in order, and its operands (the files).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    pub options: Vec<ParsedOption>,
    pub operands: Vec<String>,
}

impl Parsed {
    /// The options at their full names, each followed by its value: what encp reads as the
    /// same options.
    pub fn canonical(&self) -> Vec<String> {
        let mut out = Vec::with_capacity(self.options.len() * 2);
        for g in &self.options {
            out.push(format!("--{}", g.spec.name));
            out.extend(g.value.iter().cloned());
        }
        out
    }
}

/// Why encp refuses a command line before doing anything: `getopt`'s words (which encp prints
/// on standard output before its usage line, then exits 1), or option.py's own failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionError {
    #[error("option --{0} not recognized")]
    NotRecognized(String),
    #[error("option --{0} not a unique prefix")]
    NotUnique(String),
    #[error("option --{0} requires argument")]
    RequiresArgument(&'static str),
    #[error("option --{0} must not have an argument")]
    MustNotHaveArgument(&'static str),
    #[error("option -{0} not recognized")]
    ShortNotRecognized(char),
    #[error("option -{0} requires argument")]
    ShortRequiresArgument(char),
    #[error(
        "`{0}` makes encp's option parser fail (option.py's trim_short_option indexes past a \
         bare `-`): encp dies with a traceback"
    )]
    Crash(String),
}

impl OptionError {
    /// The options a prefix encp found ambiguous could mean.
    pub fn candidates(&self) -> Vec<&'static str> {
        match self {
            OptionError::NotUnique(prefix) => TABLE
                .iter()
                .filter(|s| s.name.starts_with(prefix.as_str()))
                .map(|s| s.name)
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// `args` as encp running as `build` reads them (see the module's steps 1 to 3; the build's
/// check, step 4, is [`super::build::refused`]).
pub fn parse(args: &[String], build: Build) -> Result<Parsed, OptionError> {
    let mut argv: Argv = convert_underscores(split_on_equals(args)?).into();
    let mut parsed = Parsed::default();
    while !argv.is_empty() {
        take_operands(&mut argv, &mut parsed.operands);
        getopt(&mut argv, build, &mut parsed.options)?;
        take_operands(&mut argv, &mut parsed.operands);
    }
    Ok(parsed)
}

/// The arguments as the parser has them so far, each with the one it was written as.
type Argv = VecDeque<(String, String)>;

/// The leading arguments that are not switches.
fn take_operands(argv: &mut Argv, operands: &mut Vec<String>) {
    while argv.front().is_some_and(|(a, _)| !is_switch(a)) {
        operands.extend(argv.pop_front().map(|(a, _)| a));
    }
}

/// Python's `getopt.getopt`: switches up to the first argument that is none, or past a `--`.
fn getopt(argv: &mut Argv, build: Build, out: &mut Vec<ParsedOption>) -> Result<(), OptionError> {
    while let Some((arg, _)) = argv.front() {
        if !arg.starts_with('-') || arg == "-" {
            break;
        }
        let (arg, written) = argv.pop_front().unwrap_or_default();
        if arg == "--" {
            break;
        }
        match arg.strip_prefix("--") {
            Some(long) => out.push(long_option(long, written, argv)?),
            None => short_options(&arg[1..], &written, build, argv, out)?,
        }
    }
    Ok(())
}

/// `getopt.do_longs` and `long_has_args`.
fn long_option(text: &str, written: String, argv: &mut Argv) -> Result<ParsedOption, OptionError> {
    let (name, inline) = match text.split_once('=') {
        Some((n, v)) => (n, Some(v.to_string())),
        None => (text, None),
    };
    let spec = match named(name) {
        Some(exact) => exact,
        None => {
            let mut matching = TABLE.iter().filter(|s| s.name.starts_with(name));
            match (matching.next(), matching.next()) {
                (Some(only), None) => only,
                (Some(_), Some(_)) => return Err(OptionError::NotUnique(name.to_string())),
                (None, _) => return Err(OptionError::NotRecognized(name.to_string())),
            }
        }
    };
    let value = match (spec.takes_value, inline) {
        (true, Some(v)) => Some(v),
        (true, None) => Some(
            argv.pop_front()
                .ok_or(OptionError::RequiresArgument(spec.name))?
                .0,
        ),
        (false, Some(_)) => return Err(OptionError::MustNotHaveArgument(spec.name)),
        (false, None) => None,
    };
    Ok(ParsedOption {
        spec,
        value,
        written,
    })
}

/// `getopt.do_shorts` over the build's short options (option.py's `getopt_short_options`
/// leaves out those above the build). encp's only one, `-h`, takes no value.
fn short_options(
    letters: &str,
    written: &str,
    build: Build,
    argv: &mut Argv,
    out: &mut Vec<ParsedOption>,
) -> Result<(), OptionError> {
    let mut rest = letters;
    while let Some(c) = rest.chars().next() {
        rest = &rest[c.len_utf8()..];
        let spec = TABLE
            .iter()
            .find(|s| s.short == Some(c) && build.allows(s.level))
            .ok_or(OptionError::ShortNotRecognized(c))?;
        let value = if !spec.takes_value {
            None
        } else if !rest.is_empty() {
            Some(std::mem::take(&mut rest).to_string())
        } else {
            let next = argv.pop_front();
            Some(next.ok_or(OptionError::ShortRequiresArgument(c))?.0)
        };
        out.push(ParsedOption {
            spec,
            value,
            written: written.to_string(),
        });
    }
    Ok(())
}

/// option.py's `split_on_equals` (each argument kept with the one it was written as).
fn split_on_equals(args: &[String]) -> Result<Vec<(String, String)>, OptionError> {
    let mut out = Vec::with_capacity(args.len() + 2);
    for arg in args {
        let head = arg.split('=').next().unwrap_or_default();
        let written = |part: &str| (part.to_string(), arg.clone());
        // `is_option` is asked first, so an argument that is no switch can still crash it.
        if is_option(&head.replace('_', "-"))? && is_switch(arg) {
            match arg.split_once('=') {
                Some((name, value)) => out.extend([written(name), written(value)]),
                None => out.push(written(arg)),
            }
        } else {
            out.push(written(arg));
        }
    }
    Ok(out)
}

/// option.py's `convert_underscores`.
fn convert_underscores(mut args: Vec<(String, String)>) -> Vec<(String, String)> {
    for (arg, _) in args.iter_mut().filter(|(a, _)| a.contains('_')) {
        let dashed = arg.replace('_', "-");
        if is_long_option(&dashed) && dashed.starts_with("--") {
            *arg = dashed;
        }
    }
    args
}

/// option.py's `is_switch_option`.
fn is_switch(arg: &str) -> bool {
    (arg.len() > 2 && arg.starts_with("--")) || (arg.len() > 1 && arg.starts_with('-'))
}

/// option.py's `is_option`: a long option's prefix, or a short option.
fn is_option(arg: &str) -> Result<bool, OptionError> {
    Ok(is_long_option(arg) || is_short_option(arg)?)
}

/// option.py's `is_long_option`: `arg`, less a leading `--`, starts some option's name (an
/// argument without the dashes too).
fn is_long_option(arg: &str) -> bool {
    let name = trim_long(arg);
    TABLE.iter().any(|s| s.name.starts_with(name))
}

/// option.py's `is_short_option`: `arg`, less a leading `-`, is some option's letter.
fn is_short_option(arg: &str) -> Result<bool, OptionError> {
    let letter = trim_short(arg)?;
    let mut chars = letter.chars();
    Ok(match (chars.next(), chars.next()) {
        (Some(c), None) => TABLE.iter().any(|s| s.short == Some(c)),
        _ => false,
    })
}

/// option.py's `trim_long_option`: `--` is taken off when a letter or digit follows it.
fn trim_long(arg: &str) -> &str {
    match arg.as_bytes() {
        [b'-', b'-', c, ..] if c.is_ascii_alphanumeric() => &arg[2..],
        _ => arg,
    }
}

/// option.py's `trim_short_option`, which reads the character after a leading `-` before
/// looking whether there is one.
fn trim_short(arg: &str) -> Result<&str, OptionError> {
    match arg.as_bytes() {
        [b'-'] => Err(OptionError::Crash(arg.to_string())),
        [b'-', c, ..] if c.is_ascii_alphanumeric() => Ok(&arg[1..]),
        _ => Ok(arg),
    }
}

#[cfg(test)]
mod tests;

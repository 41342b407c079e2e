//! Each case is a behaviour of Enstore's parser (`src/option.py` over `src/encp.py`'s table at
//! a154041, Python 2.7's getopt), named by the step of the module's list that makes it.

use super::*;

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

fn read(a: &[&str]) -> Parsed {
    parse(&args(a), Build::User).unwrap_or_else(|e| panic!("{a:?}: {e}"))
}

/// (full name, value) of each option read.
fn names(p: &Parsed) -> Vec<(&'static str, Option<&str>)> {
    p.options
        .iter()
        .map(|g| (g.spec.name, g.value.as_deref()))
        .collect()
}

#[test]
fn underscores_equals_and_unique_prefixes_read_as_the_full_name() {
    // Steps 1 and 2: `=` splits, `_` reads as `-`; step 3: a unique prefix is the option.
    let p = read(&["--prio=5", "--file_family", "raw", "--thr", "--verb", "4"]);
    assert_eq!(
        names(&p),
        [
            ("priority", Some("5")),
            ("file-family", Some("raw")),
            ("threaded", None),
            ("verbose", Some("4")),
        ]
    );
    assert!(p.operands.is_empty());
    assert_eq!(
        p.canonical(),
        [
            "--priority",
            "5",
            "--file-family",
            "raw",
            "--threaded",
            "--verbose",
            "4"
        ]
    );
    assert_eq!(
        names(&read(&["--file_family=raw", "--get_bfid=B1"])),
        [("file-family", Some("raw")), ("get-bfid", Some("B1"))]
    );
    // A name that is also the prefix of others is itself.
    assert_eq!(
        names(&read(&["--file-family", "raw", "--get-bfid", "B1"])),
        [("file-family", Some("raw")), ("get-bfid", Some("B1"))]
    );
    // Only the part before the first `=` is the option.
    assert_eq!(
        names(&read(&["--file-family=a=b"])),
        [("file-family", Some("a=b"))]
    );
}

#[test]
fn a_value_is_whatever_follows_and_a_double_dash_is_dropped() {
    assert_eq!(
        names(&read(&["--file-family", "--threaded"])),
        [("file-family", Some("--threaded"))]
    );
    assert_eq!(names(&read(&["--priority="])), [("priority", Some(""))]);
    let p = read(&["--", "--threaded", "--", "-h"]);
    assert_eq!(names(&p), [("threaded", None), ("help", None)]);
    assert!(p.operands.is_empty());
}

#[test]
fn a_value_given_to_a_switch_and_a_bare_word_are_operands() {
    // `--threaded=1` is split (step 1), and `1` is left to be a file.
    let p = read(&["--threaded=1", "cms"]);
    assert_eq!(names(&p), [("threaded", None)]);
    assert_eq!(p.operands, ["1", "cms"]);
}

#[test]
fn what_encp_refuses_is_refused_in_its_words() {
    let refused = |a: &[&str]| parse(&args(a), Build::Admin).unwrap_err();
    assert_eq!(
        refused(&["--threded"]).to_string(),
        "option --threded not recognized"
    );
    // `--prio-rity` starts no option, so its underscore stays (step 2).
    assert_eq!(
        refused(&["--prio_rity", "5"]),
        OptionError::NotRecognized("prio_rity".into())
    );
    assert_eq!(
        refused(&["--Priority", "5"]),
        OptionError::NotRecognized("Priority".into())
    );
    let ambiguous = refused(&["--ver", "4"]);
    assert_eq!(ambiguous.to_string(), "option --ver not a unique prefix");
    assert_eq!(ambiguous.candidates(), ["verbose", "version"]);
    assert_eq!(
        refused(&["--threaded", "--file-family"]),
        OptionError::RequiresArgument("file-family")
    );
    assert_eq!(refused(&["-v"]), OptionError::ShortNotRecognized('v'));
    for crash in ["-", "_", "_=x"] {
        assert!(
            matches!(refused(&[crash]), OptionError::Crash(_)),
            "{crash}"
        );
    }
}

#[test]
fn prefixes_are_resolved_among_every_option_whatever_the_build() {
    // `--stor` is `--storage-group` for the user build too, which then refuses it by name.
    assert_eq!(
        names(&read(&["--stor", "cms"])),
        [("storage-group", Some("cms"))]
    );
    // `--override` could be four options.
    let e = parse(&args(&["--override"]), Build::Admin).unwrap_err();
    assert_eq!(e.candidates().len(), 4, "{e}");
}

#[test]
fn every_option_of_the_table_has_one_name_and_the_table_is_in_order() {
    assert!(TABLE.windows(2).all(|w| w[0].name < w[1].name));
    assert_eq!(TABLE.len(), 51);
    assert_eq!(named("help").and_then(|s| s.short), Some('h'));
    assert_eq!(TABLE.iter().filter(|s| s.short.is_some()).count(), 1);
}

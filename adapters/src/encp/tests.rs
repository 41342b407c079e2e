use std::path::{Path, PathBuf};

use super::watch::{read_lines, ticket_field, StatusSeen, Tail, MAX_LINE_BYTES};
use super::*;
use crate::protocol::{Direction, EventKind, Transfer};
use crate::MssError;

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
        position: None,
        offset_bytes: None,
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

fn failed(c: &EncpConfig, exit: Exit, said: &RunOutput) -> (bool, String) {
    match outcome(c, exit, said, 0) {
        EventKind::Failed { retryable, reason } => (retryable, reason),
        other => panic!("{other:?}"),
    }
}

fn status(name: &str, message: &str) -> RunOutput {
    RunOutput {
        status: Some(name.into()),
        message: message.into(),
        ..RunOutput::default()
    }
}

#[test]
fn the_status_line_decides_retries_not_the_exit_code_or_the_tail() {
    let c = cfg();
    let done = outcome(&c, Exit::Code(0), &RunOutput::default(), 7);
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
    let tail = |t: &str| RunOutput {
        tail: t.into(),
        ..RunOutput::default()
    };
    assert!(!failed(&c, Exit::Code(2), &tail("Traceback")).0);
    assert!(failed(&c, Exit::Code(1), &tail("ERROR: DELETED")).0);
    let refused = RunOutput {
        refused: Some("option --library is an administrator option".into()),
        ..RunOutput::default()
    };
    let (retryable, reason) = failed(&c, Exit::Code(1), &refused);
    assert!(!retryable);
    assert!(reason.ends_with("option --library is an administrator option"));
    let (retryable, reason) = failed(&c, Exit::TimedOut, &tail("last line"));
    assert!(retryable);
    assert!(reason.contains("timed out after 86400 s"), "{reason}");
    assert!(reason.ends_with("last line"));
    assert!(failed(&c, Exit::Signal(9), &RunOutput::default()).0);
    let cancelled = outcome(&c, Exit::Cancelled, &RunOutput::default(), 0);
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

/// Issue 37, item 7: encp's parser takes `_` for `-` and a unique prefix for the option
/// (Enstore's `src/option.py`), so those spellings are checked at the option's full name (the
/// user build refuses `--stor` as it refuses `--storage-group`) and, when taken, passed at it.
#[test]
fn spellings_encp_takes_are_checked_and_passed_at_the_options_full_name() {
    let found = issues_of(
        r#"{"args": ["--stor", "cms", "--data_access_layer"],
            "classes": {"dt": {"args": ["--ignore_fair"]}}}"#,
    );
    let keys: Vec<&str> = found.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["args", "classes.\"dt\".args", "args"], "{found:?}");
    assert!(
        found[0].1.contains("`--stor` (--storage-group to encp)")
            && found[0].1.contains("build = \"user2\""),
        "{found:?}"
    );
    assert!(found[1].1.contains("--ignore-fair-share"), "{found:?}");
    assert!(found[2].1.contains("--data-access-layer"), "{found:?}");
    let raw = toml_like(
        r#"{"build": "admin", "args": ["--file_family=raw", "--thr"],
            "classes": {"dt": {"args": ["--ignore_fair"]}}}"#,
    );
    let cfg = raw.validate(Path::new("/")).unwrap();
    assert_eq!(cfg.args, ["--file-family", "raw", "--threaded"]);
    assert_eq!(cfg.classes["dt"].args, ["--ignore-fair-share"]);
    let inv = invocation(&cfg, &transfer(Direction::Read)).unwrap();
    let n = inv.args.len();
    assert_eq!(
        inv.args[n - 5..],
        [
            "--file-family",
            "raw",
            "--threaded",
            "/pnfs/cms/run42/f1.root",
            "/data/stage/f1.root"
        ]
    );
}

/// What encp itself refuses (a misspelt or ambiguous option, a missing value, a word it would
/// take for a file, a bare `-`) is refused at load naming the key, never left to fail every
/// run; so are options that end every run with exit 0 and no transfer.
#[test]
fn options_encp_would_refuse_or_that_transfer_nothing_are_refused_naming_the_key() {
    let refused = |args: &str, says: &str| {
        let found = issues_of(&format!(r#"{{"classes": {{"dt": {{"args": {args}}}}}}}"#));
        assert_eq!(found.len(), 1, "{args}: {found:?}");
        assert_eq!(found[0].0, "classes.\"dt\".args", "{args}");
        assert!(found[0].1.contains(says), "{args}: {found:?}");
    };
    refused(r#"["--threded"]"#, "\"option --threded not recognized\"");
    refused(
        r#"["--prio_rity", "5"]"#,
        "option --prio_rity not recognized",
    );
    refused(r#"["--ver", "4"]"#, "(it could be --verbose, --version)");
    refused(r#"["--threaded", "--file-family"]"#, "requires argument");
    refused(
        r#"["--threaded=1"]"#,
        "`1` is neither an option nor an option's value",
    );
    refused(r#"["cms"]"#, "encp would take it for a file");
    refused(r#"["-"]"#, "traceback");
    for option in ["--help", "-h", "--vers", "--usage", "--check"] {
        refused(&format!(r#"["{option}"]"#), "exits 0 without transferring");
    }
    assert!(issues_of(r#"{"args": ["--", "--verb", "4"]}"#).is_empty());
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

/// A run that said "File ... copied successfully." is done however it ended afterwards
/// (Enstore's `src/encp.py` `finish_request`; a signal then exits 128+signal through
/// `src/delete_at_exit.py` with the file kept): stopped by the timeout, it would otherwise be
/// retried and its next encp would refuse the output that is now there.
#[test]
fn a_run_that_said_copied_is_done_however_it_ended() {
    let c = cfg();
    let said = RunOutput {
        copied: true,
        ..RunOutput::default()
    };
    for exit in [
        Exit::TimedOut,
        Exit::Cancelled,
        Exit::Code(143),
        Exit::Signal(9),
    ] {
        assert_eq!(
            outcome(&c, exit, &said, 10),
            EventKind::Done { bytes: 10 },
            "{exit:?}"
        );
    }
}

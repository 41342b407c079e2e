use std::path::Path;

use serde_json::{json, Value};

use super::*;
use crate::protocol::{Direction, EventKind, Transfer};
use crate::{PriorityScale, Progress};

fn cfg() -> Fts3Config {
    let raw: RawFts3Config = serde_json::from_value(json!({
        "url": "https://fts3.example.org:8446",
        "vo": "cms",
        "tape_endpoint": "davs://tape.example.org:2880",
        "read_destination": "davs://disk.example.org:2880/stage",
        "activity": "Tape Recall",
        "priority_bands": [{"from": 0, "priority": 1}, {"from": 20, "priority": 3},
                           {"from": 100, "priority": 5}],
        "auth": {"method": "none"}
    }))
    .unwrap();
    raw.validate(Path::new("/"), Vec::new()).unwrap()
}

fn transfer(direction: Direction) -> Transfer {
    Transfer {
        key: "42".into(),
        attempt: 1,
        file: "/cms/run42/f1.root".into(),
        size_bytes: 2_500_000_000,
        priority: 20,
        volume: None,
        group: "analysis/higgs".into(),
        direction,
        local_file: None,
        bfid: None,
        position: None,
        offset_bytes: None,
    }
}

#[test]
fn job_ids_are_ftss_deterministic_uuids() {
    // Golden values from Python's uuid module: uuid5(uuid5(BASE_ID, vo), sid).
    assert_eq!(
        job_id("cms", "mssbroker-0123456789abcdef-42-1"),
        "4d51513f-254b-53f3-a897-8bcabed19699"
    );
    assert_eq!(
        job_id("dteam", "x-7-2"),
        "b8c61371-63d2-5851-b9b2-e1e7d208d6f8"
    );
}

#[test]
fn a_read_stages_from_the_tape_endpoint_with_the_one_activity_and_no_fts3_retries() {
    let body = job_body(&cfg(), "p-42-1", 3, &transfer(Direction::Read)).unwrap();
    let file = &body["files"][0];
    assert_eq!(
        file["sources"][0],
        "davs://tape.example.org:2880/cms/run42/f1.root"
    );
    assert_eq!(
        file["destinations"][0],
        "davs://disk.example.org:2880/stage/cms/run42/f1.root"
    );
    assert_eq!(
        file["activity"], "tape recall",
        "lower-cased as FTS3 keeps it"
    );
    assert_eq!(
        body["params"]["retry"], -1,
        "0 would be FTS3's server default"
    );
    let mut none = cfg();
    none.activity = None;
    let body = job_body(&none, "p-42-1", 3, &transfer(Direction::Read)).unwrap();
    assert!(body["files"][0].get("activity").is_none(), "{body}");
    assert_eq!(file["filesize"], 2_500_000_000u64);
    let params = &body["params"];
    assert_eq!(params["priority"], 3);
    assert_eq!(params["sid"], "p-42-1");
    assert_eq!(params["id_generator"], "deterministic");
    assert_eq!(params["bring_online"], 86_400);
    assert!(params.get("archive_timeout").is_none());
}

#[test]
fn a_write_archives_the_local_file_to_tape() {
    let mut t = transfer(Direction::Write);
    assert!(job_body(&cfg(), "s", 1, &t).is_err());
    t.local_file = Some("https://station.example.org/data/f1.root".into());
    let body = job_body(&cfg(), "s", 1, &t).unwrap();
    assert_eq!(
        body["files"][0]["sources"][0],
        "https://station.example.org/data/f1.root"
    );
    assert_eq!(
        body["files"][0]["destinations"][0],
        "davs://tape.example.org:2880/cms/run42/f1.root"
    );
    assert_eq!(body["params"]["archive_timeout"], 86_400);
    assert!(body["params"].get("bring_online").is_none());
}

#[test]
fn local_files_must_be_urls_fts3_takes() {
    let c = cfg();
    for ok in [
        "davs://disk.example.org/stage/f",
        "davs://u@disk.example.org:2880/stage/f",
        "https://disk.example.org/?path=f",
        " davs://disk.example.org/stage/f ",
        "davs://disk.example.org/;f",
        "https://disk.example.org/a;b/c",
    ] {
        assert!(c.check_local_file(ok).is_ok(), "{ok}");
    }
    // Each refused by FTS3's `validate_url` as Python's `urlparse` reads it.
    for bad in [
        "/data/f",
        "file:///data/f",
        "FILE:///data/f",
        "davs:///f",
        "davs://host",
        "davs://host/",
        "davs://host/#f",
        "davs://host/?",
        "davs://host#/f",
        "davs://u@:2880/f",
        "https://disk.example.org/;p",
        "1davs://disk.example.org/f",
    ] {
        assert!(c.check_local_file(bad).is_err(), "{bad}");
    }
}

#[test]
fn bands_map_broker_priorities_onto_one_to_five() {
    let caps = cfg().capabilities();
    let PriorityScale::Bands(_) = &caps.priority else {
        panic!("{caps:?}")
    };
    let map = |p| caps.priority.map(p);
    assert_eq!(map(-1), None);
    assert_eq!(map(10), Some(1));
    assert_eq!(map(20), Some(3));
    assert_eq!(map(99), Some(3));
    assert_eq!(map(100), Some(5));
}

/// `progress_of` of a polled job of one file, as the adapter reads it.
fn progress(job: &Value, declared: u64, staging: bool) -> Option<Progress> {
    let file = job.get("files").and_then(|f| f.get(0));
    progress_of(job, file, declared, staging)
}

#[test]
fn file_states_become_progress() {
    let job = |state: &str| {
        json!({"job_state": "ACTIVE", "files": [{"file_state": state,
        "filesize": 7, "reason": "SOURCE srm error", "recoverable": false}]})
    };
    assert_eq!(progress(&job("STAGING"), 1, true), Some(Progress::Queued));
    assert_eq!(progress(&job("STARTED"), 1, true), Some(Progress::Running));
    assert_eq!(progress(&job("STARTED"), 1, false), Some(Progress::Queued));
    assert_eq!(progress(&job("ACTIVE"), 1, false), Some(Progress::Running));
    assert_eq!(
        progress(&job("FINISHED"), 1, false),
        Some(Progress::Finished(EventKind::Done { bytes: 7 }))
    );
    assert_eq!(
        progress(&job("FAILED"), 1, false),
        Some(Progress::Finished(EventKind::Failed {
            reason: "fts3 job failed: SOURCE srm error".into(),
            retryable: false
        }))
    );
    assert_eq!(
        progress(&job("CANCELED"), 1, false),
        Some(Progress::Finished(EventKind::Cancelled))
    );
    assert_eq!(
        progress(&json!({"job_state": "FINISHED"}), 9, false),
        Some(Progress::Finished(EventKind::Done { bytes: 9 }))
    );
}

#[test]
fn staging_failures_without_recoverable_are_classified_by_their_reason() {
    let failed = |reason: &str| {
        let job = json!({"job_state": "FAILED", "files": [{"file_state": "FAILED",
            "reason": reason, "recoverable": null}]});
        match progress(&job, 1, true) {
            Some(Progress::Finished(EventKind::Failed { retryable, .. })) => retryable,
            other => panic!("{other:?}"),
        }
    };
    assert!(!failed(
        "[gfal_http_bring_online] No such file or directory"
    ));
    assert!(!failed("SRM_INVALID_PATH"));
    assert!(failed("Connection timed out"));
    assert!(failed("Staging request expired"));
}

#[test]
fn an_empty_activity_is_refused_and_one_is_lower_cased() {
    let raw = |activity: &str| -> RawFts3Config {
        serde_json::from_value(json!({
            "url": "https://fts3.example.org:8446", "vo": "cms",
            "tape_endpoint": "davs://tape.example.org:2880",
            "activity": activity, "auth": {"method": "none"}
        }))
        .unwrap()
    };
    let issues = raw(" ").validate(Path::new("/"), Vec::new()).unwrap_err();
    assert_eq!(issues[0].key, "activity", "{issues:?}");
    let cfg = raw("Data Taking")
        .validate(Path::new("/"), Vec::new())
        .unwrap();
    assert_eq!(cfg.activity.as_deref(), Some("data taking"));
}

#[test]
fn only_the_sid_conflict_is_our_own_job() {
    assert!(conflict_is_ours(
        "The sid provided by the user is duplicated"
    ));
    assert!(!conflict_is_ours(
        "The submission is duplicated (IntegrityError) Duplicate entry"
    ));
    assert_eq!(job_id_in(&vo_id("cms"), "x-7-2"), job_id("cms", "x-7-2"));
}

#[test]
fn validation_refuses_tokens_with_tape_and_bad_bands() {
    let raw: RawFts3Config = serde_json::from_value(json!({
        "url": "fts3.example.org",
        "vo": "",
        "tape_endpoint": "/pnfs",
        "priority_bands": [{"from": 10, "priority": 3}, {"from": 5, "priority": 6}],
        "auth": {"method": "bearer", "token_file": "Cargo.toml"}
    }))
    .unwrap();
    let issues = raw
        .validate(Path::new(env!("CARGO_MANIFEST_DIR")), Vec::new())
        .unwrap_err();
    let keys: Vec<&str> = issues.iter().map(|i| i.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "url",
            "vo",
            "tape_endpoint",
            "priority_bands[1].priority",
            "priority_bands[1].from",
            "auth.method"
        ],
        "{issues:?}"
    );
}

#[test]
fn a_file_is_refused_where_a_url_would_end_or_change_its_path() {
    assert!(super::config::check_file("/pnfs/cms/run42/f1.root").is_ok());
    assert!(super::config::check_file("/pnfs/cms/Łódź/f-1_2.root").is_ok());
    for bad in [
        "/pnfs/a#b",
        "/pnfs/a?b",
        "/pnfs/100%25",
        "/pnfs/a b",
        "/pnfs/a\tb",
    ] {
        let why = super::config::check_file(bad).unwrap_err();
        assert!(why.contains("FTS3 names files by URL"), "{bad}: {why}");
    }
}

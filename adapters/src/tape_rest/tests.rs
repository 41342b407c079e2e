use std::path::Path;

use serde_json::json;

use super::progress::all_final;
use super::stage::{group_distinct, lower_limit};
use super::*;
use crate::protocol::{Direction, EventKind, Transfer};
use crate::{PriorityScale, Progress};

fn cfg() -> TapeRestConfig {
    let raw: RawTapeRestConfig = serde_json::from_value(json!({
        "url": "https://dcache.example.org:3880/api/v1/tape",
        "auth": {"method": "none"}
    }))
    .unwrap();
    raw.validate(Path::new("/")).unwrap()
}

#[test]
fn the_stage_body_carries_the_group_as_activity() {
    let t = Transfer {
        key: "5".into(),
        attempt: 1,
        file: "/pnfs/fnal.gov/usr/cms/f.root".into(),
        size_bytes: 9,
        priority: 0,
        volume: None,
        group: "mc/top".into(),
        direction: Direction::Read,
        local_file: None,
        bfid: None,
        position: None,
        offset_bytes: None,
    };
    let body = stage_body(&cfg(), "dcache.example.org", &[&t]);
    assert_eq!(
        body,
        json!({"files": [{"path": "/pnfs/fnal.gov/usr/cms/f.root", "diskLifetime": "P1D",
            "targetedMetadata": {"dcache.example.org": {"activity": "mc/top"}}}]})
    );
}

#[test]
fn file_states_and_on_disk_become_progress() {
    let c = cfg();
    let req = json!({"id": "r", "files": [
        {"path": "/a", "state": "STARTED"},
        {"path": "/b", "state": "COMPLETED"},
        {"path": "/c", "state": "FAILED", "error": "No such file or directory"},
        {"path": "/d", "state": "FAILED", "error": "drive error"},
        {"path": "/e", "onDisk": true},
        {"path": "/f", "state": "SUBMITTED"},
        {"path": "/g", "state": "CANCELLED"}]});
    let p = |path| file_progress(&c, &req, path, 4);
    assert_eq!(p("/a"), Some(Progress::Running));
    assert_eq!(
        p("/b"),
        Some(Progress::Finished(EventKind::Done { bytes: 4 }))
    );
    assert!(matches!(
        p("/c"),
        Some(Progress::Finished(EventKind::Failed {
            retryable: false,
            ..
        }))
    ));
    assert!(matches!(
        p("/d"),
        Some(Progress::Finished(EventKind::Failed {
            retryable: true,
            ..
        }))
    ));
    assert_eq!(
        p("/e"),
        Some(Progress::Finished(EventKind::Done { bytes: 4 }))
    );
    assert_eq!(p("/f"), Some(Progress::Queued));
    assert_eq!(p("/g"), Some(Progress::Finished(EventKind::Cancelled)));
    assert_eq!(p("/zz"), None);
    assert!(c.capabilities().priority == PriorityScale::None);
}

#[test]
fn a_request_holds_distinct_normalised_paths_up_to_the_limit() {
    let t = |file: &str| Transfer {
        key: file.into(),
        attempt: 1,
        file: file.into(),
        size_bytes: 1,
        priority: 0,
        volume: None,
        group: "g".into(),
        direction: Direction::Read,
        local_file: None,
        bfid: None,
        position: None,
        offset_bytes: None,
    };
    let batch = [t("/a/b"), t("/c"), t("/a//b"), t("/d"), t("/e")];
    let groups = group_distinct(&batch, &[0, 1, 2, 3, 4], 3);
    assert_eq!(groups, [vec![0, 1], vec![2, 3, 4]]);
    assert_eq!(group_distinct(&batch, &[1, 3, 4], 2), [vec![1, 3], vec![4]]);
}

#[test]
fn a_413_names_the_limit_or_halves() {
    let dcache = "The number of targets 501 exceeds maximum 500 for directory expansion NONE.";
    assert_eq!(lower_limit(501, dcache), 500);
    assert_eq!(lower_limit(9, "Content Too Large"), 4);
    assert_eq!(lower_limit(2, "maximum 7"), 1);
    assert_eq!(cfg().max_files_per_request, 500, "dCache's default");
}

#[test]
fn the_eos_form_without_state_is_read_as_gfal2_reads_it() {
    let c = cfg();
    // cern-eos/eos GetStageBulkRequestJsonifier: path, onDisk when known, error when any.
    let req = json!({"id": "r", "createdAt": 1, "startedAt": 1, "files": [
        {"path": "/a", "onDisk": false},
        {"path": "/b", "onDisk": true},
        {"path": "/c", "onDisk": false, "error": "Retrieve failed: tape drive error"},
        {"path": "/d", "error": "No such file or directory"},
        {"path": "/e"},
        {"path": "/f//g/./h", "onDisk": true}]});
    let p = |path| file_progress(&c, &req, path, 4);
    assert_eq!(p("/a"), Some(Progress::Queued));
    assert_eq!(p("/e"), Some(Progress::Queued));
    assert_eq!(
        p("/b"),
        Some(Progress::Finished(EventKind::Done { bytes: 4 }))
    );
    assert_eq!(
        p("/c"),
        Some(Progress::Finished(EventKind::Failed {
            reason: "staging failed: Retrieve failed: tape drive error".into(),
            retryable: true
        }))
    );
    assert!(matches!(
        p("/d"),
        Some(Progress::Finished(EventKind::Failed {
            retryable: false,
            ..
        }))
    ));
    assert_eq!(
        p("/f/g/h"),
        Some(Progress::Finished(EventKind::Done { bytes: 4 }))
    );
    assert!(!all_final(&c, &req));
}

#[test]
fn a_location_names_the_stage_request_by_its_last_segment_after_stage() {
    use super::stage::location_request_id;
    let posted = reqwest::Url::parse("https://dcache.example.org:3880/api/v1/tape/stage").unwrap();
    let uuid = "5c6b9a1e-4f2d-4c3a-9a0e-2b1f1f5d7c11";
    for location in [
        // dCache: the URL posted to, then the UUID; behind a proxy, as its servlet saw it.
        format!("https://dcache.example.org:3880/api/v1/tape/stage/{uuid}"),
        format!("http://frontend.internal:3880/api/v1/tape/stage/{uuid}"),
        // EOS (always https, its alias) and StoRM: a fixed route of their own.
        format!("https://eosctaatlas.cern.ch:8444/api/v1/stage/{uuid}"),
        format!("http://storm-tape.example.org:8080/api/v1/stage/{uuid}"),
        // Relative forms, resolved against the URL posted to.
        format!("/api/v1/tape/stage/{uuid}"),
        format!("stage/{uuid}"),
        format!("//other.example.org/stage/{uuid}"),
        // Query, fragment, a trailing slash, white space around.
        format!("/api/v1/tape/stage/{uuid}?x=1#f"),
        format!("/api/v1/tape/stage/{uuid}/"),
        format!("  https://h/api/v1/stage/{uuid}  "),
    ] {
        assert_eq!(
            location_request_id(&posted, &location).as_deref(),
            Some(uuid),
            "{location}"
        );
    }
    let long = "a".repeat(129);
    for location in [
        String::new(),
        "   ".into(),
        "?x=1".into(),
        "#f".into(),
        "/api/v1/tape/requests/abc".into(),
        "/api/v1/tape/stage/".into(),
        "/api/v1/tape/stage".into(),
        "/api/v1/tape/stage/abc/cancel".into(),
        "/api/v1/tape/stage/a%2Fb".into(),
        "/api/v1/tape/stage/a b".into(),
        "/api/v1/tape/stage/caf\u{e9}".into(),
        "/api/v1/tape/stage/..".into(),
        format!("/api/v1/tape/stage/{long}"),
        // Relative to `.../tape/stage`, a bare id replaces `stage`.
        "abc".into(),
        "mailto:stage@example.org".into(),
        "http://[::1".into(),
    ] {
        assert_eq!(
            location_request_id(&posted, &location),
            None,
            "{location:?}"
        );
    }
    assert!(location_request_id(&posted, &format!("/stage/{}", "a".repeat(128))).is_some());
}

/// A body's `requestId` is the server's choice: usable unless empty, too long, with a control
/// character or a dot segment, and put into a path as one segment whatever it holds.
#[test]
fn a_body_request_id_goes_into_a_path_as_one_segment() {
    use super::stage::{id_segment, usable_request_id};
    let uuid = "5c6b9a1e-4f2d-4c3a-9a0e-2b1f1f5d7c11";
    assert!(usable_request_id(uuid));
    assert_eq!(id_segment(uuid), uuid);
    for (id, segment) in [
        ("a/b", "a%2Fb"),
        ("a?b#c", "a%3Fb%23c"),
        ("a b+c", "a%20b%2Bc"),
        ("caf\u{e9}", "caf%C3%A9"),
        ("a..b", "a..b"),
        ("a%2Fb", "a%252Fb"),
    ] {
        assert!(usable_request_id(id), "{id:?}");
        assert_eq!(id_segment(id), segment, "{id:?}");
        let url = reqwest::Url::parse(&format!("https://h/api/stage/{segment}")).unwrap();
        let last = url
            .path_segments()
            .unwrap()
            .next_back()
            .unwrap()
            .to_string();
        assert_eq!(last, segment, "{id:?} stays one segment of the URL");
    }
    let long = "a".repeat(129);
    for id in ["", ".", "..", "a\nb", "a\u{7f}", long.as_str()] {
        assert!(!usable_request_id(id), "{id:?}");
    }
}

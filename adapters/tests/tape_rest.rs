//! The WLCG Tape REST adapter against the stand-in endpoint: what a batch stages (checked by the
//! stand-in against the specification), polling into events (dCache's and EOS's forms), cancel
//! and release, recovery after a restart, writes refused, the bearer token, the sitename from
//! the discovery document, 413 splitting, normalised paths, archiveinfo before staging,
//! deleting finished requests and a garbled stage answer named by its `Location`.

use std::path::Path;
use std::time::Duration;

use mss_adapters::standin::tape_rest::{BadStageAnswer, Form, TapeRestOptions};
use mss_adapters::standin::{EventReader, Plan, TapeRestStandin};
use mss_adapters::tape_rest::{RawTapeRestConfig, TapeRestAdapter, TapeRestConfig};
use mss_adapters::{Direction, EventKind, MssAdapter, MssError, Progress, Transfer, TransferRef};
use serde_json::json;

struct Bench {
    standin: TapeRestStandin,
    dir: tempfile::TempDir,
    adapter: TapeRestAdapter,
    events: EventReader,
}

fn config(url: &str, dir: &Path) -> TapeRestConfig {
    let raw: RawTapeRestConfig = serde_json::from_value(json!({
        "url": url,
        "disk_lifetime": "PT12H",
        "metadata_key": "dcache-test",
        "poll_ms": 50,
        "auth": {"method": "bearer", "token_file": "token"},
    }))
    .unwrap();
    raw.validate(dir).unwrap()
}

impl Bench {
    async fn new() -> Bench {
        Bench::like(TapeRestOptions::default()).await
    }

    async fn like(options: TapeRestOptions) -> Bench {
        let plan = Plan {
            queued: Duration::from_millis(100),
            active: Duration::from_millis(100),
        };
        let standin = TapeRestStandin::start_with(Some("tape-token"), plan, options)
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "tape-token").unwrap();
        let adapter = TapeRestAdapter::new(config(&standin.url, dir.path())).unwrap();
        Bench {
            standin,
            dir,
            adapter,
            events: EventReader::new(),
        }
    }

    async fn final_event(&mut self, key: &str) -> EventKind {
        self.events.final_event(&self.adapter, key).await
    }
}

fn read(key: &str, path: &str) -> Transfer {
    Transfer {
        key: key.into(),
        attempt: 1,
        file: path.into(),
        size_bytes: 3_000,
        priority: 0,
        volume: None,
        group: "mc/top".into(),
        direction: Direction::Read,
        local_file: None,
        bfid: None,
        position: None,
        offset_bytes: None,
    }
}

fn reference(t: &Transfer, mss_id: &str) -> TransferRef {
    TransferRef {
        key: t.key.clone(),
        attempt: t.attempt,
        mss_id: Some(mss_id.into()),
        file: t.file.clone(),
        size_bytes: t.size_bytes,
    }
}

#[tokio::test]
async fn a_batch_is_staged_in_requests_of_distinct_paths_and_reported_done() {
    let mut b = Bench::new().await;
    let batch = [
        read("1", "/pnfs/cms/a.root"),
        read("2", "/pnfs/cms/b.root"),
        // The same file for another station: a request of its own.
        read("3", "/pnfs/cms/a.root"),
    ];
    let answers = b.adapter.submit_batch(&batch).await;
    let ids: Vec<String> = answers.into_iter().map(|a| a.unwrap().mss_id).collect();
    assert_eq!(ids, ["stage-0001", "stage-0001", "stage-0002"]);
    let requests = b.standin.requests();
    assert_eq!(requests.len(), 2);
    // Keyed by the sitename of the discovery document, not the configured metadata_key.
    assert_eq!(
        requests[0].files,
        [
            json!({"path": "/pnfs/cms/a.root", "diskLifetime": "PT12H",
                   "targetedMetadata": {"standin-tape-site": {"activity": "mc/top"}}}),
            json!({"path": "/pnfs/cms/b.root", "diskLifetime": "PT12H",
                   "targetedMetadata": {"standin-tape-site": {"activity": "mc/top"}}}),
        ]
    );
    for key in ["1", "2", "3"] {
        assert_eq!(b.final_event(key).await, EventKind::Done { bytes: 3_000 });
    }
    let starts = b
        .events
        .seen()
        .iter()
        .filter(|e| e.kind == EventKind::Started)
        .count();
    assert_eq!(starts, 3, "every file reports its start");
    assert!(b
        .standin
        .calls()
        .iter()
        .filter(|c| !c.path.starts_with("/.well-known"))
        .all(|c| c.authorization.as_deref() == Some("Bearer tape-token")));
}

#[tokio::test]
async fn writes_are_refused_without_a_call() {
    let b = Bench::new().await;
    let mut t = read("1", "/pnfs/x");
    t.direction = Direction::Write;
    match b.adapter.submit(&t).await {
        Err(MssError::Rejected(m)) => assert!(m.contains("only stages")),
        other => panic!("{other:?}"),
    }
    assert!(b.standin.calls().is_empty());
    assert!(!b.adapter.capabilities().writes);
}

#[tokio::test]
async fn cancel_and_release_name_the_file_in_its_stage_request() {
    let mut b = Bench::new().await;
    let held = read("1", "/pnfs/hold/a");
    let quick = read("2", "/pnfs/cms/b");
    let ids: Vec<String> = b
        .adapter
        .submit_batch(&[held.clone(), quick.clone()])
        .await
        .into_iter()
        .map(|r| r.unwrap().mss_id)
        .collect();
    b.adapter.cancel(&reference(&held, &ids[0])).await.unwrap();
    assert_eq!(b.final_event("1").await, EventKind::Cancelled);
    assert_eq!(b.final_event("2").await, EventKind::Done { bytes: 3_000 });
    b.adapter
        .release(&reference(&quick, &ids[1]))
        .await
        .unwrap();
    let r = &b.standin.requests()[0];
    assert!(r.cancelled.contains("/pnfs/hold/a"));
    assert!(r.released.contains("/pnfs/cms/b"));
    let calls = b.standin.calls();
    let cancel = calls
        .iter()
        .find(|c| c.path == "/stage/stage-0001/cancel")
        .unwrap();
    assert_eq!(cancel.body, Some(json!({"paths": ["/pnfs/hold/a"]})));
    let release = calls
        .iter()
        .find(|c| c.path == "/release/stage-0001")
        .unwrap();
    assert_eq!(release.body, Some(json!({"paths": ["/pnfs/cms/b"]})));
}

#[tokio::test]
async fn staging_failures_are_retryable_unless_the_file_cannot_be_had() {
    let mut b = Bench::new().await;
    b.adapter
        .submit_batch(&[read("1", "/pnfs/fail/a"), read("2", "/pnfs/fatal/b")])
        .await;
    match b.final_event("1").await {
        EventKind::Failed { reason, retryable } => {
            assert!(retryable);
            assert_eq!(reason, "staging failed: tape drive error: medium error");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        b.final_event("2").await,
        EventKind::Failed {
            retryable: false,
            ..
        }
    ));
}

#[tokio::test]
async fn after_a_restart_a_file_is_found_in_its_stage_request_and_followed() {
    let b = Bench::new().await;
    let t = read("4", "/pnfs/hold/d");
    let id = b.adapter.submit(&t).await.unwrap().mss_id;
    // The broker restarts: the old adapter is gone.
    let Bench {
        standin,
        dir,
        adapter,
        ..
    } = b;
    drop(adapter);
    let again = TapeRestAdapter::new(config(&standin.url, dir.path())).unwrap();
    let st = again.status(&reference(&t, &id)).await.unwrap().unwrap();
    assert_eq!(st.progress, Progress::Queued);
    // Followed by the new adapter: a cancellation now reaches its event log.
    again.cancel(&reference(&t, &id)).await.unwrap();
    assert_eq!(
        EventReader::new().final_event(&again, "4").await,
        EventKind::Cancelled
    );
    // No stage request on record: unknown.
    let mut lost = reference(&t, "stage-9999");
    assert_eq!(again.status(&lost).await.unwrap(), None);
    lost.mss_id = None;
    assert_eq!(again.status(&lost).await.unwrap(), None);
}

/// Poll until `f` holds, failing after ten seconds.
async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !f() {
        assert!(start.elapsed() < Duration::from_secs(10), "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_eos_form_reports_done_and_failed_files_without_a_state() {
    let mut b = Bench::like(TapeRestOptions {
        form: Form::Eos,
        ..TapeRestOptions::default()
    })
    .await;
    b.adapter
        .submit_batch(&[read("1", "/eos/cta/a"), read("2", "/eos/fail/b")])
        .await;
    assert_eq!(b.final_event("1").await, EventKind::Done { bytes: 3_000 });
    assert_eq!(
        b.final_event("2").await,
        EventKind::Failed {
            reason: "staging failed: tape drive error: medium error".into(),
            retryable: true
        }
    );
    let files = &b.standin.requests()[0].files;
    assert_eq!(files.len(), 2);
}

#[tokio::test]
async fn a_413_splits_the_stage_request_and_every_file_is_staged_once() {
    let mut b = Bench::like(TapeRestOptions {
        max_files_per_request: 2,
        ..TapeRestOptions::default()
    })
    .await;
    let batch: Vec<Transfer> = (1..=5)
        .map(|i| read(&i.to_string(), &format!("/pnfs/cms/{i}")))
        .collect();
    let answers = b.adapter.submit_batch(&batch).await;
    assert!(answers.iter().all(Result::is_ok), "{answers:?}");
    for key in ["1", "2", "3", "4", "5"] {
        assert_eq!(b.final_event(key).await, EventKind::Done { bytes: 3_000 });
    }
    let staged: Vec<String> = b
        .standin
        .requests()
        .iter()
        .flat_map(|r| {
            r.files
                .iter()
                .map(|f| f["path"].as_str().unwrap().to_string())
        })
        .collect();
    assert_eq!(staged.len(), 5, "{staged:?}");
    assert!(b.standin.requests().iter().all(|r| r.files.len() <= 2));
    let posts = b.standin.calls().into_iter().filter(|c| c.path == "/stage");
    // Five refused with dCache's "exceeds maximum 2", then 2, 2 and 1.
    assert_eq!(posts.count(), 4);
    // The lowered limit holds for the next batch: no more 413s.
    let before = b.standin.calls().len();
    b.adapter
        .submit_batch(&[read("6", "/pnfs/cms/6"), read("7", "/pnfs/cms/7")])
        .await;
    let new_posts = b.standin.calls()[before..]
        .iter()
        .filter(|c| c.path == "/stage")
        .count();
    assert_eq!(new_posts, 1);
}

#[tokio::test]
async fn a_path_the_server_answers_normalised_is_matched_not_lost() {
    let mut b = Bench::new().await;
    let t = read("1", "/pnfs/a//b/./c");
    let id = b.adapter.submit(&t).await.unwrap().mss_id;
    assert_eq!(b.final_event("1").await, EventKind::Done { bytes: 3_000 });
    assert_eq!(b.standin.requests()[0].files[0]["path"], "/pnfs/a/b/c");
    assert_eq!(b.standin.requests().len(), 1, "staged once");
    b.adapter.release(&reference(&t, &id)).await.unwrap();
    assert!(b.standin.requests()[0].released.contains("/pnfs/a/b/c"));
}

#[tokio::test]
async fn archiveinfo_settles_files_on_disk_lost_or_missing_without_staging() {
    let mut b = Bench::new().await;
    let answers = b
        .adapter
        .submit_batch(&[
            read("1", "/pnfs/disk/a"),
            read("2", "/pnfs/lost/b"),
            read("3", "/pnfs/none/c"),
            read("4", "/pnfs/unavailable/d"),
            read("5", "/pnfs/fatal/e"),
            read("6", "/pnfs/cms/f"),
        ])
        .await;
    let ids: Vec<String> = answers.into_iter().map(|a| a.unwrap().mss_id).collect();
    for settled in [0, 1, 2, 4] {
        assert_eq!(ids[settled], "archiveinfo", "{ids:?}");
    }
    assert_ne!(
        ids[3], "archiveinfo",
        "UNAVAILABLE may pass: staged, the server waits"
    );
    assert_eq!(b.final_event("1").await, EventKind::Done { bytes: 3_000 });
    let failed = |kind: EventKind| match kind {
        EventKind::Failed { reason, retryable } => (reason, retryable),
        other => panic!("{other:?}"),
    };
    let (reason, retryable) = failed(b.final_event("2").await);
    assert!(reason.contains("LOST") && !retryable, "{reason}");
    assert!(!failed(b.final_event("3").await).1);
    assert_eq!(b.final_event("4").await, EventKind::Done { bytes: 3_000 });
    let (reason, retryable) = failed(b.final_event("5").await);
    assert!(reason.contains("No such file") && !retryable, "{reason}");
    assert_eq!(b.final_event("6").await, EventKind::Done { bytes: 3_000 });
    let requests = b.standin.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        requests[0].files.len(),
        2,
        "only the files on tape or offline are staged"
    );
    // After a restart, a settled transfer is asked about again.
    let again = TapeRestAdapter::new(config(&b.standin.url, b.dir.path())).unwrap();
    let t = read("1", "/pnfs/disk/a");
    let st = again.status(&reference(&t, "archiveinfo")).await.unwrap();
    assert_eq!(
        st.map(|s| s.progress),
        Some(Progress::Finished(EventKind::Done { bytes: 3_000 }))
    );
    // It has no stage request and so no pin: a station's release of it succeeds, asking nothing.
    let calls = b.standin.requests().len();
    again.release(&reference(&t, "archiveinfo")).await.unwrap();
    assert_eq!(b.standin.requests().len(), calls);
}

#[tokio::test]
async fn a_request_whose_files_are_all_final_is_deleted() {
    let mut b = Bench::new().await;
    b.adapter
        .submit_batch(&[read("1", "/pnfs/cms/a"), read("2", "/pnfs/fail/b")])
        .await;
    b.final_event("1").await;
    b.final_event("2").await;
    until("the stage request is deleted", || {
        b.standin.requests().iter().all(|r| r.deleted)
    })
    .await;
    let deletes: Vec<String> = b
        .standin
        .calls()
        .into_iter()
        .filter(|c| c.method == "DELETE")
        .map(|c| c.path)
        .collect();
    assert_eq!(deletes, ["/stage/stage-0001"]);
}

#[tokio::test]
async fn without_a_sitename_the_configured_metadata_key_is_used() {
    let mut b = Bench::like(TapeRestOptions {
        sitename: None,
        ..TapeRestOptions::default()
    })
    .await;
    b.adapter.submit(&read("1", "/pnfs/cms/a")).await.unwrap();
    assert_eq!(b.final_event("1").await, EventKind::Done { bytes: 3_000 });
    assert_eq!(
        b.standin.requests()[0].files[0]["targetedMetadata"],
        json!({"dcache-test": {"activity": "mc/top"}})
    );
}

/// The tape endpoint refuses a whole stage request for one path it will not take. Only that
/// file fails; the others are staged one by one and finish.
#[tokio::test]
async fn one_path_the_endpoint_refuses_fails_alone_not_its_whole_batch() {
    let mut b = Bench::new().await;
    let alone = b.adapter.submit(&read("9", "x9.root")).await;
    assert!(
        matches!(&alone, Err(MssError::Rejected(m)) if m.contains("absolute")),
        "{alone:?}"
    );
    let batch = [
        read("1", "/pnfs/cms/a.root"),
        read("2", "b.root"),
        read("3", "/pnfs/cms/c.root"),
    ];
    let answers = b.adapter.submit_batch(&batch).await;
    assert!(
        matches!(&answers[1], Err(MssError::Rejected(_))),
        "{answers:?}"
    );
    assert!(
        answers[0].is_ok() && answers[2].is_ok(),
        "the good files fail with the bad one: {answers:?}"
    );
    for key in ["1", "3"] {
        assert_eq!(b.final_event(key).await, EventKind::Done { bytes: 3_000 });
    }
}

/// A created stage request is answered 201 with its id and a `Location` naming it by an
/// absolute URL, as dCache builds it: the URL posted to, `/`, the id.
#[tokio::test]
async fn the_standin_names_a_created_request_by_an_absolute_location() {
    let b = Bench::new().await;
    let resp = reqwest::Client::new()
        .post(format!("{}/stage", b.standin.url))
        .bearer_auth("tape-token")
        .json(&json!({"files": [{"path": "/pnfs/cms/a"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), reqwest::StatusCode::CREATED);
    let location = resp.headers()["location"].to_str().unwrap().to_string();
    assert_eq!(location, format!("{}/stage/stage-0001", b.standin.url));
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body, json!({"requestId": "stage-0001"}));
    // Broken off: the status and Location arrive, the body does not.
    b.standin
        .set_bad_stage_answer(Some(BadStageAnswer::BodyCutOff));
    let resp = reqwest::Client::new()
        .post(format!("{}/stage", b.standin.url))
        .bearer_auth("tape-token")
        .json(&json!({"files": [{"path": "/pnfs/cms/b"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), reqwest::StatusCode::CREATED);
    let location = resp.headers()["location"].to_str().unwrap().to_string();
    assert_eq!(location, format!("{}/stage/stage-0002", b.standin.url));
    assert!(resp.bytes().await.is_err(), "the body breaks off");
    assert_eq!(b.standin.requests().len(), 2);
}

/// The answer to a stage POST is lost in its body (cut short, the connection breaks off in it,
/// or its `requestId` is empty) but its status (201) and `Location` header came through: the request is known by the
/// id the `Location` names, followed under it, and never staged a second time. dCache's
/// `Location` is under the URL posted to; EOS's is `https://` its alias and a fixed route.
#[tokio::test]
async fn a_garbled_stage_answer_is_known_by_its_location_and_staged_once() {
    for (form, bad) in [
        (Form::Dcache, BadStageAnswer::GarbledBody),
        (Form::Dcache, BadStageAnswer::BodyCutOff),
        (Form::Eos, BadStageAnswer::GarbledBody),
        (Form::Dcache, BadStageAnswer::EmptyRequestId),
    ] {
        let mut b = Bench::like(TapeRestOptions {
            form,
            ..TapeRestOptions::default()
        })
        .await;
        b.standin.set_bad_stage_answer(Some(bad));
        let batch = [read("1", "/pnfs/cms/a"), read("2", "/pnfs/cms/b")];
        let answers = b.adapter.submit_batch(&batch).await;
        let ids: Vec<String> = answers
            .into_iter()
            .map(|a| {
                a.unwrap_or_else(|e| panic!("{form:?} {bad:?}: {e:?}"))
                    .mss_id
            })
            .collect();
        assert_eq!(ids, ["stage-0001", "stage-0001"], "{form:?} {bad:?}");
        // Asked again (a broker's resend): answered from what is followed, nothing staged.
        for again in b.adapter.submit_batch(&batch).await {
            let again = again.unwrap();
            assert_eq!(again.mss_id, "stage-0001");
            assert!(again.duplicate, "{form:?} {bad:?}");
        }
        let requests = b.standin.requests();
        assert_eq!(requests.len(), 1, "{form:?} {bad:?}: staged once");
        assert_eq!(requests[0].files.len(), 2);
        for key in ["1", "2"] {
            assert_eq!(b.final_event(key).await, EventKind::Done { bytes: 3_000 });
        }
        let polled = b.standin.calls();
        assert!(
            polled
                .iter()
                .any(|c| c.method == "GET" && c.path == "/stage/stage-0001"),
            "{form:?} {bad:?}: followed under the Location's id"
        );
    }
}

/// Without a `Location` a garbled answer names no request: the outcome stays unknown (the
/// request may exist), nothing is followed, and a resend stages the files again, the
/// duplicate the API's lack of an idempotency key leaves.
#[tokio::test]
async fn a_garbled_stage_answer_without_a_location_stays_unknown() {
    let b = Bench::new().await;
    b.standin
        .set_bad_stage_answer(Some(BadStageAnswer::GarbledBodyNoLocation));
    let batch = [read("1", "/pnfs/cms/a"), read("2", "/pnfs/cms/b")];
    for answer in b.adapter.submit_batch(&batch).await {
        assert!(matches!(answer, Err(MssError::Unknown(_))), "{answer:?}");
    }
    assert_eq!(b.standin.requests().len(), 1, "the request was created");
    let t = &batch[0];
    let unrecorded = TransferRef {
        mss_id: None,
        ..reference(t, "")
    };
    assert_eq!(b.adapter.status(&unrecorded).await.unwrap(), None);
    b.standin.set_bad_stage_answer(None);
    for again in b.adapter.submit_batch(&batch).await {
        let again = again.unwrap();
        assert_eq!(again.mss_id, "stage-0002");
        assert!(!again.duplicate);
    }
    assert_eq!(b.standin.requests().len(), 2);
}

/// Waits (up to 10 s) for `adapter.room()` to be `want`; whether it was.
async fn room_becomes(adapter: &dyn MssAdapter, want: Option<usize>) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while adapter.room() != want {
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

#[tokio::test]
async fn the_room_is_max_outstanding_less_the_transfers_followed() {
    let b = Bench::new().await;
    let mut cfg = config(&b.standin.url, b.dir.path());
    cfg.max_outstanding = Some(2);
    let stated = cfg.capabilities();
    let adapter = TapeRestAdapter::new(cfg).unwrap();
    assert_eq!(
        (adapter.name(), adapter.capabilities()),
        ("tape_rest", stated)
    );
    assert_eq!(adapter.room(), Some(2));
    adapter.submit(&read("r1", "/data/room/f1")).await.unwrap();
    assert_eq!(adapter.room(), Some(1));
    adapter.submit(&read("r2", "/data/room/f2")).await.unwrap();
    assert_eq!(adapter.room(), Some(0));
    // Each transfer's end gives its room back.
    let mut events = EventReader::new();
    for key in ["r1", "r2"] {
        let end = events.final_event(&adapter, key).await;
        assert!(matches!(end, EventKind::Done { .. }), "{key}: {end:?}");
    }
    assert!(
        room_becomes(&adapter, Some(2)).await,
        "{:?}",
        adapter.room()
    );
    // Without max_outstanding, no limit.
    assert_eq!(b.adapter.room(), None);
}

//! The WLCG Tape REST adapter against the stand-in endpoint: what a batch stages (checked by the
//! stand-in against the specification), polling into events, cancel and release, recovery
//! after a restart, writes refused, and the bearer token.

use std::path::Path;
use std::time::Duration;

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
        let plan = Plan {
            queued: Duration::from_millis(100),
            active: Duration::from_millis(100),
        };
        let standin = TapeRestStandin::start(Some("tape-token"), plan)
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
    assert_eq!(
        requests[0].files,
        [
            json!({"path": "/pnfs/cms/a.root", "diskLifetime": "PT12H",
                   "targetedMetadata": {"dcache-test": {"activity": "mc/top"}}}),
            json!({"path": "/pnfs/cms/b.root", "diskLifetime": "PT12H",
                   "targetedMetadata": {"dcache-test": {"activity": "mc/top"}}}),
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
    // A path the request does not hold is refused by the endpoint.
    let stranger = read("9", "/pnfs/other");
    assert!(matches!(
        b.adapter.release(&reference(&stranger, &ids[0])).await,
        Err(MssError::Rejected(m)) if m.starts_with("400")
    ));
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
    let again = TapeRestAdapter::new(config(&b.standin.url, b.dir.path())).unwrap();
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

//! Lookups' answers through the writer and a real SQLite file (issue 38): a request without a
//! volume waits for its lookup; an answer moves it to its tape's queue (which may make the
//! volume eligible); a failed lookup lets it go without a volume; an answer for a request
//! released meanwhile is stored and moves nothing; a restart before the answer looks it up again.

use super::*;
use crate::ledger::VolumeFound;
use crate::policy::volumes::Eligibility;

/// The volumes mode with a lookup that waits 60 s: a volume is eligible at 250 bytes.
const CONFIG: &str = r#"
[policy]
p_front = 20
p_back = 10
algorithm = "fair_tree"
[usage]
model = "none"
[shares]
a = 1
[mss]
adapter = "http"
url = "http://127.0.0.1:1"
[mss.volume_lookup]
method = "command"
command = ["/bin/false"]
timeout_secs = 5
wait_secs = 60
[release]
mode = "volumes"
[release.volumes]
min_volume_bytes = 250
min_volume_files = 1000
quiet_secs = 600
max_age_secs = 14400
batch_max_bytes = 100000
batch_max_files = 100
sticky_secs = 0
max_volumes = 8
"#;

fn read(f: &Fixture, crid: &str, volume: Option<(&str, u64)>) -> NewRequest {
    let mut r = f.request(crid, "a", "x", 100);
    r.input.volume = volume.map(|v| v.0.to_string());
    r.input.extras.position = volume.map(|v| v.1);
    r
}

fn found(id: i64, volume: &str, position: u64) -> VolumeFound {
    VolumeFound {
        id,
        found: Some((volume.into(), position)),
        source: "command",
    }
}

async fn record(l: &Ledger, id: i64) -> RequestRecord {
    l.request(id).await.unwrap().unwrap()
}

async fn an_answer_moves_a_waiting_request_to_its_tape_and_a_failed_one_lets_it_go(
    backend: Backend,
) {
    let f = Fixture::with_config_on(backend, CONFIG);
    let opened = f.open();
    let l = &opened.0;
    let x = accept(l, read(&f, "x", None)).await.id;
    let v: Vec<i64> = l
        .accept(vec![
            read(&f, "v1", Some(("V1", 1))),
            read(&f, "v2", Some(("V1", 2))),
        ])
        .await
        .unwrap()
        .iter()
        .map(|a| a.id)
        .collect();
    // x waits for its lookup; V1 (200 bytes) for more.
    assert_eq!(
        l.unlocated(0, 10).await.unwrap(),
        vec![(x, "/pnfs/x".to_string())]
    );
    let wait = l.explain_queued(x).await.unwrap().unwrap().volume.unwrap();
    assert_eq!(wait.rule, Eligibility::Locating { at_ms: 0 }.name());
    assert_eq!(wait.eligible_at_ms, Some(f.clock.now_ms() + 60_000));
    for id in [x, v[0], v[1]] {
        assert_eq!(record(l, id).await.state, RequestState::Queued);
    }

    // x lies on V1 at 3: V1 has 300 bytes and goes, x with it.
    assert_eq!(l.located(vec![found(x, "V1", 3)]).await.unwrap(), 1);
    for id in [x, v[0], v[1]] {
        assert_eq!(record(l, id).await.state, RequestState::Accepted);
    }
    let r = record(l, x).await;
    assert_eq!(
        (r.volume.as_deref(), r.position, r.volume_source.as_deref()),
        (Some("V1"), Some(3), Some("command"))
    );
    assert!(l.unlocated(0, 10).await.unwrap().is_empty());
    // A second answer changes nothing.
    assert_eq!(l.located(vec![found(x, "V7", 9)]).await.unwrap(), 0);
    assert_eq!(record(l, x).await.volume.as_deref(), Some("V1"));

    // y's lookup fails: it goes at once, without a volume.
    let y = accept(l, read(&f, "y", None)).await.id;
    assert_eq!(record(l, y).await.state, RequestState::Queued);
    let failed = VolumeFound {
        id: y,
        found: None,
        source: "command",
    };
    assert_eq!(l.located(vec![failed]).await.unwrap(), 0);
    let r = record(l, y).await;
    assert_eq!(r.state, RequestState::Accepted);
    assert_eq!(
        (r.volume, r.volume_source.as_deref()),
        (None, Some(LOOKUP_FAILED))
    );
    assert_eq!(l.audit().await.unwrap(), Vec::<String>::new());
    close(opened);
}

async fn a_request_released_before_its_answer_keeps_it_and_a_restart_asks_again(backend: Backend) {
    let f = Fixture::with_config_on(backend, CONFIG);
    let opened = f.open();
    let l = &opened.0;
    let z = accept(l, read(&f, "z", None)).await.id;
    let w = accept(l, read(&f, "w", None)).await.id;
    close(opened);

    // A restart before any answer: both still wait, and are asked for again.
    let opened = f.open();
    let l = &opened.0;
    let asked: Vec<i64> = l
        .unlocated(0, 10)
        .await
        .unwrap()
        .iter()
        .map(|r| r.0)
        .collect();
    assert_eq!(asked, vec![z, w]);
    assert_eq!(record(l, z).await.state, RequestState::Queued);

    // No answer within wait_secs: they go without a volume.
    f.clock.advance_ms(60_000);
    l.release_held().await.unwrap();
    assert_eq!(record(l, z).await.state, RequestState::Accepted);
    // The late answer is stored; nothing moves.
    assert_eq!(l.located(vec![found(z, "V9", 4)]).await.unwrap(), 1);
    let r = record(l, z).await;
    assert_eq!(
        (r.state, r.volume.as_deref()),
        (RequestState::Accepted, Some("V9"))
    );
    assert_eq!(l.audit().await.unwrap(), Vec::<String>::new());
    close(opened);
}

on_both_async!(
    an_answer_moves_a_waiting_request_to_its_tape_and_a_failed_one_lets_it_go,
    a_request_released_before_its_answer_keeps_it_and_a_restart_asks_again,
);

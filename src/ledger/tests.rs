//! Ledger tests against a real SQLite file.

use std::sync::Arc;
use std::time::Duration;

use mss_adapters::{Direction, EventCursor, EventKind, MssEvent};

use super::*;
use crate::clock::ManualClock;
use crate::config::Settings;

const CONFIG: &str = r#"
[policy]
p_front = 20
p_back = 10
[[priority_classes]]
access_mode = "datataking"
mss_priority = 100
[shares]
analysis = 1
"analysis/higgs" = 1
"analysis/top" = 3
mc = 3
[mss]
adapter = "http"
url = "http://127.0.0.1:1"
"#;

struct Fixture {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    settings: Settings,
    clock: ManualClock,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture::with_config(CONFIG)
    }

    fn with_config(text: &str) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        Fixture {
            _dir: dir,
            path,
            settings: Settings::parse(text, "test").unwrap(),
            clock: ManualClock::new(1_000_000),
        }
    }

    fn open(&self) -> (Ledger, std::thread::JoinHandle<()>) {
        let options = LedgerOptions {
            path: self.path.clone(),
            commit_batch_max: 1024,
            retry: RetrySettings {
                max_attempts: 2,
                base: Duration::from_millis(100),
                max: Duration::from_millis(1000),
            },
        };
        Ledger::open(
            &options,
            self.settings.policy.clone(),
            Arc::new(self.clock.clone()),
        )
        .unwrap()
    }

    fn request(&self, crid: &str, mode: &str, group: &str, size: u64) -> NewRequest {
        let policy = &self.settings.policy;
        let fields = crate::policy::RequestFields {
            access_mode: mode,
            physics_group: group,
            station: "st1",
            user: "u",
            file: "/f",
        };
        let group_id = crate::policy::classify(policy, &fields).unwrap();
        NewRequest {
            station: "st1".into(),
            client_request_id: crid.into(),
            user: "u".into(),
            file: format!("/pnfs/{crid}"),
            size_bytes: size,
            access_mode: mode.into(),
            physics_group: group.into(),
            volume: None,
            direction: Direction::Read,
            group: group_id,
            benefit: crate::policy::benefit(policy, mode, size),
        }
    }
}

fn usage_of(groups: &[GroupRow], path: &str) -> (u64, u64) {
    let g = groups.iter().find(|g| g.path == path).unwrap();
    (g.usage, g.pending)
}

fn event(id: i64, attempt: u32, seq: u64, kind: EventKind) -> MssEvent {
    MssEvent {
        seq,
        key: id.to_string(),
        attempt,
        at_ms: 0,
        kind,
    }
}

fn close((ledger, handle): (Ledger, std::thread::JoinHandle<()>)) {
    drop(ledger);
    handle.join().unwrap();
}

#[tokio::test]
async fn restart_restores_every_groups_usage_and_decisions() {
    let f = Fixture::new();
    let opened = f.open();
    let ledger = opened.0.clone();
    let mut items = Vec::new();
    for i in 0..60u64 {
        let (mode, group) = [
            ("analysis", "higgs"),
            ("analysis", "top"),
            ("mc", "x"),
            ("datataking", "x"),
        ][(i % 4) as usize];
        items.push(f.request(&format!("r{i}"), mode, group, 1_000 + i * 37));
    }
    let (first, second) = items.split_at(30);
    ledger.accept(first.to_vec()).await.unwrap();
    let before = ledger.groups().await.unwrap();
    drop(ledger);
    close(opened);

    let reopened = f.open();
    let after = reopened.0.groups().await.unwrap();
    assert_eq!(before, after, "stored usage identical after restart");
    let restarted = reopened.0.accept(second.to_vec()).await.unwrap();

    // A ledger that never restarts takes all sixty in one run.
    let straight_f = Fixture::new();
    let twin = straight_f.open();
    twin.0.accept(first.to_vec()).await.unwrap();
    let straight = twin.0.accept(second.to_vec()).await.unwrap();
    let decisions = |v: &[Accepted]| {
        v.iter()
            .map(|a| (a.class, a.mss_priority))
            .collect::<Vec<_>>()
    };
    assert_eq!(decisions(&restarted), decisions(&straight));
    // Both fronts and backs occurred, so the comparison means something.
    assert!(restarted.iter().any(|a| a.class == Class::Front));
    assert!(restarted.iter().any(|a| a.class == Class::Back));
    close(reopened);
    close(twin);
}

#[tokio::test]
async fn resubmission_is_idempotent() {
    let f = Fixture::new();
    let opened = f.open();
    let l = &opened.0;
    let a = l
        .accept(vec![f.request("same", "mc", "x", 500)])
        .await
        .unwrap();
    let b = l
        .accept(vec![
            f.request("same", "mc", "x", 500),
            f.request("same", "mc", "x", 999),
        ])
        .await
        .unwrap();
    assert!(!a[0].duplicate);
    assert!(b.iter().all(|x| x.duplicate && x.id == a[0].id));
    assert_eq!(
        usage_of(&l.groups().await.unwrap(), "mc"),
        (500, 1),
        "charged once"
    );
    close(opened);
}

#[tokio::test]
async fn a_request_and_its_charge_are_never_committed_apart() {
    let f = Fixture::new();
    let opened = f.open();
    let l = opened.0.clone();
    l.accept(vec![f.request("ok", "mc", "x", 100)])
        .await
        .unwrap();
    // Make the groups update fail, after the request row was inserted in the same transaction.
    let side = rusqlite::Connection::open(&f.path).unwrap();
    side.execute_batch(
        "CREATE TRIGGER boom BEFORE UPDATE ON groups WHEN NEW.usage > 1000 \
         BEGIN SELECT RAISE(ABORT, 'disk full (simulated)'); END;",
    )
    .unwrap();
    let err = l
        .accept(vec![f.request("big", "mc", "x", 5_000)])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("disk full"), "{err}");
    let counts = l.state_counts().await.unwrap();
    assert_eq!(
        counts,
        vec![(RequestState::Accepted, 1)],
        "the request row was rolled back"
    );
    assert_eq!(usage_of(&l.groups().await.unwrap(), "mc"), (100, 1));
    // The in-memory usage was rolled back too: the next decision sees 100, not 5100.
    side.execute_batch("DROP TRIGGER boom").unwrap();
    l.accept(vec![f.request("big", "mc", "x", 5_000)])
        .await
        .unwrap();
    assert_eq!(usage_of(&l.groups().await.unwrap(), "mc"), (5_100, 2));
    // And the other way round: the request insert fails, so no charge lands.
    side.execute_batch(
        "CREATE TRIGGER boom2 BEFORE INSERT ON requests WHEN NEW.size_bytes = 777 \
         BEGIN SELECT RAISE(ABORT, 'io error (simulated)'); END;",
    )
    .unwrap();
    assert!(l
        .accept(vec![
            f.request("x1", "mc", "x", 10),
            f.request("x2", "mc", "x", 777)
        ])
        .await
        .is_err());
    assert_eq!(
        usage_of(&l.groups().await.unwrap(), "mc"),
        (5_100, 2),
        "neither item landed"
    );
    drop(l);
    close(opened);
}

#[tokio::test]
async fn completion_reconciles_and_failure_refunds() {
    let f = Fixture::new();
    let opened = f.open();
    let l = &opened.0;
    let acc = l
        .accept(vec![
            f.request("a", "mc", "x", 1_000),
            f.request("b", "mc", "x", 2_000),
            f.request("c", "mc", "x", 4_000),
        ])
        .await
        .unwrap();
    let (a, b, c) = (acc[0].id, acc[1].id, acc[2].id);
    assert_eq!(usage_of(&l.groups().await.unwrap(), "mc"), (7_000, 3));
    let cursor = EventCursor {
        epoch: "e1".into(),
        after: 6,
    };
    let events = vec![
        event(a, 1, 1, EventKind::Started),
        // Actual bytes replace the estimate.
        event(a, 1, 2, EventKind::Done { bytes: 900 }),
        // A duplicated event changes nothing.
        event(a, 1, 3, EventKind::Done { bytes: 900 }),
        // Not retryable: failed and refunded.
        event(
            b,
            1,
            4,
            EventKind::Failed {
                reason: "bad file".into(),
                retryable: false,
            },
        ),
        // Retryable: back to accepted, attempt 2, charge kept.
        event(
            c,
            1,
            5,
            EventKind::Failed {
                reason: "drive".into(),
                retryable: true,
            },
        ),
        // An event of an old attempt is stale.
        event(c, 1, 6, EventKind::Done { bytes: 4_000 }),
    ];
    let changed = l.apply_events(events, cursor.clone()).await.unwrap();
    assert_eq!(changed, 4);
    assert_eq!(l.event_cursor().await.unwrap(), cursor);
    assert_eq!(usage_of(&l.groups().await.unwrap(), "mc"), (900 + 4_000, 1));
    let rc = l.request(c).await.unwrap().unwrap();
    assert_eq!((rc.state, rc.attempt), (RequestState::Accepted, 2));
    assert!(
        l.to_submit(0, f.clock.now_ms(), 10)
            .await
            .unwrap()
            .is_empty(),
        "backoff not over"
    );
    f.clock.advance_ms(100);
    assert_eq!(l.to_submit(0, f.clock.now_ms(), 10).await.unwrap().len(), 1);
    // Attempt 2 of 2 fails retryably: no attempts left, failed and refunded.
    let ev = vec![event(
        c,
        2,
        7,
        EventKind::Failed {
            reason: "drive".into(),
            retryable: true,
        },
    )];
    l.apply_events(
        ev,
        EventCursor {
            epoch: "e1".into(),
            after: 7,
        },
    )
    .await
    .unwrap();
    let rc = l.request(c).await.unwrap().unwrap();
    assert_eq!(rc.state, RequestState::Failed);
    assert!(rc.last_error.unwrap().contains("attempt 2 of 2"));
    assert_eq!(usage_of(&l.groups().await.unwrap(), "mc"), (900, 0));
    let ra = l.request(a).await.unwrap().unwrap();
    assert_eq!((ra.state, ra.bytes_done), (RequestState::Done, 900));
    close(opened);
}

#[tokio::test]
async fn cancel_refunds_before_submission_and_asks_the_mss_after() {
    let f = Fixture::new();
    let opened = f.open();
    let l = &opened.0;
    let acc = l
        .accept(vec![
            f.request("a", "mc", "x", 100),
            f.request("b", "mc", "x", 200),
        ])
        .await
        .unwrap();
    let (a, b) = (acc[0].id, acc[1].id);
    assert_eq!(l.cancel(a).await.unwrap(), CancelOutcome::Cancelled);
    assert_eq!(
        l.cancel(a).await.unwrap(),
        CancelOutcome::AlreadyFinal(RequestState::Cancelled)
    );
    assert_eq!(l.cancel(9_999).await.unwrap(), CancelOutcome::NotFound);
    l.submitted(vec![SubmittedTransfer {
        id: b,
        attempt: 1,
        mss_id: "m".into(),
    }])
    .await
    .unwrap();
    assert_eq!(
        l.cancel(b).await.unwrap(),
        CancelOutcome::Requested(RequestState::Submitted)
    );
    assert_eq!(l.cancelling().await.unwrap(), vec![b]);
    // A submission that raced with a cancellation is cancelled at the MSS.
    let after = l
        .submitted(vec![SubmittedTransfer {
            id: a,
            attempt: 1,
            mss_id: "m2".into(),
        }])
        .await
        .unwrap();
    assert_eq!(after, vec![AfterSubmit::CancelAtMss]);
    l.apply_events(
        vec![event(b, 1, 1, EventKind::Cancelled)],
        EventCursor::default(),
    )
    .await
    .unwrap();
    assert_eq!(usage_of(&l.groups().await.unwrap(), "mc"), (0, 0));
    assert!(l.cancelling().await.unwrap().is_empty());
    close(opened);
}

#[tokio::test]
async fn a_replay_after_restart_is_still_a_duplicate() {
    let f = Fixture::new();
    let opened = f.open();
    let first = opened
        .0
        .accept(vec![f.request("keep", "mc", "x", 300)])
        .await
        .unwrap();
    close(opened);
    let reopened = f.open();
    let again = reopened
        .0
        .accept(vec![
            f.request("keep", "mc", "x", 300),
            f.request("new", "mc", "x", 5),
        ])
        .await
        .unwrap();
    assert!(again[0].duplicate);
    assert_eq!(again[0].id, first[0].id);
    assert!(!again[1].duplicate);
    assert_eq!(
        usage_of(&reopened.0.groups().await.unwrap(), "mc"),
        (305, 2)
    );
    // The same client_request_id from another station is another request.
    let mut other = f.request("keep", "mc", "x", 7);
    other.station = "st2".into();
    let o = reopened.0.accept(vec![other]).await.unwrap();
    assert!(!o[0].duplicate);
    close(reopened);
}

/// Half-life usage has no drift across restarts: a ledger restarted before every step (charges,
/// completions with actual bytes, refunds, time passing) decides every request as one that ran
/// straight through, and reports bit-for-bit the same figures, which match the closed form
/// `sum b * 0.5^((t - t_j) / H)` of the charges as dated.
#[tokio::test]
async fn half_life_usage_has_no_drift_across_restarts() {
    let config = CONFIG.replace(
        "[shares]",
        "[usage]\nmodel = \"half_life\"\nhalf_life_secs = 60\n[shares]",
    );
    let restarted = Fixture::with_config(&config);
    let straight = Fixture::with_config(&config);
    let twin = straight.open();
    let mut decisions = (Vec::new(), Vec::new());
    let mut seq = 0;
    for step in 0..12u64 {
        let items: Vec<NewRequest> = (0..5)
            .map(|i| {
                let (mode, group) = [("analysis", "higgs"), ("analysis", "top"), ("mc", "x")]
                    [((step + i) % 3) as usize];
                restarted.request(
                    &format!("s{step}-{i}"),
                    mode,
                    group,
                    1_000_003 * (step + 1) + i * 7_919,
                )
            })
            .collect();
        let opened = restarted.open();
        let a = opened.0.accept(items.clone()).await.unwrap();
        let b = twin.0.accept(items).await.unwrap();
        // Complete the first two at a different size, cancel the third (a refund).
        for (ledger, accepted) in [(&opened.0, &a), (&twin.0, &b)] {
            seq += 1;
            let done = |k: usize, bytes| event(accepted[k].id, 1, seq, EventKind::Done { bytes });
            ledger
                .apply_status_events(vec![done(0, 999_999), done(1, 2_000_017)])
                .await
                .unwrap();
            ledger.cancel(accepted[2].id).await.unwrap();
        }
        decisions
            .0
            .extend(a.iter().map(|x| (x.class, x.mss_priority)));
        decisions
            .1
            .extend(b.iter().map(|x| (x.class, x.mss_priority)));
        close(opened);
        // Time passes: 17 s, about a quarter of a half-life.
        restarted.clock.advance_ms(17_000);
        straight.clock.advance_ms(17_000);
    }
    assert_eq!(decisions.0, decisions.1);
    assert!(decisions.0.iter().any(|d| d.0 == Class::Front));
    assert!(decisions.0.iter().any(|d| d.0 == Class::Back));
    let at = restarted.clock.now_ms();
    let reopened = restarted.open();
    let view_a = serde_json::to_value(reopened.0.shares(at, at).await.unwrap()).unwrap();
    let view_b = serde_json::to_value(twin.0.shares(at, at).await.unwrap()).unwrap();
    assert_eq!(view_a, view_b);
    let stored = |path: &std::path::Path| -> Vec<(String, f64)> {
        let c = rusqlite::Connection::open(path).unwrap();
        let mut st = c
            .prepare("SELECT path, decayed FROM groups ORDER BY path")
            .unwrap();
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(
        stored(&restarted.path),
        stored(&straight.path),
        "bit for bit"
    );
    // The closed form from the requests as stored: each current charge dated by charged_ms.
    let c = rusqlite::Connection::open(&restarted.path).unwrap();
    let mut st = c
        .prepare("SELECT charged, charged_ms FROM requests WHERE group_path = 'mc/x' OR group_path = 'mc'")
        .unwrap();
    let closed: f64 = st
        .query_map([], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, Option<i64>>(1)?))
        })
        .unwrap()
        .map(Result::unwrap)
        .filter_map(|(b, t)| t.map(|t| b as f64 * (-((at - t) as f64) / 60_000.0).exp2()))
        .sum();
    let mc = view_a["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["path"] == "mc")
        .unwrap();
    let got = mc["effective_usage"].as_f64().unwrap();
    assert!(closed > 1e6, "the check must weigh something: {closed}");
    assert!(
        (got - closed).abs() <= 1.0,
        "effective {got} vs closed form {closed}"
    );
    close(reopened);
    close(twin);
}

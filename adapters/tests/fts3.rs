//! The FTS3 adapter against the stand-in FTS3 server: what it submits (checked by the stand-in
//! against the fields FTS3 accepts), deterministic ids across a lost answer, polling into
//! events, re-prioritisation by bands, cancellation, recovery after a restart, and
//! authentication.

use std::path::Path;
use std::time::Duration;

use mss_adapters::fts3::{job_id, Fts3Adapter, Fts3Config, RawFts3Config};
use mss_adapters::standin::fts3::Delegation;
use mss_adapters::standin::{EventReader, Fts3Standin, Plan};
use mss_adapters::{
    Direction, EventKind, MssAdapter, MssError, MssEvent, Progress, Transfer, TransferRef,
};
use serde_json::{json, Value};

const VO: &str = "cms";

fn quick() -> Plan {
    Plan {
        queued: Duration::from_millis(100),
        active: Duration::from_millis(100),
    }
}

struct Bench {
    standin: Fts3Standin,
    dir: tempfile::TempDir,
    adapter: Fts3Adapter,
    events: EventReader,
}

impl Bench {
    /// A stand-in and an adapter authenticating as `auth` (`"none"`: certificate-like, staging
    /// allowed; `"bearer"`: a token, no tape).
    async fn new(auth: &str) -> Bench {
        let token = (auth == "bearer").then_some("tok-1");
        let standin = Fts3Standin::start(VO, token, quick()).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "tok-1\n").unwrap();
        let adapter = Fts3Adapter::new(config(&standin, dir.path(), auth), "abc123").unwrap();
        Bench {
            standin,
            dir,
            adapter,
            events: EventReader::new(),
        }
    }

    /// A second adapter on the same stand-in: the broker after a restart.
    fn restarted(&self, auth: &str) -> Fts3Adapter {
        Fts3Adapter::new(config(&self.standin, self.dir.path(), auth), "abc123").unwrap()
    }

    async fn events_until(&mut self, done: impl Fn(&[MssEvent]) -> bool) -> Vec<MssEvent> {
        self.events.until(&self.adapter, done).await.to_vec()
    }

    async fn final_event(&mut self, key: &str) -> EventKind {
        self.events.final_event(&self.adapter, key).await
    }

    fn submissions(&self) -> Vec<Value> {
        self.standin
            .calls()
            .into_iter()
            .filter(|c| c.method == "POST" && c.path == "/jobs")
            .filter_map(|c| c.body)
            .collect()
    }
}

fn config(standin: &Fts3Standin, dir: &Path, auth: &str) -> Fts3Config {
    let tape = auth != "bearer";
    let raw: RawFts3Config = serde_json::from_value(json!({
        "url": standin.url,
        "vo": VO,
        "tape_endpoint": "davs://tape.example.org:2880",
        "read_destination": "davs://disk.example.org:2880/stage",
        "bring_online_secs": if tape { 3600 } else { 0 },
        "archive_timeout_secs": if tape { 7200 } else { 0 },
        "priority_bands": [{"from": 0, "priority": 1}, {"from": 20, "priority": 3},
                           {"from": 100, "priority": 5}],
        "poll_ms": 50,
        "auth": {"method": auth, "token_file": "token"},
    }))
    .unwrap();
    raw.validate(dir, Vec::new()).unwrap()
}

fn read(key: &str, path: &str, priority: i64) -> Transfer {
    Transfer {
        key: key.into(),
        attempt: 1,
        file: path.into(),
        size_bytes: 2_000_000,
        priority,
        volume: None,
        group: "analysis/higgs".into(),
        direction: Direction::Read,
        local_file: None,
        bfid: None,
        position: None,
        offset_bytes: None,
    }
}

fn reference(t: &Transfer, mss_id: Option<&str>) -> TransferRef {
    TransferRef {
        key: t.key.clone(),
        attempt: t.attempt,
        mss_id: mss_id.map(str::to_string),
        file: t.file.clone(),
        size_bytes: t.size_bytes,
    }
}

#[tokio::test]
async fn a_stage_is_one_fts3_job_without_activity_or_fts3_retries_at_a_banded_priority() {
    let mut b = Bench::new("none").await;
    let t = read("42", "/cms/run42/f1.root", 20);
    let s = b.adapter.submit(&t).await.unwrap();
    assert_eq!(s.mss_id, job_id(VO, "mssbroker-abc123-42-1"));
    assert!(!s.duplicate);
    let events = b
        .events_until(|e| e.iter().any(|e| e.kind != EventKind::Started))
        .await;
    let kinds: Vec<&EventKind> = events.iter().map(|e| &e.kind).collect();
    assert_eq!(
        kinds,
        [&EventKind::Started, &EventKind::Done { bytes: 2_000_000 }]
    );
    let sent = b.submissions();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0],
        json!({
            "files": [{
                "sources": ["davs://tape.example.org:2880/cms/run42/f1.root"],
                "destinations": ["davs://disk.example.org:2880/stage/cms/run42/f1.root"],
                "filesize": 2_000_000,
                "metadata": {"mssbroker_key": "42", "attempt": 1},
            }],
            "params": {
                "priority": 3,
                "id_generator": "deterministic",
                "sid": "mssbroker-abc123-42-1",
                "retry": -1,
                "job_metadata": {"mssbroker_key": "42", "attempt": 1},
                "bring_online": 3600,
                "copy_pin_lifetime": 86400,
            }
        })
    );
    let job = &b.standin.jobs()[0];
    assert_eq!((job.priority, job.staging), (3, true));
    assert_eq!(
        (job.files[0].activity.as_str(), job.retries),
        ("default", 0)
    );
    // Polls ask for the file fields by job id.
    let poll = b
        .standin
        .calls()
        .into_iter()
        .find(|c| c.method == "GET" && c.path.starts_with("/jobs/"))
        .unwrap();
    assert_eq!(poll.path, format!("/jobs/{}", s.mss_id));
    assert_eq!(
        poll.query.get("files").map(String::as_str),
        Some("file_id,file_index,file_state,filesize,user_filesize,reason,recoverable")
    );
}

#[tokio::test]
async fn data_taking_reaches_fts3_at_the_top_priority_and_a_write_archives_to_tape() {
    let mut b = Bench::new("none").await;
    let mut t = read("1", "/cms/raw/r1.dat", 100);
    t.group = "datataking".into();
    t.direction = Direction::Write;
    t.local_file = Some("https://daq.example.org/buffer/r1.dat".into());
    b.adapter.submit(&t).await.unwrap();
    b.final_event("1").await;
    let sent = &b.submissions()[0];
    assert_eq!(sent["params"]["priority"], 5);
    assert_eq!(sent["params"]["archive_timeout"], 7200);
    assert!(sent["params"].get("bring_online").is_none());
    assert_eq!(
        sent["files"][0]["sources"][0],
        "https://daq.example.org/buffer/r1.dat"
    );
    assert_eq!(
        sent["files"][0]["destinations"][0],
        "davs://tape.example.org:2880/cms/raw/r1.dat"
    );
}

#[tokio::test]
async fn a_submission_whose_answer_was_lost_is_recognised_not_queued_twice() {
    let b = Bench::new("none").await;
    let t = read("7", "/cms/hold/f7", 10);
    let first = b.adapter.submit(&t).await.unwrap();
    // The broker crashed before recording the answer; the restarted one submits again, and
    // finds the job among its jobs in flight (GET /jobs) without sending it.
    let again = b.restarted("none").submit(&t).await.unwrap();
    assert!(again.duplicate);
    assert_eq!(again.mss_id, first.mss_id);
    assert_eq!(b.standin.jobs().len(), 1);
    assert_eq!(
        b.submissions().len(),
        1,
        "recognised from the jobs in flight"
    );
    let listing = (b.standin.calls().into_iter())
        .find(|c| c.method == "GET" && c.path == "/jobs")
        .expect("the jobs in flight were read");
    assert_eq!(
        listing.query.get("user_dn").map(String::as_str),
        Some("/DC=org/CN=standin"),
        "only this credential's jobs"
    );
    // A job that has ended is not listed: sent again, FTS3 refuses its sid with 409, which
    // says it is this transfer's job.
    let t = read("8", "/cms/f8", 10);
    let first = b.adapter.submit(&t).await.unwrap();
    let id = first.mss_id.clone();
    let ended = || b.standin.job_state(&id).as_deref() == Some("FINISHED");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !ended() {
        assert!(std::time::Instant::now() < deadline, "the job never ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let again = b.restarted("none").submit(&t).await.unwrap();
    assert_eq!((again.duplicate, again.mss_id), (true, first.mss_id));
    assert_eq!(b.standin.jobs().len(), 2);
    assert_eq!(b.submissions().len(), 3, "FTS3 refused the resend with 409");
}

#[tokio::test]
async fn re_prioritisation_changes_the_fts3_priority_only_across_bands() {
    let b = Bench::new("none").await;
    let t = read("3", "/cms/hold/f3", 10);
    let s = b.adapter.submit(&t).await.unwrap();
    let r = reference(&t, Some(&s.mss_id));
    let modifies = || {
        b.standin
            .calls()
            .into_iter()
            .filter(|c| c.method == "POST" && c.path != "/jobs")
            .count()
    };
    // 10 -> 15 is the same band (1): nothing to send.
    b.adapter.reprioritize(&r, 15).await.unwrap();
    assert_eq!(modifies(), 0);
    // 10 -> 25 is band 3.
    b.adapter.reprioritize(&r, 25).await.unwrap();
    assert_eq!(modifies(), 1);
    assert_eq!(b.standin.jobs()[0].priority, 3);
    let call = b
        .standin
        .calls()
        .into_iter()
        .find(|c| c.method == "POST" && c.path != "/jobs")
        .unwrap();
    assert_eq!(call.path, format!("/jobs/{}", s.mss_id));
    assert_eq!(call.body, Some(json!({"params": {"priority": 3}})));
}

#[tokio::test]
async fn cancelling_deletes_the_job_and_the_poll_reports_it() {
    let mut b = Bench::new("none").await;
    let t = read("5", "/cms/hold/f5", 10);
    let s = b.adapter.submit(&t).await.unwrap();
    b.adapter
        .cancel(&reference(&t, Some(&s.mss_id)))
        .await
        .unwrap();
    assert_eq!(b.final_event("5").await, EventKind::Cancelled);
    assert!(b
        .standin
        .calls()
        .iter()
        .any(|c| c.method == "DELETE" && c.path == format!("/jobs/{}", s.mss_id)));
    // A finished job cannot be cancelled.
    assert!(matches!(
        b.adapter.cancel(&reference(&t, Some(&s.mss_id))).await,
        Err(MssError::Rejected(m)) if m.contains("CANCELED")
    ));
}

#[tokio::test]
async fn failures_are_retryable_unless_fts3_or_the_reason_of_a_staging_failure_says_not() {
    let mut b = Bench::new("none").await;
    b.adapter
        .submit(&read("1", "/cms/fail/a", 10))
        .await
        .unwrap();
    b.adapter
        .submit(&read("2", "/cms/fatal/b", 10))
        .await
        .unwrap();
    match b.final_event("1").await {
        EventKind::Failed { reason, retryable } => {
            assert!(retryable);
            assert_eq!(
                reason,
                "fts3 job failed: TRANSFER [110] Connection timed out"
            );
        }
        other => panic!("{other:?}"),
    }
    // A staging failure: FTS3 leaves `recoverable` null, the reason says the file is missing.
    assert!(matches!(
        b.final_event("2").await,
        EventKind::Failed {
            retryable: false,
            ..
        }
    ));
    // `retry: -1`: FTS3 ran the failing transfer once (0 would be the server's default).
    let retries: Vec<i64> = b.standin.jobs().iter().map(|j| j.retries).collect();
    assert_eq!(retries, [0, 0]);
}

#[tokio::test]
async fn a_lost_answer_is_recovered_under_the_vo_fts3_derives_from_the_credential() {
    let b = Bench::new("none").await;
    // The proxy's VOMS FQAN makes FTS3's vos[0] "cms/uscms", not the configured "cms".
    b.standin
        .set_fqans(&["/cms/uscms/Role=production/Capability=NULL"]);
    let t = read("7", "/cms/hold/f7", 10);
    let first = b.restarted("none").submit(&t).await.unwrap();
    let jobs = b.standin.jobs();
    assert_eq!(first.mss_id, jobs[0].job_id);
    assert_eq!(
        jobs[0].job_id,
        job_id("cms/uscms", "mssbroker-abc123-7-1"),
        "FTS3's id comes from vos[0]"
    );
    // The answer was lost: a restarted broker submits again, FTS3 answers 409, and the
    // adapter follows the job that exists.
    let again = b.restarted("none").submit(&t).await.unwrap();
    assert!(again.duplicate);
    assert_eq!(again.mss_id, jobs[0].job_id);
    assert_eq!(b.standin.jobs().len(), 1);
}

/// FTS3 with `CheckDuplicates` for the VO: a file holds its destination (`dest_surl_uuid`)
/// until it ends. A second read of one file to one destination (two reads the broker did not
/// coalesce: a priority-class read beside a fair-share one, or `coalesce = "off"`) is answered
/// 409 "The submission is duplicated" while the first is in flight: not a refusal, since the
/// same submission is taken once the first has ended.
#[tokio::test]
async fn a_read_to_a_destination_a_transfer_in_flight_holds_waits_for_it_then_goes() {
    let mut b = Bench::new("none").await;
    b.standin.set_check_duplicates(&[VO]);
    let first = read("1", "/cms/hold/f1", 10);
    let second = read("2", "/cms/hold/f1", 100);
    let s1 = b.adapter.submit(&first).await.unwrap();
    for n in 0..2 {
        match b.adapter.submit(&second).await {
            Err(e @ MssError::Deferred(_)) => {
                assert!(e.is_retryable());
                let m = e.to_string();
                assert!(m.contains("The submission is duplicated"), "{m}");
                assert!(m.contains("same destination"), "{m}");
                // The second time the adapter answers from its hold on the destination.
                assert_eq!(m.contains("not sent again for"), n == 1, "{m}");
            }
            other => panic!("a clash on the destination is not final: {other:?}"),
        }
    }
    assert_eq!(b.standin.jobs().len(), 1, "FTS3 made nothing of the clash");
    b.standin.release_held(&s1.mss_id);
    assert_eq!(
        b.final_event("1").await,
        EventKind::Done { bytes: 2_000_000 }
    );
    // The first has ended, so FTS3 has cleared its destination, and its end freed the
    // adapter's hold at once: the same submission is taken.
    let s2 = b.adapter.submit(&second).await.unwrap();
    assert!(!s2.duplicate);
    assert_eq!(s2.mss_id, job_id(VO, "mssbroker-abc123-2-1"));
    b.standin.release_held(&s2.mss_id);
    assert_eq!(
        b.final_event("2").await,
        EventKind::Done { bytes: 2_000_000 }
    );
    // The first, one refused clash (the second try was held back without a POST: FTS3 would
    // insert and roll back each one while the first is staged), the second taken. No job
    // lookups in between (nothing was made, so nothing is uncertain).
    let posts = (b.standin.calls().iter())
        .filter(|c| c.method == "POST" && c.path == "/jobs")
        .count();
    assert_eq!(posts, 3);
    let lookups = (b.standin.calls().iter())
        .filter(|c| c.method == "GET" && c.path == format!("/jobs/{}", s2.mss_id))
        .filter(|c| {
            c.query
                .get("files")
                .is_some_and(|f| f.contains("file_metadata"))
        })
        .count();
    assert_eq!(lookups, 0);
}

/// In a volume's job, only the file whose destination another transfer in flight holds
/// waits; its job-mates go in one job without it. Two transfers of one batch to one
/// destination never share a job (FTS3 would refuse the whole job): the second goes after, in
/// its own, and waits for the first.
#[tokio::test]
async fn a_batch_file_whose_destination_is_held_waits_alone_while_its_mates_go_together() {
    let b = Bench::new("none").await;
    b.standin.set_check_duplicates(&["*"]);
    let held = b
        .adapter
        .submit(&on("VA", "1", "/cms/hold/a"))
        .await
        .unwrap();
    let batch = [
        on("VA", "2", "/cms/hold/a"),
        on("VA", "3", "/cms/hold/b"),
        on("VA", "4", "/cms/hold/c"),
        on("VA", "5", "/cms/hold/c"),
    ];
    let answers = b.adapter.submit_batch(&batch).await;
    for i in [0, 3] {
        assert!(
            matches!(&answers[i], Err(MssError::Deferred(m)) if m.contains("same destination")),
            "{i}: {answers:?}"
        );
    }
    let jobs = b.standin.jobs();
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    let mates = &jobs[1];
    assert_eq!(mates.sid.as_deref(), Some("mssbroker-abc123-3-1"));
    let dests: Vec<&str> = mates.files.iter().map(|f| f.destination.as_str()).collect();
    assert_eq!(
        dests,
        [
            "davs://disk.example.org:2880/stage/cms/hold/b",
            "davs://disk.example.org:2880/stage/cms/hold/c"
        ]
    );
    let ids: Vec<String> = [&answers[1], &answers[2]]
        .iter()
        .map(|a| a.as_ref().map(|s| s.mss_id.clone()).unwrap_or_default())
        .collect();
    assert_eq!(ids, [0, 1].map(|i| format!("{}:{i}", mates.job_id)));
    // Once the transfers holding them end, the two that waited are taken.
    for job in [&held.mss_id, &mates.job_id] {
        b.standin.release_held(job);
    }
    let mut events = EventReader::new();
    for key in ["1", "3", "4"] {
        assert_eq!(
            events.final_event(&b.adapter, key).await,
            EventKind::Done { bytes: 2_000_000 }
        );
    }
    let again = b
        .adapter
        .submit_batch(&[batch[0].clone(), batch[3].clone()])
        .await;
    assert!(again.iter().all(|a| a.is_ok()), "{again:?}");
}

/// FTS3 takes a bearer token's VOs from its `wlcg.groups` when neither its gridmap nor its
/// provider's configuration names one, so a token renewed with another first group moves new
/// jobs into another VO's namespace of ids (`uuid5(uuid5(BASE_ID, vos[0]), sid)`). The
/// adapter reads the token at every call: a job whose answer was lost is found under the VO it
/// was made in, before or after the renewal, and never queued twice; so is one listed after a
/// restart.
#[tokio::test]
async fn a_token_renewed_into_another_vo_finds_its_jobs_under_either() {
    let standin = Fts3Standin::start(VO, None, quick()).await.unwrap();
    standin.set_token_groups("tok-1", &["/cms"]);
    standin.set_token_groups("tok-2", &["/cms/uscms", "/cms"]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "tok-1\n").unwrap();
    let adapter = Fts3Adapter::new(config(&standin, dir.path(), "bearer"), "abc123").unwrap();
    let before = read("1", "/cms/hold/f1", 10);
    let after = read("2", "/cms/hold/f2", 10);
    standin.lose_next_answers(1);
    let lost = adapter.submit(&before).await;
    assert!(matches!(lost, Err(MssError::Unknown(_))), "{lost:?}");
    std::fs::write(dir.path().join("token"), "tok-2\n").unwrap();
    standin.lose_next_answers(1);
    let lost = adapter.submit(&after).await;
    assert!(matches!(lost, Err(MssError::Unknown(_))), "{lost:?}");
    let jobs = standin.jobs();
    assert_eq!(jobs[0].job_id, job_id("cms", "mssbroker-abc123-1-1"));
    assert_eq!(jobs[1].job_id, job_id("cms/uscms", "mssbroker-abc123-2-1"));
    for (t, job) in [(&after, &jobs[1]), (&before, &jobs[0])] {
        let again = adapter.submit(t).await;
        assert!(
            matches!(&again, Ok(s) if s.duplicate && s.mss_id == job.job_id),
            "{}: {again:?}",
            t.key
        );
    }
    // A restarted broker, under the renewed token: the job made under the earlier VO is its
    // own (its `vo_name`), so sending it again queues nothing.
    let restarted = Fts3Adapter::new(config(&standin, dir.path(), "bearer"), "abc123").unwrap();
    let again = restarted.submit(&before).await;
    assert!(
        matches!(&again, Ok(s) if s.duplicate && s.mss_id == jobs[0].job_id),
        "{again:?}"
    );
    assert_eq!(standin.jobs().len(), 2, "nothing queued twice");
}

#[tokio::test]
async fn a_delegation_about_to_expire_is_419_retried_until_renewed() {
    let b = Bench::new("none").await;
    for state in [Delegation::Expiring, Delegation::Missing] {
        b.standin.set_delegation(state);
        match b.adapter.submit(&read("9", "/cms/hold/f9", 10)).await {
            Err(MssError::Unavailable(m)) => {
                assert!(m.starts_with("419"), "{m}");
                assert!(m.contains("delegation") || m.contains("delegated"), "{m}");
            }
            other => panic!("{other:?}"),
        }
    }
    b.standin.set_delegation(Delegation::Valid);
    let s = b
        .adapter
        .submit(&read("9", "/cms/hold/f9", 10))
        .await
        .unwrap();
    assert_eq!(s.mss_id, b.standin.jobs()[0].job_id);
}

#[tokio::test]
async fn after_a_restart_a_job_is_found_by_its_id_and_followed_again() {
    let b = Bench::new("none").await;
    // Held at FTS3 until the new adapter has found it (a `/hold/` path), so it is in flight
    // when found whatever the machine's load: a job already ended is settled by its status,
    // with no event to follow.
    let t = read("9", "/cms/hold/f9", 10);
    let s = b.adapter.submit(&t).await.unwrap();
    drop(b.adapter);
    let standin = b.standin;
    let adapter = Fts3Adapter::new(config(&standin, b.dir.path(), "none"), "abc123").unwrap();
    let st = adapter
        .status(&reference(&t, Some(&s.mss_id)))
        .await
        .unwrap()
        .unwrap();
    assert!(!matches!(st.progress, Progress::Finished(_)), "{st:?}");
    standin.release_held(&s.mss_id);
    // Followed from now on: its end arrives as an event of the new epoch.
    assert_eq!(
        EventReader::new().final_event(&adapter, "9").await,
        EventKind::Done { bytes: 2_000_000 }
    );
    // A job FTS3 no longer has is unknown: the broker submits it again.
    standin.forget_jobs();
    assert_eq!(
        adapter
            .status(&reference(&t, Some(&s.mss_id)))
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn the_bearer_token_is_read_at_every_call_and_an_outage_is_unavailable() {
    let b = Bench::new("bearer").await;
    b.adapter
        .submit(&read("1", "/cms/hold/a", 10))
        .await
        .unwrap();
    let auth: Vec<(String, Option<String>)> = b
        .standin
        .calls()
        .into_iter()
        .map(|c| (c.path, c.authorization))
        .collect();
    let tok1 = Some("Bearer tok-1".to_string());
    assert_eq!(
        auth,
        [
            ("/whoami".to_string(), tok1.clone()),
            // The jobs in flight, read once (GET), then the submission (POST).
            ("/jobs".into(), tok1.clone()),
            ("/jobs".into(), tok1)
        ]
    );
    // Rotated by an external refresher: the stand-in still wants tok-1, so a call with the
    // new token is refused, which proves the file was read again. A 401 is retryable: the
    // operator renews the credentials.
    std::fs::write(b.dir.path().join("token"), "tok-2\n").unwrap();
    match b.adapter.submit(&read("2", "/cms/hold/b", 10)).await {
        Err(MssError::Unavailable(m)) => assert!(m.starts_with("401"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        b.standin.calls().last().unwrap().authorization.as_deref(),
        Some("Bearer tok-2")
    );
    b.standin.set_down(true);
    assert!(matches!(
        b.adapter.submit(&read("3", "/cms/hold/c", 10)).await,
        Err(MssError::Unavailable(_))
    ));
}

/// A read of `path` on `volume`.
fn on(volume: &str, key: &str, path: &str) -> Transfer {
    Transfer {
        volume: Some(volume.into()),
        ..read(key, path, 10)
    }
}

#[tokio::test]
async fn a_volume_batch_is_one_fts3_job_in_order_and_each_file_ends_on_its_own() {
    let mut b = Bench::new("none").await;
    // FTS3 lists a job's files in its own order: the adapter must go by file_index.
    b.standin.set_files_reversed(true);
    let batch = [
        on("VA", "1", "/cms/a/fatal/f1"),
        read("2", "/cms/x/f2", 10),
        on("VA", "3", "/cms/a/f3"),
        on("VB", "4", "/cms/b/f4"),
        on("VA", "5", "/cms/a/f5"),
    ];
    let answers: Vec<_> = b.adapter.submit_batch(&batch).await;
    let ids: Vec<String> = answers.into_iter().map(|a| a.unwrap().mss_id).collect();
    let jobs = b.standin.jobs();
    assert_eq!(
        jobs.len(),
        3,
        "VA's three reads in one job, the others alone"
    );
    let va = &jobs[0];
    assert_eq!(
        va.sid.as_deref(),
        Some("mssbroker-abc123-1-1"),
        "the first transfer's sid"
    );
    let paths: Vec<&str> = va.files.iter().map(|f| f.source.as_str()).collect();
    assert_eq!(
        paths,
        [
            "davs://tape.example.org:2880/cms/a/fatal/f1",
            "davs://tape.example.org:2880/cms/a/f3",
            "davs://tape.example.org:2880/cms/a/f5"
        ]
    );
    assert!(va.staging, "one bring-online job for the volume");
    assert_eq!(
        [&ids[0], &ids[2], &ids[4]],
        [0, 1, 2].map(|i| format!("{}:{i}", va.job_id)).each_ref()
    );
    assert_eq!(
        ids[1], jobs[1].job_id,
        "a job of one file is named by its id alone"
    );
    assert_eq!(ids[3], jobs[2].job_id);
    // Each file reports on its own: the fatal one fails, its job-mates finish.
    for key in ["3", "5", "2", "4"] {
        assert_eq!(
            b.final_event(key).await,
            EventKind::Done { bytes: 2_000_000 },
            "{key}"
        );
    }
    assert!(matches!(
        b.final_event("1").await,
        EventKind::Failed {
            retryable: false,
            ..
        }
    ));
    assert_eq!(
        b.standin.job_state(&va.job_id).as_deref(),
        Some("FINISHEDDIRTY")
    );
    // Its status, asked by the MSS id the broker recorded, is the file's.
    let status = b
        .restarted("none")
        .status(&reference(&batch[0], Some(&ids[0])))
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(
        status.progress,
        Progress::Finished(EventKind::Failed {
            retryable: false,
            ..
        })
    ));
    let last = b.adapter.status(&reference(&batch[4], Some(&ids[4]))).await;
    assert_eq!(
        last.unwrap().unwrap().progress,
        Progress::Finished(EventKind::Done { bytes: 2_000_000 })
    );
}

#[tokio::test]
async fn one_file_of_a_job_is_cancelled_alone_unless_fts3_made_it_a_session_reuse_job() {
    let mut b = Bench::new("none").await;
    let batch: Vec<Transfer> = (1..=3)
        .map(|k| on("VA", &k.to_string(), &format!("/cms/hold/f{k}")))
        .collect();
    let ids: Vec<String> = (b.adapter.submit_batch(&batch).await)
        .into_iter()
        .map(|a| a.unwrap().mss_id)
        .collect();
    b.adapter
        .cancel(&reference(&batch[1], Some(&ids[1])))
        .await
        .unwrap();
    assert_eq!(b.final_event("2").await, EventKind::Cancelled);
    let job = &b.standin.jobs()[0];
    let deleted = format!("/jobs/{}/files/{}", job.job_id, job.files[1].file_id);
    assert!(b
        .standin
        .calls()
        .iter()
        .any(|c| c.method == "DELETE" && c.path == deleted));
    assert_eq!(b.standin.job_state(&job.job_id).as_deref(), Some("STAGING"));
    // Its job-mates are untouched at FTS3.
    let states = b.standin.file_states(&job.job_id);
    assert_eq!(states, ["STAGING", "CANCELED", "STAGING"]);
    assert!(matches!(
        b.adapter.cancel(&reference(&batch[1], Some(&ids[1]))).await,
        Err(MssError::Rejected(m)) if m.contains("CANCELED")
    ));
    // Five small writes between one pair of endpoints: FTS3's AutoSessionReuse makes them one
    // session, whose files it cancels only all together.
    b.standin.set_auto_session_reuse(true);
    let writes: Vec<Transfer> = (10..15)
        .map(|k| Transfer {
            direction: Direction::Write,
            local_file: Some(format!("davs://disk.example.org:2880/hold/w{k}")),
            ..on("VW", &k.to_string(), &format!("/cms/w{k}"))
        })
        .collect();
    let w: Vec<String> = (b.adapter.submit_batch(&writes).await)
        .into_iter()
        .map(|a| a.unwrap().mss_id)
        .collect();
    assert_eq!(b.standin.jobs()[1].job_type, "Y");
    match b.adapter.cancel(&reference(&writes[0], Some(&w[0]))).await {
        Err(MssError::Rejected(m)) => assert!(m.contains("cancelled at once"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_batch_whose_answer_was_lost_is_never_queued_twice_whatever_company_it_comes_in() {
    let b = Bench::new("none").await;
    // A second broker on the same ledger (the one after a restart) that read its jobs in
    // flight before the batch below was sent: it must learn of the batch's job from FTS3's 409.
    let restarted = b.restarted("none");
    let other = restarted
        .submit(&read("99", "/cms/hold/x", 10))
        .await
        .unwrap();
    let batch: Vec<Transfer> = (1..=3)
        .map(|k| on("VA", &k.to_string(), &format!("/cms/hold/f{k}")))
        .collect();
    b.standin.lose_next_answers(1);
    for a in b.adapter.submit_batch(&batch).await {
        assert!(a.unwrap_err().is_retryable());
    }
    let job_id = b.standin.jobs()[1].job_id.clone();
    assert_ne!(job_id, other.mss_id);
    // The first was cancelled meanwhile: the others come again without it, under another
    // sid, and are found in the job FTS3 created.
    let again = b.adapter.submit_batch(&batch[1..]).await;
    let again: Vec<_> = again.into_iter().map(Result::unwrap).collect();
    assert!(again.iter().all(|s| s.duplicate));
    assert_eq!(again[0].mss_id, format!("{job_id}:1"));
    assert_eq!(again[1].mss_id, format!("{job_id}:2"));
    // After a restart the same batch again: FTS3's 409 on the first's sid, and the job's files
    // say which transfers it holds.
    let third: Vec<_> = (restarted.submit_batch(&batch).await)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert!(third.iter().all(|s| s.duplicate));
    let want: Vec<String> = (0..3).map(|i| format!("{job_id}:{i}")).collect();
    assert_eq!(
        third.iter().map(|s| s.mss_id.clone()).collect::<Vec<_>>(),
        want
    );
    // x, the batch, and the batch again refused with 409 (the others were found unsent).
    assert_eq!(b.submissions().len(), 3);
    // After another restart, without the first again: its sid is gone with it, but the jobs
    // in flight the restarted adapter reads at its first submission hold the others.
    let fourth: Vec<_> = (b.restarted("none").submit_batch(&batch[1..]).await)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert!(fourth.iter().all(|s| s.duplicate));
    let got: Vec<String> = fourth.iter().map(|s| s.mss_id.clone()).collect();
    assert_eq!(got, want[1..]);
    assert_eq!(b.submissions().len(), 3, "found among the jobs in flight");
    assert_eq!(b.standin.jobs().len(), 2, "every file queued once");
}

/// A listing of the jobs in flight that fails is tried again a minute later, not at every
/// submission: each submission goes ahead meanwhile.
#[tokio::test]
async fn a_failed_listing_of_the_jobs_in_flight_is_not_repeated_at_every_submission() {
    let b = Bench::new("none").await;
    b.standin.set_listing_fails(true);
    let adapter = b.restarted("none");
    for k in 1..=3 {
        let t = read(&k.to_string(), &format!("/cms/hold/l{k}"), 10);
        assert!(!adapter.submit(&t).await.unwrap().duplicate);
    }
    let listings = (b.standin.calls().iter())
        .filter(|c| c.method == "GET" && c.path == "/jobs")
        .count();
    assert_eq!(listings, 1);
    assert_eq!(b.standin.jobs().len(), 3);
}

/// A submission answered by a proxy's page (FTS3 may have taken it) whose job FTS3 does not
/// show yet is not sent again at once: FTS3 may still be creating it.
#[tokio::test]
async fn a_lost_answer_whose_job_is_not_found_yet_is_not_sent_again_at_once() {
    let b = Bench::new("none").await;
    let batch: Vec<Transfer> = (1..=2)
        .map(|k| on("VA", &k.to_string(), &format!("/cms/hold/g{k}")))
        .collect();
    b.standin.lose_next_answers(1);
    for a in b.adapter.submit_batch(&batch).await {
        assert!(matches!(a, Err(MssError::Unknown(_))), "{a:?}");
    }
    // FTS3 does not show the job (yet).
    b.standin.forget_jobs();
    for a in b.adapter.submit_batch(&batch).await {
        match a {
            Err(MssError::Unavailable(m)) => assert!(m.contains("settle"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(b.submissions().len(), 1, "not sent again");
}

/// A volume batch (one job under its first transfer's sid) whose answer was lost; the broker
/// then takes a cancelled job-mate as at the MSS with no MSS id (`cancel_maybe_at_mss`) and
/// never sends it again: its status and cancel go by key alone. FTS3 holds it in the batch's
/// job, so the status must not say "unknown" (the broker would end it cancelled and refunded
/// while FTS3 copies the file) and the cancel must reach its file.
#[tokio::test]
async fn a_job_mate_whose_answer_was_lost_is_found_by_key_alone() {
    let b = Bench::new("none").await;
    let batch: Vec<Transfer> = (1..=2)
        .map(|k| on("VA", &k.to_string(), &format!("/cms/hold/m{k}")))
        .collect();
    b.standin.lose_next_answers(1);
    for a in b.adapter.submit_batch(&batch).await {
        assert!(matches!(a, Err(MssError::Unknown(_))), "{a:?}");
    }
    let job = b.standin.jobs()[0].job_id.clone();
    assert_eq!(b.standin.file_states(&job), ["STAGING", "STAGING"]);
    let status = b.adapter.status(&reference(&batch[1], None)).await;
    assert!(
        matches!(&status, Ok(Some(s)) if !matches!(s.progress, Progress::Finished(_))),
        "fts3 holds it in job {job}: {status:?}"
    );
    let cancel = b.adapter.cancel(&reference(&batch[1], None)).await;
    assert!(cancel.is_ok(), "{cancel:?}");
    assert_eq!(b.standin.file_states(&job), ["STAGING", "CANCELED"]);
    // Asked again (the lost answer's record is dropped once the status is known): still found
    // there, now cancelled.
    let again = b.adapter.status(&reference(&batch[1], None)).await;
    assert!(
        matches!(&again, Ok(Some(s)) if s.progress == Progress::Finished(EventKind::Cancelled)),
        "{again:?}"
    );
}

/// FTS3 refuses a whole submission for one file it cannot take (here a path-less URL: a
/// `file` without a leading `/` joined to the tape endpoint). In a volume's job only that file
/// fails; its job-mates are sent again, one by one, and finish.
#[tokio::test]
async fn one_file_fts3_refuses_fails_alone_not_its_whole_batch() {
    let mut b = Bench::new("none").await;
    let alone = b.adapter.submit(&on("VB", "9", "f9.root")).await;
    assert!(
        matches!(&alone, Err(MssError::Rejected(m)) if m.contains("Missing path")),
        "{alone:?}"
    );
    let batch = [
        on("VA", "1", "/cms/a/f1"),
        on("VA", "2", "f2.root"),
        on("VA", "3", "/cms/a/f3"),
    ];
    let answers = b.adapter.submit_batch(&batch).await;
    assert!(
        matches!(&answers[1], Err(MssError::Rejected(_))),
        "{answers:?}"
    );
    assert!(
        answers[0].is_ok() && answers[2].is_ok(),
        "the good job-mates fail with the bad one: {answers:?}"
    );
    for key in ["1", "3"] {
        assert_eq!(
            b.final_event(key).await,
            EventKind::Done { bytes: 2_000_000 }
        );
    }
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
    let b = Bench::new("none").await;
    let mut cfg = config(&b.standin, b.dir.path(), "none");
    cfg.max_outstanding = Some(2);
    let stated = cfg.capabilities();
    let adapter = Fts3Adapter::new(cfg, "abc123").unwrap();
    assert_eq!((adapter.name(), adapter.capabilities()), ("fts3", stated));
    assert_eq!(adapter.room(), Some(2));
    adapter
        .submit(&read("r1", "/cms/room/f1", 10))
        .await
        .unwrap();
    assert_eq!(adapter.room(), Some(1));
    adapter
        .submit(&read("r2", "/cms/room/f2", 10))
        .await
        .unwrap();
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

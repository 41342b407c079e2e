//! A write in flight across the end of a term: committed or not, it is not acknowledged.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};

use crate::leadership::Role;
use crate::startup::Application;

/// Wait until `done` holds (panics after 20 s).
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A submission that took the office before the term ended, and reaches the ledger after it,
/// is answered 503 saying the outcome is unknown, never 202: from the flip on nothing is
/// acknowledged. (It waits at the reload gate, which the test holds, while the role flips.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_took_the_office_before_the_term_ended_is_not_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = crate::tests::TestConfig::new().settings();
    settings.database.path = dir.path().join("term.db");
    settings.server.listen = "127.0.0.1:0".parse().unwrap();
    let (role, watched) = watch::channel(Role::Leader { epoch: 3 });
    let clock = Arc::new(crate::clock::SystemClock);
    let app = Application::build_with_role(&settings, clock, watched)
        .await
        .unwrap();
    let (live, slot) = (app.state.live.clone(), app.state.office.clone());
    let base = format!("http://{}", app.local_addr());
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until_stopped(async {
        let _ = stopped.await;
    }));
    // The first term is published when the server task runs, before it serves: wait for it.
    until("the first term published", || slot.current().is_ok()).await;
    let office = slot.current().expect("published");
    let holders = Arc::strong_count(&office);
    let closed = live.swapping().await;
    let body = serde_json::json!({
        "client_request_id": "flip-1", "station": "station-a", "user": "alice",
        "file": "/pnfs/test/flip-1", "size_bytes": 1000, "access_mode": "reprocessing",
        "physics_group": "higgs"
    });
    let sent = tokio::spawn(
        reqwest::Client::new()
            .post(format!("{base}/v1/requests"))
            .json(&body)
            .send(),
    );
    // The handler holds the office (one more holder) and waits at the gate.
    until("the handler took the office", || {
        Arc::strong_count(&office) > holders
    })
    .await;
    role.send(Role::Lost { epoch: 3 }).unwrap();
    until("the office withdrawn", || slot.current().is_err()).await;
    assert!(!office.holds());
    drop(office);
    drop(closed);
    let resp = sent.await.unwrap().unwrap();
    let status = resp.status().as_u16();
    let retry = resp.headers().get("retry-after").cloned();
    let text = resp.text().await.unwrap();
    assert_eq!(status, 503, "{text}");
    assert!(retry.is_some(), "no Retry-After");
    assert!(text.contains("stopped leading"), "{text}");
    let _ = stop.send(());
    let _ = server.await;
}

/// A term that cannot open (here its ledger's path is a directory) leaves the broker a standby
/// and resigns that epoch, so a contended leadership passes to another broker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_term_that_cannot_open_resigns_its_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = crate::tests::TestConfig::new().settings();
    settings.database.path = dir.path().join("not-a-file");
    std::fs::create_dir(&settings.database.path).unwrap();
    settings.server.listen = "127.0.0.1:0".parse().unwrap();
    let (role, watched) = watch::channel(Role::Standby);
    let (resigner, mut resigned) = crate::leadership::Resigner::channel();
    let leadership = crate::startup::Leadership {
        role: watched,
        resigner: Some(resigner),
    };
    let clock = Arc::new(crate::clock::SystemClock);
    let app = Application::build_with_role(&settings, clock, leadership)
        .await
        .unwrap();
    let slot = app.state.office.clone();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until_stopped(async {
        let _ = stopped.await;
    }));
    role.send(Role::Leader { epoch: 5 }).unwrap();
    let epoch = tokio::time::timeout(Duration::from_secs(20), resigned.recv())
        .await
        .expect("a resignation within 20 s");
    assert_eq!(epoch, Some(5));
    assert!(slot.current().is_err(), "an office was published");
    let _ = stop.send(());
    let _ = server.await;
}

/// A term whose leadership is lost while it opens (the role watch no longer leads at its
/// epoch once the ledger has loaded) does not take office: no office is published, no loop
/// starts, and its writer is joined (a term opened next on the same file opens and leads).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_term_whose_leadership_is_lost_while_it_opens_does_not_take_office() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = crate::tests::TestConfig::new().settings();
    settings.database.path = dir.path().join("term.db");
    settings.server.listen = "127.0.0.1:0".parse().unwrap();
    let (_role, watched) = watch::channel(Role::Standby);
    let clock = Arc::new(crate::clock::SystemClock);
    let app = Application::build_with_role(&settings, clock, watched)
        .await
        .unwrap();
    let slot = app.state.office.clone();

    let (_lost, now) = watch::channel(Role::Lost { epoch: 5 });
    let term = super::follow(&app.terms, &slot, Role::Leader { epoch: 5 }, None, &now).await;
    assert!(term.is_none(), "a term started at a lost epoch");
    assert!(slot.current().is_err(), "an office was published");

    let (_led, now) = watch::channel(Role::Leader { epoch: 6 });
    let term = super::follow(&app.terms, &slot, Role::Leader { epoch: 6 }, None, &now)
        .await
        .expect("the next term opens on the same file: the abandoned writer was joined");
    assert_eq!(slot.current().expect("published").epoch, 6);
    term.end(&app.terms, &slot).await;
}

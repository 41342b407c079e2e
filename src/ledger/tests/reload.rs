//! `Ledger::reload` and `cancel_group` on each backend (a real SQLite file, a PostgreSQL
//! database; the reload's snapshot is each one's own read transaction): the writer's memory is
//! rebuilt by path for a reordered tree (a queued request released after the reload is charged
//! to its own group), and a policy that leaves out a group with unfinished requests is refused
//! at reload and at open until the group's requests are cancelled.

use std::sync::Arc;
use std::time::Duration;

use mss_adapters::Direction;

use super::super::*;
use crate::clock::ManualClock;
use crate::config::Settings;
use crate::domain::RequestState;
use crate::domain::RetrySettings;
use crate::ledger::db::tests::testdb::{Backend, TestDb};
use crate::ledger::db::{params, Db};

const SHARES: &str = "mc = 3\nan = 1\n";

fn config(shares: &str) -> Arc<PolicySettings> {
    let text = format!(
        "[policy]\np_front = 20\np_back = 10\n[release]\nmode = \"held\"\nlimit = 1\n\
         [shares]\n{shares}[mss]\nadapter = \"http\"\nurl = \"http://127.0.0.1:1\"\n"
    );
    Settings::parse(&text, "test").unwrap().policy
}

fn open(
    db: &TestDb,
    policy: Arc<PolicySettings>,
) -> Result<(Ledger, std::thread::JoinHandle<()>), LedgerError> {
    let options = LedgerOptions {
        path: db.path().map(|p| p.to_path_buf()).unwrap_or_default(),
        commit_batch_max: 64,
        url: db.url().cloned(),
        epoch: 1,
        retry: RetrySettings {
            max_attempts: 2,
            base: Duration::from_millis(100),
            max: Duration::from_millis(1000),
        },
        metrics: Arc::new(NoObserver),
        read_outputs: None,
    };
    let open = || {
        let clock = Arc::new(ManualClock::new(1_000_000));
        Ledger::open(&options, policy.clone(), clock)
    };
    match options.url {
        // The PostgreSQL client blocks on a runtime of its own: not on an async thread.
        Some(_) => tokio::task::block_in_place(open),
        None => super::lock_released(open),
    }
}

/// A new database on `backend`; on PostgreSQL with a broker in office at the ledger's epoch.
fn new_db(backend: Backend) -> TestDb {
    if backend == Backend::Sqlite {
        return TestDb::new(backend);
    }
    let db = tokio::task::block_in_place(|| TestDb::new(backend));
    super::take_office(&db, 1);
    db
}

/// A request classified under `policy`.
fn item(policy: &PolicySettings, crid: &str, mode: &str, group: &str) -> NewRequest {
    let fields = crate::policy::RequestFields {
        access_mode: mode,
        physics_group: group,
        station: "st1",
        user: "u",
        file: "/f",
    };
    NewRequest {
        input: RequestInput {
            station: "st1".into(),
            client_request_id: crid.into(),
            user: "u".into(),
            file: format!("/pnfs/{crid}"),
            size_bytes: 1_000,
            access_mode: mode.into(),
            physics_group: group.into(),
            volume: None,
            direction: Direction::Read,
            extras: Default::default(),
        },
        group: crate::policy::classify(policy, &fields).unwrap(),
        benefit: crate::policy::benefit(policy, mode, 1_000),
    }
}

async fn usage_of(ledger: &Ledger, path: &str) -> u128 {
    let rows = ledger.groups().await.unwrap();
    rows.iter().find(|r| r.path == path).map_or(0, |r| r.usage)
}

async fn a_reordered_tree_keeps_every_figure_with_its_path(backend: Backend) {
    let db = new_db(backend);
    let before = config(SHARES);
    let (ledger, writer) = open(&db, before.clone()).unwrap();
    // One slot: mc-1 is released within its own commit (its answer still says queued: read it
    // back), top-1 waits in the held queue.
    let first = ledger
        .accept(vec![item(&before, "mc-1", "mc", "x")])
        .await
        .unwrap();
    let queued = (ledger.accept(vec![item(&before, "top-1", "an", "x")]).await).unwrap();
    let state = |r: Option<RequestRecord>| r.unwrap().state;
    assert_eq!(
        state(ledger.request(first[0].id).await.unwrap()),
        RequestState::Accepted
    );
    assert_eq!(
        state(ledger.request(queued[0].id).await.unwrap()),
        RequestState::Queued
    );
    assert_eq!(usage_of(&ledger, "mc").await, 1_000);

    // Reordered, with a new group: the ids change
    // (a queue left with the old ids would charge top-1 to `new`, which now has an's old id).
    let after = config("an = 1\nnew = 5\nmc = 3\n");
    assert_eq!(after.group_by_path("new"), before.group_by_path("an"));
    assert_ne!(after.group_by_path("mc"), before.group_by_path("mc"));
    ledger.reload(after.clone()).await.unwrap();
    assert!(Arc::ptr_eq(&ledger.policy(), &after));
    // Freeing the slot releases top-1 from the rebuilt queue, charged to its own path.
    assert_eq!(
        ledger.cancel(first[0].id).await.unwrap(),
        CancelOutcome::Cancelled
    );
    let released = ledger.request(queued[0].id).await.unwrap().unwrap();
    assert_eq!(released.state, RequestState::Accepted);
    assert_eq!(usage_of(&ledger, "an").await, 1_000);
    assert_eq!(usage_of(&ledger, "mc").await, 0);
    assert_eq!(usage_of(&ledger, "new").await, 0);
    // A request classified under the new policy goes to its group.
    let new = ledger
        .accept(vec![item(&after, "new-1", "new", "x")])
        .await
        .unwrap();
    assert_eq!(new[0].group, "new");
    drop(ledger);
    writer.join().unwrap();
}

async fn a_removed_group_with_unfinished_requests_is_refused_until_cancelled(backend: Backend) {
    let db = new_db(backend);
    let before = config(SHARES);
    let (ledger, writer) = open(&db, before.clone()).unwrap();
    for crid in ["top-1", "top-2"] {
        ledger
            .accept(vec![item(&before, crid, "an", "x")])
            .await
            .unwrap();
    }
    let without = config("mc = 3\n");
    let refused = ledger.reload(without.clone()).await.unwrap_err();
    let LedgerError::RemovedGroups(RemovedGroups(groups)) = &refused else {
        panic!("{refused}");
    };
    let counts = vec![(RequestState::Queued, 1), (RequestState::Accepted, 1)];
    assert_eq!(groups[0].path, "an");
    let mut got = groups[0].counts.clone();
    got.sort_by_key(|(s, _)| s.as_str());
    let mut want = counts;
    want.sort_by_key(|(s, _)| s.as_str());
    assert_eq!(got, want);
    assert!(refused.to_string().contains("mssbroker cancel --group an"));
    assert!(
        Arc::ptr_eq(&ledger.policy(), &before),
        "a refused reload changed the policy"
    );
    drop(ledger);
    writer.join().unwrap();

    // At open too, naming the group; then with the old policy, cancel and reload.
    let at_open = open(&db, without.clone())
        .err()
        .expect("opened with an orphan");
    assert!(at_open.to_string().contains("group `an`"), "{at_open}");
    let (ledger, writer) = open(&db, before).unwrap();
    let cancelled = ledger.cancel_group("an".into(), |_| {}).await.unwrap();
    let previous: Vec<RequestState> = cancelled.listed.iter().map(|c| c.previous).collect();
    assert_eq!(previous, [RequestState::Accepted, RequestState::Queued]);
    assert!(cancelled
        .listed
        .iter()
        .all(|c| c.outcome == CancelOutcome::Cancelled));
    assert_eq!(
        (cancelled.total, cancelled.cancelled, cancelled.transactions),
        (2, 2, 1)
    );
    assert_eq!(usage_of(&ledger, "an").await, 0);
    ledger.reload(without.clone()).await.unwrap();
    drop(ledger);
    writer.join().unwrap();
    let reopened = open(&db, without).unwrap();
    drop(reopened.0);
    reopened.1.join().unwrap();
}

/// A reload that fails after `load_usage` (here: a queued row that cannot be read, as an I/O
/// error or a corrupt page would fail it) is refused, and must change nothing: `load_state`
/// commits the usage aggregates rebuilt for the new usage model (and `meta.usage_model`) only
/// with the rest. Had it committed them first, the writer would go on charging under the old
/// model over aggregates kept for the new one: charges made meanwhile would never reach
/// `usage_windows`, and a restart on the new configuration would decide without them.
async fn a_refused_reload_leaves_the_usage_aggregates_as_they_were(backend: Backend) {
    let db = new_db(backend);
    let before = config(&format!("{SHARES}[usage]\nmodel = \"none\"\n"));
    let windows = "[usage]\nmodel = \"windows\"\ninterval_secs = 43200\ndepth = 8\ndecay = 0.8\n";
    let after = config(&format!("{SHARES}{windows}"));
    let (ledger, writer) = open(&db, before.clone()).unwrap();
    let first = (ledger.accept(vec![item(&before, "mc-1", "mc", "x")]).await).unwrap();
    let queued = (ledger.accept(vec![item(&before, "an-1", "an", "x")]).await).unwrap();
    let side = |sql: &str, id: i64| {
        super::on_test_db(&db, |d| d.execute(sql, params![id])).expect("a side write")
    };
    let model = || -> String {
        super::on_test_db(&db, |d| {
            d.query_one(
                "SELECT value FROM meta WHERE key = 'usage_model'",
                params![],
                |r| r.get(0),
            )
        })
        .expect("the stored model")
    };
    let was = model();
    // The queued row cannot be read back: the reload fails after the usage step.
    side(
        "UPDATE requests SET qos = 'urgent' WHERE id = ?1",
        queued[0].id,
    );
    assert!(
        ledger.reload(after.clone()).await.is_err(),
        "the reload is refused"
    );
    side("UPDATE requests SET qos = NULL WHERE id = ?1", queued[0].id);
    // Still the old policy: cancel mc-1 (refunded) and release an-1 (charged).
    assert!(Arc::ptr_eq(&ledger.policy(), &before));
    ledger.cancel(first[0].id).await.unwrap();
    let released = ledger.request(queued[0].id).await.unwrap().unwrap();
    assert_eq!(released.state, RequestState::Accepted);
    drop(ledger);
    writer.join().unwrap();
    let windowed = |path: &str| -> i128 {
        let rows = super::on_test_db(&db, |d: &Db<'_>| {
            d.query_rows(
                "SELECT usage FROM usage_windows WHERE path = ?1",
                params![path],
                |r| r.get::<crate::ledger::wide::Wide>(0),
            )
        });
        rows.expect("the usage windows").iter().map(|u| u.0).sum()
    };
    let stored = (model(), windowed("mc"), windowed("an"));
    // Restarted on the new configuration, the windows hold every charge: an's 1000, mc's none.
    let (ledger, writer) = open(&db, after.clone()).unwrap();
    drop(ledger);
    writer.join().unwrap();
    assert_eq!(
        (windowed("mc"), windowed("an")),
        (0, 1_000),
        "usage windows after a restart on the new model (after the refused reload the file \
         held model {:?} and windows mc {} an {}; before the reload the model was {was:?})",
        stored.0,
        stored.1,
        stored.2
    );
}

/// Every row of every table, as text, sorted: what "the database is unchanged" compares.
fn dump(db: &TestDb) -> Vec<String> {
    super::on_test_db(db, super::every_row_in).expect("every row")
}

/// A reload is read off the writer from a snapshot; what is committed meanwhile (requests
/// queued, released, cancelled under the old policy) is caught up with at install, so the
/// writer's memory is what the rows say (audited) and the queue goes on under the new policy.
/// Without the catch-up the new queue would still hold the cancelled and the released requests
/// and miss the one queued meanwhile.
async fn a_reload_catches_up_with_what_was_committed_while_it_was_prepared(backend: Backend) {
    let db = new_db(backend);
    let before = config(SHARES);
    let (ledger, writer) = open(&db, before.clone()).unwrap();
    let one = |crid: &str, mode: &str| item(&before, crid, mode, "x");
    // One slot: mc-1 takes it, an-1..3 wait in the held queue.
    let mc = ledger.accept(vec![one("mc-1", "mc")]).await.unwrap()[0].id;
    let mut an = Vec::new();
    for crid in ["an-1", "an-2", "an-3"] {
        an.push(ledger.accept(vec![one(crid, "an")]).await.unwrap()[0].id);
    }
    // Reordered, with a new group: every group id changes.
    let after = config("an = 1\nnew = 5\nmc = 3\n");
    let prepared = ledger.prepare_reload(after.clone()).await.unwrap();
    // Meanwhile, under the old policy: an-4 queues, an-2 is cancelled, mc-1 is cancelled and
    // its slot goes to an-1.
    an.push(ledger.accept(vec![one("an-4", "an")]).await.unwrap()[0].id);
    ledger.cancel(an[1]).await.unwrap();
    ledger.cancel(mc).await.unwrap();
    let state = |r: Option<RequestRecord>| r.unwrap().state;
    assert_eq!(
        state(ledger.request(an[0]).await.unwrap()),
        RequestState::Accepted
    );
    assert!(Arc::ptr_eq(&ledger.policy(), &before), "not in force yet");

    ledger.install_reload(prepared).await.unwrap();
    assert!(Arc::ptr_eq(&ledger.policy(), &after));
    assert_eq!(ledger.audit().await.unwrap(), Vec::<String>::new());
    // The queue is the rows': an-1's end releases an-3, then an-4, each charged to `an`.
    ledger.cancel(an[0]).await.unwrap();
    assert_eq!(
        state(ledger.request(an[2]).await.unwrap()),
        RequestState::Accepted
    );
    assert_eq!(usage_of(&ledger, "an").await, 1_000);
    ledger.cancel(an[2]).await.unwrap();
    assert_eq!(
        state(ledger.request(an[3]).await.unwrap()),
        RequestState::Accepted
    );
    assert_eq!(ledger.audit().await.unwrap(), Vec::<String>::new());
    drop(ledger);
    writer.join().unwrap();
}

/// A reload refused at its last step (a request committed while it was prepared is in a group
/// it leaves out, found at install) writes nothing: the groups' rows it had added in its
/// transaction are rolled back with the rest; every table is as it was, and the old policy
/// stays in force.
async fn a_reload_refused_at_install_leaves_every_row_as_it_was(backend: Backend) {
    let db = new_db(backend);
    let before = config("mc = 3\nan = 1\nold = 1\n");
    let (ledger, writer) = open(&db, before.clone()).unwrap();
    (ledger.accept(vec![item(&before, "mc-1", "mc", "x")]).await).unwrap();
    (ledger.accept(vec![item(&before, "an-1", "an", "x")]).await).unwrap();
    // `old` out, `new` in: refused at once while `old` has unfinished requests; now it has none.
    let after = config("mc = 3\nan = 1\nnew = 2\n");
    let prepared = ledger.prepare_reload(after.clone()).await.unwrap();
    (ledger
        .accept(vec![item(&before, "old-1", "old", "x")])
        .await)
        .unwrap();
    let rows = dump(&db);
    assert!(
        !rows
            .iter()
            .any(|r| r.starts_with("groups: ") && r.contains("\"new\"")),
        "{rows:#?}"
    );
    let refused = ledger.install_reload(prepared).await.unwrap_err();
    assert!(
        matches!(&refused, LedgerError::RemovedGroups(g) if g.0[0].path == "old"),
        "{refused}"
    );
    assert_eq!(dump(&db), rows, "the refused reload changed the file");
    assert!(Arc::ptr_eq(&ledger.policy(), &before));
    assert_eq!(ledger.audit().await.unwrap(), Vec::<String>::new());
    drop(ledger);
    writer.join().unwrap();
}

on_both_async!(
    a_reordered_tree_keeps_every_figure_with_its_path,
    a_removed_group_with_unfinished_requests_is_refused_until_cancelled,
    a_refused_reload_leaves_the_usage_aggregates_as_they_were,
    a_reload_catches_up_with_what_was_committed_while_it_was_prepared,
    a_reload_refused_at_install_leaves_every_row_as_it_was,
);

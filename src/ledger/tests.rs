//! Ledger tests against a real SQLite file and, for each test whose subject PostgreSQL has
//! (`on_both_async!`), a real PostgreSQL database in a pg-cluster.

use std::sync::Arc;
use std::time::Duration;

use mss_adapters::{Direction, EventCursor, EventKind, MssEvent};

use super::*;
use crate::clock::ManualClock;
use crate::config::Settings;
use crate::domain::Class;
use crate::domain::{RequestState, RetrySettings};
use crate::ledger::db::tests::testdb::{Backend, TestDb};
use crate::shares::view::SharesView;

/// `on_both_async!(a, b)`: for each async test function `a(Backend)`, a module `a` with the
/// tests `sqlite` and `postgres` awaiting it (on a multi-threaded runtime: the PostgreSQL
/// client blocks, so the ledger is opened in `block_in_place`).
macro_rules! on_both_async {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            use $crate::ledger::db::tests::testdb::Backend;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$name(Backend::Sqlite).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$name(Backend::Postgres).await
            }
        }
    )+};
}

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
    /// The PostgreSQL database the ledger is opened on (`Fixture::on`); `None`: the file.
    pg: Option<TestDb>,
    /// The epoch the ledger is opened at (its writer's fence on PostgreSQL).
    epoch: i64,
    /// PostgreSQL: the connection `with_db` reads through, kept (a test reads after each step).
    side: std::sync::Mutex<Option<crate::ledger::db::DbConn>>,
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
            pg: None,
            epoch: 1,
            side: Default::default(),
            settings: Settings::parse(text, "test").unwrap(),
            clock: ManualClock::new(1_000_000),
        }
    }

    /// A fixture on `backend`: SQLite's file, or a fresh PostgreSQL database.
    fn on(backend: Backend) -> Fixture {
        Fixture::with_config_on(backend, CONFIG)
    }

    /// [`Fixture::with_config`] on `backend`.
    fn with_config_on(backend: Backend, text: &str) -> Fixture {
        let mut f = Fixture::with_config(text);
        if backend == Backend::Postgres {
            // Its admin client blocks on a runtime of its own: not on an async thread.
            let db = tokio::task::block_in_place(|| TestDb::new(backend));
            f.pg = Some(db);
            // A broker took office at the fixture's epoch (the writer's fence reads it).
            f.set_leader_epoch(f.epoch);
        }
        f
    }

    /// The `leader` row's epoch set to `epoch` from a connection of its own (a broker taking
    /// office, as `leadership` does); PostgreSQL only.
    fn set_leader_epoch(&self, epoch: i64) {
        take_office(self.pg.as_ref().expect("a PostgreSQL fixture"), epoch);
    }

    /// `read` run on a connection of its own to the fixture's database (the file, or the
    /// PostgreSQL database), as a test reads or tampers with what the ledger stored.
    fn with_db<T>(&self, read: impl FnOnce(&crate::ledger::db::Db<'_>) -> T) -> T {
        match &self.pg {
            // Its client blocks on a runtime of its own: not on an async thread.
            Some(db) => tokio::task::block_in_place(|| {
                let mut side = self.side.lock().unwrap_or_else(|e| e.into_inner());
                read(&side.get_or_insert_with(|| db.connect()).db())
            }),
            None => {
                let conn = rusqlite::Connection::open(&self.path).expect("the ledger's file");
                crate::ledger::wide::register(&conn).expect("the wide functions");
                read(&crate::ledger::db::DbConn::from_sqlite(conn).db())
            }
        }
    }

    /// `op` run with every COMMIT of the writer failing, after every statement and every
    /// change to memory (what a full disk or an I/O error at COMMIT does). SQLite: the file
    /// moved away for `op` (`identity::DbFile::check` fails right before `tx.commit()`).
    /// PostgreSQL: a deferred constraint trigger on every ledger table raises at COMMIT while a
    /// flag is set (made on first use; a transaction that wrote no row commits).
    async fn commits_failing<T>(&self, op: impl std::future::Future<Output = T>) -> T {
        if self.pg.is_none() {
            let away = self.path.with_extension("away");
            std::fs::rename(&self.path, &away).expect("the file moved away");
            let r = op.await;
            std::fs::rename(&away, &self.path).expect("the file back");
            return r;
        }
        self.fail_commits(true);
        let r = op.await;
        self.fail_commits(false);
        // No setting back of the ids: a transaction that does not commit gives the ids it took
        // back to the writer's reserve (`db/pg.rs`), so a ledger that failed a commit numbers
        // its requests as its twin that never did (`commit_faults` compares the rows).
        r
    }

    /// PostgreSQL: whether every COMMIT that wrote a row fails (see `commits_failing`).
    fn fail_commits(&self, on: bool) {
        const FAULT: &str =
            "CREATE TABLE IF NOT EXISTS test_commit_fails (fail BOOLEAN NOT NULL); \
            CREATE OR REPLACE FUNCTION test_commit_fails() RETURNS trigger LANGUAGE plpgsql AS $$ \
            BEGIN IF EXISTS (SELECT 1 FROM test_commit_fails WHERE fail) THEN \
            RAISE EXCEPTION 'the COMMIT fails (a fault the test injects)'; END IF; \
            RETURN NULL; END $$; \
            DO $$ DECLARE t TEXT; BEGIN \
            IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'test_commit_fails') THEN \
            FOR t IN SELECT tablename FROM pg_tables WHERE schemaname = current_schema() \
            AND tablename NOT IN ('test_commit_fails', 'leader') LOOP \
            EXECUTE format('CREATE CONSTRAINT TRIGGER test_commit_fails \
            AFTER INSERT OR UPDATE OR DELETE ON %I DEFERRABLE INITIALLY DEFERRED \
            FOR EACH ROW EXECUTE FUNCTION test_commit_fails()', t); \
            END LOOP; END IF; END $$;";
        self.with_db(|db| {
            db.execute_batch(FAULT)?;
            db.execute_batch("DELETE FROM test_commit_fails")?;
            db.execute(
                "INSERT INTO test_commit_fails (fail) VALUES (?1)",
                crate::ledger::db::params![on],
            )
        })
        .expect("the injected fault");
    }

    fn open(&self) -> (Ledger, std::thread::JoinHandle<()>) {
        try_open(self).unwrap()
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
            input: RequestInput {
                station: "st1".into(),
                client_request_id: crid.into(),
                user: "u".into(),
                file: format!("/pnfs/{crid}"),
                size_bytes: size,
                access_mode: mode.into(),
                physics_group: group.into(),
                volume: None,
                direction: Direction::Read,
                extras: Default::default(),
            },
            group: group_id,
            benefit: crate::policy::benefit(policy, mode, size),
        }
    }
}

/// A broker took office at `epoch` on the PostgreSQL database `db`: the `leader` row the
/// writer's fence reads, set from a connection of its own (as `leadership` does).
fn take_office(db: &TestDb, epoch: i64) {
    on_test_db(db, |db| {
        db.execute_batch(crate::leadership::LEADER_TABLE)?;
        db.execute(
            "INSERT INTO leader (only_row, epoch, holder, advertised_url, since) \
             VALUES (TRUE, ?1, 'test', 'http://127.0.0.1:1', now()) \
             ON CONFLICT (only_row) DO UPDATE SET epoch = excluded.epoch",
            crate::ledger::db::params![epoch],
        )
    })
    .expect("the leader row");
}

/// `read` run on a connection of its own to `db` (PostgreSQL's client blocks on a runtime of
/// its own: off the async thread).
fn on_test_db<T>(db: &TestDb, read: impl FnOnce(&crate::ledger::db::Db<'_>) -> T) -> T {
    match db.url() {
        Some(_) => tokio::task::block_in_place(|| read(&db.connect().db())),
        None => read(&db.connect().db()),
    }
}

/// The seeds per configuration of the random-sequence tests (`random_sequences`,
/// `commit_faults`): `MSSBROKER_SEQUENCE_SEEDS`, else 8 on SQLite and 2 on PostgreSQL (each
/// step there is several round trips to a server; 8 would add minutes to the suite).
fn sequence_seeds(backend: Backend) -> u64 {
    let default = match backend {
        Backend::Sqlite => 8,
        Backend::Postgres => 2,
    };
    std::env::var("MSSBROKER_SEQUENCE_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// A column's value as text, whatever its type (what [`every_row`] compares).
struct Shown(String);

impl crate::ledger::db::FromColumn for Shown {
    fn from_column(
        value: crate::ledger::db::ColumnValue<'_>,
    ) -> Result<Shown, crate::ledger::db::Mismatch> {
        Ok(Shown(format!("{value:?}")))
    }
}

/// Every row of every ledger table, as text ("table: a | b"), sorted: what "the database is
/// unchanged" compares, on either backend (PostgreSQL's `leader` row, a timestamp, and a test's
/// fault table left out).
fn every_row(f: &Fixture) -> Vec<String> {
    f.with_db(every_row_in).expect("every row")
}

/// [`every_row`] of the database `db` is a connection to.
fn every_row_in(db: &crate::ledger::db::Db<'_>) -> crate::ledger::db::DbResult<Vec<String>> {
    let tables = match db.sqlite() {
        Some(_) => "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name",
        None => {
            "SELECT CAST(tablename AS TEXT) FROM pg_tables WHERE schemaname = current_schema() \
             AND tablename NOT IN ('leader', 'test_commit_fails') ORDER BY 1"
        }
    };
    let tables = db.query_rows(tables, crate::ledger::db::params![], |r| r.get::<String>(0))?;
    let mut out = Vec::new();
    for t in tables {
        let sql = format!("SELECT * FROM \"{t}\"");
        db.for_each(&sql, crate::ledger::db::params![], |r| {
            let cells = (0..r.column_count())
                .map(|i| r.get::<Shown>(i).map(|c| c.0))
                .collect::<Result<Vec<_>, _>>()?;
            out.push(format!("{t}: {}", cells.join(" | ")));
            Ok::<_, crate::ledger::db::DbError>(())
        })?;
    }
    out.sort();
    Ok(out)
}

impl Drop for Fixture {
    /// A PostgreSQL client owns a runtime, which may not be dropped on an async thread.
    fn drop(&mut self) {
        if let Some(side) = self.side.get_mut().ok().and_then(Option::take) {
            let _ = std::thread::spawn(move || drop(side)).join();
        }
    }
}

fn usage_of(groups: &[GroupRow], path: &str) -> (u128, u64) {
    let g = groups.iter().find(|g| g.path == path).unwrap();
    (g.usage, g.pending)
}

fn event(l: &Ledger, id: i64, attempt: u32, seq: u64, kind: EventKind) -> MssEvent {
    MssEvent {
        seq,
        key: l.mss_key(id),
        attempt,
        at_ms: 0,
        kind,
    }
}

/// One request accepted through the writer: its answer.
async fn accept(l: &Ledger, item: NewRequest) -> Accepted {
    let mut a = l.accept(vec![item]).await.expect("accepted");
    a.pop().expect("one answer")
}

/// The MSS took attempt `attempt` of request `id` (MSS id `m{id}`).
async fn submit(l: &Ledger, id: i64, attempt: u32) {
    submitted_as(l, id, attempt, &format!("m{id}")).await;
}

/// The MSS's answer to a submission, naming the transfer `mss_id`: what the ledger asks next.
async fn submitted_as(l: &Ledger, id: i64, attempt: u32, mss_id: &str) -> Vec<AfterSubmit> {
    let item = SubmittedTransfer {
        id,
        attempt,
        mss_id: mss_id.into(),
    };
    l.submitted(vec![item]).await.expect("recorded")
}

fn close((ledger, handle): (Ledger, std::thread::JoinHandle<()>)) {
    drop(ledger);
    handle.join().unwrap();
}

async fn restart_restores_every_groups_usage_and_decisions(backend: Backend) {
    let f = Fixture::on(backend);
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
    let straight_f = Fixture::on(backend);
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

async fn resubmission_is_idempotent(backend: Backend) {
    let f = Fixture::on(backend);
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

/// A stored class, state or QoS this build does not know is a corrupt row: every reader of it
/// (a record, a replay, the writer settling it) reports an error instead of a default.
async fn a_corrupt_class_or_state_in_a_row_is_an_error_not_a_default(backend: Backend) {
    let f = Fixture::on(backend);
    let opened = f.open();
    let l = &opened.0;
    let a = l
        .accept(vec![f.request("c1", "mc", "x", 500)])
        .await
        .unwrap();
    let id = a[0].id;
    let tamper = |sql: &str| {
        f.with_db(|db| db.execute(sql, db::params![id]))
            .expect("tampered");
    };
    tamper("UPDATE requests SET class = 'sideways' WHERE id = ?1");
    let e = l.request(id).await.unwrap_err();
    assert!(e.to_string().contains("unknown class"), "{e}");
    let replay = l.accept(vec![f.request("c1", "mc", "x", 500)]).await;
    assert!(replay.is_err(), "a replay of a corrupt row: {replay:?}");
    let cancel = l.cancel(id).await;
    assert!(cancel.is_err(), "settling a corrupt row: {cancel:?}");
    tamper("UPDATE requests SET class = 'back', state = 'limbo' WHERE id = ?1");
    let e = l.request(id).await.unwrap_err();
    assert!(e.to_string().contains("unknown state"), "{e}");
    assert!(l.cancel(id).await.is_err());
    assert!(l.state_counts().await.is_err());
    tamper("UPDATE requests SET state = 'queued', qos = 'urgent' WHERE id = ?1");
    let e = l.explain_queued(id).await.unwrap_err();
    assert!(e.to_string().contains("unknown qos"), "{e}");
    close(opened);
}

/// A decision's explain is stored in the ledger's versioned format (version 2, by position), and
/// a row an older build wrote (version 1's named fields, with its version or without) reads back
/// with the same figures.
async fn a_stored_explain_of_an_older_build_reads_back(backend: Backend) {
    let f = Fixture::on(backend);
    let opened = f.open();
    let l = &opened.0;
    let a = l
        .accept(vec![f.request("e1", "mc", "x", 500)])
        .await
        .unwrap();
    let id = a[0].id;
    let fresh = l.request(id).await.unwrap().unwrap().explain.unwrap();
    assert_eq!(fresh.v, stored_explain::VERSION);
    let text: String = f
        .with_db(|db| {
            db.query_one(
                "SELECT explain FROM requests WHERE id = ?1",
                db::params![id],
                |r| r.get(0),
            )
        })
        .expect("the stored explain");
    assert!(text.starts_with("[2,"), "{text}");
    // The same explanation as older builds wrote it: named fields, then with the version.
    let named = serde_json::to_value(&fresh.explain).unwrap();
    let mut with_v = named.clone();
    with_v.as_object_mut().unwrap().insert("v".into(), 1.into());
    for old in [named, with_v] {
        f.with_db(|db| {
            db.execute(
                "UPDATE requests SET explain = ?2 WHERE id = ?1",
                db::params![id, old.to_string()],
            )
        })
        .expect("an older build's explain");
        let read = l.request(id).await.unwrap().unwrap().explain.unwrap();
        assert_eq!((read.v, &read.explain), (1, &fresh.explain), "{old}");
    }
    close(opened);
}

async fn a_request_and_its_charge_are_never_committed_apart(backend: Backend) {
    let f = Fixture::on(backend);
    let opened = f.open();
    let l = opened.0.clone();
    l.accept(vec![f.request("ok", "mc", "x", 100)])
        .await
        .unwrap();
    // Make the groups update fail, after the request row was inserted in the same transaction
    // (a trigger, in each backend's own DDL).
    let side = |sqlite: &str, postgres: &str| {
        let sql = if f.pg.is_some() { postgres } else { sqlite };
        f.with_db(|db| db.execute_batch(sql)).expect("a trigger");
    };
    side(
        "CREATE TRIGGER boom BEFORE UPDATE ON groups WHEN CAST(NEW.usage AS INTEGER) > 1000 \
         BEGIN SELECT RAISE(ABORT, 'disk full (simulated)'); END;",
        "CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN RAISE EXCEPTION 'disk full (simulated)'; END $$; \
         CREATE TRIGGER boom BEFORE UPDATE ON groups FOR EACH ROW \
         WHEN (NEW.usage > 1000) EXECUTE FUNCTION boom();",
    );
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
    side("DROP TRIGGER boom", "DROP TRIGGER boom ON groups");
    l.accept(vec![f.request("big", "mc", "x", 5_000)])
        .await
        .unwrap();
    assert_eq!(usage_of(&l.groups().await.unwrap(), "mc"), (5_100, 2));
    // And the other way round: the request insert fails, so no charge lands.
    side(
        "CREATE TRIGGER boom2 BEFORE INSERT ON requests WHEN NEW.size_bytes = 777 \
         BEGIN SELECT RAISE(ABORT, 'io error (simulated)'); END;",
        "CREATE FUNCTION boom2() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN RAISE EXCEPTION 'io error (simulated)'; END $$; \
         CREATE TRIGGER boom2 BEFORE INSERT ON requests FOR EACH ROW \
         WHEN (NEW.size_bytes = 777) EXECUTE FUNCTION boom2();",
    );
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

async fn completion_reconciles_and_failure_refunds(backend: Backend) {
    let f = Fixture::on(backend);
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
        event(l, a, 1, 1, EventKind::Started),
        // Actual bytes replace the estimate.
        event(l, a, 1, 2, EventKind::Done { bytes: 900 }),
        // A duplicated event changes nothing.
        event(l, a, 1, 3, EventKind::Done { bytes: 900 }),
        // Not retryable: failed and refunded.
        event(
            l,
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
            l,
            c,
            1,
            5,
            EventKind::Failed {
                reason: "drive".into(),
                retryable: true,
            },
        ),
        // An event of an old attempt is stale.
        event(l, c, 1, 6, EventKind::Done { bytes: 4_000 }),
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
        l,
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

async fn cancel_refunds_before_submission_and_asks_the_mss_after(backend: Backend) {
    let f = Fixture::on(backend);
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
    submitted_as(l, b, 1, "m").await;
    assert_eq!(
        l.cancel(b).await.unwrap(),
        CancelOutcome::Requested(RequestState::Submitted)
    );
    // The dispatcher gets what the adapter needs to name the transfer at the MSS.
    let cancelling = l.cancelling().await.unwrap();
    assert_eq!(cancelling.len(), 1);
    assert_eq!(cancelling[0].id, b);
    assert_eq!(
        cancelling[0].transfer,
        mss_adapters::TransferRef {
            key: l.mss_key(b),
            attempt: 1,
            mss_id: Some("m".into()),
            file: "/pnfs/b".into(),
            size_bytes: 200,
        }
    );
    // A submission that raced with a cancellation is cancelled at the MSS.
    let after = submitted_as(l, a, 1, "m2").await;
    assert_eq!(after, vec![AfterSubmit::CancelAtMss]);
    l.apply_events(
        vec![event(l, b, 1, 1, EventKind::Cancelled)],
        EventCursor::default(),
    )
    .await
    .unwrap();
    assert_eq!(usage_of(&l.groups().await.unwrap(), "mc"), (0, 0));
    assert!(l.cancelling().await.unwrap().is_empty());
    close(opened);
}

/// A request is marked before its submission goes out (`mark_sending`): from then on the MSS may
/// hold it, so its cancel is not final at once (the MSS would transfer a file nobody is charged
/// for). It is taken as at the MSS, never sent again, and settled as an in-flight request is:
/// by the answer that names it and the MSS's cancel, or by `resubmit_lost` when the MSS does not hold
/// it. A request never marked for its attempt is cancelled at once; one cancelled before it
/// was marked is not sent at all.
async fn a_cancel_of_a_request_being_sent_goes_to_the_mss(backend: Backend) {
    let f = Fixture::on(backend);
    let opened = f.open();
    let l = &opened.0;
    let acc = l
        .accept(vec![
            f.request("a", "mc", "x", 100),
            f.request("b", "mc", "x", 200),
            f.request("c", "mc", "x", 300),
            f.request("d", "mc", "x", 400),
        ])
        .await
        .unwrap();
    let [a, b, c, d] = [acc[0].id, acc[1].id, acc[2].id, acc[3].id];
    // d is cancelled after it was read for submission, before it was marked: not sent.
    assert_eq!(l.cancel(d).await.unwrap(), CancelOutcome::Cancelled);
    let marked = l
        .mark_sending(vec![(a, 1), (b, 1), (c, 7), (d, 1)])
        .await
        .unwrap();
    assert_eq!(
        marked,
        vec![(a, true), (b, true)],
        "c's attempt is 1, d has ended"
    );
    // Sent again (its answer unreadable): not the attempt's first send.
    assert_eq!(
        l.mark_sending(vec![(a, 1)]).await.unwrap(),
        vec![(a, false)]
    );
    for id in [a, b] {
        assert_eq!(
            l.cancel(id).await.unwrap(),
            CancelOutcome::Requested(RequestState::Submitted)
        );
    }
    // c was never marked for its attempt: cancelled at once.
    assert_eq!(l.cancel(c).await.unwrap(), CancelOutcome::Cancelled);
    assert!(
        l.to_submit(0, i64::MAX, 10).await.unwrap().is_empty(),
        "never sent again"
    );
    // Still charged, and pending, while the MSS may transfer them; their cancels go by key.
    assert_eq!(usage_of(&l.groups().await.unwrap(), "mc"), (300, 2));
    assert_eq!(l.cancel_pending().await.unwrap(), vec![a, b]);
    let cancelling: Vec<i64> = (l.cancelling().await.unwrap().iter().map(|i| i.id)).collect();
    assert_eq!(cancelling, vec![a, b]);
    // a's answer comes: it names the transfer, and its cancel is carried to the MSS again.
    let after = submitted_as(l, a, 1, "m").await;
    assert_eq!(after, vec![AfterSubmit::CancelRequested]);
    let ra = l.request(a).await.unwrap().unwrap();
    assert_eq!(
        (ra.state, ra.mss_id.as_deref()),
        (RequestState::Submitted, Some("m"))
    );
    // b's submission never reached the MSS: its status is unknown there, and it ends cancelled.
    assert!(l
        .resubmit_lost(b, 1, "unknown to the mss".into())
        .await
        .unwrap());
    assert_eq!(
        l.request(b).await.unwrap().unwrap().state,
        RequestState::Cancelled
    );
    l.apply_events(
        vec![event(l, a, 1, 1, EventKind::Cancelled)],
        EventCursor::default(),
    )
    .await
    .unwrap();
    assert_eq!(usage_of(&l.groups().await.unwrap(), "mc"), (0, 0));
    assert!(l.cancel_pending().await.unwrap().is_empty());
    close(opened);
}

/// A first send that could not connect to the MSS left nothing there: the mark goes, and a
/// cancel is final at once again; one cancelled while it was being sent ends cancelled.
async fn a_first_send_that_could_not_connect_is_unmarked(backend: Backend) {
    let f = Fixture::on(backend);
    let opened = f.open();
    let l = &opened.0;
    let acc = l
        .accept(vec![
            f.request("x", "mc", "x", 100),
            f.request("y", "mc", "x", 200),
        ])
        .await
        .unwrap();
    let (x, y) = (acc[0].id, acc[1].id);
    l.mark_sending(vec![(x, 1), (y, 1)]).await.unwrap();
    assert_eq!(
        l.cancel(y).await.unwrap(),
        CancelOutcome::Requested(RequestState::Submitted)
    );
    l.mark_unsent(vec![(x, 1), (y, 1)]).await.unwrap();
    assert_eq!(
        l.request(y).await.unwrap().unwrap().state,
        RequestState::Cancelled
    );
    assert_eq!(l.cancel(x).await.unwrap(), CancelOutcome::Cancelled);
    assert_eq!(usage_of(&l.groups().await.unwrap(), "mc"), (0, 0));
    close(opened);
}

/// A send the MSS deferred stays `accepted` at its attempt, with the reason, and is not offered
/// to the submit step again before the instant given, while the requests behind it are.
async fn a_deferred_send_waits_until_its_instant_while_the_others_go(backend: Backend) {
    let f = Fixture::on(backend);
    let opened = f.open();
    let l = &opened.0;
    let acc = l
        .accept(vec![
            f.request("x", "mc", "x", 100),
            f.request("y", "mc", "x", 200),
        ])
        .await
        .unwrap();
    let (x, y) = (acc[0].id, acc[1].id);
    let ids = |v: Vec<ToSubmit>| v.into_iter().map(|r| r.id).collect::<Vec<_>>();
    let now = f.clock.now_ms();
    assert_eq!(ids(l.to_submit(0, now, 10).await.unwrap()), vec![x, y]);
    l.mark_sending(vec![(x, 1)]).await.unwrap();
    l.deferred(vec![(x, 1)], now + 1_000, "destination held".into())
        .await
        .unwrap();
    assert_eq!(ids(l.to_submit(0, now, 10).await.unwrap()), vec![y]);
    assert_eq!(ids(l.to_submit(0, now + 999, 10).await.unwrap()), vec![y]);
    assert_eq!(
        ids(l.to_submit(0, now + 1_000, 10).await.unwrap()),
        vec![x, y]
    );
    let r = l.request(x).await.unwrap().unwrap();
    assert_eq!((r.state, r.attempt), (RequestState::Accepted, 1));
    assert_eq!(r.last_error.as_deref(), Some("destination held"));
    // An earlier instant never brings it forward; another attempt's deferral is not its own.
    l.deferred(vec![(x, 1)], now + 10, "again".into())
        .await
        .unwrap();
    l.deferred(vec![(y, 2)], now + 5_000, "not y's attempt".into())
        .await
        .unwrap();
    assert_eq!(ids(l.to_submit(0, now + 500, 10).await.unwrap()), vec![y]);
    assert_eq!(
        ids(l.to_submit(0, now + 1_000, 10).await.unwrap()),
        vec![x, y]
    );
    close(opened);
}

/// A deferral's reason is the MSS's text (FTS3's message inside the adapter's): kept clipped,
/// as every MSS text in `last_error` is (ARCHITECTURE.md, "MSS text is clipped where it is
/// kept").
async fn a_deferred_sends_reason_is_clipped_where_it_is_kept(backend: Backend) {
    let f = Fixture::on(backend);
    let opened = f.open();
    let l = &opened.0;
    let acc = l
        .accept(vec![f.request("x", "mc", "x", 100)])
        .await
        .unwrap();
    let x = acc[0].id;
    let now = f.clock.now_ms();
    l.mark_sending(vec![(x, 1)]).await.unwrap();
    l.deferred(vec![(x, 1)], now + 1_000, "held ".repeat(2_000))
        .await
        .unwrap();
    let r = l.request(x).await.unwrap().unwrap();
    let kept = r.last_error.expect("the reason");
    assert!(kept.starts_with("held held"), "{kept}");
    assert!(kept.chars().count() < 1_000, "{} chars kept", kept.len());
    close(opened);
}

/// A send refused by the MSS after the request was cancelled while it was out: the MSS took
/// nothing, so the request ends cancelled and refunded now, with the refusal's text (not left
/// for the stale sweep to find it unknown at the MSS).
async fn a_refused_send_of_a_request_cancelled_meanwhile_ends_it_cancelled(backend: Backend) {
    let f = Fixture::on(backend);
    let opened = f.open();
    let l = &opened.0;
    let a = l
        .accept(vec![f.request("a", "mc", "x", 100)])
        .await
        .unwrap()[0]
        .id;
    l.mark_sending(vec![(a, 1)]).await.unwrap();
    assert_eq!(
        l.cancel(a).await.unwrap(),
        CancelOutcome::Requested(RequestState::Submitted)
    );
    l.rejected(a, 1, "no such file".into()).await.unwrap();
    let r = l.request(a).await.unwrap().unwrap();
    assert_eq!(r.state, RequestState::Cancelled);
    assert_eq!(r.last_error.as_deref(), Some("no such file"));
    assert_eq!(usage_of(&l.groups().await.unwrap(), "mc"), (0, 0));
    close(opened);
}

/// An MSS that answers a cancel with a failure (EOS lists a cancelled file with an error) must not
/// get the request again as the next attempt: a cancel asked while it was at the MSS ends it
/// cancelled and refunded, whatever failure comes back.
async fn a_failure_after_a_cancel_is_a_cancel_not_a_retry(backend: Backend) {
    let f = Fixture::on(backend);
    let opened = f.open();
    let l = &opened.0;
    let acc = l
        .accept(vec![f.request("a", "mc", "x", 100)])
        .await
        .unwrap();
    let a = acc[0].id;
    submitted_as(l, a, 1, "m").await;
    assert_eq!(
        l.cancel(a).await.unwrap(),
        CancelOutcome::Requested(RequestState::Submitted)
    );
    let failed = EventKind::Failed {
        reason: "File not requested with request ID m".into(),
        retryable: true,
    };
    l.apply_events(vec![event(l, a, 1, 1, failed)], EventCursor::default())
        .await
        .unwrap();
    assert_eq!(
        l.cancel(a).await.unwrap(),
        CancelOutcome::AlreadyFinal(RequestState::Cancelled)
    );
    assert_eq!(usage_of(&l.groups().await.unwrap(), "mc"), (0, 0));
    close(opened);
}

async fn a_replay_after_restart_is_still_a_duplicate(backend: Backend) {
    let f = Fixture::on(backend);
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
    other.input.station = "st2".into();
    let o = reopened.0.accept(vec![other]).await.unwrap();
    assert!(!o[0].duplicate);
    close(reopened);
}

/// Half-life usage has no drift across restarts: a ledger restarted before every step (charges,
/// completions with actual bytes, refunds, time passing) decides every request as one that ran
/// straight through, and reports bit-for-bit the same figures, which match the closed form
/// `sum b * 0.5^((t - t_j) / H)` of the charges as dated.
async fn half_life_usage_has_no_drift_across_restarts(backend: Backend) {
    let config = CONFIG.replace(
        "[shares]",
        "[usage]\nmodel = \"half_life\"\nhalf_life_secs = 60\n[shares]",
    );
    let restarted = Fixture::with_config_on(backend, &config);
    let straight = Fixture::with_config_on(backend, &config);
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
            let done =
                |k: usize, bytes| event(ledger, accepted[k].id, 1, seq, EventKind::Done { bytes });
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
    let stored = |f: &Fixture| -> Vec<(String, f64)> {
        f.with_db(|db| {
            db.query_rows(
                "SELECT path, decayed FROM groups ORDER BY path",
                db::params![],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
        })
        .expect("the decayed usage")
    };
    assert_eq!(stored(&restarted), stored(&straight), "bit for bit");
    // The closed form from the requests as stored: each current charge dated by charged_ms.
    let charges: Vec<(i64, Option<i64>)> = restarted
        .with_db(|db| {
            db.query_rows(
                "SELECT charged, charged_ms FROM requests \
                 WHERE group_path = 'mc/x' OR group_path = 'mc'",
                db::params![],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
        })
        .expect("the charges");
    let closed: f64 = (charges.into_iter())
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

/// Per (group, hour) aggregate columns, and per (group, hour, bin) wait counts.
type Aggregates = (Vec<(String, i64, [i64; 15])>, Vec<(String, i64, i64, i64)>);

/// The report aggregates recomputed from the request rows: per (group, hour) the same columns
/// as `report_hours` (but `started_over_priority`, which depends on what else was waiting), and
/// the wait histogram.
fn recompute_aggregates(f: &Fixture) -> Aggregates {
    use super::aggregates::{hour_of, wait_bin};
    use std::collections::BTreeMap;
    type Stored = (
        String,
        String,
        String,
        i64,
        Option<i64>,
        Option<i64>,
        Option<i64>,
    );
    let stored: Vec<(Stored, Option<String>, i64, i64)> = f
        .with_db(|db| {
            db.query_rows(
                "SELECT group_path, state, class, created_ms, started_ms, finished_ms, \
                 released_ms, held_reason, bytes_done, charged FROM requests",
                crate::ledger::db::params![],
                |r| {
                    Ok((
                        (
                            r.get(0)?,
                            r.get(1)?,
                            r.get(2)?,
                            r.get(3)?,
                            r.get(4)?,
                            r.get(5)?,
                            r.get(6)?,
                        ),
                        r.get(7)?,
                        r.get(8)?,
                        r.get(9)?,
                    ))
                },
            )
        })
        .expect("the requests");
    let mut rows: BTreeMap<(String, i64), [i64; 15]> = BTreeMap::new();
    let mut waits: BTreeMap<(String, i64, i64), i64> = BTreeMap::new();
    for (row, held_reason, bytes, charged) in stored {
        let (path, state, class, created, started, finished, released) = row;
        let held_cancelled = state == "cancelled" && held_reason.is_some() && released.is_none();
        let was_held = state == "held" || released.is_some() || held_cancelled;
        let mut at = |ms: i64, col: usize, v: i64| {
            rows.entry((path.clone(), hour_of(ms))).or_default()[col] += v;
        };
        // Columns: accepted, held, released, held_cancelled, front, back, priority, started,
        // wait_ms_sum, done, failed, cancelled, bytes_done, benefit_done, (unused).
        at(created, 0, 1);
        if was_held {
            at(created, 1, 1);
        }
        if let Some(t) = released {
            at(t, 2, 1);
        }
        let decided = if was_held { released } else { Some(created) };
        if let Some(t) = decided {
            let col = match class.as_str() {
                "front" => 4,
                "back" => 5,
                _ => 6,
            };
            at(t, col, 1);
        }
        if let Some(t) = started {
            at(t, 7, 1);
            at(t, 8, t - created);
            *waits
                .entry((path.clone(), hour_of(t), wait_bin(t - created)))
                .or_default() += 1;
        }
        if let Some(t) = finished {
            match state.as_str() {
                "done" => {
                    at(t, 9, 1);
                    at(t, 12, bytes);
                    at(t, 13, charged);
                }
                "failed" => at(t, 10, 1),
                "cancelled" => {
                    at(t, 11, 1);
                    if held_cancelled {
                        at(t, 3, 1);
                    }
                }
                _ => {}
            }
        }
    }
    (
        rows.into_iter().map(|((p, h), v)| (p, h, v)).collect(),
        waits
            .into_iter()
            .map(|((p, h, b), n)| (p, h, b, n))
            .collect(),
    )
}

/// The maintained aggregates, in the shape of [`recompute_aggregates`].
fn stored_aggregates(f: &Fixture) -> Aggregates {
    let rows = f.with_db(|db| {
        db.query_rows(
            "SELECT path, hour, accepted, held, released, held_cancelled, front, back, priority, \
             started, wait_ms_sum, done, failed, cancelled, bytes_done, benefit_done \
             FROM report_hours ORDER BY path, hour",
            crate::ledger::db::params![],
            |r| {
                let mut v = [0i64; 15];
                for (i, slot) in v.iter_mut().enumerate().take(14) {
                    // bytes_done and benefit_done are wide decimals; the rest plain integers.
                    let wide: super::wide::Wide = r.get(i + 2)?;
                    *slot = i64::try_from(wide.0).expect("within i64");
                }
                Ok((r.get(0)?, r.get(1)?, v))
            },
        )
    });
    let rows = (rows.expect("the report's hours").into_iter())
        // A row can be all zeros only if nothing happened: the recomputation has none.
        .filter(|(_, _, v): &(String, i64, [i64; 15])| v.iter().any(|x| *x != 0))
        .collect();
    let waits = f.with_db(|db| {
        db.query_rows(
            "SELECT path, hour, bin, count FROM report_waits ORDER BY path, hour, bin",
            crate::ledger::db::params![],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
    });
    (rows, waits.expect("the report's waits"))
}

#[derive(Debug, Clone)]
enum Op {
    Accept { group: usize, size: u64 },
    Start(usize),
    Done(usize, u64),
    Fail(usize, bool),
    Cancel(usize),
    Release,
    Wait(i64),
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (0usize..4, 1u64..3_000).prop_map(|(group, size)| Op::Accept { group, size }),
        3 => any::<usize>().prop_map(Op::Start),
        3 => (any::<usize>(), 1u64..3_000).prop_map(|(i, b)| Op::Done(i, b)),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(i, r)| Op::Fail(i, r)),
        2 => any::<usize>().prop_map(Op::Cancel),
        1 => Just(Op::Release),
        2 => (0i64..2 * 3_600_000).prop_map(Op::Wait),
    ]
}

// SQLite-only: a proptest builds a runtime per case; on PostgreSQL the same recomputation
// runs after each pass-through sequence of `random_sequences`.
proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

    /// After any sequence of accepts (some held by a feasibility cap), starts, completions,
    /// failures (retried or final), cancellations, releases and time passing across hours, the
    /// maintained report aggregates equal a full recomputation from the request rows.
    #[test]
    fn report_aggregates_equal_a_recomputation(ops in proptest::collection::vec(op(), 1..80)) {
        let config = CONFIG.replace(
            "[mss]",
            "[usage]\nmodel = \"windows\"\ninterval_secs = 3600\ndepth = 1\n[targets.mc]\nfeasibility_cap = 1500\n[mss]",
        );
        let f = Fixture::with_config(&config);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let opened = f.open();
            let l = &opened.0;
            let mut ids: Vec<i64> = Vec::new();
            let mut seq = 0u64;
            for (n, op) in ops.iter().enumerate() {
                let pick = |i: &usize| ids.get(i % ids.len().max(1)).copied();
                match op {
                    Op::Accept { group, size } => {
                        let (mode, g) = [("analysis", "higgs"), ("analysis", "top"), ("mc", "x"), ("datataking", "x")][*group];
                        let a = l.accept(vec![f.request(&format!("r{n}"), mode, g, *size)]).await.unwrap();
                        ids.push(a[0].id);
                    }
                    Op::Start(i) | Op::Done(i, _) | Op::Fail(i, _) => {
                        let Some(id) = pick(i) else { continue };
                        let r = l.request(id).await.unwrap().unwrap();
                        seq += 1;
                        let kind = match op {
                            Op::Start(_) => EventKind::Started,
                            Op::Done(_, b) => EventKind::Done { bytes: *b },
                            Op::Fail(_, retryable) => EventKind::Failed { reason: "x".into(), retryable: *retryable },
                            _ => unreachable!(),
                        };
                        l.apply_status_events(vec![event(l, id, r.attempt, seq, kind)]).await.unwrap();
                    }
                    Op::Cancel(i) => {
                        let Some(id) = pick(i) else { continue };
                        l.cancel(id).await.unwrap();
                    }
                    Op::Release => {
                        l.release_held().await.unwrap();
                    }
                    Op::Wait(ms) => f.clock.advance_ms(*ms),
                }
            }
            close(opened);
        });
        let (stored, stored_waits) = stored_aggregates(&f);
        let (recomputed, recomputed_waits) = recompute_aggregates(&f);
        proptest::prop_assert_eq!(stored, recomputed);
        proptest::prop_assert_eq!(stored_waits, recomputed_waits);
    }
}

/// A fair-share request that starts while a priority-class request waits is counted (the
/// report's "data taking held back" figure); once the priority request runs, none is.
async fn fair_share_starts_over_waiting_priority_requests_are_counted(backend: Backend) {
    let f = Fixture::on(backend);
    let opened = f.open();
    let l = &opened.0;
    let daq = l
        .accept(vec![f.request("d", "datataking", "x", 10)])
        .await
        .unwrap()[0]
        .id;
    let a = l.accept(vec![f.request("a", "mc", "x", 10)]).await.unwrap()[0].id;
    let b = l.accept(vec![f.request("b", "mc", "x", 10)]).await.unwrap()[0].id;
    let start = |id, seq| event(l, id, 1, seq, EventKind::Started);
    // While daq is still in the broker, a start does not count: daq goes to the MSS first.
    l.apply_status_events(vec![start(a, 1)]).await.unwrap();
    let at_mss = |id: i64| SubmittedTransfer {
        id,
        attempt: 1,
        mss_id: format!("m{id}"),
    };
    l.submitted(vec![at_mss(daq), at_mss(b)]).await.unwrap();
    // Queued at the MSS, daq waits: c starting now is an inversion.
    let c = l.accept(vec![f.request("c", "mc", "x", 10)]).await.unwrap()[0].id;
    l.apply_status_events(vec![start(c, 2)]).await.unwrap();
    f.clock.advance_ms(250);
    l.apply_status_events(vec![start(daq, 3), start(b, 4)])
        .await
        .unwrap();
    close(opened);
    let over = |p: &str| -> (i64, i64, i64) {
        f.with_db(|db| {
            db.query_one(
                "SELECT SUM(started_over_priority), SUM(started), SUM(wait_ms_sum) \
                 FROM report_hours WHERE path = ?1",
                db::params![p],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
        })
        .expect("the report's starts")
    };
    assert_eq!(
        over("mc"),
        (1, 3, 250),
        "c started while daq was queued at the MSS; a before daq got there; b after it ran"
    );
    assert_eq!(over("datataking"), (0, 1, 250));
}

/// Usage past i64 (and past u64) under the windows model: the group sums, the window sums and
/// the report's bytes and benefit done are exact, in memory and on disk, and a restart loads
/// the same book (SQLite's INTEGER is i64; these are wide decimals).
async fn sums_past_i64_are_exact_and_survive_a_restart(backend: Backend) {
    const SIZE: u64 = 4_000_000_000_000_000_000;
    let config = CONFIG.replace(
        "[mss]",
        "[usage]\nmodel = \"windows\"\ninterval_secs = 3600\ndepth = 2\n[mss]",
    );
    let f = Fixture::with_config_on(backend, &config);
    let opened = f.open();
    let l = &opened.0;
    let mut ids = Vec::new();
    for i in 0..5 {
        let a = l
            .accept(vec![f.request(&format!("r{i}"), "mc", "x", SIZE)])
            .await
            .unwrap();
        ids.push(a[0].id);
    }
    let want = 5 * u128::from(SIZE);
    assert_eq!(usage_of(&l.groups().await.unwrap(), "mc"), (want, 5));
    // Three complete an hour later (re-dated into the next window), two stay accepted.
    f.clock.advance_ms(3_600_000);
    let done = |seq: u64, id: i64| event(l, id, 1, seq, EventKind::Done { bytes: SIZE });
    l.apply_status_events(vec![done(1, ids[0]), done(2, ids[1]), done(3, ids[2])])
        .await
        .unwrap();
    let now = f.clock.now_ms();
    let before = l.shares(now, now).await.unwrap();
    let mc = |v: &SharesView| {
        let g = v.groups.iter().find(|g| g.path == "mc").unwrap().clone();
        (g.usage, g.counts.unwrap().usage_bytes, g.windows.unwrap())
    };
    assert_eq!(mc(&before).0, want);
    assert_eq!(mc(&before).1, want);
    let groups = l.groups().await.unwrap();
    close(opened);

    let reopened = f.open();
    assert_eq!(reopened.0.groups().await.unwrap(), groups);
    assert_eq!(mc(&reopened.0.shares(now, now).await.unwrap()), mc(&before));
    close(reopened);

    f.with_db(|db| {
        let windows = db.query_rows(
            "SELECT usage FROM usage_windows WHERE path = 'mc' ORDER BY \"window\"",
            db::params![],
            |r| r.get::<wide::Wide>(0),
        );
        assert_eq!(
            windows.expect("the windows"),
            [
                wide::Wide(2 * i128::from(SIZE)),
                wide::Wide(3 * i128::from(SIZE))
            ],
            "two estimates in the first window, three actuals in the second"
        );
        let hours = 0..(now + 3_600_000 - 1).div_euclid(3_600_000) + 1;
        let report = history::report_rows(db, hours).expect("the report");
        let (bytes, benefit) = report
            .hours
            .iter()
            .filter(|(p, _, _)| p == "mc")
            .fold((0, 0), |(b, n), (_, _, r)| {
                (b + r.bytes_done, n + r.benefit_done)
            });
        assert_eq!(
            (bytes, benefit),
            (3 * i128::from(SIZE), 3 * i128::from(SIZE))
        );
        let totals = history::totals_before(db, i64::MAX).expect("the totals");
        let mc_total = &totals.iter().find(|(p, _)| p == "mc").unwrap().1;
        assert_eq!(mc_total.bytes_done, 3 * i128::from(SIZE));
    });
}

/// A database written by the schema before the wide columns (INTEGER sums, one of them already
/// overflowed into a REAL) opens: the columns become TEXT with the same figures (the
/// overflowed group's recomputed exactly from its requests), and charges add to them exactly.
// SQLite-only: SQLite's own schema and migrations (PostgreSQL's are `postgres/schema.rs`'s,
// tested in `ledger::postgres`).
#[tokio::test]
async fn an_old_shape_database_is_migrated() {
    let f = Fixture::new();
    {
        let old = super::schema::SCHEMA
            .replace("TEXT    NOT NULL DEFAULT '0'", "INTEGER NOT NULL DEFAULT 0")
            .replace("usage  TEXT    NOT NULL", "usage  INTEGER NOT NULL");
        assert!(!old.contains("TEXT    NOT NULL DEFAULT '0'"));
        let c = rusqlite::Connection::open(&f.path).unwrap();
        c.execute_batch(&old).unwrap();
        c.execute_batch(
            "INSERT INTO groups(path, usage, usage_bytes, pending) VALUES ('mc', 1234, 5678, 0), \
             ('analysis/top', 1.0e19, 1.0e19, 0); \
             INSERT INTO requests(station, client_request_id, user_name, file, size_bytes, \
             access_mode, physics_group, direction, group_path, class, mss_priority, charged, \
             charged_bytes, state, created_ms) VALUES \
             ('s', 'a', 'u', '/a', 5000000000000000001, 'analysis', 'top', 'read', \
              'analysis/top', 'back', 10, 5000000000000000001, 5000000000000000001, 'done', 1), \
             ('s', 'b', 'u', '/b', 5000000000000000002, 'analysis', 'top', 'read', \
              'analysis/top', 'back', 10, 5000000000000000002, 5000000000000000002, 'done', 1), \
             ('s', 'c', 'u', '/c', 1234, 'mc', 'x', 'read', 'mc', 'back', 10, 1234, 5678, \
              'done', 1); \
             INSERT INTO usage_windows(path, window, usage) VALUES ('mc', 0, 1234); \
             INSERT INTO report_hours(path, hour, done, bytes_done, benefit_done) \
             VALUES ('mc', 0, 1, 5678, 1234);",
        )
        .unwrap();
        let declared: String = c
            .query_row(
                "SELECT type FROM pragma_table_info('groups') WHERE name = 'usage'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(declared, "INTEGER");
    }
    let opened = f.open();
    let l = &opened.0;
    let groups = l.groups().await.unwrap();
    assert_eq!(usage_of(&groups, "mc"), (1234, 0));
    let top = groups.iter().find(|g| g.path == "analysis/top").unwrap();
    assert_eq!(
        (top.usage, top.usage_bytes),
        (10_000_000_000_000_000_003, 10_000_000_000_000_000_003),
        "the overflowed REAL recomputed from the requests"
    );
    l.accept(vec![f.request("a", "mc", "x", 100)])
        .await
        .unwrap();
    assert_eq!(usage_of(&l.groups().await.unwrap(), "mc"), (1334, 1));
    close(opened);
    let c = super::schema::open_reader(&f.path).unwrap();
    for (table, column) in [
        ("groups", "usage"),
        ("groups", "usage_bytes"),
        ("usage_windows", "usage"),
        ("report_hours", "bytes_done"),
        ("report_hours", "benefit_done"),
    ] {
        let declared: String = c
            .query_row(
                &format!("SELECT type FROM pragma_table_info('{table}') WHERE name = ?1"),
                [column],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(declared, "TEXT", "{table}.{column}");
    }
    let stored: (String, String, i64) = c
        .query_row(
            "SELECT bytes_done, benefit_done, done FROM report_hours WHERE path = 'mc'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(stored, ("5678".into(), "1234".into(), 1));
    let tables: i64 = c
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE name LIKE '%_narrow'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(tables, 0, "the set-aside tables are dropped");
    assert_eq!(
        user_version(&c),
        super::schema::LATEST,
        "migrated to the latest version"
    );
}

fn user_version(c: &rusqlite::Connection) -> i64 {
    c.query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap()
}

/// Open a fixture's database, the error left to the caller.
fn try_open(f: &Fixture) -> Result<(Ledger, std::thread::JoinHandle<()>), LedgerError> {
    open_with(f, &options(f))
}

/// The options the fixture's ledger is opened with.
fn options(f: &Fixture) -> LedgerOptions {
    LedgerOptions {
        path: f.path.clone(),
        commit_batch_max: 1024,
        url: f.pg.as_ref().and_then(|db| db.url().cloned()),
        epoch: f.epoch,
        retry: RetrySettings {
            max_attempts: 2,
            base: Duration::from_millis(100),
            max: Duration::from_millis(1000),
        },
        metrics: Arc::new(crate::ledger::NoObserver),
        read_outputs: f.settings.mss.read_outputs(),
    }
}

/// The fixture's ledger opened with `options`.
fn open_with(
    f: &Fixture,
    options: &LedgerOptions,
) -> Result<(Ledger, std::thread::JoinHandle<()>), LedgerError> {
    let open = || {
        Ledger::open(
            options,
            f.settings.policy.clone(),
            Arc::new(f.clock.clone()),
        )
    };
    match options.url {
        // The PostgreSQL client blocks on a runtime of its own: not on an async thread.
        Some(_) => tokio::task::block_in_place(open),
        None => lock_released(open),
    }
}

/// `open` once the lock a closed ledger released is free. A process another test of this
/// binary starts (pg-cluster's `initdb`, `pg_ctl`, `psql`) holds a copy of every descriptor
/// from its fork to its exec, the lock file's too: a lock just released may still be held for
/// that moment. Waited for (polled), up to 10 s; past that the refusal is the answer.
fn lock_released<T>(open: impl Fn() -> Result<T, LedgerError>) -> Result<T, LedgerError> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match open() {
            Err(LedgerError::Locked { .. }) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5))
            }
            opened => return opened,
        }
    }
}

// SQLite-only: SQLite's own schema and migrations (PostgreSQL's are `postgres/schema.rs`'s,
// tested in `ledger::postgres`).
#[tokio::test]
async fn a_new_database_is_created_at_the_latest_version() {
    let f = Fixture::new();
    close(f.open());
    let c = super::schema::open_reader(&f.path).unwrap();
    assert_eq!(user_version(&c), super::schema::LATEST);
}

// SQLite-only: SQLite's own schema and migrations (PostgreSQL's are `postgres/schema.rs`'s,
// tested in `ledger::postgres`).
#[tokio::test]
async fn an_old_database_missing_added_columns_keeps_its_rows_and_is_versioned() {
    let f = Fixture::new();
    {
        // The first schema: no column added since (charged_ms ... bfid, held ... queue_priority).
        let c = rusqlite::Connection::open(&f.path).unwrap();
        c.execute_batch(
            "CREATE TABLE requests (id INTEGER PRIMARY KEY, station TEXT NOT NULL, \
             client_request_id TEXT NOT NULL, user_name TEXT NOT NULL, file TEXT NOT NULL, \
             size_bytes INTEGER NOT NULL, access_mode TEXT NOT NULL, physics_group TEXT NOT NULL, \
             volume TEXT, direction TEXT NOT NULL, group_path TEXT NOT NULL, class TEXT NOT NULL, \
             mss_priority INTEGER NOT NULL, charged INTEGER NOT NULL, \
             charged_bytes INTEGER NOT NULL, state TEXT NOT NULL, \
             attempt INTEGER NOT NULL DEFAULT 1, mss_id TEXT, \
             bytes_done INTEGER NOT NULL DEFAULT 0, cancel_requested INTEGER NOT NULL DEFAULT 0, \
             last_error TEXT, created_ms INTEGER NOT NULL, submitted_ms INTEGER, \
             started_ms INTEGER, finished_ms INTEGER, next_attempt_ms INTEGER NOT NULL DEFAULT 0, \
             checked_ms INTEGER); \
             CREATE TABLE groups (path TEXT PRIMARY KEY, usage INTEGER NOT NULL DEFAULT 0, \
             usage_bytes INTEGER NOT NULL DEFAULT 0, pending INTEGER NOT NULL DEFAULT 0) \
             WITHOUT ROWID; \
             INSERT INTO groups(path, usage, usage_bytes, pending) VALUES ('mc', 1234, 5678, 0); \
             INSERT INTO requests(station, client_request_id, user_name, file, size_bytes, \
             access_mode, physics_group, direction, group_path, class, mss_priority, charged, \
             charged_bytes, state, created_ms) VALUES ('s', 'c', 'u', '/c', 5678, 'mc', 'x', \
             'read', 'mc', 'back', 10, 1234, 5678, 'done', 1);",
        )
        .unwrap();
    }
    let opened = f.open();
    assert_eq!(usage_of(&opened.0.groups().await.unwrap(), "mc"), (1234, 0));
    close(opened);
    let c = super::schema::open_reader(&f.path).unwrap();
    let row: (String, i64, String, i64, i64) = c
        .query_row(
            "SELECT file, charged, library, slots, passed FROM requests WHERE client_request_id = 'c'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .unwrap();
    assert_eq!(row, ("/c".into(), 1234, String::new(), 1, 0));
    assert_eq!(user_version(&c), super::schema::LATEST);
}

// SQLite-only: its openers are SQLite's (PostgreSQL's refusal, with the same error:
// `ledger::postgres::tests::the_ledger_refuses_a_newer_schema_with_the_same_error_on_both_backends`).
#[tokio::test]
async fn a_database_newer_than_the_binary_is_refused_by_every_opener() {
    let f = Fixture::new();
    let newer = super::schema::LATEST + 1;
    {
        let c = rusqlite::Connection::open(&f.path).unwrap();
        c.execute_batch("CREATE TABLE future (x INTEGER)").unwrap();
        c.pragma_update(None, "user_version", newer).unwrap();
    }
    let shown = f.path.display().to_string();
    let written = match try_open(&f) {
        Err(e) => e,
        Ok(_) => panic!("the writer opened a database newer than it knows"),
    };
    let read = match LedgerReader::open(&f.path) {
        Err(e) => e,
        Ok(_) => panic!("the reader opened a database newer than it knows"),
    };
    for e in [written, read] {
        assert!(
            matches!(&e, LedgerError::SchemaTooNew { path, found, known }
                if *path == f.path && *found == newer && *known == super::schema::LATEST),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(text.contains(&shown), "{text}");
        assert!(text.contains(&newer.to_string()), "{text}");
    }
    let c = rusqlite::Connection::open(&f.path).unwrap();
    assert_eq!(user_version(&c), newer, "the version is left alone");
    let tables: i64 = c
        .query_row("SELECT COUNT(*) FROM sqlite_master", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        tables, 1,
        "nothing is created in a database the binary does not know"
    );
}

/// On PostgreSQL a ledger opened at epoch N whose `leader` row another broker moved to N+1
/// commits nothing: the submission is refused (an error, never an accepted answer), no row is
/// written, and the writer takes no more commands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leaders_submission_is_refused_and_nothing_is_committed() {
    let mut f = Fixture::on(Backend::Postgres);
    f.epoch = 7;
    f.set_leader_epoch(7);
    let opened = f.open();
    let l = opened.0.clone();
    let first = accept(&l, f.request("before", "mc", "x", 100)).await;
    assert!(!first.duplicate, "taken while this broker leads");
    f.set_leader_epoch(8);
    let refused = l.accept(vec![f.request("after", "mc", "x", 200)]).await;
    assert!(
        refused.is_err(),
        "a deposed leader's submission: {refused:?}"
    );
    let again = l.accept(vec![f.request("later", "mc", "x", 300)]).await;
    assert!(again.is_err(), "and every later one: {again:?}");
    let rows: Vec<String> = tokio::task::block_in_place(|| {
        let conn = f.pg.as_ref().expect("postgres").connect();
        let rows = (conn.db())
            .query_rows(
                "SELECT client_request_id FROM requests ORDER BY id",
                crate::ledger::db::params![],
                |r| r.get::<String>(0),
            )
            .expect("the rows");
        drop(conn);
        rows
    });
    assert_eq!(rows, ["before"], "nothing of the fenced groups committed");
    drop(l);
    close(opened);
}

/// A PostgreSQL fixture whose ledger was opened once at epoch 7 and closed (its schema, groups
/// and first incarnation written).
async fn led_once_at_epoch_7() -> Fixture {
    let mut f = Fixture::on(Backend::Postgres);
    f.epoch = 7;
    f.set_leader_epoch(7);
    let opened = f.open();
    accept(&opened.0, f.request("before", "mc", "x", 100)).await;
    close(opened);
    f
}

/// The fixture's configuration with a group `new` added: an open or a reload under it writes
/// that group's row.
fn with_a_new_group() -> Settings {
    let config = CONFIG.replace("[shares]\n", "[shares]\nnew = 2\n");
    Settings::parse(&config, "test").expect("the configuration")
}

/// On PostgreSQL the writes a term makes at load (the instance id, the groups' rows and
/// rebuilt aggregates, the start's incarnation) are fenced as its groups are: a ledger opened
/// at epoch 7 after another broker took office at 8 is refused and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_term_deposed_before_it_opens_writes_nothing_at_load() {
    let mut f = led_once_at_epoch_7().await;
    f.settings = with_a_new_group();
    let before = every_row(&f);
    f.set_leader_epoch(8);
    let refused = match try_open(&f) {
        Err(e) => e.to_string(),
        Ok(opened) => {
            close(opened);
            panic!("a deposed term opened its ledger")
        }
    };
    assert!(refused.contains("fenced"), "{refused}");
    assert_eq!(every_row(&f), before, "a deposed term wrote at load");
}

/// The epoch goes stale in the middle of a load, without timing: a trigger on `groups` moves
/// the `leader` row to epoch 8 inside the load's first transaction (which read the fence at 7,
/// and commits the new group's row). The start's incarnation, written after, is refused: the
/// ledger does not open, and no incarnation of the deposed term is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_term_deposed_during_its_load_records_no_incarnation() {
    let mut f = led_once_at_epoch_7().await;
    f.settings = with_a_new_group();
    let incarnations = |f: &Fixture| -> Vec<String> {
        (every_row(f).into_iter())
            .filter(|r| r.starts_with("incarnations:"))
            .collect()
    };
    let before = incarnations(&f);
    assert_eq!(before.len(), 1, "the first term's incarnation");
    f.with_db(|db| {
        db.execute_batch(
            "CREATE FUNCTION depose() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN UPDATE leader SET epoch = 8; RETURN NULL; END $$; \
             CREATE TRIGGER depose AFTER INSERT ON groups FOR EACH ROW \
             EXECUTE FUNCTION depose();",
        )
    })
    .expect("the trigger");
    let refused = match try_open(&f) {
        Err(e) => e.to_string(),
        Ok(opened) => {
            close(opened);
            panic!("a term deposed during its load opened its ledger")
        }
    };
    assert!(refused.contains("fenced"), "{refused}");
    let epoch = f.with_db(|db| {
        db.query_one("SELECT epoch FROM leader", db::params![], |r| {
            r.get::<i64>(0)
        })
    });
    assert_eq!(epoch.expect("the epoch"), 8, "deposed during the load");
    assert_eq!(incarnations(&f), before, "a deposed term's incarnation");
}

/// A reload's install is a write transaction of the term, fenced too: a deposed leader's
/// reload is refused and writes nothing (not the new group's row).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leaders_reload_is_refused_and_writes_nothing() {
    let f = led_once_at_epoch_7().await;
    let opened = f.open();
    let before = every_row(&f);
    f.set_leader_epoch(8);
    let refused = opened.0.reload(with_a_new_group().policy).await;
    assert!(refused.is_err(), "a deposed leader's reload: {refused:?}");
    assert_eq!(every_row(&f), before, "a deposed leader's reload wrote");
    close(opened);
}

// The writer's paths on both backends (PostgreSQL: issue 42, step 4).
on_both_async!(
    a_corrupt_class_or_state_in_a_row_is_an_error_not_a_default,
    a_stored_explain_of_an_older_build_reads_back,
    a_request_and_its_charge_are_never_committed_apart,
    half_life_usage_has_no_drift_across_restarts,
    fair_share_starts_over_waiting_priority_requests_are_counted,
    sums_past_i64_are_exact_and_survive_a_restart,
    restart_restores_every_groups_usage_and_decisions,
    resubmission_is_idempotent,
    completion_reconciles_and_failure_refunds,
    cancel_refunds_before_submission_and_asks_the_mss_after,
    a_cancel_of_a_request_being_sent_goes_to_the_mss,
    a_first_send_that_could_not_connect_is_unmarked,
    a_deferred_send_waits_until_its_instant_while_the_others_go,
    a_deferred_sends_reason_is_clipped_where_it_is_kept,
    a_refused_send_of_a_request_cancelled_meanwhile_ends_it_cancelled,
    a_failure_after_a_cancel_is_a_cancel_not_a_retry,
    a_replay_after_restart_is_still_a_duplicate,
);

/// The queued-bytes caps through the writer.
mod both_backends;
mod coalesce;
mod commit_faults;
mod commit_rollback;
mod finished_keys;
mod group_answers;
mod offsets;
mod outputs;
mod queued_caps;
mod random_sequences;
mod reload;
mod reload_noting;
mod retry_paths;
mod unsettled;
mod volume_flights;
mod volume_lookup;

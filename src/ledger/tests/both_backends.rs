//! The ledger's readers outside the writer, on PostgreSQL beside SQLite (issue 42, step 4): the
//! same rows written into a new ledger of each backend (the accept path's own INSERT through
//! `Db::insert_id`, the report aggregates' upserts through `ReportDeltas::flush`, the MSS keys'
//! incarnations, the unknown keys, the usage model's rows), then every reader asked the same
//! questions; their answers must be the same on both, and right for the rows written.

use std::collections::BTreeMap;

use super::Fixture;
use crate::domain::{Class, RequestState};
use crate::ledger::aggregates::{HourRow, ReportDeltas, HOUR_MS};
use crate::ledger::columns::{self, NewRow};
use crate::ledger::db::tests::testdb::{Backend, TestDb};
use crate::ledger::db::{params, Db};
use crate::ledger::mss_key::{self, MssKeys};
use crate::ledger::wide::Wide;
use crate::ledger::{history, read, usage};

/// The requests written: (client request id, group, size, the state it is moved to).
const REQUESTS: &[(&str, &str, u64, RequestState)] = &[
    ("r1", "analysis/higgs", 10, RequestState::Accepted),
    ("r2", "analysis/top", 20, RequestState::Submitted),
    ("r3", "mc", 30, RequestState::Running),
    ("r4", "analysis/higgs", 40, RequestState::Queued),
    ("r5", "mc", 50, RequestState::Done),
    ("r6", "analysis/top", 60, RequestState::Held),
];

const NOW: i64 = 5 * HOUR_MS + 17;

/// A wide sum past `i64`, as the groups' usage can be.
const BIG: i128 = i64::MAX as i128 * 3 + 7;

/// The rows the readers read, written through the ledger's own statements where it has them.
fn write(db: &Db<'_>, fixture: &Fixture) -> (MssKeys, Vec<i64>) {
    let keys = MssKeys::begin(db, NOW).expect("an incarnation");
    let mut ids = Vec::new();
    for (i, (crid, group, size, _)) in REQUESTS.iter().enumerate() {
        let item = fixture.request(crid, "mc", "x", *size);
        let row = NewRow {
            item: &item,
            group_path: group,
            class: Class::Front,
            mss_priority: 100 + i as i64,
            charged: *size as i64,
            charged_bytes: *size as i64,
            state: RequestState::Accepted,
            created_ms: NOW - 1000 + i as i64,
            charged_ms: Some(NOW),
            held_reason: None,
            slots: 1,
            explain: None,
            rides_on: None,
        };
        ids.push(
            db.insert_id(columns::insert_sql(), row.values())
                .expect("the accept path's INSERT"),
        );
    }
    for (id, (_, _, _, state)) in ids.iter().zip(REQUESTS) {
        db.execute(
            "UPDATE requests SET state = ?2, mss_id = ?3, submitted_ms = ?4, \
             next_attempt_ms = ?5, cancel_requested = ?6 WHERE id = ?1",
            params![
                *id,
                state.as_str(),
                format!("m{id}"),
                NOW - 500,
                NOW - 100 + *id,
                matches!(state, RequestState::Running)
            ],
        )
        .expect("a state");
    }
    for (path, usage, pending) in [("analysis/higgs", BIG, 2i64), ("mc", 5, 1)] {
        db.execute(
            "INSERT INTO groups (path, usage, usage_bytes, pending) VALUES (?1, ?2, ?3, ?4)",
            params![path, Wide(usage), Wide(usage * 2 - 1), pending],
        )
        .expect("a group");
    }
    let mut deltas = ReportDeltas::default();
    for (i, (_, group, size, _)) in REQUESTS.iter().enumerate() {
        let at = i as i64 * HOUR_MS;
        let row = HourRow {
            accepted: 1,
            bytes_done: BIG,
            benefit_done: *size as i128,
            ..HourRow::default()
        };
        deltas.add(group, at, row.decided(Class::Front));
        deltas.started(group, at, 1000 * i as i64, i % 2 == 0);
    }
    deltas.flush(db).expect("the report's upserts");
    // Twice: the upsert adds to the rows the first made (past i64 in the wide sums).
    deltas.flush(db).expect("the report's upserts again");
    for (key, what) in [("k1", "done"), ("k2", "failed"), ("k1", "cancelled")] {
        mss_key::record_unknown(db, key, what, NOW).expect("an unknown key");
    }
    usage::set_meta(db, "mss_event_epoch", "e7").expect("meta");
    usage::set_meta(db, "mss_event_after", "41").expect("meta");
    usage::set_meta(db, "mss_event_after", "42").expect("meta, replaced");
    (keys, ids)
}

/// Every reader's answer, one line each (maps and unordered results sorted).
fn answers(db: &Db<'_>, fixture: &Fixture, keys: &MssKeys, ids: &[i64]) -> Vec<String> {
    let mut out = Vec::new();
    let mut say = |what: &str, answer: String| out.push(format!("{what}: {answer}"));
    // The keys as read back, with the request ids relative to the first (the ids are the
    // database's own: the same on both, but not what is compared).
    let reread = MssKeys::read(db).expect("the keys");
    say(
        "keys",
        format!(
            "{:?}",
            ids.iter()
                .map(|id| reread.key(*id) == keys.key(*id))
                .collect::<Vec<_>>()
        ),
    );
    for id in ids {
        let mut r = read::request(db, keys, *id)
            .expect("a record")
            .expect("the request");
        // The key's nonce is random: whether it is the incarnation's key for the id.
        r.mss_key = format!("the incarnation's: {}", r.mss_key == keys.key(*id));
        r.id -= ids[0];
        say("request", format!("{r:?}"));
    }
    let rel = |v: Vec<read::InFlight>| -> Vec<(i64, u32, Option<String>, String, u64)> {
        v.into_iter()
            .map(|f| {
                (
                    f.id - ids[0],
                    f.attempt,
                    f.transfer.mss_id,
                    f.transfer.file,
                    f.transfer.size_bytes,
                )
            })
            .collect()
    };
    let submit = read::to_submit(db, keys, 0, NOW, 10).expect("to submit");
    say(
        "to_submit",
        format!(
            "{:?}",
            submit
                .iter()
                .map(|s| (s.file.clone(), s.attempt, s.mss_priority, s.group.clone()))
                .collect::<Vec<_>>()
        ),
    );
    say(
        "next_retry_ms",
        format!("{:?}", read::next_retry_ms(db).expect("next retry")),
    );
    say(
        "in_flight",
        format!("{:?}", rel(read::in_flight(db, keys).expect("in flight"))),
    );
    say(
        "stale",
        format!("{:?}", rel(read::stale(db, keys, NOW, 10).expect("stale"))),
    );
    say(
        "cancelling",
        format!("{:?}", rel(read::cancelling(db, keys).expect("cancelling"))),
    );
    say(
        "cancel_pending",
        format!(
            "{:?}",
            read::cancel_pending(db)
                .expect("pending")
                .iter()
                .map(|id| id - ids[0])
                .collect::<Vec<_>>()
        ),
    );
    for id in ids {
        say(
            "cancelling_one",
            format!(
                "{:?}",
                read::cancelling_one(db, keys, *id)
                    .expect("one")
                    .map(|f| f.id - ids[0])
            ),
        );
    }
    say("groups", format!("{:?}", read::groups(db).expect("groups")));
    say(
        "event_cursor",
        format!("{:?}", read::event_cursor(db).expect("cursor")),
    );
    let mut counts = read::state_counts(db).expect("counts");
    counts.sort_by_key(|(s, _)| s.as_str());
    say("state_counts", format!("{counts:?}"));
    say(
        "group_counts",
        format!(
            "{:?}",
            usage::group_counts(db, &fixture.settings.policy).expect("group counts")
        ),
    );
    say(
        "meta",
        format!("{:?}", usage::meta(db, "mss_event_after").expect("meta")),
    );
    say(
        "totals_before",
        format!("{:?}", history::totals_before(db, 3).expect("totals")),
    );
    let rows = history::report_rows(db, 1..4).expect("report rows");
    let (mut hours, mut waits) = (rows.hours, rows.waits);
    hours.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    waits.sort();
    say(
        "report before",
        format!("{:?}", rows.before.into_iter().collect::<BTreeMap<_, _>>()),
    );
    say("report hours", format!("{hours:?}"));
    say("report waits", format!("{waits:?}"));
    let mut since = history::wait_rows_since(db, 1, 3).expect("wait rows");
    since.sort();
    say("wait_rows_since", format!("{since:?}"));
    say(
        "unknown_keys",
        format!("{:?}", mss_key::unknown_keys(db, 10).expect("unknown keys")),
    );
    out
}

#[test]
fn the_readers_answer_on_postgresql_as_on_sqlite() {
    let fixture = Fixture::new();
    let mut answered = Vec::new();
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let test = TestDb::new(backend);
        let conn = test.ledger();
        let db = conn.db();
        let (keys, ids) = write(&db, &fixture);
        answered.push((backend, answers(&db, &fixture, &keys, &ids), ids));
    }
    let (_, sqlite, _) = &answered[0];
    let (_, postgres, pg_ids) = &answered[1];
    for (s, p) in sqlite.iter().zip(postgres) {
        assert_eq!(s, p, "the backends answered differently");
    }
    assert_eq!(sqlite.len(), postgres.len());
    // And the answers are right for the rows written (checked once: they are equal).
    let line = |what: &str| -> &str {
        postgres
            .iter()
            .find(|l| l.starts_with(&format!("{what}: ")))
            .map(|l| &l[what.len() + 2..])
            .unwrap_or_else(|| panic!("no answer {what}"))
    };
    assert_eq!(pg_ids.len(), REQUESTS.len());
    assert!(
        pg_ids.windows(2).all(|w| w[0] < w[1]),
        "ids in insert order"
    );
    assert!(
        line("groups").contains(&format!("usage: {BIG}")),
        "{}",
        line("groups")
    );
    assert!(line("groups").contains(&format!("usage_bytes: {}", BIG * 2 - 1)));
    // Each group's bytes_done was added twice, one hour at a time: past i64, exact.
    assert!(line("report hours").contains(&format!("bytes_done: {}", BIG * 2)));
    assert!(line("event_cursor").contains("\"e7\"") && line("event_cursor").contains("42"));
    assert_eq!(line("meta"), "Some(\"42\")");
    let unknown = line("unknown_keys");
    assert!(
        unknown.contains("events: 2") && unknown.ends_with(", 2)"),
        "{unknown}"
    );
    for (_, _, _, state) in REQUESTS {
        assert!(
            line("state_counts").contains(&format!("{state:?}, 1")),
            "{state:?}"
        );
    }
    let in_flight = line("in_flight");
    assert!(in_flight.contains("r2") && in_flight.contains("r3") && !in_flight.contains("r1"));
    assert!(line("cancelling").contains("r3") && !line("cancelling").contains("r2"));
}

/// The usage book under the windows model: rebuilt from the requests, stored (the groups'
/// decayed figures, the `"window"` rows, the model in `meta`) in a transaction, loaded back.
fn usage_answers(
    db: &Db<'_>,
    conn: &mut crate::ledger::db::DbConn,
    fixture: &Fixture,
) -> Vec<String> {
    let policy = &fixture.settings.policy;
    let mut out = Vec::new();
    let as_of = usage::book_as_of(db, policy, NOW).expect("the book as of now");
    out.push(format!("as of: {as_of:?}"));
    let first = usage::load_book(db, policy, NOW).expect("a book");
    out.push(format!("rebuilt: {} {:?}", first.rebuilt, first.book));
    let tx = conn.transaction().expect("begin");
    usage::persist_rebuilt(&tx, policy, &first.book).expect("stored");
    tx.commit().expect("commit");
    let windows: i64 = conn
        .db()
        .query_one("SELECT COUNT(*) FROM usage_windows", params![], |r| {
            r.get(0)
        })
        .expect("windows");
    out.push(format!("window rows: {windows}"));
    let again = usage::load_book(&conn.db(), policy, NOW).expect("the stored book");
    out.push(format!("loaded: {} {:?}", again.rebuilt, again.book));
    out
}

#[test]
fn the_usage_book_is_rebuilt_stored_and_loaded_alike_on_both_backends() {
    let config = super::CONFIG.replace(
        "[mss]",
        "[usage]\nmodel = \"windows\"\ninterval_secs = 3600\ndepth = 2\n[mss]",
    );
    let fixture = Fixture::with_config(&config);
    let mut answered = Vec::new();
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let test = TestDb::new(backend);
        let mut conn = test.ledger();
        {
            let db = conn.db();
            write(&db, &fixture);
        }
        // Read on a connection of its own, written on the ledger's (as the read pool and the
        // writer do).
        let reader = test.connect();
        answered.push(usage_answers(&reader.db(), &mut conn, &fixture));
    }
    assert_eq!(
        answered[0], answered[1],
        "the backends answered differently"
    );
    let pg = &answered[1];
    assert!(pg[1].starts_with("rebuilt: true"), "{}", pg[1]);
    assert!(pg[3].starts_with("loaded: false"), "{}", pg[3]);
    // One window row per group charged in the window of NOW (every request is charged at NOW).
    let groups: std::collections::BTreeSet<&str> = REQUESTS.iter().map(|r| r.1).collect();
    assert_eq!(pg[2], format!("window rows: {}", groups.len()));
}

/// The round trips of each group the writer commits (PostgreSQL's; none on SQLite).
#[derive(Default)]
struct Trips(std::sync::Mutex<Vec<u64>>);

impl crate::ledger::CommitObserver for Trips {
    fn committed(&self, _seconds: f64, _commands: usize) {}
    fn round_trips(&self, trips: u64) {
        self.0.lock().expect("trips").push(trips);
    }
}

impl Trips {
    /// The most any group took since `from` commits (a tick of the writer's may commit beside
    /// a submission's group, with fewer statements), and how many commits there are now.
    fn most_since(&self, from: usize) -> (Option<u64>, usize) {
        let all = self.0.lock().expect("trips");
        (
            all.get(from..).and_then(|t| t.iter().max().copied()),
            all.len(),
        )
    }
}

/// `fixture`'s ledger opened as `try_open` opens it, reporting its commits' round trips.
fn open_counting(
    f: &Fixture,
    trips: std::sync::Arc<Trips>,
) -> (crate::ledger::Ledger, std::thread::JoinHandle<()>) {
    let options = crate::ledger::LedgerOptions {
        path: f.path.clone(),
        commit_batch_max: 1024,
        url: f.pg.as_ref().and_then(|db| db.url().cloned()),
        epoch: f.epoch,
        retry: crate::domain::RetrySettings {
            max_attempts: 2,
            base: std::time::Duration::from_millis(100),
            max: std::time::Duration::from_millis(1000),
        },
        metrics: trips,
        read_outputs: f.settings.mss.read_outputs(),
    };
    let policy = f.settings.policy.clone();
    let clock = std::sync::Arc::new(f.clock.clone());
    tokio::task::block_in_place(|| crate::ledger::Ledger::open(&options, policy, clock))
        .expect("the ledger opens")
}

/// The most round trips a group took while `items` were accepted (all new).
async fn most_trips(
    l: &crate::ledger::Ledger,
    trips: &Trips,
    items: Vec<crate::ledger::NewRequest>,
) -> Option<u64> {
    let (_, from) = trips.most_since(usize::MAX);
    let a = l.accept(items).await.expect("accepted");
    assert!(a.iter().all(|a| !a.duplicate));
    trips.most_since(from).0
}

/// `n` new reads, `tag0` .. `tag{n-1}`, over two groups' modes.
fn new_reads(f: &Fixture, tag: &str, n: usize) -> Vec<crate::ledger::NewRequest> {
    (0..n)
        .map(|i| {
            let (mode, group) = [("mc", "x"), ("analysis", "higgs")][i % 2];
            f.request(&format!("{tag}{i}"), mode, group, 1_000 + i as u64)
        })
        .collect()
}

/// Issue 42's batched ingest: a group of many new requests, one of them resubmitted and one
/// file read again by another station in the same group, committed through the writer. Each
/// answer names the id its own request got, in order (the rows hold them so), the resubmission
/// answers the first's id as a duplicate and is charged once, the second read rides on the
/// first. On PostgreSQL the rows of a group go to the server together: a group of 40 new
/// requests takes no more round trips than a group of 4 but for one reservation of ids (row by
/// row it took two per request).
async fn a_group_of_new_requests_gets_its_ids_in_order_with_a_resubmission_and_a_rider(
    backend: Backend,
) {
    let f = Fixture::on(backend);
    let trips = std::sync::Arc::new(Trips::default());
    let opened = open_counting(&f, trips.clone());
    let l = opened.0.clone();

    let mut items = new_reads(&f, "g", 40);
    let resubmitted = items[5].clone();
    items.insert(20, resubmitted);
    let mut rider = f.request("rider", "mc", "x", 77);
    rider.input.station = "st-rider".into();
    rider.input.file = items[7].input.file.clone();
    items.insert(30, rider);
    let answers = l.accept(items.clone()).await.expect("accepted");

    assert_eq!(answers.len(), items.len());
    let new: Vec<i64> = (answers.iter())
        .filter(|a| !a.duplicate)
        .map(|a| a.id)
        .collect();
    assert_eq!(new.len(), 41, "40 new requests and the rider");
    assert!(new.windows(2).all(|w| w[0] < w[1]), "ids in order: {new:?}");
    assert!(answers[20].duplicate, "the resubmission replays");
    assert_eq!(answers[20].id, answers[5].id, "with the first's id");
    assert_eq!(answers[30].state, RequestState::Riding);
    for (item, a) in items.iter().zip(&answers) {
        let r = l.request(a.id).await.expect("read").expect("stored");
        assert_eq!(
            (r.station.as_str(), r.client_request_id.as_str()),
            (
                item.input.station.as_str(),
                item.input.client_request_id.as_str()
            ),
            "request {} holds its own row",
            a.id
        );
        if a.state == RequestState::Riding {
            assert_eq!(r.rides_on, Some(answers[7].id), "the rider's carrier");
        }
    }
    let groups = l.groups().await.expect("groups");
    let pending: u64 = groups.iter().map(|g| g.pending).sum();
    assert_eq!(
        pending, 41,
        "each new request counted once, the resubmission not"
    );
    let again = l.accept(vec![items[12].clone()]).await.expect("replayed");
    assert!(again[0].duplicate && again[0].id == answers[12].id);

    // Round trips per group: 40 new requests against 4 (the same groups and hour).
    let small = most_trips(&l, &trips, new_reads(&f, "small", 4)).await;
    let large = most_trips(&l, &trips, new_reads(&f, "large", 40)).await;
    match backend {
        Backend::Sqlite => assert_eq!((small, large), (None, None), "no server, no trips"),
        Backend::Postgres => {
            let (small, large) = (small.expect("counted"), large.expect("counted"));
            assert!(
                large <= small + 1,
                "a group of 40 took {large} round trips, a group of 4 {small}"
            );
        }
    }
    drop(l);
    super::close(opened);
}

on_both_async!(a_group_of_new_requests_gets_its_ids_in_order_with_a_resubmission_and_a_rider);

//! The ledger's PostgreSQL pieces against a real server (pg-cluster): the connection, the
//! rewritten statements, `Wide` as NUMERIC, and the ingest forms. Blocking clients, as the
//! ledger's writer uses; every wait is for a state.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use num_bigint::BigInt;
use pg_cluster::Cluster;
use postgres::Client;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::connect::{connect, ConnectError};
use super::ingest_form::{self, Form, Prepared, Row};
use super::numeric::NumericError;
use super::placeholders::rewrite;
use super::schema;
use crate::database_url::DatabaseUrl;
use crate::ledger::wide::Wide;

fn url(s: &str) -> DatabaseUrl {
    DatabaseUrl::parse(s).expect("a valid url")
}

/// A ledger connection to the cluster, its schema created.
fn ledger(cluster: &Cluster) -> Client {
    let mut client = connect(&url(&cluster.url())).expect("a connection");
    client.batch_execute(schema::SCHEMA).expect("the schema");
    client
}

#[test]
fn the_ledgers_connection_is_named_over_tcp_and_over_the_socket() {
    let cluster = Cluster::start().expect("a cluster");
    for settings in [cluster.url(), cluster.socket_settings()] {
        let mut client = connect(&url(&settings)).expect("a connection");
        let row = client
            .query_one(
                "SELECT application_name, client_addr IS NULL FROM pg_stat_activity \
                 WHERE pid = pg_backend_pid()",
                &[],
            )
            .expect("its session");
        assert_eq!(row.get::<_, String>(0), "mssbroker ledger", "{settings}");
        let over_socket = settings.starts_with("host=/");
        assert_eq!(row.get::<_, bool>(1), over_socket, "{settings}");
    }
    let mut named = connect(&url(&format!(
        "{}?application_name=broker-a",
        cluster.url()
    )))
    .expect("a connection");
    let name: String = named
        .query_one("SHOW application_name", &[])
        .expect("shown")
        .get(0);
    assert_eq!(name, "broker-a ledger");
}

/// Password authentication on TCP for every role but the superuser, in force once a wrong
/// password is refused.
fn require_passwords(cluster: &Cluster) {
    let hba = cluster.socket_dir().join("data").join("pg_hba.conf");
    std::fs::write(
        &hba,
        "local all all trust\n\
         host all postgres 127.0.0.1/32 trust\n\
         host all all 127.0.0.1/32 scram-sha-256\n",
    )
    .expect("pg_hba.conf");
    cluster
        .psql("CREATE ROLE broker LOGIN PASSWORD 'right-pw'; SELECT pg_reload_conf()")
        .expect("a role with a password");
}

fn is_auth_refusal(e: &ConnectError) -> bool {
    matches!(e, ConnectError::Connect { source, .. }
        if source.code() == Some(&postgres::error::SqlState::INVALID_PASSWORD))
}

#[test]
fn a_refused_or_failed_connection_never_shows_the_password() {
    let cluster = Cluster::start().expect("a cluster");
    require_passwords(&cluster);
    let secret = "Wr0ng-s3cret-pw";
    let wrong = url(&format!(
        "postgresql://broker:{secret}@127.0.0.1:{}/postgres",
        cluster.port()
    ));
    // The reload is in force once the server refuses the wrong password.
    let deadline = Instant::now() + Duration::from_secs(30);
    let refused = loop {
        match connect(&wrong) {
            Err(e) if is_auth_refusal(&e) => break e,
            other => {
                let other = other.err().map(|e| e.to_string());
                assert!(Instant::now() < deadline, "never refused: {other:?}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    let right = format!(
        "postgresql://broker:right-pw@127.0.0.1:{}/postgres",
        cluster.port()
    );
    connect(&url(&right)).expect("the right password is taken");

    // Nothing listening: a connection error, not an answer from the server.
    let port = cluster.port();
    cluster.stop_immediately().expect("stopped");
    let Err(failed) = connect(&wrong) else {
        panic!("connected with nothing listening")
    };
    for e in [&refused, &failed] {
        let mut shown = vec![e.to_string(), format!("{e:?}")];
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            shown.push(s.to_string());
            shown.push(format!("{s:?}"));
            source = s.source();
        }
        for text in &shown {
            assert!(!text.contains(secret), "the password shown: {text}");
        }
        assert!(
            shown[0].contains(&format!("postgresql://broker@127.0.0.1:{port}/postgres")),
            "{}",
            shown[0]
        );
    }
}

/// The statements of the accept path and the finishing of a request's key, rewritten, on the
/// server: each prepared, run, and its effect read back.
#[test]
fn rewritten_ledger_statements_run_on_postgresql() {
    let cluster = Cluster::start().expect("a cluster");
    let mut client = ledger(&cluster);
    let prepared = Prepared::new(&mut client).expect("the accept path's statements");
    let rows: Vec<Row> = (0..3).map(|i| Row::sample(i, 1_700_000_000_000)).collect();
    let ids = ingest_form::pg_group(&mut client, &prepared, Form::PerRow, &rows).expect("written");

    let replay = rewrite(
        "SELECT id, group_path, class, mss_priority, state, held_reason FROM requests \
         WHERE id = ?1 AND station = ?2 AND client_request_id = ?3",
    )
    .expect("rewritten");
    let row = client
        .query_one(
            &replay,
            &[&ids[1], &rows[1].station, &rows[1].client_request_id],
        )
        .expect("the replay");
    assert_eq!(row.get::<_, i64>(0), ids[1]);
    assert_eq!(row.get::<_, String>(4), "accepted");
    assert_eq!(row.get::<_, Option<String>>(5), None);

    let finish =
        rewrite("DELETE FROM idempotency WHERE id = ?1 RETURNING fingerprint").expect("ok");
    let fp: i64 = client
        .query_one(&finish, &[&ids[0]])
        .expect("its key")
        .get(0);
    assert_eq!(fp, rows[0].fingerprint);
    let keep = rewrite(
        "INSERT INTO idempotency_finished (fingerprint, id) VALUES (?1, ?2) \
         ON CONFLICT DO NOTHING",
    )
    .expect("ok");
    assert_eq!(client.execute(&keep, &[&fp, &ids[0]]).expect("kept"), 1);
    assert_eq!(client.execute(&keep, &[&fp, &ids[0]]).expect("again"), 0);

    let decayed = rewrite("UPDATE groups SET decayed = ?2 WHERE path = ?1").expect("ok");
    assert_eq!(
        client
            .execute(&decayed, &[&"/exp/raw", &0.5f64])
            .expect("set"),
        1
    );
    let (usage, pending): (Wide, i64) = {
        let r = client
            .query_one(
                "SELECT usage, pending FROM groups WHERE path = '/exp/raw'",
                &[],
            )
            .expect("the group");
        (r.get(0), r.get(1))
    };
    let charged: i128 = rows.iter().map(|r| i128::from(r.size_bytes >> 20)).sum();
    assert_eq!((usage, pending), (Wide(charged), 3));
}

/// Literals, comments and parameters of random statements come back from PostgreSQL's parser
/// as they were written for SQLite.
#[test]
fn rewritten_statements_keep_their_literals_on_the_server() {
    let cluster = Cluster::start().expect("a cluster");
    let client = RefCell::new(connect(&url(&cluster.url())).expect("a connection"));
    let text = "[a-z0-9 ?'\"*/\\-$é]{0,16}";
    let strategy = (text, text, any::<i64>(), any::<i64>());
    let mut runner = TestRunner::new(Config::with_cases(64));
    runner
        .run(&strategy, |(a, b, x, y)| {
            let sqlite = format!(
                "SELECT '{}', ?2::bigint /* {} */, '{}', ?1::bigint -- ?3 '\n",
                a.replace('\'', "''"),
                b.replace('*', ""),
                b.replace('\'', "''"),
            );
            let sql = rewrite(&sqlite).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let row = client
                .borrow_mut()
                .query_one(&sql, &[&x, &y])
                .map_err(|e| TestCaseError::fail(format!("{sql}: {e}")))?;
            prop_assert_eq!(row.get::<_, String>(0), a);
            prop_assert_eq!(row.get::<_, i64>(1), y);
            prop_assert_eq!(row.get::<_, String>(2), b);
            prop_assert_eq!(row.get::<_, i64>(3), x);
            Ok(())
        })
        .expect("every statement");
}

/// Any `Wide`, with more of the values near the edges and of ledger-like size.
fn wide() -> impl Strategy<Value = i128> {
    prop_oneof![
        any::<i128>(),
        any::<i64>().prop_map(i128::from),
        -10_000i128..10_000,
        Just(i128::MAX),
        Just(i128::MIN),
        (0u32..127).prop_map(|p| 1i128 << p),
        // Trailing zero digits, which PostgreSQL leaves out of the binary form.
        (any::<i32>(), 0u32..29).prop_map(|(m, e)| i128::from(m) * 10i128.pow(e)),
    ]
}

/// The exact sum, when within `i128` (as the `wide` domain takes it).
fn exact_sum(values: &[i128]) -> Option<i128> {
    let sum: BigInt = values.iter().map(|&v| BigInt::from(v)).sum();
    i128::try_from(sum).ok()
}

#[test]
fn wide_round_trips_as_numeric_and_adds_as_wide_does() {
    let cluster = Cluster::start().expect("a cluster");
    let client = RefCell::new(ledger(&cluster));
    client
        .borrow_mut()
        .batch_execute("CREATE TABLE w (n BIGINT, v wide NOT NULL)")
        .expect("a table");
    let strategy = (wide(), wide(), prop::collection::vec(wide(), 0..6));
    let mut runner = TestRunner::new(Config::with_cases(200));
    let mut case = 0i64;
    let case = RefCell::new(&mut case);
    runner
        .run(&strategy, |(a, b, many)| {
            let mut c = client.borrow_mut();
            let n = {
                let mut k = case.borrow_mut();
                **k += 1;
                **k
            };
            // Written as NUMERIC's binary form; read back as it and as PostgreSQL's text.
            let row = c
                .query_one("SELECT $1::wide, $1::wide::text", &[&Wide(a)])
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(row.get::<_, Wide>(0), Wide(a));
            prop_assert_eq!(row.get::<_, String>(1), a.to_string());
            // wide_add: exact, or refused past i128, as Wide's own arithmetic.
            let added = c.query_one("SELECT wide_add($1, $2)", &[&Wide(a), &Wide(b)]);
            match (added, a.checked_add(b)) {
                (Ok(r), Some(sum)) => prop_assert_eq!(r.get::<_, Wide>(0), Wide(sum)),
                (Err(_), None) => {}
                (r, expected) => {
                    prop_assert!(false, "wide_add({a}, {b}): {r:?}, expected {expected:?}")
                }
            }
            // wide_sum over stored rows: the exact sum when it is within i128, else refused.
            for v in &many {
                c.execute("INSERT INTO w (n, v) VALUES ($1, $2)", &[&n, &Wide(*v)])
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
            }
            let summed = c.query_one("SELECT wide_sum(v) FROM w WHERE n = $1", &[&n]);
            match (summed, exact_sum(&many)) {
                (Ok(r), Some(sum)) => prop_assert_eq!(r.get::<_, Wide>(0), Wide(sum)),
                (Err(_), None) => {}
                (r, expected) => {
                    prop_assert!(false, "wide_sum({many:?}): {r:?}, expected {expected:?}")
                }
            }
            Ok(())
        })
        .expect("every value");
}

/// What reading `sql`'s one value as a `Wide` was refused with.
fn refusal(client: &mut Client, sql: &str) -> Option<NumericError> {
    let row = client.query_one(sql, &[]).expect("a value");
    let e = row.try_get::<_, Wide>(0).expect_err("not a Wide");
    let source = std::error::Error::source(&e)?;
    source.downcast_ref::<NumericError>().cloned()
}

#[test]
fn nan_infinity_fractions_and_values_past_i128_are_refused_with_their_errors() {
    let cluster = Cluster::start().expect("a cluster");
    let mut c = ledger(&cluster);
    let cases = [
        ("SELECT 'NaN'::numeric", NumericError::NotANumber),
        ("SELECT 'Infinity'::numeric", NumericError::Infinite),
        ("SELECT '-Infinity'::numeric", NumericError::Infinite),
        ("SELECT 1.5::numeric", NumericError::NotAnInteger),
        ("SELECT -0.0001::numeric", NumericError::NotAnInteger),
        (
            "SELECT 170141183460469231731687303715884105728::numeric",
            NumericError::OutOfRange,
        ),
        (
            "SELECT -170141183460469231731687303715884105729::numeric",
            NumericError::OutOfRange,
        ),
        ("SELECT 1e60::numeric", NumericError::OutOfRange),
    ];
    for (sql, expected) in cases {
        assert_eq!(refusal(&mut c, sql), Some(expected), "{sql}");
    }
    // What the server writes with a scale, trailing zero digits, or at the edges, is read.
    let row = c
        .query_one(
            "SELECT 5.000::numeric, 100000000::numeric, 1e30::numeric, \
             (-170141183460469231731687303715884105728)::wide, 0::numeric",
            &[],
        )
        .expect("values");
    let read: Vec<Wide> = (0..5).map(|i| row.get(i)).collect();
    assert_eq!(
        read,
        [
            Wide(5),
            Wide(100_000_000),
            Wide(10i128.pow(30)),
            Wide(i128::MIN),
            Wide(0)
        ]
    );
    // A Wide is bound only where NUMERIC is expected.
    let wrong = c.query_one("SELECT $1::bigint", &[&Wide(1)]);
    assert!(wrong.is_err(), "{wrong:?}");
}

/// Every form writes the same rows and counters as the SQLite ledger's group commit.
#[test]
fn every_ingest_form_writes_what_the_sqlite_ledger_writes() {
    let cluster = Cluster::start().expect("a cluster");
    let mut client = ledger(&cluster);
    let prepared = Prepared::new(&mut client).expect("prepared");
    let dir = tempfile::tempdir().expect("a directory");
    let mut sqlite = ingest_form::open_sqlite(&dir.path().join("l.db")).expect("a ledger");
    let now = 1_700_000_000_000;
    let mut next = 0u64;
    let mut group = |n: u64| {
        let rows: Vec<Row> = (next..next + n).map(|i| Row::sample(i, now)).collect();
        next += n;
        rows
    };
    let mut written = Vec::new();
    for form in Form::ALL {
        let rows = group(4);
        let ids = ingest_form::pg_group(&mut client, &prepared, form, &rows).expect("written");
        let lite = ingest_form::sqlite_group(&mut sqlite, &rows).expect("written on SQLite");
        assert_eq!(ids.len(), 4, "{form:?}");
        written.push((form, ids, lite, rows));
    }
    let record = "SELECT station, client_request_id, file, size_bytes, explain, state, \
                  charged, charged_ms, user_factor IS NULL FROM requests WHERE id = ?1";
    let pg_record = rewrite(record).expect("ok");
    for (form, ids, lite, rows) in &written {
        for ((id, lite_id), row) in ids.iter().zip(lite).zip(rows) {
            let p = client.query_one(&pg_record, &[id]).expect("the row");
            let s = sqlite
                .query_row(record, [lite_id], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, i64>(3)?,
                        r.get::<_, String>(4)?,
                        r.get::<_, String>(5)?,
                        r.get::<_, i64>(6)?,
                        r.get::<_, i64>(7)?,
                        r.get::<_, bool>(8)?,
                    ))
                })
                .expect("the SQLite row");
            let pg = (
                p.get::<_, String>(0),
                p.get::<_, String>(1),
                p.get::<_, String>(2),
                p.get::<_, i64>(3),
                p.get::<_, String>(4),
                p.get::<_, String>(5),
                p.get::<_, i64>(6),
                p.get::<_, i64>(7),
                p.get::<_, bool>(8),
            );
            assert_eq!(pg, s, "{form:?}");
            assert_eq!(pg.1, row.client_request_id);
            let fp: i64 = client
                .query_one("SELECT fingerprint FROM idempotency WHERE id = $1", &[id])
                .expect("its key")
                .get(0);
            assert_eq!(fp, row.fingerprint, "{form:?}");
        }
    }
    let pg_counters = client
        .query_one(
            "SELECT g.usage, g.usage_bytes, g.pending, w.usage, h.accepted \
             FROM groups g, usage_windows w, report_hours h",
            &[],
        )
        .expect("the counters");
    let lite_counters = sqlite
        .query_row(
            "SELECT g.usage, g.usage_bytes, g.pending, w.usage, h.accepted \
             FROM groups g, usage_windows w, report_hours h",
            [],
            |r| {
                Ok((
                    r.get::<_, Wide>(0)?,
                    r.get::<_, Wide>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, Wide>(3)?,
                    r.get::<_, i64>(4)?,
                ))
            },
        )
        .expect("the SQLite counters");
    let pg = (
        pg_counters.get::<_, Wide>(0),
        pg_counters.get::<_, Wide>(1),
        pg_counters.get::<_, i64>(2),
        pg_counters.get::<_, Wide>(3),
        pg_counters.get::<_, i64>(4),
    );
    assert_eq!(pg, lite_counters);
    assert_eq!(pg.2, 12);
    let count: i64 = client
        .query_one(
            "SELECT count(*) FROM requests r JOIN idempotency i USING (id)",
            &[],
        )
        .expect("counted")
        .get(0);
    assert_eq!(count, 12);
}

//! The PostgreSQL schema against a real cluster (pg-cluster), and against the SQLite schema it
//! translates.

use std::collections::BTreeMap;

use pg_cluster::Cluster;
use postgres::{Client, NoTls};

use super::schema::{self, PgSchemaError};
use crate::ledger::db::tests::testdb::{on_both, Backend, TestDb};
use crate::ledger::db::{params, Dialect};
use crate::ledger::LedgerError;

/// A ledger connection (the blocking client of `connect.rs`) to `cluster`, its schema created:
/// where the server tests of the PostgreSQL pieces start.
pub(in crate::ledger::postgres) fn ledger_client(cluster: &Cluster) -> postgres::Client {
    let url = crate::database_url::DatabaseUrl::parse(&cluster.url()).expect("the cluster's url");
    let mut client = super::connect::connect(&url).expect("a connection");
    client.batch_execute(schema::SCHEMA).expect("the schema");
    client
}

fn connect(cluster: &Cluster) -> Client {
    Client::connect(&cluster.url(), NoTls).expect("a connection")
}

/// Columns by table: (name, type, not null).
type Columns = BTreeMap<String, Vec<(String, String, bool)>>;

fn pg_columns(client: &mut Client) -> Columns {
    let mut out = Columns::new();
    for r in client
        .query(
            "SELECT table_name::text, column_name::text, data_type::text, is_nullable = 'NO'
             FROM information_schema.columns WHERE table_schema = current_schema()
             ORDER BY table_name, ordinal_position",
            &[],
        )
        .expect("columns")
    {
        out.entry(r.get(0))
            .or_default()
            .push((r.get(1), r.get(2), r.get(3)));
    }
    out
}

fn pg_indexes(client: &mut Client) -> Vec<String> {
    client
        .query(
            "SELECT indexname::text FROM pg_indexes WHERE schemaname = current_schema()
             AND indexname NOT LIKE '%_pkey' ORDER BY 1",
            &[],
        )
        .expect("indexes")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// The SQLite ledger's columns and indexes at `ledger::schema::LATEST`, from a new file.
fn sqlite_schema() -> (Columns, Vec<String>) {
    let dir = tempfile::tempdir().expect("a directory");
    let conn = crate::ledger::schema::open_writer(&dir.path().join("l.db")).expect("a ledger");
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .expect("tables");
    let mut columns = Columns::new();
    for t in tables {
        let cols: Vec<(String, String, bool)> = conn
            .prepare(&format!(
                "SELECT name, type, \"notnull\" OR pk FROM pragma_table_info('{t}') ORDER BY cid"
            ))
            .and_then(|mut s| {
                s.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                    .collect()
            })
            .expect("columns");
        columns.insert(t, cols);
    }
    let indexes = conn
        .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'index'
             AND name NOT LIKE 'sqlite_autoindex%' ORDER BY name",
        )
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .expect("indexes");
    (columns, indexes)
}

/// The wide sums: TEXT decimals on SQLite, NUMERIC here.
const WIDE: &[(&str, &str)] = &[
    ("groups", "usage"),
    ("groups", "usage_bytes"),
    ("usage_windows", "usage"),
    ("report_hours", "bytes_done"),
    ("report_hours", "benefit_done"),
];

fn translated(table: &str, column: &str, sqlite_type: &str) -> &'static str {
    if WIDE.contains(&(table, column)) {
        return "numeric";
    }
    match sqlite_type {
        "INTEGER" => "bigint",
        "REAL" => "double precision",
        _ => "text",
    }
}

#[test]
fn both_backends_are_at_the_same_version() {
    // A new SQLite step needs its PostgreSQL step (same number, same tables).
    assert_eq!(schema::LATEST, crate::ledger::schema::LATEST);
}

#[test]
fn the_schema_is_created_on_an_empty_database_as_sqlite_has_it() {
    let cluster = Cluster::start().expect("a cluster");
    let mut client = connect(&cluster);
    assert_eq!(schema::migrate(&mut client).expect("created"), 0);
    assert_eq!(
        schema::version(&mut client).expect("version"),
        schema::LATEST
    );

    let (sqlite, sqlite_indexes) = sqlite_schema();
    let pg = pg_columns(&mut client);
    assert_eq!(
        pg.keys().collect::<Vec<_>>(),
        sqlite.keys().collect::<Vec<_>>(),
        "tables"
    );
    for (table, columns) in &sqlite {
        let expected: Vec<(String, String, bool)> = columns
            .iter()
            .map(|(c, t, not_null)| (c.clone(), translated(table, c, t).to_string(), *not_null))
            .collect();
        let mut expected_sorted = expected.clone();
        expected_sorted.sort();
        let mut found = pg[table].clone();
        found.sort();
        assert_eq!(found, expected_sorted, "the columns of {table}");
    }
    assert_eq!(pg_indexes(&mut client), sqlite_indexes, "indexes");
}

#[test]
fn a_second_start_changes_nothing() {
    let cluster = Cluster::start().expect("a cluster");
    let mut client = connect(&cluster);
    schema::migrate(&mut client).expect("created");
    let instance = schema::instance(&mut client).expect("an instance id");
    client
        .execute("INSERT INTO groups (path, usage) VALUES ('/a', 5)", &[])
        .expect("a row");
    assert_eq!(schema::migrate(&mut client).expect("again"), schema::LATEST);
    assert_eq!(schema::instance(&mut client).expect("again"), instance);
    let usage: String = client
        .query_one("SELECT usage::text FROM groups WHERE path = '/a'", &[])
        .expect("kept")
        .get(0);
    assert_eq!(usage, "5");
}

#[test]
fn a_newer_schema_is_refused_and_left_as_it_is() {
    let cluster = Cluster::start().expect("a cluster");
    let mut client = connect(&cluster);
    schema::migrate(&mut client).expect("created");
    let newer = schema::LATEST + 1;
    client
        .execute(
            "UPDATE meta SET value = $1 WHERE key = 'schema_version'",
            &[&newer.to_string()],
        )
        .expect("a newer version");
    match schema::migrate(&mut client) {
        Err(PgSchemaError::SchemaTooNew { found, known }) => {
            assert_eq!((found, known), (newer, schema::LATEST))
        }
        other => panic!("a newer schema was not refused: {other:?}"),
    }
    assert_eq!(schema::version(&mut client).expect("version"), newer);
}

#[test]
fn another_applications_tables_are_not_created_over() {
    let cluster = Cluster::start().expect("a cluster");
    let mut client = connect(&cluster);
    client
        .batch_execute("CREATE TABLE groups (gid int)")
        .expect("a foreign table");
    assert!(matches!(
        schema::migrate(&mut client),
        Err(PgSchemaError::NotOurs { table }) if table == "groups"
    ));
    assert_eq!(schema::version(&mut client).expect("version"), 0);
}

#[test]
fn brokers_starting_together_create_the_schema_once() {
    let cluster = Cluster::start().expect("a cluster");
    let (mut a, mut b) = (connect(&cluster), connect(&cluster));
    let (ra, rb) = std::thread::scope(|s| {
        let ra = s.spawn(|| schema::migrate(&mut a));
        let rb = s.spawn(|| schema::migrate(&mut b));
        (ra.join().expect("a"), rb.join().expect("b"))
    });
    let mut froms = [ra.expect("a"), rb.expect("b")];
    froms.sort();
    assert_eq!(froms, [0, schema::LATEST]);
}

/// The ledger's statement text for SQLite with its `?N` as PostgreSQL's `$N`.
fn dollars(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        let numbered = c == '?' && chars.peek().is_some_and(char::is_ascii_digit);
        out.push(if numbered { '$' } else { c });
    }
    out
}

#[test]
fn wide_sums_are_exact_past_i64_with_the_ledgers_upsert() {
    let cluster = Cluster::start().expect("a cluster");
    let mut client = connect(&cluster);
    schema::migrate(&mut client).expect("created");
    // The writer's upsert of a group's deltas (writer/state.rs) with the two changes
    // PostgreSQL needs (docs/ha.md): the target's columns qualified (an unqualified `usage`
    // beside `excluded` is ambiguous there; SQLite takes either), and the wide parameters cast
    // from text until `Wide` binds as NUMERIC.
    let upsert = dollars(
        "INSERT INTO groups(path, usage, usage_bytes, pending, held) \
         VALUES (?1, ?2::text::wide, ?3::text::wide, ?4, ?5) \
         ON CONFLICT(path) DO UPDATE SET usage = wide_add(groups.usage, excluded.usage), \
         usage_bytes = wide_add(groups.usage_bytes, excluded.usage_bytes), \
         pending = groups.pending + excluded.pending, \
         held = groups.held + excluded.held",
    );
    let near = (i128::MAX - 1).to_string();
    let big = i64::MAX.to_string();
    for (path, usage) in [
        ("/a", near.as_str()),
        ("/a", "1"),
        ("/b", &big),
        ("/c", &big),
    ] {
        client
            .execute(&upsert, &[&path, &usage, &"0", &1i64, &0i64])
            .expect("an upsert");
    }
    let row = client
        .query_one(
            "SELECT (SELECT usage::text FROM groups WHERE path = '/a'),
                    (SELECT wide_sum(usage)::text FROM groups WHERE path IN ('/b', '/c')),
                    (SELECT wide_sum(usage)::text FROM groups WHERE path = '/none')",
            &[],
        )
        .expect("read");
    assert_eq!(row.get::<_, String>(0), i128::MAX.to_string());
    assert_eq!(
        row.get::<_, String>(1),
        (2 * i128::from(i64::MAX)).to_string()
    );
    assert_eq!(row.get::<_, String>(2), "0", "wide_sum over no rows");
    // Past i128 the sum is refused (as SQLite's wide_add refuses), not rounded or stored.
    let over = client.execute(&upsert, &[&"/a", &"1", &"0", &0i64, &0i64]);
    assert!(over.is_err(), "a sum past i128 was stored");
    let past = client.query_one(
        "SELECT wide_sum(usage)::text FROM groups WHERE path IN ('/a', '/b')",
        &[],
    );
    assert!(past.is_err(), "wide_sum past i128 answered");
}

on_both!(the_ledger_refuses_a_newer_schema_with_the_same_error_on_both_backends);

/// The broker's opening of its ledger (`schema::open_writer`, `postgres::open`) refuses a
/// database written by a newer build with one error, naming where the database is and both
/// versions, and leaves it as it was.
fn the_ledger_refuses_a_newer_schema_with_the_same_error_on_both_backends(backend: Backend) {
    let test = TestDb::new(backend);
    let newer = crate::ledger::schema::LATEST + 1;
    {
        let conn = test.ledger();
        let db = conn.db();
        db.execute("INSERT INTO groups (path) VALUES (?1)", params!["/kept"])
            .expect("a row");
        db.execute_batch(&match db.dialect() {
            Dialect::Sqlite => format!("PRAGMA user_version = {newer}"),
            Dialect::Postgres => {
                format!("UPDATE meta SET value = '{newer}' WHERE key = 'schema_version'")
            }
        })
        .expect("a newer version");
    }
    let refused = match test.open_ledger() {
        Err(e) => e,
        Ok(_) => panic!("a newer schema was opened"),
    };
    match &refused {
        LedgerError::SchemaTooNew { found, known, .. } => {
            assert_eq!((*found, *known), (newer, crate::ledger::schema::LATEST))
        }
        e => panic!("refused with another error: {e}"),
    }
    let shown = refused.to_string();
    assert!(
        shown.starts_with(&format!(
            "the database {} has schema version {newer}",
            test.shown()
        )),
        "{shown}"
    );
    // Left as it was: the version and the rows (read without the ledger's opening).
    let conn = test.connect();
    let db = conn.db();
    let version: i64 = match db.dialect() {
        Dialect::Sqlite => db.query_one("PRAGMA user_version", params![], |r| r.get(0)),
        Dialect::Postgres => db.query_one(
            "SELECT CAST(value AS BIGINT) FROM meta WHERE key = 'schema_version'",
            params![],
            |r| r.get(0),
        ),
    }
    .expect("the version");
    assert_eq!(version, newer);
    assert!(db
        .exists("SELECT 1 FROM groups WHERE path = ?1", params!["/kept"])
        .expect("the row"));
}

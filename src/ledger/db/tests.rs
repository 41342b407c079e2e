//! The `Db` layer on a real SQLite file: typed reads, a bad value a typed error, the statement
//! cache, transactions and the read snapshot.

use super::*;
use crate::ledger::wide::Wide;

fn open(dir: &tempfile::TempDir) -> DbConn {
    let conn = rusqlite::Connection::open(dir.path().join("t.db")).expect("open");
    conn.execute_batch(
        "PRAGMA journal_mode=WAL;
         CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER, f REAL, s TEXT, w TEXT, b BLOB);",
    )
    .expect("schema");
    DbConn::from_sqlite(conn)
}

fn insert(db: &Db<'_>, n: &dyn Param, s: &dyn Param, w: &dyn Param) -> DbResult<usize> {
    db.execute("INSERT INTO t (n, s, w) VALUES (?1, ?2, ?3)", &[n, s, w])
}

#[test]
fn integers_read_as_the_narrower_types_the_ledger_asks_for() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open(&dir);
    let db = db.db();
    let big = i128::from(i64::MAX) * 4;
    insert(&db, &7u32, &"seven", &Wide(big)).expect("insert");
    db.execute("UPDATE t SET f = ?1, b = ?2", params![2.5, vec![1u8, 2]])
        .expect("update");
    let (flag, n32, nusize, n64, s, w, f, b) = db
        .query_one("SELECT n, n, n, n, s, w, f, b FROM t", params![], |r| {
            Ok((
                r.get::<bool>(0)?,
                r.get::<u32>(1)?,
                r.get::<usize>("n")?,
                r.get::<u64>(3)?,
                r.get::<String>("s")?,
                r.get::<Wide>(5)?,
                r.get::<f64>(6)?,
                r.get::<Vec<u8>>(7)?,
            ))
        })
        .expect("read");
    assert!(flag);
    assert_eq!((n32, nusize, n64), (7, 7, 7));
    assert_eq!(s, "seven");
    assert_eq!(w, Wide(big), "a wide sum round-trips exactly past i64");
    assert_eq!(f, 2.5);
    assert_eq!(b, vec![1, 2]);
    let none: Option<i64> = db
        .query_one("SELECT NULL", params![], |r| r.get(0))
        .expect("null");
    assert_eq!(none, None);
    let zero: bool = db
        .query_one("SELECT 0", params![], |r| r.get(0))
        .expect("flag");
    assert!(!zero);
    let widened: Wide = db
        .query_one("SELECT 41", params![], |r| r.get(0))
        .expect("an INTEGER reads as a wide sum");
    assert_eq!(widened, Wide(41));
}

#[test]
fn a_value_that_does_not_fit_its_type_is_a_column_error_naming_the_column() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open(&dir);
    let db = db.db();
    insert(&db, &-1i64, &"x", &"not a number").expect("insert");
    let read = |sql: &str| -> DbError {
        db.query_one(sql, params![], |r| r.get::<u32>(0))
            .expect_err("must not read")
    };
    for (sql, column) in [("SELECT n FROM t", "0"), ("SELECT s FROM t", "0")] {
        match read(sql) {
            DbError::Column { column: c, .. } => assert_eq!(c, column, "{sql}"),
            e => panic!("{sql}: {e}"),
        }
    }
    let e = db
        .query_one("SELECT n FROM t", params![], |r| r.get::<u32>("n"))
        .expect_err("negative");
    assert!(e.to_string().contains("out of range for u32"), "{e}");
    let e = db
        .query_one("SELECT ?1", params![i64::MAX], |r| r.get::<u32>(0))
        .expect_err("too big");
    assert!(e.to_string().contains("out of range"), "{e}");
    let e = db
        .query_one("SELECT w FROM t", params![], |r| r.get::<Wide>("w"))
        .expect_err("not a decimal");
    assert!(matches!(e, DbError::Column { .. }), "{e}");
    let e = db
        .query_one("SELECT n FROM t", params![], |r| r.get::<i64>("nope"))
        .expect_err("unknown column");
    assert!(e.to_string().contains("nope"), "{e}");
    assert!(matches!(
        db.query_one("SELECT n FROM t WHERE id = -5", params![], |r| r
            .get::<i64>(0)),
        Err(DbError::NoRow)
    ));
}

#[test]
fn a_parameter_past_the_largest_integer_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open(&dir);
    let db = db.db();
    let e = insert(&db, &(i64::MAX as u64 + 1), &"x", &None::<Wide>).expect_err("refused");
    assert!(e.to_string().contains("past the largest INTEGER"), "{e}");
    let e = insert(&db, &usize::MAX, &"x", &None::<Wide>).expect_err("refused");
    assert!(e.to_string().contains("usize"), "{e}");
    let rows: i64 = db
        .query_one("SELECT COUNT(*) FROM t", params![], |r| r.get(0))
        .expect("count");
    assert_eq!(rows, 0);
    insert(&db, &(i64::MAX as u64), &None::<&str>, &None::<Wide>).expect("i64::MAX fits");
}

#[test]
fn a_statement_is_compiled_once_and_reused_from_the_cache() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open(&dir);
    let db = db.db();
    let sql = "INSERT INTO t (n) VALUES (?1)";
    for n in 0..3i64 {
        db.execute(sql, params![n]).expect("insert");
    }
    let runs = |stmt: &Stmt<'_>| match &stmt.inner {
        StmtInner::Sqlite(s) => s.get_status(rusqlite::StatementStatus::Run),
    };
    let stmt = db.prepare(sql).expect("prepare");
    assert_eq!(
        runs(&stmt),
        3,
        "the three runs were of this one compiled statement"
    );
    drop(stmt);
    let other = db
        .prepare("INSERT INTO t (n) VALUES (?1 + 0)")
        .expect("prepare");
    assert_eq!(runs(&other), 0, "another text is another statement");
}

#[test]
fn a_transaction_commits_or_rolls_back_and_lends_itself_as_a_db() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut conn = open(&dir);
    let count = |db: &Db<'_>| -> i64 {
        db.query_one("SELECT COUNT(*) FROM t", params![], |r| r.get(0))
            .expect("count")
    };
    {
        let tx = conn.transaction().expect("begin");
        insert(&tx, &1i64, &"a", &None::<Wide>).expect("insert");
        assert_eq!(count(&tx), 1);
    }
    assert_eq!(count(&conn.db()), 0, "dropped: rolled back");
    let tx = conn.transaction().expect("begin");
    insert(&tx, &1i64, &"a", &None::<Wide>).expect("insert");
    tx.commit().expect("commit");
    assert_eq!(count(&conn.db()), 1);
    let tx = conn.transaction().expect("begin");
    insert(&tx, &2i64, &"b", &None::<Wide>).expect("insert");
    tx.rollback().expect("rollback");
    assert_eq!(count(&conn.db()), 1);
}

#[test]
fn a_snapshot_keeps_reading_the_commit_it_began_at() {
    let dir = tempfile::tempdir().expect("tempdir");
    let writer = open(&dir);
    let writer = writer.db();
    let reader =
        DbConn::from_sqlite(rusqlite::Connection::open(dir.path().join("t.db")).expect("open"));
    let count = |db: &Db<'_>| -> i64 {
        db.query_one("SELECT COUNT(*) FROM t", params![], |r| r.get(0))
            .expect("count")
    };
    let reader = reader.db();
    let snap = reader.snapshot().expect("snapshot");
    insert(&writer, &1i64, &"a", &None::<Wide>).expect("insert");
    assert_eq!(count(&snap), 0, "the snapshot was fixed before the insert");
    drop(snap);
    assert_eq!(count(&reader), 1);
}

#[test]
fn rows_stream_one_at_a_time_and_an_error_stops_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open(&dir);
    let db = db.db();
    for n in 1..=4i64 {
        insert(&db, &n, &"x", &None::<Wide>).expect("insert");
    }
    let all = db
        .query_rows("SELECT n FROM t ORDER BY n", params![], |r| r.get::<i64>(0))
        .expect("rows");
    assert_eq!(all, vec![1, 2, 3, 4]);
    let mut seen = Vec::new();
    let stopped: Result<(), DbError> = db.for_each("SELECT n FROM t ORDER BY n", params![], |r| {
        let n: i64 = r.get(0)?;
        seen.push(n);
        if n == 2 {
            return Err(DbError::column(0, "stop"));
        }
        Ok(())
    });
    assert!(stopped.is_err());
    assert_eq!(seen, vec![1, 2]);
    assert!(db
        .exists("SELECT 1 FROM t WHERE n = ?1", params![3i64])
        .expect("exists"));
    assert!(!db
        .exists("SELECT 1 FROM t WHERE n = ?1", params![9i64])
        .expect("exists"));
}

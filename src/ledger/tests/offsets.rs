//! A byte offset from the station (issue 38): stored in its own column beside the file
//! sequence number, read back by the record, the submit step and the export, and added by
//! schema version 12 to a database of version 11 whose rows keep no offset.

use super::*;
use crate::ledger::LedgerReader;

/// A read on `V1` at file sequence number `position`, starting `offset` bytes in.
fn placed(f: &Fixture, crid: &str, position: u64, offset: Option<u64>) -> NewRequest {
    let mut r = f.request(crid, "mc", "x", 100);
    r.input.volume = Some("V1".into());
    r.input.extras.position = Some(position);
    r.input.extras.offset_bytes = offset;
    r
}

/// (id, offset_bytes) of every request, as the export reads them.
fn exported(f: &Fixture) -> Vec<(i64, Option<u64>)> {
    let export = || {
        let reader = match &f.pg {
            Some(db) => LedgerReader { conn: db.connect() },
            None => LedgerReader::open(&f.path).unwrap(),
        };
        let mut out = Vec::new();
        reader
            .for_each_request::<LedgerError>(None, None, |r| {
                out.push((r.id, r.offset_bytes));
                Ok(())
            })
            .unwrap();
        out
    };
    match f.pg {
        // The PostgreSQL client blocks on a runtime of its own: not on an async thread.
        Some(_) => tokio::task::block_in_place(export),
        None => export(),
    }
}

fn columns(f: &Fixture) -> Vec<String> {
    let c = rusqlite::Connection::open(&f.path).unwrap();
    let mut stmt = c
        .prepare("SELECT name FROM pragma_table_info('requests')")
        .unwrap();
    let names = stmt.query_map([], |r| r.get(0)).unwrap();
    names.map(Result::unwrap).collect()
}

async fn an_offset_is_kept_apart_from_the_sequence_number_through_record_submit_and_export(
    backend: Backend,
) {
    let f = Fixture::on(backend);
    let opened = f.open();
    let l = &opened.0;
    let far = 17_000_000_000_000;
    let with = accept(l, placed(&f, "with", 3, Some(far))).await.id;
    let without = accept(l, placed(&f, "without", 4, None)).await.id;
    let r = l.request(with).await.unwrap().unwrap();
    assert_eq!((r.position, r.offset_bytes), (Some(3), Some(far)));
    let r = l.request(without).await.unwrap().unwrap();
    assert_eq!((r.position, r.offset_bytes), (Some(4), None));
    let ready = l.to_submit(0, i64::MAX / 2, 10).await.unwrap();
    let sent: Vec<_> = ready
        .iter()
        .map(|t| (t.id, t.position, t.offset_bytes))
        .collect();
    assert_eq!(
        sent,
        vec![(with, Some(3), Some(far)), (without, Some(4), None)]
    );
    close(opened);
    assert_eq!(exported(&f), vec![(with, Some(far)), (without, None)]);
}

// SQLite-only: it rewinds the file's schema to version 11 (PostgreSQL's schema has its own
// migrations, tested in `ledger::postgres`).
#[tokio::test]
async fn a_version_11_database_gets_the_offset_column_and_its_rows_keep_none() {
    let f = Fixture::new();
    let opened = f.open();
    let old = accept(&opened.0, placed(&f, "old", 5, None)).await.id;
    close(opened);
    {
        // Back to version 11's shape: no `offset_bytes`.
        let c = rusqlite::Connection::open(&f.path).unwrap();
        c.execute_batch(
            "ALTER TABLE requests DROP COLUMN offset_bytes; \
             PRAGMA user_version = 11;",
        )
        .unwrap();
    }
    assert!(!columns(&f).contains(&"offset_bytes".to_string()));
    // A reader of the old file (trace export) migrates nothing and exports no offset.
    assert_eq!(exported(&f), vec![(old, None)]);
    let opened = f.open();
    let l = &opened.0;
    assert!(columns(&f).contains(&"offset_bytes".to_string()));
    let c = super::super::schema::open_reader(&f.path).unwrap();
    assert_eq!(user_version(&c), super::super::schema::LATEST);
    let r = l.request(old).await.unwrap().unwrap();
    assert_eq!((r.position, r.offset_bytes), (Some(5), None));
    let new = accept(l, placed(&f, "new", 6, Some(42))).await.id;
    let r = l.request(new).await.unwrap().unwrap();
    assert_eq!((r.position, r.offset_bytes), (Some(6), Some(42)));
    assert_eq!(l.audit().await.unwrap(), Vec::<String>::new());
    close(opened);
    assert_eq!(exported(&f), vec![(old, None), (new, Some(42))]);
}

on_both_async!(an_offset_is_kept_apart_from_the_sequence_number_through_record_submit_and_export,);

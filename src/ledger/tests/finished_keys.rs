//! Replays stay exact while memory holds only what is unfinished: a finished request's
//! fingerprint leaves the writer's memory for `idempotency_finished`, where a replay of it is
//! still found, across restarts and from a database of an older version.

use super::*;

/// Rows of `table`, as stored.
fn rows(f: &Fixture, table: &str) -> i64 {
    let sql = format!("SELECT COUNT(*) FROM {table}");
    f.with_db(|db| db.query_one(&sql, crate::ledger::db::params![], |r| r.get(0)))
        .expect("a count")
}

/// Three requests: one done, one cancelled, one left unfinished; their ids.
async fn three(f: &Fixture, l: &Ledger) -> [i64; 3] {
    let done = accept(l, f.request("done", "mc", "x", 500)).await.id;
    let cancelled = accept(l, f.request("cancelled", "mc", "x", 200)).await.id;
    let open = accept(l, f.request("open", "mc", "x", 100)).await.id;
    submit(l, done, 1).await;
    let end = event(l, done, 1, 0, EventKind::Done { bytes: 500 });
    l.apply_status_events(vec![end]).await.unwrap();
    assert_eq!(l.cancel(cancelled).await.unwrap(), CancelOutcome::Cancelled);
    [done, cancelled, open]
}

/// Each of the three again: answered as the stored request, creating and charging nothing.
async fn replayed(f: &Fixture, l: &Ledger, ids: [i64; 3]) {
    let again = l
        .accept(vec![
            f.request("done", "mc", "x", 500),
            f.request("cancelled", "mc", "x", 200),
            f.request("open", "mc", "x", 100),
        ])
        .await
        .unwrap();
    assert!(again.iter().all(|a| a.duplicate), "{again:?}");
    assert_eq!(again.iter().map(|a| a.id).collect::<Vec<_>>(), ids);
    assert_eq!(usage_of(&l.groups().await.unwrap(), "mc"), (600, 1));
}

async fn a_finished_requests_key_leaves_memory_and_its_replay_is_still_a_duplicate(
    backend: Backend,
) {
    let f = Fixture::on(backend);
    let opened = f.open();
    let l = &opened.0;
    let ids = three(&f, l).await;
    // The writer's memory and `idempotency` hold the unfinished request alone (the audit
    // compares the memory with the table, and every final request with `idempotency_finished`).
    assert_eq!(l.audit().await.unwrap(), Vec::<String>::new());
    assert_eq!(
        (rows(&f, "idempotency"), rows(&f, "idempotency_finished")),
        (1, 2)
    );
    replayed(&f, l, ids).await;
    close(opened);
    let opened = f.open();
    let l = &opened.0;
    assert_eq!(l.audit().await.unwrap(), Vec::<String>::new());
    replayed(&f, l, ids).await;
    // Another station's same client_request_id is a request of its own.
    let mut other = f.request("done", "mc", "x", 7);
    other.input.station = "st2".into();
    assert!(!accept(l, other).await.duplicate);
    close(opened);
}

/// A database of version 9 kept every fingerprint in `idempotency`: opening it moves the
/// finished requests' to `idempotency_finished`, and their replays are still duplicates.
// SQLite-only: it rewinds the file's schema to version 9 (PostgreSQL's schema has its own
// migrations, tested in `ledger::postgres`).
#[tokio::test]
async fn a_version_9_database_moves_its_finished_keys_out_of_memory() {
    let f = Fixture::new();
    let opened = f.open();
    let ids = three(&f, &opened.0).await;
    close(opened);
    {
        // Back to version 9's shape: every fingerprint in `idempotency`, no finished table
        // (and none of version 11's volume lookup or version 12's offset).
        let c = rusqlite::Connection::open(&f.path).unwrap();
        c.execute_batch(
            "INSERT INTO idempotency (id, fingerprint) \
                 SELECT id, fingerprint FROM idempotency_finished; \
             DROP TABLE idempotency_finished; \
             DROP INDEX requests_unlocated; \
             ALTER TABLE requests DROP COLUMN volume_source; \
             ALTER TABLE requests DROP COLUMN offset_bytes; \
             PRAGMA user_version = 9;",
        )
        .unwrap();
    }
    assert_eq!(rows(&f, "idempotency"), 3);
    let opened = f.open();
    let l = &opened.0;
    assert_eq!(
        (rows(&f, "idempotency"), rows(&f, "idempotency_finished")),
        (1, 2)
    );
    assert_eq!(l.audit().await.unwrap(), Vec::<String>::new());
    replayed(&f, l, ids).await;
    close(opened);
}

on_both_async!(a_finished_requests_key_leaves_memory_and_its_replay_is_still_a_duplicate,);

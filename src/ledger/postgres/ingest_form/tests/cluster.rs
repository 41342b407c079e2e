//! The accept path's statements, rewritten, and every ingest form against a real server
//! (pg-cluster), beside the SQLite ledger.

use pg_cluster::Cluster;

use crate::ledger::postgres::ingest_form::{self, Form, Prepared, Row};
use crate::ledger::postgres::placeholders::rewrite;
use crate::ledger::postgres::tests::ledger_client as ledger;
use crate::ledger::wide::Wide;

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

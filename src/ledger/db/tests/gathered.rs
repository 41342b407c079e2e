//! Gathered statements read as statements run one at a time (`db/pg/batch.rs`): a random
//! sequence of one-row INSERTs and UPDATEs by key in one transaction (rows updated twice, a row
//! updated in the group that inserted it, a key that names no row, UPDATEs and upserts whose
//! result depends on their order) leaves, at every read and after the COMMIT, exactly what a model applying
//! them in order holds. On SQLite they run at once, so the same test pins the model.

use std::collections::BTreeMap;

use super::testdb::{on_both, Backend, Rng, TestDb};
use crate::ledger::db::{params, Db, Value};

on_both!(
    a_random_sequence_of_gathered_rows_reads_as_if_run_in_order,
    a_large_group_goes_by_copy_and_reads_as_if_run_in_order,
);

const INSERT: &str = "INSERT INTO t (n, s) VALUES (?1, ?2)";
const ADD: &str = "UPDATE t SET n = n + ?2 WHERE id = ?1";
const UPSERT: &str = "INSERT INTO c (k, total) VALUES (?1, ?2) \
     ON CONFLICT(k) DO UPDATE SET total = (c.total * 2 + excluded.total) % 1000003";
const TAKE: &str = "UPDATE c SET total = total - ?2 WHERE k = ?1";
const SCALE: &str = "UPDATE t SET s = ?2, n = (n * ?3) % 1000003 WHERE id = ?1";

/// Both tables: `t` by id, `c` by key.
type Tables = (BTreeMap<i64, (i64, String)>, BTreeMap<String, i64>);

fn tables(db: &Db<'_>) -> Tables {
    let t = db.query_rows("SELECT id, n, s FROM t", params![], |r| {
        Ok((r.get(0)?, (r.get(1)?, r.get(2)?)))
    });
    let c = db.query_rows("SELECT k, total FROM c", params![], |r| {
        Ok((r.get(0)?, r.get(1)?))
    });
    let (t, c) = (t.expect("t"), c.expect("c"));
    (t.into_iter().collect(), c.into_iter().collect())
}

fn a_random_sequence_of_gathered_rows_reads_as_if_run_in_order(backend: Backend) {
    let test = TestDb::new(backend);
    let mut conn = super::open(&test);
    (conn.db())
        .execute_batch("CREATE TABLE c (k TEXT PRIMARY KEY, total BIGINT NOT NULL)")
        .expect("c");
    let mut model: Tables = Default::default();
    for seed in 1..=25u64 {
        let mut random = Rng::new(seed);
        let tx = conn.transaction().expect("begin");
        let (mut group, mut counts) = model.clone();
        for step in 0..40 {
            let ids: Vec<i64> = group.keys().copied().collect();
            let k = format!("k{}", random.below(4));
            // A key of a row there is, most of the time; else one that names no row.
            let any_id = |random: &mut Rng| match ids.len() as u64 {
                0 => -1,
                n if random.below(8) > 0 => ids[random.below(n) as usize],
                _ => -1 - random.below(5) as i64,
            };
            match random.below(13) {
                0..=2 => {
                    let n = random.below(100) as i64;
                    let s = format!("s{seed}.{step}");
                    let id = tx
                        .insert_id(INSERT, [Value::Integer(n), Value::Text(&s)])
                        .expect("insert");
                    group.insert(id, (n, s));
                }
                3..=5 => {
                    let (id, by) = (any_id(&mut random), random.below(7) as i64 - 3);
                    tx.update(ADD, params![id, by]).expect("add");
                    group.entry(id).and_modify(|r| r.0 += by);
                }
                6..=8 => {
                    let (id, times) = (any_id(&mut random), random.below(3) as i64 + 2);
                    let s = format!("x{seed}.{step}");
                    tx.update(SCALE, params![id, s, times]).expect("scale");
                    group
                        .entry(id)
                        .and_modify(|r| *r = (r.0 * times % 1_000_003, s.clone()));
                }
                9 | 10 => {
                    let v = random.below(50) as i64;
                    tx.insert(UPSERT, params![k, v]).expect("upsert");
                    let total = counts.get(&k).map_or(v, |t| (t * 2 + v) % 1_000_003);
                    counts.insert(k, total);
                }
                11 => {
                    let v = random.below(9) as i64;
                    tx.update(TAKE, params![k, v]).expect("take");
                    counts.entry(k).and_modify(|t| *t -= v);
                }
                _ => {
                    let now = (group.clone(), counts.clone());
                    assert_eq!(tables(&tx), now, "seed {seed}, read at step {step}");
                }
            }
        }
        if random.below(4) == 0 {
            tx.rollback().expect("rollback");
        } else {
            tx.commit().expect("commit");
            model = (group, counts);
        }
        assert_eq!(tables(&conn.db()), model, "seed {seed}, after its end");
    }
    let (t, c) = &model;
    assert!(
        t.len() > 50 && c.len() == 4,
        "the sequences wrote rows: {model:?}"
    );
}

/// A group past `COPY_ROWS` rows of one INSERT (sent by COPY on PostgreSQL), some of them
/// updated in the same group (after the COPY, in a later statement), another table's rows
/// beside them: every row as written one at a time, ids in order; a rollback leaves none.
fn a_large_group_goes_by_copy_and_reads_as_if_run_in_order(backend: Backend) {
    let test = TestDb::new(backend);
    let mut conn = super::open(&test);
    (conn.db())
        .execute_batch("CREATE TABLE c (k TEXT PRIMARY KEY, total BIGINT NOT NULL)")
        .expect("c");
    for commit in [false, true] {
        let tx = conn.transaction().expect("begin");
        let mut expected: Tables = Default::default();
        let mut ids = Vec::new();
        for n in 0..600i64 {
            let s = format!("row {n}, with a comma and a \"quote\"");
            let id = (tx.insert_id(INSERT, [Value::Integer(n), Value::Text(&s)])).expect("insert");
            tx.insert(UPSERT, params![format!("k{}", n % 3), 1i64])
                .expect("upsert");
            ids.push(id);
            expected.0.insert(id, (n, s));
        }
        for k in 0..3 {
            // 1, then doubled plus one for each later row of its key.
            let total = (0..200).fold(
                0i64,
                |t, i| if i == 0 { 1 } else { (t * 2 + 1) % 1_000_003 },
            );
            expected.1.insert(format!("k{k}"), total);
        }
        for &id in ids.iter().step_by(7) {
            tx.update(ADD, params![id, 1000i64]).expect("add");
            expected.0.entry(id).and_modify(|r| r.0 += 1000);
        }
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids in order");
        assert_eq!(tables(&tx), expected, "read in the group");
        if commit {
            tx.commit().expect("commit");
            assert_eq!(tables(&conn.db()), expected, "committed");
        } else {
            tx.rollback().expect("rollback");
            assert_eq!(
                tables(&conn.db()),
                Tables::default(),
                "a rollback leaves none"
            );
        }
    }
}

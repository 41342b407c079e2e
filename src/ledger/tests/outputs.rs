//! One station-side copy per unfinished read (`writer::outputs`): with encp, a read writes its
//! `local_file`, or its file's basename in `read_dir`. A read of another file to a copy an
//! unfinished read writes is refused, recording nothing; a read of the same file to the same
//! copy rides on it; the copy is free again once that read ends, after a restart too, and a
//! rolled-back transaction neither holds nor frees one.

use super::commit_rollback::commit_failing;
use super::*;

/// The ledger tests' configuration with encp as the adapter, reads without `local_file` going
/// to `/tmp`.
fn encp_config() -> String {
    let head = &CONFIG[..CONFIG.find("[mss]").unwrap()];
    format!("{head}[mss]\nadapter = \"encp\"\n[mss.encp]\nread_dir = \"/tmp\"\n")
}

/// A read by station `st-<crid>` of `file` to `local` (`None`: `read_dir`).
fn read(f: &Fixture, crid: &str, file: &str, local: Option<&str>) -> NewRequest {
    let mut r = f.request(crid, "mc", "x", 500);
    r.input.station = format!("st-{crid}");
    r.input.file = file.into();
    r.input.extras.local_file = local.map(str::to_string);
    r
}

/// The refusal of an acceptance, which must be for a copy in use.
async fn in_use(l: &Ledger, item: NewRequest) -> OutputInUse {
    match l.accept(vec![item]).await {
        Err(LedgerError::OutputInUse(r)) => r,
        other => panic!("expected a copy in use, got {other:?}"),
    }
}

/// The requests stored.
fn rows(f: &Fixture) -> i64 {
    f.with_db(|db| {
        db.query_one(
            "SELECT COUNT(*) FROM requests",
            crate::ledger::db::params![],
            |r| r.get(0),
        )
    })
    .expect("the requests stored")
}

async fn audit_clean(l: &Ledger) {
    assert_eq!(l.audit().await.unwrap(), Vec::<String>::new());
}

async fn a_read_of_another_file_to_a_copy_in_use_is_refused_until_that_read_ends(backend: Backend) {
    let f = Fixture::with_config_on(backend, &encp_config());
    let opened = f.open();
    let l = opened.0.clone();
    let a = accept(&l, read(&f, "a", "/pnfs/a/f.root", Some("/data/x.out"))).await;
    let refused = in_use(&l, read(&f, "b", "/pnfs/b/g.root", Some("/data//x.out"))).await;
    assert_eq!(
        (refused.field, refused.output.as_str(), refused.holder),
        ("local_file", "/data/x.out", a.id)
    );
    assert_eq!(
        (
            refused.holder_station.as_str(),
            refused.holder_file.as_str()
        ),
        ("st-a", "/pnfs/a/f.root")
    );
    // The same file to the same copy rides on it (coalescing).
    let c = accept(&l, read(&f, "c", "/pnfs/a/f.root", Some("/data/x.out"))).await;
    assert_eq!(c.state, RequestState::Riding);
    // Without local_file, encp writes the file's basename in read_dir.
    let d = accept(&l, read(&f, "d", "/pnfs/d/k.root", None)).await;
    let refused = in_use(&l, read(&f, "e", "/pnfs/e/k.root", None)).await;
    assert_eq!(
        (refused.field, refused.output.as_str(), refused.holder),
        ("file", "/tmp/k.root", d.id)
    );
    let refused = in_use(&l, read(&f, "e", "/pnfs/e/z.root", Some("/tmp/k.root"))).await;
    assert_eq!((refused.field, refused.holder), ("local_file", d.id));
    // A write reads its local_file: no copy of a read's is taken.
    let mut w = read(&f, "w", "/pnfs/w/g.root", Some("/data/x.out"));
    w.input.direction = Direction::Write;
    accept(&l, w).await;
    assert_eq!(rows(&f), 4, "a refusal records nothing");
    audit_clean(&l).await;

    // After a restart the copies are known again.
    drop(l);
    close(opened);
    let opened = f.open();
    let l = opened.0.clone();
    let again = in_use(&l, read(&f, "b", "/pnfs/b/g.root", Some("/data/x.out"))).await;
    assert_eq!(again.holder, a.id);
    audit_clean(&l).await;

    // Once every read writing it has ended, the copy is free.
    l.cancel(c.id).await.unwrap();
    in_use(&l, read(&f, "b", "/pnfs/b/g.root", Some("/data/x.out"))).await;
    l.cancel(a.id).await.unwrap();
    let b = accept(&l, read(&f, "b", "/pnfs/b/g.root", Some("/data/x.out"))).await;
    assert!(!b.duplicate, "nothing of the refused request was stored");
    audit_clean(&l).await;
    drop(l);
    close(opened);
}

/// Two reads in one call are checked in order: the second sees the first.
async fn a_batch_is_checked_item_by_item(backend: Backend) {
    let f = Fixture::with_config_on(backend, &encp_config());
    let opened = f.open();
    let l = opened.0.clone();
    let answers = l
        .accept_each(vec![
            read(&f, "a", "/pnfs/a/f.root", Some("/data/x.out")),
            read(&f, "b", "/pnfs/b/g.root", Some("/data/x.out")),
            read(&f, "c", "/pnfs/c/h.root", Some("/data/y.out")),
        ])
        .await
        .unwrap();
    let a = answers[0].clone().unwrap();
    match &answers[1] {
        Err(Refused::OutputInUse(r)) => assert_eq!(r.holder, a.id),
        other => panic!("{other:?}"),
    }
    assert!(answers[2].is_ok());
    audit_clean(&l).await;
    drop(l);
    close(opened);
}

/// A COMMIT that fails leaves the copies as they were: an acceptance rolled back holds none,
/// an end rolled back frees none.
async fn a_rolled_back_transaction_neither_holds_nor_frees_a_copy(backend: Backend) {
    let f = Fixture::with_config_on(backend, &encp_config());
    let opened = f.open();
    let l = opened.0.clone();
    commit_failing(
        &f,
        l.accept(vec![read(&f, "a", "/pnfs/a/f.root", Some("/data/x.out"))]),
    )
    .await;
    let b = accept(&l, read(&f, "b", "/pnfs/b/g.root", Some("/data/x.out"))).await;
    commit_failing(&f, l.cancel(b.id)).await;
    let refused = in_use(&l, read(&f, "c", "/pnfs/c/h.root", Some("/data/x.out"))).await;
    assert_eq!(refused.holder, b.id);
    audit_clean(&l).await;
    drop(l);
    close(opened);
}

/// The simulator writes no station-side copy: nothing is refused for one.
async fn an_adapter_that_writes_no_copy_refuses_nothing(backend: Backend) {
    let f = Fixture::on(backend);
    let opened = f.open();
    let l = opened.0.clone();
    accept(&l, read(&f, "a", "/pnfs/a/f.root", Some("/data/x.out"))).await;
    accept(&l, read(&f, "b", "/pnfs/b/g.root", Some("/data/x.out"))).await;
    drop(l);
    close(opened);
}

on_both_async!(
    a_read_of_another_file_to_a_copy_in_use_is_refused_until_that_read_ends,
    a_batch_is_checked_item_by_item,
    a_rolled_back_transaction_neither_holds_nor_frees_a_copy,
    an_adapter_that_writes_no_copy_refuses_nothing,
);

//! A COMMIT that fails must leave no trace in the writer's memory (`WriterState::checkpoint`,
//! `rollback`): what the writer does next is what it would have done had the failed
//! transaction never run. The failure is injected with the database file moved away for one
//! command: `identity::DbFile::check` then fails right before `tx.commit()`, after every
//! statement and every change to memory (what a disk full or an I/O error at COMMIT does).

use super::*;

/// Run `op` with the database file moved away, so the writer's COMMIT fails (the identity check
/// right before `tx.commit()`, after every statement and every change to memory).
pub(super) async fn commit_failing<T: std::fmt::Debug>(
    f: &Fixture,
    op: impl std::future::Future<Output = Result<T, LedgerError>>,
) {
    let away = f.path.with_extension("away");
    std::fs::rename(&f.path, &away).unwrap();
    let r = op.await;
    std::fs::rename(&away, &f.path).unwrap();
    assert!(r.is_err(), "the commit was to fail: {r:?}");
}

/// A cancel of a carrier whose COMMIT fails (503; the station does not try again) leaves the
/// carrier in flight, but the writer's carrier map forgot it (`Carriers` is not journalled):
/// a later read of the same file no longer rides on it and costs a second transfer.
#[tokio::test]
async fn a_carrier_whose_cancel_failed_to_commit_still_carries_its_file() {
    let f = Fixture::new();
    let opened = f.open();
    let l = opened.0.clone();
    let read = |crid: &str| NewRequest {
        station: format!("st-{crid}"),
        file: "/pnfs/same".into(),
        ..f.request(crid, "mc", "x", 500)
    };
    let a = accept(&l, read("a")).await;
    assert_eq!(a.state, RequestState::Accepted);
    commit_failing(&f, l.cancel(a.id)).await;
    let stored = l.request(a.id).await.unwrap().unwrap();
    assert_eq!(stored.state, RequestState::Accepted, "the cancel was rolled back");
    let b = accept(&l, read("b")).await;
    assert_eq!(
        (b.state, l.request(b.id).await.unwrap().unwrap().rides_on),
        (RequestState::Riding, Some(a.id)),
        "a read of a file request {} is still to transfer rides on it",
        a.id
    );
    drop(l);
    close(opened);
}


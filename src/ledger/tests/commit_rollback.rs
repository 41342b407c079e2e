//! A COMMIT that fails must leave no trace in the writer's memory (`WriterState::checkpoint`,
//! `rollback`): what the writer does next is what it would have done had the failed
//! transaction never run. The failure is injected for one command, after every statement and
//! every change to memory (what a disk full or an I/O error at COMMIT does): on SQLite with the
//! database file moved away (`identity::DbFile::check` then fails right before `tx.commit()`),
//! on PostgreSQL by a deferred constraint trigger that raises at COMMIT itself.

use super::*;

/// Run `op` with the writer's COMMIT failing (see the module's doc).
pub(super) async fn commit_failing<T: std::fmt::Debug>(
    f: &Fixture,
    op: impl std::future::Future<Output = Result<T, LedgerError>>,
) {
    let r = f.commits_failing(op).await;
    assert!(r.is_err(), "the commit was to fail: {r:?}");
}

/// A cancel of a carrier whose COMMIT fails (503; the station does not try again) leaves the
/// carrier in flight, and the writer's carrier map still has it (its changes are journalled):
/// a later read of the same file rides on it rather than costing a second transfer.
async fn a_carrier_whose_cancel_failed_to_commit_still_carries_its_file(backend: Backend) {
    let f = Fixture::on(backend);
    let opened = f.open();
    let l = opened.0.clone();
    let read = |crid: &str| {
        let mut r = f.request(crid, "mc", "x", 500);
        r.input.station = format!("st-{crid}");
        r.input.file = "/pnfs/same".into();
        r
    };
    let a = accept(&l, read("a")).await;
    assert_eq!(a.state, RequestState::Accepted);
    commit_failing(&f, l.cancel(a.id)).await;
    let stored = l.request(a.id).await.unwrap().unwrap();
    assert_eq!(
        stored.state,
        RequestState::Accepted,
        "the cancel was rolled back"
    );
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

/// The `volumes` mode: a volume whose flight just ended stays mounted (`sticky_secs`), so the
/// next requests for it go before another volume is mounted. A rolled-back transaction that
/// changed the volume queue (here: a queued request's cancel, whose COMMIT failed) makes the
/// writer reload the queue from the rows (`Writer::reload_volumes`), which do not hold which
/// volumes are sticky: the checkpoint keeps them (`VolumeQueue::memory`) and the reload gets
/// them back, else the next release would mount another tape. The same requests after the
/// same steps, with and without that failed cancel, must be released alike.
async fn a_rolled_back_transaction_does_not_forget_a_sticky_volume(backend: Backend) {
    let config = format!(
        "{CONFIG}[release]\nmode = \"volumes\"\n[release.volumes]\nmin_volume_bytes = 10000\n\
         min_volume_files = 1000\nquiet_secs = 3600\nmax_age_secs = 86400\n\
         batch_max_bytes = 1000000\nbatch_max_files = 100\nsticky_secs = 600\nmax_volumes = 1\n"
    );
    let mut released = Vec::new();
    for fail in [false, true] {
        let f = Fixture::with_config_on(backend, &config);
        let opened = f.open();
        let l = opened.0.clone();
        let on = |crid: &str, mode: &str, group: &str, size: u64, vol: &str| {
            let mut r = f.request(crid, mode, group, size);
            r.input.volume = Some(vol.into());
            r
        };
        // A volume's batch, mounted, read and done: V0 is sticky from now.
        let a = accept(&l, on("a", "mc", "x", 20_000, "V0")).await;
        let ready = l.to_submit(0, i64::MAX / 2, 10).await.unwrap();
        assert_eq!(ready.iter().map(|t| t.id).collect::<Vec<_>>(), [a.id]);
        submit(&l, a.id, 1).await;
        let done = event(&l, a.id, 1, 1, EventKind::Done { bytes: 20_000 });
        l.apply_status_events(vec![done]).await.unwrap();
        // A small request on another volume waits (not eligible yet) ...
        let q = accept(&l, on("q", "mc", "x", 100, "V2")).await;
        assert_eq!(
            l.request(q.id).await.unwrap().unwrap().state,
            RequestState::Queued
        );
        if fail {
            // ... and its cancel is answered 503 (the station tries no more).
            commit_failing(&f, l.cancel(q.id)).await;
        }
        f.clock.advance_ms(1_000);
        // Two requests at once: one for the sticky V0, one for V1 (eligible by its bytes).
        let both = l
            .accept(vec![
                on("v1", "analysis", "higgs", 20_000, "V1"),
                on("v0", "analysis", "top", 500, "V0"),
            ])
            .await
            .unwrap();
        let mut states = Vec::new();
        for b in &both {
            states.push(l.request(b.id).await.unwrap().unwrap().state);
        }
        released.push(states);
        drop(l);
        close(opened);
    }
    assert_eq!(
        released[0],
        [RequestState::Queued, RequestState::Accepted],
        "without a fault: the sticky V0 goes first"
    );
    assert_eq!(
        released[1], released[0],
        "after a rolled-back cancel: (V1 request, V0 request) released alike"
    );
}

/// The MSS's answer to a send during which the request was cancelled (`cancel_maybe_at_mss`:
/// `submitted`, no MSS id, never sent again), whose recording failed to commit, recorded again
/// (`Ledger::submitted_late`): it names the transfer and asks for the cancel to be carried, as
/// it would have the first time. A request of the same batch still `accepted` is left to its
/// resend's answer.
async fn an_answer_recorded_late_names_a_request_cancelled_while_it_was_sent(backend: Backend) {
    let f = Fixture::on(backend);
    let opened = f.open();
    let l = opened.0.clone();
    let cancelled = accept(&l, f.request("a", "mc", "x", 500)).await.id;
    let resent = accept(&l, f.request("b", "mc", "x", 500)).await.id;
    l.mark_sending(vec![(cancelled, 1), (resent, 1)])
        .await
        .unwrap();
    let asked = l.cancel(cancelled).await.unwrap();
    assert_eq!(asked, CancelOutcome::Requested(RequestState::Submitted));
    let answers = |id: i64| SubmittedTransfer {
        id,
        attempt: 1,
        mss_id: format!("m{id}"),
    };
    let both = vec![answers(cancelled), answers(resent)];
    commit_failing(&f, l.submitted(both.clone())).await;
    let late = l.submitted_late(both).await.unwrap();
    assert_eq!(late, [Some(AfterSubmit::CancelRequested), None]);
    let a = l.request(cancelled).await.unwrap().unwrap();
    assert_eq!(
        (a.state, a.mss_id.as_deref(), a.cancel_requested),
        (
            RequestState::Submitted,
            Some(format!("m{cancelled}").as_str()),
            true
        )
    );
    let b = l.request(resent).await.unwrap().unwrap();
    assert_eq!(
        (b.state, b.mss_id),
        (RequestState::Accepted, None),
        "sent again"
    );
    let ready = l.to_submit(0, i64::MAX / 2, 10).await.unwrap();
    assert_eq!(ready.iter().map(|t| t.id).collect::<Vec<_>>(), [resent]);
    drop(l);
    close(opened);
}

/// The commit histograms (`mssbroker_ledger_commit_seconds`, `_commands`) count commits: a
/// group whose COMMIT failed was rolled back and is not one (under a full disk they would go on
/// counting commits while nothing is written).
async fn a_rolled_back_group_is_not_counted_as_a_commit(backend: Backend) {
    #[derive(Default)]
    struct Counted(std::sync::Mutex<Vec<usize>>, std::sync::Mutex<Vec<usize>>);
    impl CommitObserver for Counted {
        fn committed(&self, _seconds: f64, commands: usize) {
            self.0.lock().unwrap().push(commands);
        }
        fn rolled_back(&self, commands: usize) {
            self.1.lock().unwrap().push(commands);
        }
    }
    let f = Fixture::on(backend);
    let counted = Arc::new(Counted::default());
    let options = LedgerOptions {
        metrics: counted.clone(),
        ..options(&f)
    };
    let opened = open_with(&f, &options).unwrap();
    let l = opened.0.clone();
    let a = accept(&l, f.request("a", "mc", "x", 500)).await;
    commit_failing(&f, l.cancel(a.id)).await;
    commit_failing(&f, l.accept(vec![f.request("b", "mc", "x", 500)])).await;
    l.cancel(a.id).await.unwrap();
    assert_eq!(
        *counted.0.lock().unwrap(),
        [1, 1],
        "the accept and the cancel"
    );
    assert_eq!(
        *counted.1.lock().unwrap(),
        [1, 1],
        "the two groups whose COMMIT failed, counted as rolled back (mssbroker_ledger_rollbacks_total)"
    );
    drop(l);
    close(opened);
}

on_both_async!(
    a_carrier_whose_cancel_failed_to_commit_still_carries_its_file,
    a_rolled_back_transaction_does_not_forget_a_sticky_volume,
    an_answer_recorded_late_names_a_request_cancelled_while_it_was_sent,
    a_rolled_back_group_is_not_counted_as_a_commit,
);

//! The answers of one MSS call are recorded with their rows read in one statement
//! (`Txn::submitted`, `Txn::mark_sending`): a list that names one request twice reads as two
//! calls would, the second answer seeing what the first left, and a request that is not there
//! (or has moved on) is passed over as before.

use super::*;

fn taken(id: i64, attempt: u32, mss_id: &str) -> SubmittedTransfer {
    SubmittedTransfer {
        id,
        attempt,
        mss_id: mss_id.into(),
    }
}

async fn a_list_naming_a_request_twice_reads_as_two_calls(backend: Backend) {
    let f = Fixture::on(backend);
    let opened = f.open();
    let l = &opened.0;
    let [a, b, c] = [
        accept(l, f.request("a", "mc", "x", 100)).await.id,
        accept(l, f.request("b", "mc", "x", 200)).await.id,
        accept(l, f.request("c", "mc", "x", 300)).await.id,
    ];
    // c is cancelled before it is marked: not sent, whatever the list says.
    assert_eq!(l.cancel(c).await.unwrap(), CancelOutcome::Cancelled);
    let marked = (l.mark_sending(vec![(a, 1), (b, 1), (a, 1), (c, 1), (9_999, 1), (b, 2)]))
        .await
        .unwrap();
    assert_eq!(
        marked,
        [(a, true), (b, true), (a, false)],
        "a's second is a resend; c has ended, 9999 is not there, b's attempt is 1"
    );

    // The MSS answers a twice (a duplicate) and names b, c and a request that is not there.
    let after = l
        .submitted(vec![
            taken(a, 1, "m-a"),
            taken(b, 1, "m-b"),
            taken(a, 1, "m-a-again"),
            taken(c, 1, "m-c"),
            taken(c, 1, "m-c-again"),
            taken(9_999, 1, "m-x"),
        ])
        .await
        .unwrap();
    use AfterSubmit::{CancelAtMss, Recorded};
    assert_eq!(
        after,
        [
            Recorded,
            Recorded,
            Recorded,
            CancelAtMss,
            CancelAtMss,
            Recorded
        ],
        "c was cancelled: each of its answers names a transfer to cancel at the MSS"
    );
    for (id, state, mss_id) in [
        (a, RequestState::Submitted, "m-a"),
        (b, RequestState::Submitted, "m-b"),
        (c, RequestState::Cancelled, "m-c"),
    ] {
        let r = l.request(id).await.unwrap().unwrap();
        assert_eq!(
            (r.state, r.mss_id.as_deref()),
            (state, Some(mss_id)),
            "{id}"
        );
    }
    assert_eq!(usage_of(&l.groups().await.unwrap(), "mc"), (300, 2));
}

on_both_async!(a_list_naming_a_request_twice_reads_as_two_calls,);

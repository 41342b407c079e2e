//! The HTTP adapter against the real simulator answering badly: an answer that cannot be read is
//! an unknown outcome (retryable, the same key and attempt deduplicated), an over-size answer is
//! refused without being read whole, and only the simulator's own refusal is `Rejected`.

use std::time::Duration;

use mss_adapters::http::HttpAdapter;
use mss_adapters::protocol::{BadAnswer, Faults, ReceivedResponse};
use mss_adapters::sim::{self, SimConfig};
use mss_adapters::{MssAdapter, MssError, Transfer};

/// A simulator on a loopback port, stopped when the test's runtime ends.
async fn simulator() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(sim::run(
        listener,
        SimConfig::default(),
        std::future::pending(),
    ));
    url
}

async fn set_faults(url: &str, faults: &Faults) {
    let resp = reqwest::Client::new()
        .put(format!("{url}/v1/faults"))
        .json(faults)
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success());
}

async fn received(url: &str) -> ReceivedResponse {
    reqwest::get(format!("{url}/v1/received"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn transfers(n: usize) -> Vec<Transfer> {
    (0..n)
        .map(|i| Transfer {
            key: (i + 1).to_string(),
            attempt: 1,
            file: format!("/pnfs/test/f{i}"),
            size_bytes: 1_000_000,
            priority: 1,
            volume: None,
            group: "mc".into(),
            direction: Default::default(),
            local_file: None,
            bfid: None,
            position: None,
            offset_bytes: None,
        })
        .collect()
}

fn bad(answer: BadAnswer, queue: bool) -> Faults {
    Faults {
        submit_answer: Some(answer),
        queue_before_bad_answer: queue,
        ..Faults::default()
    }
}

#[tokio::test]
async fn unreadable_answers_are_unknown_and_a_resend_is_deduplicated() {
    for answer in [
        BadAnswer::Garbled,
        BadAnswer::Stalled,
        BadAnswer::ProxyNotFound,
    ] {
        for queue in [false, true] {
            let url = simulator().await;
            let adapter = HttpAdapter::new(&url, Duration::from_millis(500)).unwrap();
            set_faults(&url, &bad(answer.clone(), queue)).await;
            let batch = transfers(3);
            for r in adapter.submit_batch(&batch).await {
                match r {
                    Err(e @ MssError::Unknown(_)) => assert!(e.is_retryable()),
                    other => panic!("{answer:?}: {other:?}"),
                }
            }
            set_faults(&url, &Faults::default()).await;
            let again = adapter.submit_batch(&batch).await;
            assert!(
                again
                    .iter()
                    .all(|r| r.as_ref().is_ok_and(|s| s.duplicate == queue)),
                "{answer:?} queue={queue}: {again:?}"
            );
            let got = received(&url).await;
            assert_eq!(
                got.received.len(),
                3,
                "{answer:?}: each transfer queued once"
            );
        }
    }
}

#[tokio::test]
async fn an_over_size_answer_is_refused_without_reading_it_all() {
    let url = simulator().await;
    let adapter = HttpAdapter::new(&url, Duration::from_secs(30)).unwrap();
    let gib = 1u64 << 30;
    set_faults(&url, &bad(BadAnswer::Oversized { bytes: gib }, true)).await;
    let results = adapter.submit_batch(&transfers(2)).await;
    for r in &results {
        match r {
            Err(MssError::Unknown(m)) => assert!(m.contains("too large"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
    // The adapter stopped reading at its cap: the simulator got to send little more than that
    // (what the sockets' buffers took), not the gigabyte.
    let sent = received(&url).await.bad_answer_bytes;
    let cap = mss_adapters::answer::MAX_ANSWER_BYTES as u64;
    assert!(sent >= cap && sent < 4 * cap, "{sent} bytes sent");
}

#[tokio::test]
async fn only_the_simulators_own_refusal_is_rejected_and_its_text_is_clipped() {
    let url = simulator().await;
    let adapter = HttpAdapter::new(&url, Duration::from_secs(5)).unwrap();
    let body = BadAnswer::ErrorBody {
        status: 422,
        bytes: 200_000,
    };
    set_faults(&url, &bad(body, false)).await;
    let results = adapter.submit_batch(&transfers(2)).await;
    for r in &results {
        match r {
            Err(MssError::Rejected(m)) => {
                assert!(m.starts_with("422"), "{m}");
                assert!(m.contains("refused\n2026"), "{m}");
                assert!(m.len() < 400, "{} chars kept", m.len());
                assert!(m.ends_with("bytes cut]"), "{m}");
            }
            other => panic!("{other:?}"),
        }
    }
    // The same error body on a 503 is the MSS saying it is unavailable: retryable.
    let unavailable = BadAnswer::ErrorBody {
        status: 503,
        bytes: 1000,
    };
    set_faults(&url, &bad(unavailable, false)).await;
    let results = adapter.submit_batch(&transfers(1)).await;
    assert!(
        matches!(&results[0], Err(MssError::Unavailable(_))),
        "{results:?}"
    );
}

/// A submission sent but not answered in time may have been taken: an unknown outcome (the
/// broker then sends a cancel to the MSS, not just ends the request). One that cannot reach the
/// MSS at all is `Unreachable`: nothing was sent.
#[tokio::test]
async fn a_submission_not_answered_in_time_is_unknown_and_an_unconnected_one_unreachable() {
    let url = simulator().await;
    let adapter = HttpAdapter::new(&url, Duration::from_millis(200)).unwrap();
    let slow = Faults {
        delay_ms: 2_000,
        ..Faults::default()
    };
    set_faults(&url, &slow).await;
    for r in adapter.submit_batch(&transfers(2)).await {
        assert!(
            matches!(&r, Err(MssError::Unknown(m)) if m.contains("in time")),
            "{r:?}"
        );
    }
    let single = adapter.submit(&transfers(1)[0]).await;
    assert!(matches!(&single, Err(MssError::Unknown(_))), "{single:?}");
    // A port nobody listens on (bound, then closed).
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let nowhere = HttpAdapter::new(&closed, Duration::from_millis(200)).unwrap();
    for r in nowhere.submit_batch(&transfers(1)).await {
        assert!(matches!(&r, Err(MssError::Unreachable(_))), "{r:?}");
    }
}

/// An MSS host that drops connection attempts (a firewall, a host down, a full listen queue):
/// the submission times out while connecting, so nothing was sent. That is unreachable
/// (`Unreachable`), not an unknown outcome: a cancel of a request never sent stays final at
/// once. (The clients bound the connection at half the call's timeout, so the connect timeout
/// fires first and names itself.)
#[tokio::test]
async fn a_submission_that_times_out_while_connecting_is_unreachable_not_unknown() {
    // A listener that never accepts, its queue full: further connection attempts hang.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..4 {
        if let Ok(s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            fillers.push(s);
        }
    }
    let probe = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200));
    assert!(probe.is_err(), "the listen queue is not full");
    let adapter = HttpAdapter::new(&format!("http://{addr}"), Duration::from_millis(300)).unwrap();
    for r in adapter.submit_batch(&transfers(1)).await {
        assert!(
            matches!(&r, Err(MssError::Unreachable(_))),
            "nothing was sent: {r:?}"
        );
    }
    drop(listener);
}

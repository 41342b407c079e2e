//! The dispatcher's unit tests: the outage backoff here, the submit path under faults in
//! `submit_faults.rs`.

use super::*;

fn retry(base: u64, max: u64) -> RetrySettings {
    RetrySettings {
        max_attempts: 5,
        base: Duration::from_millis(base),
        max: Duration::from_millis(max),
    }
}

#[test]
fn backoff_grows_to_its_cap_with_bounded_jitter() {
    let mut b = Backoff::new(retry(100, 800));
    let seen: Vec<Duration> = (0..6).map(|_| b.next()).collect();
    for (d, want) in seen.iter().zip([100u64, 200, 400, 800, 800, 800]) {
        let want = Duration::from_millis(want);
        assert!(*d <= want && *d >= want.mul_f64(0.75), "{d:?} vs {want:?}");
    }
    b.reset();
    assert!(b.next() <= Duration::from_millis(100));
}

#[test]
fn backoff_never_exceeds_its_max_whatever_the_jitter() {
    // `RetrySettings::jittered` is checked for every jitter in `domain/settings.rs`; the
    // loop's, with its own draw, over a long outage.
    for (base, max) in [(500, 60_000), (100, 800), (700, 700), (1, 86_400_000)] {
        let r = retry(base, max);
        let mut b = Backoff::new(r);
        assert!((0..200).map(|_| b.next()).all(|d| d <= r.max));
    }
}

mod submit_faults;

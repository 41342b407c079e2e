//! Destinations FTS3 holds for another transfer. Under `CheckDuplicates` FTS3 refuses a file
//! whose destination a file not ended yet holds ("The submission is duplicated", see
//! `batch.rs`), which may last the hours a tape recall takes. The broker sends such a
//! transfer again at each submit step, so without a hold every step would be one more
//! `POST /jobs` that FTS3 inserts and rolls back. A held destination is answered here,
//! deferred, until its next try: 30 s after the first refusal, doubling to 10 minutes; and
//! at once when a transfer this adapter follows to that destination ends (the usual holder:
//! two reads of one file to one place that did not coalesce in the broker).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::MssError;

/// The wait after the first refusal for a destination.
const FIRST: Duration = Duration::from_secs(30);
/// The longest wait between two tries.
const MOST: Duration = Duration::from_secs(600);
/// A hold not tried again for this long is forgotten (its transfer was cancelled or went
/// elsewhere), so the map stays as small as the destinations refused lately.
const FORGET: Duration = Duration::from_secs(3600);

#[derive(Debug, Default)]
pub(super) struct Holds(Mutex<HashMap<String, Hold>>);

#[derive(Debug, Clone)]
struct Hold {
    retry_at: Instant,
    wait: Duration,
    /// FTS3's refusal, repeated in the answers given here.
    message: String,
}

impl Holds {
    fn map(&self) -> MutexGuard<'_, HashMap<String, Hold>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The answer for a transfer to `dest` at `now`: deferred while its destination is held.
    pub fn check(&self, dest: &str, now: Instant) -> Option<MssError> {
        let map = self.map();
        let hold = map.get(dest).filter(|h| h.retry_at > now)?;
        Some(MssError::Deferred(format!(
            "{}; not sent again for {} s",
            hold.message,
            hold.retry_at
                .saturating_duration_since(now)
                .as_secs()
                .max(1)
        )))
    }

    /// FTS3 refused a transfer to `dest` with `message` at `now`: held until its next try.
    pub fn hold(&self, dest: &str, message: &str, now: Instant) {
        let mut map = self.map();
        map.retain(|_, h| now.saturating_duration_since(h.retry_at) < FORGET);
        let wait = map.get(dest).map_or(FIRST, |h| (h.wait * 2).min(MOST));
        map.insert(
            dest.to_string(),
            Hold {
                retry_at: now + wait,
                wait,
                message: message.to_string(),
            },
        );
    }

    /// `dest` is free (FTS3 took a transfer to it, or one this adapter follows there ended).
    pub fn release(&self, dest: &str) {
        self.map().remove(dest);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_destination_waits_doubling_to_its_cap_and_is_freed_by_a_release() {
        let holds = Holds::default();
        let t0 = Instant::now();
        assert!(holds.check("d", t0).is_none());
        holds.hold("d", "The submission is duplicated", t0);
        let e = holds.check("d", t0).expect("held");
        assert!(e.is_retryable());
        assert!(
            e.to_string().contains("The submission is duplicated"),
            "{e}"
        );
        assert!(holds
            .check("d", t0 + FIRST - Duration::from_millis(1))
            .is_some());
        assert!(
            holds.check("d", t0 + FIRST).is_none(),
            "tried again after 30 s"
        );
        assert!(holds.check("other", t0).is_none());
        // Refused again: each wait twice the last, never over the cap.
        let mut at = t0 + FIRST;
        let mut waits = Vec::new();
        for _ in 0..6 {
            holds.hold("d", "again", at);
            let mut wait = Duration::ZERO;
            while holds.check("d", at + wait).is_some() {
                wait += Duration::from_secs(30);
            }
            waits.push(wait.as_secs());
            at += wait;
        }
        assert_eq!(waits, [60, 120, 240, 480, 600, 600]);
        holds.release("d");
        assert!(holds.check("d", at).is_none());
        // A fresh hold after a release starts from the first wait.
        holds.hold("d", "again", at);
        assert!(holds.check("d", at + FIRST).is_none());
    }

    #[test]
    fn a_hold_not_tried_again_for_an_hour_is_forgotten() {
        let holds = Holds::default();
        let t0 = Instant::now();
        holds.hold("a", "x", t0);
        holds.hold("b", "x", t0 + FIRST + FORGET - Duration::from_secs(1));
        assert_eq!(holds.len(), 2, "a's next try was less than an hour ago");
        holds.hold("c", "x", t0 + FIRST + FORGET);
        assert_eq!(holds.len(), 2, "a forgotten: b and c left");
        assert!(holds.check("b", t0 + FIRST + FORGET).is_some());
    }
}

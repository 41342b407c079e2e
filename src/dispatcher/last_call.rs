//! The outcome of the dispatcher's latest call to the MSS, for readiness (`/readyz`): answered
//! (including a refusal or a deferral, which are answers) or not (unreachable, 5xx, timed out, unreadable).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use mss_adapters::MssError;

/// The latest call's outcome; `None` before the first.
#[derive(Debug, Default)]
pub struct LastCall(Mutex<Option<CallOutcome>>);

/// One call's outcome.
#[derive(Debug, Clone)]
pub struct CallOutcome {
    /// The adapter call (`submit_batch`, `events`, `status`, ...).
    pub call: &'static str,
    /// Why the MSS did not answer; `None` when it did.
    pub error: Option<String>,
    pub at: Instant,
}

impl CallOutcome {
    pub fn age(&self) -> Duration {
        self.at.elapsed()
    }
}

impl LastCall {
    /// Record `call`'s outcome: a refusal or a deferral is an answer; any other error is not.
    pub fn record(&self, call: &'static str, error: Option<&MssError>) {
        let error = error.filter(|e| !e.is_answer()).map(|e| e.to_string());
        let outcome = CallOutcome {
            call,
            error,
            at: Instant::now(),
        };
        if let Ok(mut last) = self.0.lock() {
            *last = Some(outcome);
        }
    }

    /// The latest outcome, if a call was made.
    pub fn get(&self) -> Option<CallOutcome> {
        self.0.lock().ok().and_then(|last| last.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_an_answer_and_an_outage_is_not() {
        let last = LastCall::default();
        assert!(last.get().is_none());
        last.record(
            "submit_batch",
            Some(&MssError::Rejected("no such file".into())),
        );
        assert_eq!(last.get().unwrap().error, None);
        last.record(
            "events",
            Some(&MssError::Unavailable("connection refused".into())),
        );
        let got = last.get().unwrap();
        assert_eq!(got.call, "events");
        assert!(got.error.unwrap().contains("connection refused"));
        last.record("events", None);
        assert_eq!(last.get().unwrap().error, None);
    }
}

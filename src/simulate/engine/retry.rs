//! Failed attempts retried as `serve`'s writer retries them: what follows a failure is the
//! writer's own rule (`policy::transition::after_failure`): a retryable failure with attempts
//! left goes back to `accepted` for the backoff of the attempt that failed, keeping its charge,
//! its slots, its place in a volume's flight and its riders, and is sent again at the MSS
//! priority it had (`serve` re-prioritises only what is at the MSS, `ledger/live.rs`,
//! `reprioritise`); the last attempt's failure is final (refunded, `settle`). Retries due at one
//! instant go out as the submit loop reads ready requests: highest priority first, then by id.
//! A priority-class retry waits again from its resend to its start, as `serve` counts a
//! priority-class request `submitted` (`ledger/writer/state.rs`, `moved`), and a read riding on
//! a retried carrier waits for the carrier's next start.

use std::collections::BTreeMap;
use std::time::Duration;

use mss_adapters::sim::library::Micros;

use super::{transfer, Info, Run};
use crate::domain::RetrySettings;
use crate::policy::transition::{after_failure, AfterFailure, CarrierEnd};

/// The failed attempts waiting out their backoff.
#[derive(Debug)]
pub(super) struct BackoffQueue {
    settings: RetrySettings,
    /// (due, id) -> the MSS priority it is sent again at.
    due: BTreeMap<(Micros, i64), i64>,
}

impl BackoffQueue {
    pub(super) fn new(settings: RetrySettings) -> BackoffQueue {
        BackoffQueue {
            settings,
            due: BTreeMap::new(),
        }
    }

    /// What follows a failure of `info`'s attempt.
    pub(super) fn on_failure(&self, info: &Info, retryable: bool) -> AfterFailure {
        after_failure(&self.settings, info.attempt, retryable)
    }

    /// When the next retry is due.
    pub(super) fn wakeup(&self) -> Option<Micros> {
        self.due.keys().next().map(|&(at, _)| at)
    }
}

impl Run<'_> {
    /// `info`'s attempt (library key `key`) failed at `at` with attempts left: sent again as
    /// `attempt` `after` the backoff, at the priority the library had for it.
    pub(super) fn retry_later(&mut self, info: Info, key: &str, at: Micros, next: (u32, Duration)) {
        let (attempt, after) = next;
        let priority = self.lib.job(key).map_or(0, |j| j.transfer.priority);
        let due = at.saturating_add(after.as_micros() as Micros);
        if let Some(i) = self.info.get_mut(&info.id) {
            i.attempt = attempt;
        }
        let file = self.file_of(info.id);
        self.carrier_ended(info.id, file, CarrierEnd::Retried, at);
        self.retries.due.insert((due, info.id), priority);
        self.out.retried += 1;
    }

    /// Send every retry due by now, highest priority first, then by id (`ledger/read.rs`,
    /// `to_submit`).
    pub(super) fn resend_due(&mut self) {
        let mut due = Vec::new();
        while let Some(entry) = self.retries.due.first_entry() {
            if entry.key().0 > self.now {
                break;
            }
            let ((_, id), priority) = entry.remove_entry();
            due.push((std::cmp::Reverse(priority), id));
        }
        due.sort_unstable();
        for (std::cmp::Reverse(priority), id) in due {
            self.resend(id, priority);
        }
    }

    fn resend(&mut self, id: i64, priority: i64) {
        let load = self.load;
        let (Some(&info), Some(a)) = (
            self.info.get(&id),
            usize::try_from(id - 1).ok().and_then(|i| load.get(i)),
        ) else {
            return;
        };
        let mut t = transfer(id, a, info.attempt);
        t.priority = priority;
        if !self.fair[info.group.0] {
            self.waiting_priority += 1;
        } else if !self.by_volume() && self.picker == super::Picker::Policy {
            self.pending
                .add(id, info.group, priority, (info.arrived, self.now));
        }
        let mut events = std::mem::take(&mut self.events);
        self.lib.submit(t, self.now, &mut events);
        self.apply(&mut events);
        self.events = events;
    }
}

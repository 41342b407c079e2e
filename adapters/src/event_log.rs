//! An in-process event log with a cursor, for adapters that learn of changes themselves (an
//! `encp` process exiting, a polled FTS3 job or Tape REST request changing state) and hand them
//! to the broker the way the simulator's HTTP log does.
//!
//! The log lives in the broker's process, so its epoch is new at every start: a restarted broker
//! presents its stored cursor of the old epoch, is answered from the new one, and recovers every
//! in-flight request through the adapter's `status` first. Events are kept until a read asks for
//! what follows them: the broker asks with the cursor it committed together with their effects,
//! so nothing it has not applied is dropped.
//!
//! An in-process event log with an epoch and a cursor, for adapters that learn of changes
//! themselves (a process exiting, a polled state): the same protocol as the simulator's log; a new
//! epoch at every start makes the broker recover in-flight requests by `status`.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

use crate::protocol::{EventCursor, EventKind, MssEvent};
use crate::{EventBatch, Progress};

/// Most events one read returns.
const MAX_EVENTS_PER_READ: usize = 10_000;

/// What a polled state changed for a transfer the adapter follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Nothing new (still queued, or running as already reported).
    Nothing,
    /// It started: mark it started.
    Started,
    /// It ended: stop following it.
    Final,
}

/// A log of [`MssEvent`]s, long-polled with a cursor.
#[derive(Debug)]
pub struct EventLog {
    epoch: String,
    inner: Mutex<Inner>,
    last: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct Inner {
    /// The sequence number of the newest event (0: none yet).
    last_seq: u64,
    /// Events not yet read past, oldest first, with consecutive sequence numbers.
    events: VecDeque<MssEvent>,
}

impl EventLog {
    /// A new log whose epoch names the adapter and this start.
    pub fn new(adapter: &str) -> EventLog {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        EventLog {
            epoch: format!("{adapter}-{}-{}", now.as_nanos(), std::process::id()),
            inner: Mutex::new(Inner::default()),
            last: watch::channel(0).0,
        }
    }

    pub fn epoch(&self) -> &str {
        &self.epoch
    }

    /// Append an event, stamped now, and wake readers.
    pub fn push(&self, key: &str, attempt: u32, kind: EventKind) {
        let at_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let seq = {
            let mut inner = self.lock();
            inner.last_seq += 1;
            let seq = inner.last_seq;
            inner.events.push_back(MssEvent {
                seq,
                key: key.to_string(),
                attempt,
                at_ms,
                kind,
            });
            seq
        };
        self.last.send_replace(seq);
    }

    /// Publish what a poll saw of a followed transfer: its start once, then its end. A transfer
    /// that finished between two polls before its start was seen still reports a start before
    /// it is done, so the broker's waits and starts are counted.
    pub fn observe(&self, key: &str, attempt: u32, started: bool, progress: Progress) -> Seen {
        match progress {
            Progress::Queued => Seen::Nothing,
            Progress::Running if started => Seen::Nothing,
            Progress::Running => {
                self.push(key, attempt, EventKind::Started);
                Seen::Started
            }
            Progress::Finished(kind) => {
                if !started && matches!(kind, EventKind::Done { .. }) {
                    self.push(key, attempt, EventKind::Started);
                }
                self.push(key, attempt, kind);
                Seen::Final
            }
        }
    }

    /// Events after `cursor`, waiting up to `wait` for the first one. Events at or before the
    /// cursor are dropped: the reader has them.
    pub async fn read(&self, cursor: &EventCursor, wait: Duration) -> EventBatch {
        let after = if cursor.epoch == self.epoch {
            cursor.after
        } else {
            0
        };
        if !wait.is_zero() {
            let mut seen = self.last.subscribe();
            // A timeout just means "answer with what there is".
            let _ = tokio::time::timeout(wait, seen.wait_for(|&last| last > after)).await;
        }
        let mut inner = self.lock();
        while inner.events.front().is_some_and(|e| e.seq <= after) {
            inner.events.pop_front();
        }
        let events: Vec<MssEvent> = inner
            .events
            .iter()
            .take(MAX_EVENTS_PER_READ)
            .cloned()
            .collect();
        let after = events.last().map_or(after, |e| e.seq);
        EventBatch {
            cursor: EventCursor {
                epoch: self.epoch.clone(),
                after,
            },
            events,
        }
    }

    /// Events held, not yet read past.
    pub fn backlog(&self) -> usize {
        self.lock().events.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_from_a_cursor_and_drops_what_was_read_past() {
        let log = EventLog::new("t");
        log.push("1", 1, EventKind::Started);
        log.push("1", 1, EventKind::Done { bytes: 5 });
        let first = log.read(&EventCursor::default(), Duration::ZERO).await;
        assert_eq!(first.events.len(), 2);
        assert_eq!(first.cursor.after, 2);
        assert_eq!(first.cursor.epoch, log.epoch());
        // The same cursor again (the reader did not commit): the same events.
        let again = log
            .read(
                &EventCursor {
                    epoch: log.epoch().to_string(),
                    after: 0,
                },
                Duration::ZERO,
            )
            .await;
        assert_eq!(again.events, first.events);
        // Reading past them drops them.
        let next = log.read(&first.cursor, Duration::ZERO).await;
        assert!(next.events.is_empty());
        assert_eq!(next.cursor, first.cursor);
        assert_eq!(log.backlog(), 0);
    }

    #[tokio::test]
    async fn a_cursor_of_another_epoch_starts_from_the_beginning() {
        let log = EventLog::new("t");
        log.push("7", 2, EventKind::Cancelled);
        let old = EventCursor {
            epoch: "before-a-restart".into(),
            after: 40,
        };
        let batch = log.read(&old, Duration::ZERO).await;
        assert_eq!(batch.events.len(), 1);
        assert_eq!(batch.events[0].seq, 1);
        assert_ne!(batch.cursor.epoch, old.epoch);
    }

    #[tokio::test]
    async fn observing_reports_a_start_once_then_the_end() {
        let log = EventLog::new("t");
        assert_eq!(log.observe("1", 1, false, Progress::Queued), Seen::Nothing);
        assert_eq!(log.observe("1", 1, false, Progress::Running), Seen::Started);
        assert_eq!(log.observe("1", 1, true, Progress::Running), Seen::Nothing);
        let done = Progress::Finished(EventKind::Done { bytes: 3 });
        assert_eq!(log.observe("1", 1, true, done.clone()), Seen::Final);
        // Done before a start was seen: the start is reported first.
        assert_eq!(log.observe("2", 1, false, done), Seen::Final);
        // A cancellation before it started is just that.
        let cancelled = Progress::Finished(EventKind::Cancelled);
        assert_eq!(log.observe("3", 1, false, cancelled), Seen::Final);
        let kinds: Vec<(String, EventKind)> = log
            .read(&EventCursor::default(), Duration::ZERO)
            .await
            .events
            .into_iter()
            .map(|e| (e.key, e.kind))
            .collect();
        let k = |key: &str, kind| (key.to_string(), kind);
        assert_eq!(
            kinds,
            [
                k("1", EventKind::Started),
                k("1", EventKind::Done { bytes: 3 }),
                k("2", EventKind::Started),
                k("2", EventKind::Done { bytes: 3 }),
                k("3", EventKind::Cancelled),
            ]
        );
    }

    #[tokio::test]
    async fn a_read_waits_for_the_next_event() {
        let log = std::sync::Arc::new(EventLog::new("t"));
        let cursor = log
            .read(&EventCursor::default(), Duration::ZERO)
            .await
            .cursor;
        let writer = log.clone();
        let pushed = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            writer.push("3", 1, EventKind::Started);
        });
        let batch = log.read(&cursor, Duration::from_secs(10)).await;
        assert_eq!(batch.events.len(), 1);
        pushed.await.unwrap();
    }
}

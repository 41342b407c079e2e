//! Reading an adapter's events in tests: everything read so far is kept, so a test can wait
//! for one transfer's end without losing another's events read on the way.

use std::time::Duration;

use crate::protocol::{EventCursor, EventKind, MssEvent};
use crate::MssAdapter;

/// An adapter's events, read from the start of its log.
#[derive(Debug, Default)]
pub struct EventReader {
    cursor: EventCursor,
    seen: Vec<MssEvent>,
}

/// How long a test waits for what it expects before failing.
const PATIENCE: Duration = Duration::from_secs(20);

impl EventReader {
    pub fn new() -> EventReader {
        EventReader::default()
    }

    /// Every event read so far.
    pub fn seen(&self) -> &[MssEvent] {
        &self.seen
    }

    /// Read until `done` holds for what was read; panics after 20 s with what was seen.
    pub async fn until(
        &mut self,
        adapter: &dyn MssAdapter,
        done: impl Fn(&[MssEvent]) -> bool,
    ) -> &[MssEvent] {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while !done(&self.seen) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "events so far: {:?}",
                self.seen
            );
            let batch = adapter
                .events(&self.cursor, Duration::from_millis(200))
                .await
                .expect("an in-process event log always answers");
            self.cursor = batch.cursor;
            self.seen.extend(batch.events);
        }
        &self.seen
    }

    /// The final event (anything but a start) of `key`, waiting for it.
    pub async fn final_event(&mut self, adapter: &dyn MssAdapter, key: &str) -> EventKind {
        let final_of = |e: &MssEvent| e.key == key && e.kind != EventKind::Started;
        let seen = self.until(adapter, |e| e.iter().any(final_of)).await;
        seen.iter()
            .find(|e| final_of(e))
            .map(|e| e.kind.clone())
            .unwrap_or(EventKind::Cancelled)
    }
}

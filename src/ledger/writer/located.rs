//! Lookups' answers in the writer (issue 38): each is stored on its request (`volume`,
//! `position`, `volume_source`) if no answer is there yet and the request still has no volume;
//! a request still waiting in the `volumes` mode's queue moves from its group's requests
//! waiting for the lookup to its volume's queue (or, when the lookup failed, to its group's
//! requests without a volume, which go at once). A request released or finished meanwhile keeps
//! the answer and moves nowhere. The queue is changed through `WriterState`, so a rollback
//! rebuilds it from the rows, which then hold no answer: the locator asks again.

use crate::ledger::db::{params, DbResult};
use tracing::debug;

use super::state::Txn;
use crate::ledger::{VolumeFound, LOOKUP_FAILED};

impl Txn<'_, '_> {
    /// Store `items`; returns how many requests took a volume.
    pub fn located(&mut self, items: &[VolumeFound]) -> DbResult<usize> {
        let mut took = 0;
        for item in items {
            let (volume, position, source) = match &item.found {
                Some((v, p)) => (Some(v.as_str()), i64::try_from(*p).ok(), item.source),
                None => (None, None, LOOKUP_FAILED),
            };
            self.note(item.id);
            let changed = self.tx.execute(
                "UPDATE requests SET volume = COALESCE(?2, volume), \
                 position = COALESCE(?3, position), volume_source = ?4 \
                 WHERE id = ?1 AND volume_source IS NULL AND (volume IS NULL OR volume = '')",
                params![item.id, volume, position, source],
            )?;
            if changed == 0 {
                continue;
            }
            took += usize::from(volume.is_some());
            let position = position.and_then(|p| u64::try_from(p).ok());
            let moved = self.st.relocate_volume(item.id, volume, position);
            debug!(
                request = item.id,
                volume, moved, source, "volume lookup stored"
            );
        }
        Ok(took)
    }
}

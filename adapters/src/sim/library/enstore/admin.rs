//! Admin requests in [`super::Enstore`] (`LibraryConfig::admin_from`), as Enstore's library
//! manager serves its admin queue (Enstore-org/enstore at `a154041a`, `src/library_manager.py`):
//!
//! - an idle mover takes the admin queue first (`next_work_any_volume`: `pending_work.get`
//!   without a key looks in the admin queue before the regular one);
//! - a mover that finished a *regular* request on its volume is first offered the best admin
//!   request of any volume (`next_work_this_volume`: `get_admin_request` with no key). For
//!   another volume `allow_hipri` lets it take the request only when no mover is idle
//!   (`if len(self.idle_movers) > 0: ret = False`), and not when that volume is busy elsewhere
//!   (`is_vol_busy`); the mover then unmounts its tape and mounts the other at once
//!   ("perhaps this is a hipri request forcing a tape replacement"; mover.py `mount_volume`
//!   dismounts when `volume_label != self.current_volume`), with no dismount delay;
//! - a mover that finished an admin request looks only at admin requests for its own volume,
//!   then at its volume's regular ones.
//!
//! Among a volume's requests an admin one goes first, whatever its position.

use std::cmp::Reverse;

use super::{Enstore, State};
use crate::sim::library::{Aging, Jobs, LibraryConfig, LibraryEvent, Micros};

impl Enstore {
    /// The highest priority waiting for `volume`, not aged.
    fn best_raw(&self, volume: &str) -> Option<i64> {
        let vq = self.volumes.get(volume)?;
        vq.by_pri.keys().next().map(|&(Reverse(p), _)| p)
    }

    /// Whether `volume` has an admin request waiting.
    pub(super) fn has_admin(&self, cfg: &LibraryConfig, volume: &str) -> bool {
        cfg.admin_from
            .is_some_and(|from| self.best_raw(volume).is_some_and(|p| p >= from))
    }

    /// The volume of the best admin request drive `d` may take: none held by another drive.
    pub(super) fn admin_volume(&self, cfg: &LibraryConfig, d: usize) -> Option<String> {
        let from = cfg.admin_from?;
        for (&(Reverse(tag), _), volume) in &self.index {
            if tag < from {
                // Tags are at least the raw priority: nothing further is admin.
                return None;
            }
            if !self.has_admin(cfg, volume) {
                continue;
            }
            if self.held.get(volume).is_none_or(|&other| other == d) {
                return Some(volume.clone());
            }
        }
        None
    }

    /// Take `volume`'s best request (its admin one) rather than the next by position.
    pub(super) fn take_best(
        &mut self,
        volume: &str,
        aging: Option<Aging>,
        at: Micros,
    ) -> Option<String> {
        let vq = self.volumes.get_mut(volume)?;
        let (&slot, &pos) = vq.by_pri.iter().next()?;
        vq.by_pri.remove(&slot);
        let (key, _) = vq.by_pos.remove(&(pos, slot.1))?;
        self.pending -= 1;
        self.retag(volume, aging, at);
        Some(key)
    }

    /// Idle drives take admin volumes first.
    pub(super) fn admin_to_idle(
        &mut self,
        cfg: &LibraryConfig,
        jobs: &mut Jobs,
        at: Micros,
        out: &mut Vec<LibraryEvent>,
    ) {
        for d in 0..self.drives.len() {
            if !matches!(self.drives[d].state, State::Empty) {
                continue;
            }
            let Some(volume) = self.admin_volume(cfg, d) else {
                return;
            };
            if let Some(key) = self.take_best(&volume, cfg.aging, at) {
                self.start(cfg, jobs, (d, volume, key, true), at, out);
            }
        }
    }

    /// Bound drive `d`, done with a regular request on `own`, is handed an admin request of
    /// another volume when no drive is idle: it unmounts `own` at once and mounts that one.
    /// Whether it was.
    pub(super) fn admin_takes_over(
        &mut self,
        cfg: &LibraryConfig,
        jobs: &mut Jobs,
        (d, own): (usize, &str),
        at: Micros,
        out: &mut Vec<LibraryEvent>,
    ) -> bool {
        let idle = self.drives.iter().any(|x| matches!(x.state, State::Empty));
        if idle || self.drives[d].admin {
            return false;
        }
        let Some(volume) = self.admin_volume(cfg, d).filter(|v| v != own) else {
            return false;
        };
        let Some(key) = self.take_best(&volume, cfg.aging, at) else {
            return false;
        };
        // The tape stays in drive `d` until it is unloaded: only then may another drive mount
        // it. Enstore's mover.py `mount_volume` (MV 6989–6993) dismounts the current tape
        // synchronously before loading the new one, and library_manager.py keeps a volume in
        // `volumes_at_movers` until its mover reports IDLE (LM 4195; docs/enstore-model.md).
        let took = self.unmount_now(d);
        self.releasing
            .insert((at.saturating_add(took), own.to_string(), d));
        self.stats.unmounts += 1;
        self.stats.drives[d].unmounting += took;
        self.start(cfg, jobs, (d, volume, key, true), at, out);
        if let State::Busy { end, .. } = &mut self.drives[d].state {
            *end = end.saturating_add(took);
        }
        true
    }
}

//! Remainders (issue 39): a batch takes along every request it would leave on its tape when
//! together they hold at most `[release.volumes] remainder_bytes`, whatever their groups'
//! standing, so that a tape is not mounted again later for a few files the mount already on it
//! reads in seconds. A second mount costs a mount, a locate from the load point, an unmount and
//! Enstore's dismount delay: about four minutes of an LTO-9 drive, the time it streams 90 GB.
//!
//! What keeps the shares: every fair-share group has a **credit**, in benefit units. Each batch
//! released adds the group's share of the batch's benefit to it (at most one full batch's
//! worth, `cap`), and a group's requests ride as a remainder only while its credit covers them,
//! which they then spend. So a group's remainders never take more than its share of what the
//! library reads, beyond a burst of one batch (1 pp of a 10 TB window with 100 GB batches, the
//! step a batch moves a share by anyway; two batches' worth passed 2 pp on a goals trace);
//! they are charged to the group as any request, so the group choice, which ranks a group ahead
//! of its share last, repays what they add. Pure: the credit lives in the `VolumeQueue`, kept
//! over a rollback and a reload (`VolumeMemory`); a start begins with none.

use std::collections::BTreeMap;

use super::state::Vol;
use super::{Batch, VolumeId};
use crate::domain::order::VolumeSettings;
use crate::domain::{Benefit, GroupId, GroupKind, PolicySettings};

/// Per group, the benefit its remainders may still take.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Credit(BTreeMap<GroupId, u64>);

impl Credit {
    /// What group `g`'s remainders may take now.
    pub fn room(&self, g: GroupId) -> u64 {
        self.0.get(&g).copied().unwrap_or(0)
    }

    /// `batch` was released: every fair-share group earns its share of the batch's benefit (up
    /// to `cap`), then the batch's remainders are paid.
    pub fn started(&mut self, policy: &PolicySettings, batch: &Batch) {
        let s = &policy.order.release.volumes;
        if s.remainder_bytes == 0 {
            return;
        }
        let cap = cap(policy, s);
        let benefit: u64 = batch.requests.iter().map(|c| c.benefit).sum();
        for (g, info) in policy.groups.iter().enumerate() {
            if let GroupKind::FairShare { share } = info.kind {
                let earned = share.num().saturating_mul(u128::from(benefit)) / share.den().max(1);
                let c = self.0.entry(GroupId(g)).or_default();
                *c = (u128::from(*c) + earned).min(u128::from(cap)) as u64;
            }
        }
        for &(g, spent) in &batch.remainder {
            let c = self.0.entry(g).or_default();
            *c = c.saturating_sub(spent);
        }
    }

    /// The same credit under the group ids `regroup` gives (a reload); a group no longer
    /// configured is dropped.
    pub fn regroup(self, regroup: &impl Fn(GroupId) -> Option<GroupId>) -> Credit {
        Credit(
            (self.0.into_iter())
                .filter_map(|(g, c)| Some((regroup(g)?, c)))
                .collect(),
        )
    }
}

/// The most credit a group holds: the benefit of one full batch.
fn cap(policy: &PolicySettings, s: &VolumeSettings) -> u64 {
    let bytes = s.batch_max_bytes;
    match &policy.benefit {
        Benefit::Bytes => bytes,
        Benefit::Files => u64::from(s.batch_max_files),
        Benefit::WeightedBytes(w) => {
            bytes.saturating_mul(w.values().copied().max().unwrap_or(1).max(1))
        }
    }
}

/// What a batch takes along as its remainder.
pub(super) struct Taken {
    /// (tape position, id) of each request.
    pub keys: Vec<(u64, i64)>,
    pub bytes: u64,
    /// Per group, the benefit it spends.
    pub spent: Vec<(GroupId, u64)>,
}

/// The requests on tape `vol` (`v` its queue) that a batch of `picked` leaves, when the rule
/// takes them: they hold at most `remainder_bytes` in all, the batch stays within
/// `batch_max_files`, and `room` (each group's credit) covers every group's share of them. All
/// or none: a request left behind needs a mount anyway, and the others could ride on it.
pub(super) fn take(
    s: &VolumeSettings,
    vol: &VolumeId,
    v: &Vol,
    picked: &[(u64, i64)],
    room: &dyn Fn(GroupId) -> u64,
) -> Option<Taken> {
    if s.remainder_bytes == 0 || !matches!(vol, VolumeId::Tape(_)) {
        return None;
    }
    let left = v.reqs.len().checked_sub(picked.len()).filter(|&n| n > 0)?;
    if picked.len() + left > s.batch_max_files as usize {
        return None;
    }
    let mut keys = Vec::with_capacity(left);
    let mut bytes = 0u64;
    let mut spent: BTreeMap<GroupId, u64> = BTreeMap::new();
    for (k, (g, w)) in &v.reqs {
        if picked.binary_search(k).is_ok() {
            continue;
        }
        bytes = bytes.saturating_add(w.size_bytes());
        if bytes > s.remainder_bytes {
            return None;
        }
        *spent.entry(*g).or_default() += w.benefit();
        keys.push(*k);
    }
    if spent.iter().any(|(&g, &b)| room(g) < b) {
        return None;
    }
    Some(Taken {
        keys,
        bytes,
        spent: spent.into_iter().collect(),
    })
}

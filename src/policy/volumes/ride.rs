//! Riders (issue 39): which other groups' requests may ride on a batch a group leads, and how
//! much, so that a mounted volume is read for every group waiting on it while no group's lead
//! over its share passes `[release.volumes] ride_lead_bytes`, and a group the bound stopped is
//! repaid (rides no more) until it is back at its share. Pure: usage in, an allowance out.

use std::collections::BTreeSet;

use crate::domain::order::VolumeSettings;
use crate::domain::{GroupId, GroupKind};
use crate::policy::order::ShareSnapshot;
use crate::shares::UsageLookup;

/// How much (benefit units) a group's requests may ride on one batch; 0: none.
pub(super) type Allowance = u64;

/// What group `g` may ride on the next batch.
///
/// Without `ride_lead_bytes`, a group not ahead of its share rides as much as the batch holds,
/// a group ahead of it not at all (the rule before issue 39). With it, a group not repaying
/// rides while its lead after the ride stays at most the bound: a ride of `b` adds `b` to the
/// group's usage and to the fair-share total, so its lead grows by `(1 - share) * b`.
/// A priority class (never queued here) or a group that is the whole fair share has no lead.
pub(super) fn allowance<U: UsageLookup>(
    s: &VolumeSettings,
    standing: &ShareSnapshot<'_, U>,
    repaying: &BTreeSet<GroupId>,
    g: GroupId,
) -> Allowance {
    let Some(bound) = s.ride_lead_bytes else {
        return if not_ahead(standing, g) { u64::MAX } else { 0 };
    };
    if repaying.contains(&g) {
        return 0;
    }
    let Some((lead, share)) = lead(standing, g) else {
        return u64::MAX;
    };
    let keep = 1.0 - share;
    if keep <= 0.0 {
        return u64::MAX;
    }
    let room = (bound as f64 - lead) / keep;
    if room < 1.0 {
        0
    } else if room >= u64::MAX as f64 {
        u64::MAX
    } else {
        room.floor() as u64
    }
}

/// Group `g`'s lead over its share, in benefit units (negative: behind it), and its share;
/// `None` for a priority class. With no usage yet, every group is at its share (lead 0).
pub fn lead<U: UsageLookup>(standing: &ShareSnapshot<'_, U>, g: GroupId) -> Option<(f64, f64)> {
    let GroupKind::FairShare { share } = standing.policy.group(g).kind else {
        return None;
    };
    let share = share.num() as f64 / share.den() as f64;
    let unit = standing.usage.unit().max(1) as f64;
    let used = standing.usage.value(g) as f64;
    let total = standing.usage.fair_total() as f64;
    Some(((used - share * total) / unit, share))
}

/// Whether `g` has not used more than its target share of the fair-share usage (at the start,
/// with no usage, every group): it may keep a mounted volume (the sticky rule), and, without
/// `ride_lead_bytes`, ride on another group's mount. A group ahead of its share waits for the
/// policy to choose it.
pub(super) fn not_ahead<U: UsageLookup>(standing: &ShareSnapshot<'_, U>, g: GroupId) -> bool {
    let GroupKind::FairShare { share } = standing.policy.group(g).kind else {
        return true;
    };
    let total = standing.usage.fair_total();
    if total == 0 {
        return true;
    }
    let used = standing.usage.value(g) as f64 / total as f64;
    used <= share.num() as f64 / share.den() as f64
}

/// The groups ahead of their share (see [`not_ahead`]).
pub(super) fn ahead<U: UsageLookup>(standing: &ShareSnapshot<'_, U>) -> BTreeSet<GroupId> {
    (0..standing.policy.groups.len())
        .map(GroupId)
        .filter(|&g| !not_ahead(standing, g))
        .collect()
}

/// The groups repaying a lead that are back at their share stop repaying.
pub(super) fn repaid<U: UsageLookup>(
    standing: &ShareSnapshot<'_, U>,
    repaying: &mut BTreeSet<GroupId>,
) {
    repaying.retain(|&g| !not_ahead(standing, g));
}

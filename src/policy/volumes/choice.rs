//! The volume a chosen group's batch mounts (issue 39): of the group's fullest eligible volumes,
//! the one whose mount reads the most, each group's bytes on it weighed by what reading them
//! does to the shares. Pure: usage in, a weight per group out.

use crate::domain::order::{ShareChoice, VolumeSettings};
use crate::domain::{Benefit, GroupId};
use crate::policy::order::ShareSnapshot;
use crate::shares::UsageLookup;

use super::ride;

/// One batch in benefit units: `batch_max_bytes`, or `batch_max_files` where the benefit is
/// files.
fn batch<U: UsageLookup>(s: &VolumeSettings, standing: &ShareSnapshot<'_, U>) -> f64 {
    let b = match standing.policy.benefit {
        Benefit::Files => u64::from(s.batch_max_files),
        Benefit::Bytes | Benefit::WeightedBytes(_) => s.batch_max_bytes,
    };
    b.max(1) as f64
}

/// The weight of group `o`'s bytes on a volume another group's batch would mount, `rides`
/// whether `o` may ride on it. Without a share choice: 1 for a group that may ride, else 0 (its
/// bytes are left on the volume). With one: a group ahead of its share counts against the
/// volume in proportion to its lead (up to a batch), whether it rides (its lead grows) or not
/// (its bytes wait for another mount); a group at or behind its share that may ride counts 1
/// and more the further behind it is.
pub(super) fn weight<U: UsageLookup>(
    s: &VolumeSettings,
    standing: &ShareSnapshot<'_, U>,
    rides: bool,
    o: GroupId,
) -> f64 {
    let base = if rides { 1.0 } else { 0.0 };
    let Some(c) = s.share_choice else {
        return base;
    };
    let Some((lead, _)) = ride::lead(standing, o) else {
        return base;
    };
    let r = lead / (batch(s, standing) * c.scale);
    weigh(&c, r, rides)
}

/// [`weight`] for a group `r` batches ahead of its share (negative: behind).
fn weigh(c: &ShareChoice, r: f64, rides: bool) -> f64 {
    if r > 0.0 {
        -c.ahead * r.min(1.0)
    } else if rides {
        1.0 + c.behind * (-r).min(1.0)
    } else {
        0.0
    }
}

/// How many of the chosen group's fullest eligible volumes are weighed.
pub(super) fn width(s: &VolumeSettings) -> usize {
    s.share_choice
        .map_or(super::state::CONSIDERED, |c| c.width.max(1))
}

//! The SAM fair-share decision (seed 000; the `policy::sam` module states it) and the exact
//! comparison of fractions it and the floors and caps ([`super::limits`]) use. Pure.

use super::limits::floor_or_cap;
use super::UsageLookup;
use crate::domain::settings::PolicySettings;
use crate::domain::tree::{GroupId, GroupKind};
use crate::domain::Class;

/// Where a request enters the MSS queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub class: Class,
    pub mss_priority: i64,
}

/// Decide the class and MSS priority of a request of `group` worth `benefit`, given the usage
/// before it (effective usage under the configured model, at the decision's instant). The
/// caller charges `benefit` to `group` afterwards (same transaction).
///
/// A floor or cap on the group's path decides first (caps lower, then floors raise; see
/// [`crate::shares::limits`]); otherwise the group's own fraction of usage, this request
/// included, is compared with its target (a `"parent"` leaf: its parent's usage, see
/// [`standing_value`]). A target of 0 (siblings that all have 0 shares) always goes back.
pub fn decide(
    policy: &PolicySettings,
    usage: &impl UsageLookup,
    group: GroupId,
    benefit: u64,
) -> Decision {
    let front = Decision {
        class: Class::Front,
        mss_priority: policy.p_front,
    };
    let back = Decision {
        class: Class::Back,
        mss_priority: policy.p_back,
    };
    match policy.group(group).kind {
        GroupKind::Priority { mss_priority, .. } => Decision {
            class: Class::Priority,
            mss_priority,
        },
        GroupKind::FairShare { share } => {
            let add = u128::from(benefit).saturating_mul(usage.unit());
            match floor_or_cap(policy, usage, group, add) {
                Some((Class::Front, _)) => return front,
                Some(_) => return back,
                None => {}
            }
            let mine = standing_value(policy, usage, group) + add;
            let all = usage.fair_total() + add;
            if all > 0 && less_than(mine, all, share.num(), share.den()) {
                front
            } else {
                back
            }
        }
    }
}

/// The usage a fair-share group is judged by: its own, or for a `"parent"` leaf its parent
/// node's (every leaf under it summed), which its target (the parent's fraction) is compared
/// with. SchedMD/slurm src/plugins/priority/multifactor/priority_multifactor.c:1306-1326
/// (`_set_assoc_fs_factor`) uses the parent's usage and shares for a
/// FairShare=parent association.
pub fn standing_value(policy: &PolicySettings, usage: &impl UsageLookup, group: GroupId) -> u128 {
    match policy.group(group).ancestors.last() {
        Some(&leaf) if policy.tree.nodes[leaf].use_parent => {
            super::limits::node_value(policy, usage, policy.tree.standing(leaf))
        }
        _ => usage.value(group),
    }
}

/// `a / b < c / d` exactly, for `b, d > 0`.
pub(crate) fn less_than(a: u128, b: u128, c: u128, d: u128) -> bool {
    match (a.checked_mul(d), c.checked_mul(b)) {
        (Some(lhs), Some(rhs)) => lhs < rhs,
        // Only past 2^80 bytes of usage; compare the integer parts then the remainders.
        _ => {
            let (qa, ra) = (a / b, a % b);
            let (qc, rc) = (c / d, c % d);
            if qa != qc {
                return qa < qc;
            }
            // ra/b < rc/d with ra < b, rc < d: recurse on the reciprocals (continued fractions).
            if ra == 0 {
                return rc > 0;
            }
            if rc == 0 {
                return false;
            }
            less_than(d, rc, b, ra)
        }
    }
}

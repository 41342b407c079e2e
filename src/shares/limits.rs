//! Maui's floors, caps and feasibility caps on tree nodes (seed 004), as pure checks.
//!
//! - A **cap** only lowers: when a node's share of fair-share usage (this request included) is
//!   at or over its cap, requests under it go back.
//! - A **floor** only raises: when a node's share is under its floor, requests under it go
//!   front (unless a cap lowers them: caps are checked first).
//! - A **feasibility cap** holds: when a node's usage in the current window (or its share of the
//!   window's usage), this request's charge included, would pass the cap, or is already at or
//!   over it, new requests under it are held, not refused, until the request fits. Maui: "If
//!   the fairshare cap is reached or exceeded, the job is not allowed to run" (seed 004,
//!   6.3.3.2); counting the request being decided means a node never overshoots its cap by one
//!   request of any size. A percent cap compares the node's usage plus the request with the
//!   total usage *before* the request, as Maui's `MFSCheckCap` does for `mfstCapRel`
//!   (`(F->FSUsage[0] + F->FSFactor + FSReq) / (GP->F.FSUsage[0] + GP->F.FSFactor) * 100.0`
//!   over the cap fails): a request adds to the node's part and not to the whole, so it cannot
//!   dilute the share it is judged by. A node with nothing counted yet is never held, so a request larger
//!   than the cap on its own is released once its node's window is empty instead of waiting
//!   for ever.
//!
//! Shares are compared exactly, as fractions of integers; equality counts as reaching a cap, and
//! as not being under a floor, as SAM's equality goes back.

use super::sam::less_than;
use crate::domain::{Class, Fraction};
use crate::domain::{GroupId, NodeLimits, PolicySettings};

use super::book::UsageLookup;

/// A node's usage: the sum of its groups'.
pub fn node_value(policy: &PolicySettings, usage: &impl UsageLookup, node: usize) -> u128 {
    policy.tree.nodes[node]
        .leaves
        .iter()
        .map(|&g| usage.value(g))
        .sum()
}

fn node_measure(policy: &PolicySettings, usage: &impl UsageLookup, node: usize) -> u128 {
    policy.tree.nodes[node]
        .leaves
        .iter()
        .map(|&g| usage.measure(g))
        .sum()
}

/// `part / all < f`; an empty total counts as a share of 0.
fn share_below(part: u128, all: u128, f: Fraction) -> bool {
    if all == 0 {
        return f.num() > 0;
    }
    less_than(part, all, f.num(), f.den())
}

/// Whether a floor or cap on the path of group `g` decides a request adding `add` weighted
/// units: `Some((class, node))` names the class and the node that decided it.
pub fn floor_or_cap(
    policy: &PolicySettings,
    usage: &impl UsageLookup,
    g: GroupId,
    add: u128,
) -> Option<(Class, usize)> {
    let path = &policy.group(g).ancestors;
    if path.iter().all(|&n| {
        let l = &policy.tree.nodes[n].limits;
        l.floor.is_none() && l.cap.is_none()
    }) {
        return None;
    }
    let all = usage.fair_total() + add;
    let share = |n: usize| node_value(policy, usage, n) + add;
    for &n in path {
        if let Some(cap) = policy.tree.nodes[n].limits.cap {
            if !share_below(share(n), all, cap) {
                return Some((Class::Back, n));
            }
        }
    }
    for &n in path {
        if let Some(floor) = policy.tree.nodes[n].limits.floor {
            if share_below(share(n), all, floor) {
                return Some((Class::Front, n));
            }
        }
    }
    None
}

/// Why a new request of group `g` charging `benefit` (benefit units, what feasibility caps
/// count) must be held now: a feasibility cap on its path is reached, or would be passed with
/// the request counted; `None` when it fits.
pub fn held_by(
    policy: &PolicySettings,
    usage: &impl UsageLookup,
    g: GroupId,
    benefit: u64,
) -> Option<String> {
    policy
        .group(g)
        .ancestors
        .iter()
        .find_map(|&n| over_feasibility(policy, usage, n, u128::from(benefit)))
}

/// Why node `node` is at or over a feasibility cap, or would pass one with `add` more benefit
/// units counted (0: the node as it stands), or `None`. A node with nothing counted is never
/// held.
pub fn over_feasibility(
    policy: &PolicySettings,
    usage: &impl UsageLookup,
    node: usize,
    add: u128,
) -> Option<String> {
    let limits: &NodeLimits = &policy.tree.nodes[node].limits;
    if !limits.has_feasibility_cap() {
        return None;
    }
    let used = node_measure(policy, usage, node);
    if used == 0 {
        return None;
    }
    let path = &policy.tree.nodes[node].path;
    let window = match policy.usage_model {
        crate::shares::UsageModel::Windows { .. } => "in the current usage window",
        _ => "of effective usage",
    };
    let with = used.saturating_add(add);
    if let Some(cap) = limits.feasibility_cap {
        let cap_u = u128::from(cap);
        if used >= cap_u {
            return Some(format!(
                "feasibility cap of `{path}` reached: {used} used {window}, cap {cap}"
            ));
        }
        if with > cap_u {
            return Some(format!(
                "feasibility cap of `{path}` would be passed: {used} used {window} + {add} \
                 requested = {with}, over the cap {cap}"
            ));
        }
    }
    if let Some(pct) = limits.feasibility_cap_percent {
        let all = usage.fair_measure_total();
        let cap = pct.to_f64() * 100.0;
        if !less_than(used, all, pct.num(), pct.den()) {
            return Some(format!(
                "feasibility cap of `{path}` reached: {used} of {all} used {window}, cap {cap}%"
            ));
        }
        // Maui's `MFSCheckCap`: the node's usage plus the request, against the total usage
        // before the request (`all` > 0: it holds `used`).
        if less_than(pct.num(), pct.den(), with, all) {
            return Some(format!(
                "feasibility cap of `{path}` would be passed: {used} used + {add} requested = \
                 {with}, against {all} used by all {window}: over the cap {cap}%"
            ));
        }
    }
    None
}

/// Where a node stands against its floor and caps, for people.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapState {
    /// No floor or cap set on the node.
    None,
    /// Set, and none of them acts now.
    Ok,
    /// Under its floor: its requests go front.
    Floor,
    /// At or over its cap: its requests go back.
    Capped,
    /// At or over a feasibility cap: its new requests are held.
    Held,
}

impl CapState {
    pub fn as_str(self) -> &'static str {
        match self {
            CapState::None => "none",
            CapState::Ok => "ok",
            CapState::Floor => "floor",
            CapState::Capped => "capped",
            CapState::Held => "held",
        }
    }
}

/// A node's own cap state at the usage given (no request added).
pub fn cap_state(policy: &PolicySettings, usage: &impl UsageLookup, node: usize) -> CapState {
    let limits = &policy.tree.nodes[node].limits;
    if limits.is_empty() {
        return CapState::None;
    }
    if over_feasibility(policy, usage, node, 0).is_some() {
        return CapState::Held;
    }
    let mine = node_value(policy, usage, node);
    let all = usage.fair_total();
    if let Some(cap) = limits.cap {
        if all > 0 && !share_below(mine, all, cap) {
            return CapState::Capped;
        }
    }
    if let Some(floor) = limits.floor {
        if share_below(mine, all, floor) {
            return CapState::Floor;
        }
    }
    CapState::Ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;
    use crate::shares::Effective;

    fn policy(targets: &str) -> std::sync::Arc<PolicySettings> {
        let text = format!(
            "[policy]\np_front = 20\np_back = 10\n[usage]\nmodel = \"none\"\n[shares]\na = 1\n\"a/x\" = 1\n\"a/y\" = 1\nb = 1\n{targets}\n[mss]\nadapter = \"http\"\nurl = \"http://127.0.0.1:1\"\n"
        );
        Settings::parse(&text, "t").unwrap().policy
    }

    fn usage(p: &PolicySettings, values: &[(&str, u128)]) -> Effective {
        let mut v = vec![0u128; p.groups.len()];
        for (path, u) in values {
            v[p.group_by_path(path).unwrap().0] = *u;
        }
        Effective {
            measures: v.clone(),
            cumulative: v.clone(),
            fair: vec![true; v.len()],
            values: v,
            unit: 1,
            windows: Vec::new(),
        }
    }

    #[test]
    fn caps_lower_floors_raise_caps_first() {
        let p = policy("[targets.a]\ncap_percent = 60\n[targets.\"a/x\"]\nfloor_percent = 10");
        let x = p.group_by_path("a/x").unwrap();
        let node_a = p.group(x).ancestors[0];
        let node_x = p.group(x).ancestors[1];
        // a has 50 of 100; a request of 10 makes it 60/110 < 60%: the cap does not act; x has
        // 0 + 10 of 110 = 9.1% < 10%: the floor raises it.
        let u = usage(&p, &[("a/y", 50), ("b", 50)]);
        assert_eq!(floor_or_cap(&p, &u, x, 10), Some((Class::Front, node_x)));
        // A request of 30: a = 80/130 = 61.5%, at or over the cap: back, floor or not.
        assert_eq!(floor_or_cap(&p, &u, x, 30), Some((Class::Back, node_a)));
        // Exactly at the cap counts as reached: a = 60 + 15 = 75 of 125 = 60%.
        let u = usage(&p, &[("a/y", 60), ("b", 50)]);
        assert_eq!(floor_or_cap(&p, &u, x, 15), Some((Class::Back, node_a)));
        // x over its floor, a under its cap: nothing decides.
        let u = usage(&p, &[("a/x", 20), ("b", 80)]);
        assert_eq!(floor_or_cap(&p, &u, x, 1), None);
        assert_eq!(cap_state(&p, &u, node_a), CapState::Ok);
        assert_eq!(cap_state(&p, &u, node_x), CapState::Ok);
        let u = usage(&p, &[("a/x", 5), ("b", 95)]);
        assert_eq!(cap_state(&p, &u, node_x), CapState::Floor);
        let u = usage(&p, &[("a/x", 60), ("b", 40)]);
        assert_eq!(cap_state(&p, &u, node_a), CapState::Capped);
        let b = p.group(p.group_by_path("b").unwrap()).ancestors[0];
        assert_eq!(cap_state(&p, &u, b), CapState::None);
    }

    #[test]
    fn feasibility_caps_hold_at_or_over() {
        let p =
            policy("[targets.a]\nfeasibility_cap = 100\n[targets.b]\nfeasibility_cap_percent = 50");
        let (x, b) = (
            p.group_by_path("a/x").unwrap(),
            p.group_by_path("b").unwrap(),
        );
        assert_eq!(held_by(&p, &usage(&p, &[("a/y", 99)]), x, 0), None);
        let reason = held_by(&p, &usage(&p, &[("a/y", 100)]), x, 0).unwrap();
        assert!(reason.contains("`a`") && reason.contains("100"), "{reason}");
        // b: 50 of 100 is 50%: held; 49 of 99 is under.
        assert!(held_by(&p, &usage(&p, &[("a/x", 50), ("b", 50)]), b, 0).is_some());
        assert_eq!(
            held_by(&p, &usage(&p, &[("a/x", 50), ("b", 49)]), b, 0),
            None
        );
        // No usage at all: nothing is over a percentage.
        assert_eq!(held_by(&p, &usage(&p, &[]), b, 0), None);
    }

    /// Worked by hand: the request being decided counts. Node `a` has a cap of 100 and 60 used;
    /// `b` a cap of 50% with 30 of 90 used (33.3%).
    #[test]
    fn feasibility_caps_count_the_request_being_decided() {
        let p =
            policy("[targets.a]\nfeasibility_cap = 100\n[targets.b]\nfeasibility_cap_percent = 50");
        let (x, b) = (
            p.group_by_path("a/x").unwrap(),
            p.group_by_path("b").unwrap(),
        );
        let u = usage(&p, &[("a/y", 60), ("b", 30)]);
        // a: 60 + 40 = 100 reaches the cap exactly, which fits; 60 + 41 = 101 would pass it.
        assert_eq!(held_by(&p, &u, x, 40), None);
        let reason = held_by(&p, &u, x, 41).unwrap();
        assert!(
            reason.contains("would be passed")
                && reason.contains("60 used")
                && reason.contains("+ 41 requested = 101")
                && reason.contains("cap 100"),
            "{reason}"
        );
        // Before, a node could overshoot by one request of any size: 60 is under 100, and a
        // request of a million was let through. Now it waits.
        assert!(held_by(&p, &u, x, 1_000_000).is_some());
        // b: (30 + 15) / 90 = 50% exactly: fits; (30 + 16) / 90 = 51.1%: held (Maui's rule,
        // `percent_feasibility_caps_compare_with_the_total_before_the_request`).
        assert_eq!(held_by(&p, &u, b, 15), None);
        let reason = held_by(&p, &u, b, 16).unwrap();
        assert!(reason.contains("= 46, against 90"), "{reason}");
        // The node as it stands (what `mssbroker shares` shows) is not held.
        let node_a = p.group(x).ancestors[0];
        assert_eq!(cap_state(&p, &u, node_a), CapState::Ok);
        // A node with nothing counted is never held, even by a request larger than its cap on
        // its own: it would otherwise wait for ever.
        let empty = usage(&p, &[("b", 90)]);
        assert_eq!(held_by(&p, &empty, x, 1_000), None);
        // Once anything is counted, the same request waits for the window to empty.
        let one = usage(&p, &[("a/y", 1), ("b", 90)]);
        assert!(held_by(&p, &one, x, 1_000).is_some());
    }

    /// Maui's `MFSCheckCap` for a percent cap (`mfstCapRel`): the node's usage plus the request
    /// against the total usage before the request. Worked: `b` has a cap of 50% and 30 of 90
    /// used (33.3%). A request of 15: (30 + 15) / 90 = 50%, not over: fits. One of 16:
    /// 46 / 90 = 51.1%: held. One of 30: 60 / 90 = 66.7%: held; counting it in the total too,
    /// (30 + 30) / (90 + 30) = 50%, would have let it through, and with it any request up to
    /// the rest of the total: with a total of T, a node's share can only stay under p% when
    /// the request is counted on one side.
    #[test]
    fn percent_feasibility_caps_compare_with_the_total_before_the_request() {
        let p = policy("[targets.b]\nfeasibility_cap_percent = 50");
        let b = p.group_by_path("b").unwrap();
        let u = usage(&p, &[("a/x", 60), ("b", 30)]);
        assert_eq!(
            held_by(&p, &u, b, 15),
            None,
            "45 of 90 is 50%: reached, not passed"
        );
        let reason = held_by(&p, &u, b, 16).expect("46 of 90 is over 50%");
        assert!(
            reason.contains("30 used + 16 requested = 46, against 90"),
            "{reason}"
        );
        assert!(
            held_by(&p, &u, b, 30).is_some(),
            "60 of 90: held, although 60 of 120 is 50%"
        );
        // Another node's usage is only in the total: a's 60 of 90 does not hold b.
        let x = p.group_by_path("a/x").unwrap();
        assert_eq!(held_by(&p, &u, x, 1_000), None, "a has no cap");
    }

    proptest::proptest! {
        /// Requests of any sizes, each accepted when `held_by` lets it and charged at once: the
        /// node's usage never passes its cap, except by a single request larger than the cap
        /// itself taken into an empty node (which would otherwise wait for ever); and every
        /// request refused would have passed it.
        #[test]
        fn a_node_never_passes_its_feasibility_cap(
            cap in 1u64..1_000,
            sizes in proptest::collection::vec(1u64..400, 1..40),
        ) {
            let p = policy(&format!("[targets.a]\nfeasibility_cap = {cap}"));
            let x = p.group_by_path("a/x").unwrap();
            let mut used = 0u128;
            for size in sizes {
                let u = usage(&p, &[("a/x", used)]);
                match held_by(&p, &u, x, size) {
                    None => {
                        let alone_over_empty = used == 0 && u128::from(size) > u128::from(cap);
                        used += u128::from(size);
                        proptest::prop_assert!(used <= u128::from(cap) || alone_over_empty,
                            "{used} past the cap {cap}");
                    }
                    Some(_) => proptest::prop_assert!(used + u128::from(size) > u128::from(cap)),
                }
            }
        }
    }

    #[test]
    fn targets_must_name_tree_nodes_and_be_percentages() {
        let text = "[policy]\np_front = 20\np_back = 10\n[shares]\na = 1\n[targets.zz]\ncap_percent = 5\n[targets.a]\nfloor_percent = 150\ncap_percent = 0\n[mss]\nadapter = \"http\"\nurl = \"http://127.0.0.1:1\"\n";
        let err = Settings::parse(text, "t").unwrap_err().to_string();
        assert!(err.contains("targets.\"zz\": is not a node"), "{err}");
        assert!(err.contains("targets.\"a\".floor_percent"), "{err}");
        assert!(err.contains("targets.\"a\".cap_percent"), "{err}");
    }
}

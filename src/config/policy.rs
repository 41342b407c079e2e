//! `[policy]`, `[[priority_classes]]` and `[classification]` validated, with the tree, usage
//! model and ordering, into [`PolicySettings`].

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use super::raw::RawConfig;
use super::targets::validate_targets;
use super::tree::build_tree;
use super::usage::validate_usage;
use super::{order, positive, Issues};
use crate::domain::{
    Benefit, DeltaForm, GroupId, GroupInfo, GroupKind, GroupPath, PolicySettings, Rule, ShareTree,
};

/// A request's benefit is stored as an i64 (`requests.charged`): refuse a weight for which the
/// largest request allowed (`limits.max_size_bytes`) would be worth more.
fn check_weight_bound(mode: &str, weight: i64, max_size_bytes: i64, issues: &mut Issues) {
    if weight <= 0 || max_size_bytes <= 0 {
        return; // reported as not positive
    }
    let max_weight = i64::MAX / max_size_bytes;
    if weight > max_weight {
        issues.add(
            format!("policy.benefit_weights.{mode}"),
            format!(
                "{weight} times limits.max_size_bytes ({max_size_bytes}) exceeds the largest \
                 benefit a request may have (2^63 - 1); at most {max_weight}"
            ),
        );
    }
}

pub(super) fn validate_policy(raw: &RawConfig, issues: &mut Issues) -> Option<PolicySettings> {
    let p = &raw.policy;
    let benefit = validate_benefit(raw, issues);
    let mut groups = priority_classes(raw, issues);
    check_fair_share_priorities(raw, issues);
    let mut tree = build_tree(&raw.shares, issues)?;
    add_leaves(&mut tree, &mut groups, issues);
    validate_targets(&raw.targets, &mut tree, issues);
    let usage_model = validate_usage(&raw.usage, issues);
    let fs_delta = validate_delta(&p.fairshare_delta, issues);
    let (rules, default_group) = classification(raw, &groups.by_path, issues);
    let p0 = lowest_class_priority(raw);
    let order = order::validate_order(p, &raw.release, &groups.list, &groups.by_path, p0, issues);
    let benefit = benefit?;
    let usage_model = usage_model?;
    let held_recheck_ms = positive(raw.usage.held_recheck_ms, "usage.held_recheck_ms", issues);
    Some(PolicySettings {
        order,
        p_front: p.p_front,
        p_back: p.p_back,
        benefit,
        usage_model,
        fs_delta,
        held_recheck: Duration::from_millis(held_recheck_ms as u64),
        groups: groups.list,
        tree,
        rules,
        default_group,
        max_queued_bytes_per_user: super::limits::queued_bytes_per_user(&raw.limits, issues),
        by_path: groups.by_path,
        class_by_mode: groups.class_by_mode,
    })
}

/// The accounting groups as they are found: priority classes, then the tree's leaves.
#[derive(Default)]
struct Groups {
    list: Vec<GroupInfo>,
    by_path: HashMap<String, GroupId>,
    class_by_mode: HashMap<String, GroupId>,
}

/// The lowest priority class's MSS priority, if there are classes.
fn lowest_class_priority(raw: &RawConfig) -> Option<i64> {
    raw.priority_classes.iter().map(|c| c.mss_priority).min()
}

/// `policy.benefit` and `policy.benefit_weights`.
fn validate_benefit(raw: &RawConfig, issues: &mut Issues) -> Option<Benefit> {
    let p = &raw.policy;
    match p.benefit.as_str() {
        "bytes" | "files" if !p.benefit_weights.is_empty() => {
            issues.add(
                "policy.benefit_weights",
                "only used with benefit = \"weighted_bytes\"",
            );
            None
        }
        "bytes" => Some(Benefit::Bytes),
        "files" => Some(Benefit::Files),
        "weighted_bytes" => {
            let mut w = BTreeMap::new();
            for (mode, &v) in &p.benefit_weights {
                if v <= 0 {
                    issues.add(
                        format!("policy.benefit_weights.{mode}"),
                        format!("must be a positive integer, got {v}"),
                    );
                }
                check_weight_bound(mode, v, raw.limits.max_size_bytes, issues);
                w.insert(mode.clone(), v.max(1) as u64);
            }
            Some(Benefit::WeightedBytes(w))
        }
        other => {
            issues.add(
                "policy.benefit",
                format!("`{other}` is not one of bytes, files, weighted_bytes"),
            );
            None
        }
    }
}

/// `[[priority_classes]]`, highest first, as the first accounting groups.
fn priority_classes(raw: &RawConfig, issues: &mut Issues) -> Groups {
    let mut groups = Groups::default();
    let mut last_priority: Option<i64> = None;
    for (rank, class) in raw.priority_classes.iter().enumerate() {
        let key = format!("priority_classes[{rank}]");
        let Ok(path) = GroupPath::parse(&class.access_mode) else {
            issues.add(
                format!("{key}.access_mode"),
                format!(
                    "`{}` must be a lower-case name (a-z, 0-9, _, -, .)",
                    class.access_mode
                ),
            );
            continue;
        };
        if groups.class_by_mode.contains_key(&class.access_mode) {
            issues.add(
                format!("{key}.access_mode"),
                format!("`{}` is listed twice", class.access_mode),
            );
            continue;
        }
        if let Some(prev) = last_priority {
            if class.mss_priority >= prev {
                issues.add(
                    format!("{key}.mss_priority"),
                    format!(
                        "classes are listed highest first: {} must be below the previous class's {prev}",
                        class.mss_priority
                    ),
                );
            }
        }
        last_priority = Some(class.mss_priority);
        let id = GroupId(groups.list.len());
        groups.class_by_mode.insert(class.access_mode.clone(), id);
        groups.by_path.insert(path.as_str().to_string(), id);
        groups.list.push(GroupInfo {
            path,
            kind: GroupKind::Priority {
                rank,
                mss_priority: class.mss_priority,
            },
            ancestors: Vec::new(),
        });
    }
    groups
}

/// `policy.p_front` below every priority class, `policy.p_back` below `p_front`.
fn check_fair_share_priorities(raw: &RawConfig, issues: &mut Issues) {
    let p = &raw.policy;
    if let Some(p0) = lowest_class_priority(raw) {
        if p.p_front >= p0 {
            issues.add(
                "policy.p_front",
                format!(
                    "must be below every priority class's mss_priority (lowest is {p0}), got {}",
                    p.p_front
                ),
            );
        }
    }
    if p.p_back >= p.p_front {
        issues.add(
            "policy.p_back",
            format!(
                "must be below policy.p_front ({}), got {}",
                p.p_front, p.p_back
            ),
        );
    }
}

/// The tree's leaves as fair-share groups, after the priority classes, depth first; each
/// node learns the groups at or below it.
fn add_leaves(tree: &mut ShareTree, groups: &mut Groups, issues: &mut Issues) {
    for i in tree.depth_first() {
        let node = &tree.nodes[i];
        if !node.is_leaf() {
            continue;
        }
        if groups.by_path.contains_key(node.path.as_str()) {
            issues.add(
                format!("shares.\"{}\"", node.path),
                "has the name of a priority class",
            );
            continue;
        }
        let id = GroupId(groups.list.len());
        groups.by_path.insert(node.path.as_str().to_string(), id);
        let mut ancestors = vec![i];
        while let Some(p) = tree.nodes[*ancestors.last().unwrap_or(&i)].parent {
            ancestors.push(p);
        }
        ancestors.reverse();
        for &a in &ancestors {
            tree.nodes[a].leaves.push(id);
        }
        groups.list.push(GroupInfo {
            path: tree.nodes[i].path.clone(),
            kind: GroupKind::FairShare {
                share: tree.nodes[i].fraction,
            },
            ancestors,
        });
    }
}

/// `policy.fairshare_delta`.
fn validate_delta(name: &str, issues: &mut Issues) -> DeltaForm {
    match name {
        "difference" => DeltaForm::Difference,
        "percent" => DeltaForm::Percent,
        other => {
            issues.add(
                "policy.fairshare_delta",
                format!("`{other}` is not one of difference, percent"),
            );
            DeltaForm::Difference
        }
    }
}

/// `[classification]`: the rules, each naming a priority class or a leaf, and the default group.
fn classification(
    raw: &RawConfig,
    by_path: &HashMap<String, GroupId>,
    issues: &mut Issues,
) -> (Vec<Rule>, Option<GroupId>) {
    let leaf = |name: &str, key: String, issues: &mut Issues| -> Option<GroupId> {
        match by_path.get(name) {
            Some(&id) => Some(id),
            None => {
                issues.add(
                    key,
                    format!("`{name}` is not a priority class or a leaf of [shares]"),
                );
                None
            }
        }
    };
    let mut rules = Vec::new();
    for (i, r) in raw.classification.rules.iter().enumerate() {
        let key = format!("classification.rules[{i}]");
        let all_empty = r.access_mode.is_none()
            && r.physics_group.is_none()
            && r.station.is_none()
            && r.user.is_none()
            && r.path_prefix.is_none();
        if all_empty {
            issues.add(
                key.clone(),
                "matches everything: give at least one of access_mode, physics_group, station, user, path_prefix (or use classification.default_group)",
            );
        }
        if let Some(group) = leaf(&r.group, format!("{key}.group"), issues) {
            rules.push(Rule {
                access_mode: r.access_mode.clone(),
                physics_group: r.physics_group.clone(),
                station: r.station.clone(),
                user: r.user.clone(),
                path_prefix: r.path_prefix.clone(),
                group,
            });
        }
    }
    let default_group = match raw.classification.default_group.as_deref() {
        None | Some("") => None,
        Some(g) => leaf(g, "classification.default_group".into(), issues),
    };
    (rules, default_group)
}

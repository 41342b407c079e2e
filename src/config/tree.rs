//! `[shares]` validated into the [`ShareTree`]: parents before children, each node's exact
//! fraction of the whole. A leaf's value may be `"parent"` (Slurm's `fairshare=parent`): it has
//! no shares of its own and stands as its parent (see [`ShareNode::use_parent`]).

use std::collections::HashMap;

use super::Issues;
use crate::domain::{Fraction, GroupPath, NodeLimits, ShareNode, ShareTree};

/// Largest denominator a leaf's fraction may have, so exact share comparisons stay in u128.
const MAX_SHARE_DEN: u128 = 1 << 48;

pub(super) fn build_tree(table: &toml::Table, issues: &mut Issues) -> Option<ShareTree> {
    let mut nodes = link(entries(table, issues), issues)?;
    check_parent_values(&nodes, issues)?;
    if nodes.is_empty() {
        issues.add("shares", "at least one fair-share group is needed");
        return None;
    }
    set_fractions(&mut nodes, issues)?;
    Some(ShareTree { nodes })
}

/// One `[shares]` entry: a path, its relative shares, and whether it is `"parent"`.
type Entry = (GroupPath, u64, bool);

/// `[shares]`'s paths and relative shares, parents before children.
fn entries(table: &toml::Table, issues: &mut Issues) -> Vec<Entry> {
    let mut entries: Vec<Entry> = Vec::new();
    for (key, value) in table {
        let qkey = format!("shares.\"{key}\"");
        let path = match GroupPath::parse(key) {
            Ok(p) => p,
            Err(e) => {
                issues.add(qkey, e);
                continue;
            }
        };
        match (value.as_integer(), value.as_str()) {
            (Some(v), _) if v >= 0 => entries.push((path, v as u64, false)),
            (_, Some("parent")) => entries.push((path, 0, true)),
            _ => issues.add(
                qkey,
                format!(
                    "relative shares must be a non-negative integer or \"parent\", got {value}"
                ),
            ),
        }
    }
    // Parents before children, whatever order the file lists them in.
    entries.sort_by_key(|(p, _, _)| p.depth());
    entries
}

/// The nodes, each linked to its parent (which must be listed too).
fn link(entries: Vec<Entry>, issues: &mut Issues) -> Option<Vec<ShareNode>> {
    let mut nodes: Vec<ShareNode> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for (path, shares, use_parent) in entries {
        let parent = match path.parent() {
            None => None,
            Some(pp) => match index.get(pp.as_str()) {
                Some(&i) => Some(i),
                None => {
                    issues.add(
                        format!("shares.\"{path}\""),
                        format!("its parent `{pp}` is not listed in [shares]"),
                    );
                    continue;
                }
            },
        };
        let i = nodes.len();
        index.insert(path.as_str().to_string(), i);
        if let Some(p) = parent {
            nodes[p].children.push(i);
        }
        nodes.push(ShareNode {
            path,
            shares,
            use_parent,
            parent,
            children: Vec::new(),
            fraction: Fraction::new(0, 1)?,
            limits: NodeLimits::default(),
            leaves: Vec::new(),
        });
    }
    Some(nodes)
}

/// `"parent"` only on a leaf under a parent: a top-level node has no parent to stand as, and an
/// inner node's standing is its users'.
fn check_parent_values(nodes: &[ShareNode], issues: &mut Issues) -> Option<()> {
    let mut ok = true;
    for n in nodes.iter().filter(|n| n.use_parent) {
        let problem = if n.parent.is_none() {
            "\"parent\" needs a parent: a top-level node has none to stand as"
        } else if !n.is_leaf() {
            "\"parent\" is for leaves (users under a group); give this inner node a number"
        } else {
            continue;
        };
        issues.add(format!("shares.\"{}\"", n.path), problem);
        ok = false;
    }
    ok.then_some(())
}

/// Fractions top-down: a node's share of its siblings times its parent's fraction (0 when it
/// and all its siblings have 0 shares; its parent's for a `"parent"` leaf).
fn set_fractions(nodes: &mut [ShareNode], issues: &mut Issues) -> Option<()> {
    for i in 0..nodes.len() {
        let siblings: u64 = match nodes[i].parent {
            Some(p) => nodes[p].children.iter().map(|&c| nodes[c].shares).sum(),
            None => nodes
                .iter()
                .filter(|n| n.parent.is_none())
                .map(|n| n.shares)
                .sum(),
        };
        let parent_fraction = match nodes[i].parent {
            Some(p) => nodes[p].fraction,
            None => Fraction::new(1, 1)?,
        };
        if nodes[i].use_parent {
            // Its parent's target (SchedMD/slurm src/common/assoc_mgr.c:416-425,
            // `_normalize_assoc_shares_traditional` copies the parent's shares_norm); its
            // siblings' fractions do not count it (its shares are 0, as assoc_mgr.c:1175-1186
            // `_foreach_sum_level_shares` leaves a user's out of the level's sum).
            nodes[i].fraction = parent_fraction;
            continue;
        }
        let key = format!("shares.\"{}\"", nodes[i].path);
        // Siblings that all have 0 shares split nothing: each has a target of 0 and ranks
        // last (SchedMD/slurm src/common/assoc_mgr.c:391-405: shares_norm 0 when the level's
        // shares are 0; flux-accounting src/fairness/weighted_tree/weighted_tree.cpp:52-55:
        // weight 0 for 0 shares). docs/shares.md has the worked example.
        let own = if siblings == 0 {
            Fraction::new(0, 1)?
        } else {
            Fraction::new(u128::from(nodes[i].shares), u128::from(siblings))?
        };
        match parent_fraction.checked_mul(own) {
            Some(f) if f.den() <= MAX_SHARE_DEN => nodes[i].fraction = f,
            _ => {
                issues.add(key, "share fractions too fine: use smaller share numbers");
                return None;
            }
        }
    }
    Some(())
}

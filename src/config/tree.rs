//! `[shares]` validated into the [`ShareTree`]: parents before children, each node's exact
//! fraction of the whole.

use std::collections::HashMap;

use super::Issues;
use crate::domain::{Fraction, GroupPath, NodeLimits, ShareNode, ShareTree};

/// Largest denominator a leaf's fraction may have, so exact share comparisons stay in u128.
const MAX_SHARE_DEN: u128 = 1 << 48;

pub(super) fn build_tree(table: &toml::Table, issues: &mut Issues) -> Option<ShareTree> {
    let mut nodes = link(entries(table, issues), issues)?;
    if nodes.is_empty() {
        issues.add("shares", "at least one fair-share group is needed");
        return None;
    }
    set_fractions(&mut nodes, issues)?;
    Some(ShareTree { nodes })
}

/// `[shares]`'s paths and relative shares, parents before children.
fn entries(table: &toml::Table, issues: &mut Issues) -> Vec<(GroupPath, u64)> {
    let mut entries: Vec<(GroupPath, u64)> = Vec::new();
    for (key, value) in table {
        let qkey = format!("shares.\"{key}\"");
        let path = match GroupPath::parse(key) {
            Ok(p) => p,
            Err(e) => {
                issues.add(qkey, e);
                continue;
            }
        };
        match value.as_integer() {
            Some(v) if v >= 0 => entries.push((path, v as u64)),
            _ => issues.add(
                qkey,
                format!("relative shares must be a non-negative integer, got {value}"),
            ),
        }
    }
    // Parents before children, whatever order the file lists them in.
    entries.sort_by_key(|(p, _)| p.depth());
    entries
}

/// The nodes, each linked to its parent (which must be listed too).
fn link(entries: Vec<(GroupPath, u64)>, issues: &mut Issues) -> Option<Vec<ShareNode>> {
    let mut nodes: Vec<ShareNode> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for (path, shares) in entries {
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
            parent,
            children: Vec::new(),
            fraction: Fraction::new(0, 1)?,
            limits: NodeLimits::default(),
            leaves: Vec::new(),
        });
    }
    Some(nodes)
}

/// Fractions top-down: a node's share of its siblings times its parent's fraction.
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
        let key = format!("shares.\"{}\"", nodes[i].path);
        if siblings == 0 {
            issues.add(key, "it and all its siblings have 0 shares");
            return None;
        }
        let own = Fraction::new(u128::from(nodes[i].shares), u128::from(siblings))?;
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

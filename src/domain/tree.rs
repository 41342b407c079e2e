//! The share tree and the accounting groups: what `[priority_classes]`, `[shares]` and
//! `[targets]` describe, validated once by `config` and read by `policy`, `shares`, `ledger`,
//! `report` and `api`.

use super::{Fraction, GroupPath};

/// Index of a group in [`super::PolicySettings::groups`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupId(pub usize);

/// One accounting group.
#[derive(Debug, Clone)]
pub struct GroupInfo {
    pub path: GroupPath,
    pub kind: GroupKind,
    /// Fair-share groups: the tree nodes from the top level down to the group's own leaf.
    pub ancestors: Vec<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupKind {
    /// A priority class with its MSS priority; `rank` 0 is the highest class.
    Priority { rank: usize, mss_priority: i64 },
    /// A fair-share leaf with its allotted fraction of all fair-share benefit.
    FairShare { share: Fraction },
}

/// The share tree: relative shares at each level, any depth.
#[derive(Debug, Clone)]
pub struct ShareTree {
    pub nodes: Vec<ShareNode>,
}

#[derive(Debug, Clone)]
pub struct ShareNode {
    pub path: GroupPath,
    /// Relative shares among its siblings (0 for a `use_parent` leaf).
    pub shares: u64,
    /// `shares = "parent"` (Slurm's `fairshare=parent`), leaves only: no standing of its own.
    /// Its target is its parent's fraction, SAM judges it by its parent's usage and target, and
    /// Fair Tree gives it an infinite level fair-share, so it ranks where its parent ranks
    /// (first among its siblings, tying with others like it).
    pub use_parent: bool,
    pub parent: Option<usize>,
    pub children: Vec<usize>,
    /// This node's fraction of the whole fair-share tree: the product down its path.
    pub fraction: Fraction,
    /// Floors and caps set on this node (`[targets."path"]`).
    pub limits: NodeLimits,
    /// The accounting groups at or below this node.
    pub leaves: Vec<GroupId>,
}

/// Maui's floors and caps on one tree node. Percentages are of all fair-share usage.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeLimits {
    /// Under this share of usage the node's requests go front (only raises).
    pub floor: Option<Fraction>,
    /// At or over this share of usage its requests go back (only lowers).
    pub cap: Option<Fraction>,
    /// At or over this usage (benefit units, current window) its new requests are held.
    pub feasibility_cap: Option<u64>,
    /// At or over this share of the current window's usage its new requests are held.
    pub feasibility_cap_percent: Option<Fraction>,
    /// Volumes release mode: most volumes in flight per library whose batch is led by a group
    /// at or below this node (CTA's drive caps, Enstore's storage-group limits).
    pub max_volumes: Option<u32>,
    /// At most this many bytes of its fair-share requests not finished, riders included; a
    /// submission past it is refused (429).
    pub max_queued_bytes: Option<u64>,
}

impl NodeLimits {
    pub fn is_empty(&self) -> bool {
        *self == NodeLimits::default()
    }

    pub fn has_feasibility_cap(&self) -> bool {
        self.feasibility_cap.is_some() || self.feasibility_cap_percent.is_some()
    }
}

impl ShareTree {
    /// Node indices depth first, siblings in the order the file lists them.
    pub fn depth_first(&self) -> Vec<usize> {
        let mut out = Vec::with_capacity(self.nodes.len());
        let mut stack: Vec<usize> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.parent.is_none())
            .map(|(i, _)| i)
            .rev()
            .collect();
        while let Some(i) = stack.pop() {
            out.push(i);
            stack.extend(self.nodes[i].children.iter().rev());
        }
        out
    }
}

impl ShareNode {
    pub fn is_leaf(&self) -> bool {
        self.children.is_empty()
    }
}

impl ShareTree {
    /// The node whose usage and target node `i` is judged by: its parent for a `use_parent`
    /// leaf, itself otherwise.
    pub fn standing(&self, i: usize) -> usize {
        match &self.nodes[i] {
            ShareNode {
                use_parent: true,
                parent: Some(p),
                ..
            } => *p,
            _ => i,
        }
    }
}

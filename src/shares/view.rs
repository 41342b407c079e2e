//! The operator's view of the shares: one row per tree node with its target, usage, Fair Tree
//! level fair-share and rank, the SAM class a new request would get, and its floor/cap state.
//! `mssbroker shares` prints it as a table or JSON; `GET /v1/groups` serves the same rows.

use serde::{Deserialize, Serialize};

use super::book::{Effective, UsageLookup};
use super::fairtree::fair_tree;
use super::limits::{cap_state, node_value, over_feasibility};
use super::sam::decide;
use crate::domain::Class;
use crate::domain::{DeltaForm, GroupKind, PolicySettings};

/// Figures the ledger keeps per group besides usage (present when read from a database).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GroupCounts {
    /// Benefit of requests not yet final (accepted, held, at the MSS).
    pub pending: u64,
    /// Requests held by a feasibility cap.
    pub held: u64,
    /// Bytes charged: done bytes plus estimates of requests not yet final (exact; may exceed
    /// 2^64). Served as the row's own `usage_bytes`, not through the flattened counts: serde
    /// buffers flattened fields, and its buffer cannot hold an integer past u64.
    #[serde(skip)]
    pub usage_bytes: u128,
}

/// Everything `mssbroker shares` shows.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SharesView {
    /// The instant the figures are for, RFC 3339 UTC.
    pub at: String,
    pub at_ms: i64,
    /// `none`, `half_life` or `windows`.
    pub usage_model: String,
    /// The model's parameters, for people.
    pub usage_model_detail: String,
    pub benefit: String,
    pub fairshare_delta: String,
    /// `U`: effective usage of all fair-share groups.
    pub fair_share_usage: f64,
    /// One per node of the share tree, depth first in configuration order.
    pub groups: Vec<NodeRow>,
    pub priority_classes: Vec<ClassRow>,
    /// The configuration these figures are for: served by `GET /v1/groups`, absent where the
    /// view is built without a running broker (`mssbroker shares`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<LoadedConfig>,
}

/// Which configuration a running broker has loaded, and when (start-up or its latest reload).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LoadedConfig {
    /// Where it was read from.
    pub origin: String,
    /// SHA-256 of the configuration file's bytes as read, lower-case hex.
    pub sha256: String,
    /// When it was loaded, RFC 3339 UTC, and the same in epoch milliseconds.
    pub loaded_at: String,
    pub loaded_at_ms: i64,
}

/// One node of the share tree.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NodeRow {
    pub path: String,
    pub leaf: bool,
    /// Relative shares among its siblings (0 for a `"parent"` leaf).
    pub shares: u64,
    /// `shares = "parent"`: no standing of its own; its target is its parent's and it ranks as
    /// its parent (the table prints `parent` as its shares).
    #[serde(default)]
    pub use_parent: bool,
    /// Its fraction of all fair-share benefit: the product of `shares / siblings' shares` down
    /// its path.
    pub target_share: f64,
    /// `target_share` exactly, e.g. "3/10".
    pub target_fraction: String,
    /// All-time cumulative benefit charged (never decayed; exact, may exceed 2^64).
    pub usage: u128,
    /// Usage under the configured model (decayed or window-weighted), in benefit units.
    pub effective_usage: f64,
    /// `effective_usage` over the fair-share total.
    pub usage_share: f64,
    /// Fair Tree `LF = S / U` at its level; null when infinite (shares, no usage).
    pub level_fairshare: Option<f64>,
    /// `level_fairshare` exactly, e.g. "225/299", or "inf".
    pub level_fairshare_exact: String,
    /// Leaves: Fair Tree rank, from N (the most under-served) down to 1.
    pub fairtree_rank: Option<u32>,
    /// Leaves: `fairtree_rank / N`.
    pub fairshare: Option<f64>,
    /// Leaves: the SAM class a new request of one benefit unit would get now.
    pub sam_class: Option<Class>,
    /// `none`, `ok`, `floor`, `capped` or `held` (see the configuration's `[targets]`).
    pub cap_state: String,
    /// Why new requests under this node are held, when `cap_state` is `held`.
    pub held_reason: Option<String>,
    /// Maui's fair-share delta: `target - usage_share`, or `1 - usage_share / target` with
    /// `policy.fairshare_delta = "percent"` (null for a zero target); a `"parent"` leaf's is
    /// taken with its parent's usage share, what its target is compared with.
    pub fs_delta: Option<f64>,
    /// Windows model: usage per window, current first (benefit units).
    pub windows: Option<Vec<f64>>,
    /// Ledger figures, when read from a database or a running broker.
    #[serde(flatten)]
    pub counts: Option<GroupCounts>,
    /// `counts.usage_bytes`, present with the counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_bytes: Option<u128>,
}

/// A priority class: not part of the fair-share tree.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ClassRow {
    pub path: String,
    pub mss_priority: i64,
    /// All-time cumulative benefit charged (exact, may exceed 2^64).
    pub usage: u128,
    pub effective_usage: f64,
    #[serde(flatten)]
    pub counts: Option<GroupCounts>,
    /// `counts.usage_bytes`, present with the counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_bytes: Option<u128>,
}

/// Build the view of `usage` at `at_ms`; `counts` is indexed by group id.
pub fn build(
    policy: &PolicySettings,
    usage: &Effective,
    at_ms: i64,
    counts: Option<&[GroupCounts]>,
) -> SharesView {
    let tree = &policy.tree;
    let unit = usage.unit.max(1) as f64;
    let mut leaf_usage = vec![0u128; tree.nodes.len()];
    for g in policy.group_ids() {
        if let Some(&leaf) = policy.group(g).ancestors.last() {
            leaf_usage[leaf] = usage.value(g);
        }
    }
    let ft = fair_tree(tree, &leaf_usage);
    let fair_total = usage.fair_total();
    let mut groups = Vec::with_capacity(tree.nodes.len());
    for i in tree.depth_first() {
        let node = &tree.nodes[i];
        let value = node_value(policy, usage, i);
        let share_of = |v: u128| {
            if fair_total == 0 {
                0.0
            } else {
                v as f64 / fair_total as f64
            }
        };
        let share = share_of(value);
        // What its target is compared with: its parent's share for a `parent` leaf.
        let standing_share = share_of(node_value(policy, usage, tree.standing(i)));
        let target = node.fraction.to_f64();
        let leaf_group = node
            .is_leaf()
            .then(|| node.leaves.first().copied())
            .flatten();
        let state = cap_state(policy, usage, i);
        let node_counts = node_counts(policy, counts, i);
        groups.push(NodeRow {
            path: node.path.to_string(),
            leaf: node.is_leaf(),
            shares: node.shares,
            use_parent: node.use_parent,
            target_share: target,
            target_fraction: node.fraction.to_string(),
            usage: node.leaves.iter().map(|&g| usage.cumulative[g.0]).sum(),
            effective_usage: value as f64 / unit,
            usage_share: share,
            level_fairshare: ft.level_fs[i].to_f64(),
            level_fairshare_exact: ft.level_fs[i].exact(),
            fairtree_rank: ft.rank[i],
            fairshare: ft.fairshare(i),
            sam_class: leaf_group.map(|g| decide(policy, usage, g, 1).class),
            cap_state: state.as_str().to_string(),
            held_reason: over_feasibility(policy, usage, i, 0),
            fs_delta: fs_delta(policy, target, standing_share),
            windows: node_windows(policy, usage, i),
            counts: node_counts,
            usage_bytes: node_counts.map(|c| c.usage_bytes),
        });
    }
    let priority_classes = class_rows(policy, usage, counts);
    SharesView {
        at: format_ms(at_ms),
        at_ms,
        usage_model: policy.usage_model.name().to_string(),
        usage_model_detail: policy.usage_model.describe(),
        benefit: policy.benefit.name().to_string(),
        fairshare_delta: policy.fs_delta.name().to_string(),
        fair_share_usage: fair_total as f64 / unit,
        groups,
        priority_classes,
        config: None,
    }
}

/// The ledger's counts summed over a node's leaves (none when read without a database).
fn node_counts(
    policy: &PolicySettings,
    counts: Option<&[GroupCounts]>,
    node: usize,
) -> Option<GroupCounts> {
    let counts = counts?;
    let mut c = GroupCounts::default();
    for g in &policy.tree.nodes[node].leaves {
        let x = counts.get(g.0).copied().unwrap_or_default();
        c.pending += x.pending;
        c.held += x.held;
        c.usage_bytes += x.usage_bytes;
    }
    Some(c)
}

/// Maui's `fs_delta` of a node: `target - usage share`, or `1 - share / target`.
fn fs_delta(policy: &PolicySettings, target: f64, share: f64) -> Option<f64> {
    match policy.fs_delta {
        DeltaForm::Difference => Some(target - share),
        DeltaForm::Percent if target > 0.0 => Some(1.0 - share / target),
        DeltaForm::Percent => None,
    }
}

/// A node's usage per window, summed over its leaves (only under the windows model).
fn node_windows(policy: &PolicySettings, usage: &Effective, node: usize) -> Option<Vec<f64>> {
    let leaves = &policy.tree.nodes[node].leaves;
    (!usage.windows.is_empty()).then(|| {
        let depth = usage.windows.first().map_or(0, Vec::len);
        (0..depth)
            .map(|w| leaves.iter().map(|g| usage.windows[g.0][w] as f64).sum())
            .collect()
    })
}

/// One row per priority class.
fn class_rows(
    policy: &PolicySettings,
    usage: &Effective,
    counts: Option<&[GroupCounts]>,
) -> Vec<ClassRow> {
    let unit = usage.unit.max(1) as f64;
    policy
        .group_ids()
        .filter_map(|g| match policy.group(g).kind {
            GroupKind::Priority { mss_priority, .. } => Some(ClassRow {
                path: policy.group(g).path.to_string(),
                mss_priority,
                usage: usage.cumulative[g.0],
                effective_usage: usage.value(g) as f64 / unit,
                counts: counts.map(|c| c.get(g.0).copied().unwrap_or_default()),
                usage_bytes: counts.map(|c| c.get(g.0).map_or(0, |x| x.usage_bytes)),
            }),
            GroupKind::FairShare { .. } => None,
        })
        .collect()
}

/// RFC 3339 UTC, to the millisecond.
pub fn format_ms(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| format!("{t:.3}"))
        .unwrap_or_else(|_| format!("{ms} ms"))
}

/// The table for people: the same figures as the JSON.
pub fn render_table(view: &SharesView) -> String {
    let mut out = format!(
        "shares at {}  usage model: {}  benefit: {}  fair-share usage U = {}\n\n",
        view.at,
        view.usage_model_detail,
        view.benefit,
        num(view.fair_share_usage)
    );
    let header = [
        "group",
        "shares",
        "target",
        "usage",
        "effective",
        "share",
        "LF",
        "rank",
        "fairshare",
        "sam",
        "cap",
    ];
    let rows: Vec<Vec<String>> = view.groups.iter().map(table_row).collect();
    out.push_str(&crate::text_table::aligned(&header, &rows));
    for r in view.groups.iter().filter(|r| r.held_reason.is_some()) {
        out.push_str(&format!(
            "\nheld: {}",
            r.held_reason.as_deref().unwrap_or_default()
        ));
    }
    if view.groups.iter().any(|r| r.windows.is_some()) {
        out.push_str("\nusage per window (current first):\n");
        for r in &view.groups {
            if let Some(w) = &r.windows {
                let cells: Vec<String> = w.iter().map(|v| num(*v)).collect();
                out.push_str(&format!("  {:<24} {}\n", r.path, cells.join("  ")));
            }
        }
    }
    if !view.priority_classes.is_empty() {
        out.push_str("\npriority classes (not part of U):\n");
        for c in &view.priority_classes {
            out.push_str(&format!(
                "  {:<24} mss_priority {:>5}  usage {}  effective {}\n",
                c.path,
                c.mss_priority,
                num(c.usage as f64),
                num(c.effective_usage)
            ));
        }
    }
    out
}

/// One node's cells in the table, its name indented by its depth.
fn table_row(r: &NodeRow) -> Vec<String> {
    let depth = r.path.matches('/').count();
    let name = r.path.rsplit('/').next().unwrap_or(&r.path);
    vec![
        format!("{}{name}", "  ".repeat(depth)),
        if r.use_parent {
            "parent".to_string()
        } else {
            r.shares.to_string()
        },
        pct(r.target_share),
        num(r.usage as f64),
        num(r.effective_usage),
        pct(r.usage_share),
        r.level_fairshare
            .map_or("inf".into(), |v| format!("{v:.4}")),
        r.fairtree_rank.map_or(String::new(), |v| v.to_string()),
        r.fairshare.map_or(String::new(), |v| format!("{v:.3}")),
        r.sam_class
            .map_or(String::new(), |c| c.as_str().to_string()),
        if r.cap_state == "none" {
            String::new()
        } else {
            r.cap_state.clone()
        },
    ]
}

fn pct(v: f64) -> String {
    format!("{:.2}%", v * 100.0)
}

/// Whole numbers without decimals, others with up to 4.
fn num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e18 {
        format!("{}", v as i128)
    } else {
        let s = format!("{v:.4}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

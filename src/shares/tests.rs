//! Hand-worked cases of the share tree's stricter semantics, through every policy that reads
//! shares: siblings that all have 0 shares, and `"parent"` leaves (Slurm's `fairshare=parent`).
//! Multifactor's fair-share factor is the Fair Tree `rank / N` (`ShareSnapshot::rank`), so the
//! Fair Tree figures below are its inputs; FBSNG orders queues by their own parameters and
//! never reads shares.

use super::book::Effective;
use super::fairtree::{fair_tree, LevelFs};
use super::sam::{decide, standing_value};
use super::view::{build, render_table};
use crate::config::Settings;
use crate::domain::{Class, GroupKind, PolicySettings};
use std::sync::Arc;

fn policy(shares: &str) -> Arc<PolicySettings> {
    let text = format!(
        "[policy]\np_front = 20\np_back = 10\n[usage]\nmodel = \"none\"\n[shares]\n{shares}\n[mss]\nadapter = \"http\"\nurl = \"http://127.0.0.1:1\"\n"
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

fn node(p: &PolicySettings, path: &str) -> usize {
    p.tree
        .nodes
        .iter()
        .position(|n| n.path.as_str() == path)
        .unwrap()
}

/// Leaf usage indexed by node, as `fair_tree` takes it.
fn leaf_usage(p: &PolicySettings, u: &Effective) -> Vec<u128> {
    let mut v = vec![0; p.tree.nodes.len()];
    for g in p.group_ids() {
        if let Some(&leaf) = p.group(g).ancestors.last() {
            v[leaf] = u.values[g.0];
        }
    }
    v
}

fn class_of(p: &PolicySettings, u: &Effective, path: &str) -> Class {
    decide(p, u, p.group_by_path(path).unwrap(), 1).class
}

fn target(p: &PolicySettings, path: &str) -> String {
    match p.group(p.group_by_path(path).unwrap()).kind {
        GroupKind::FairShare { share } => share.to_string(),
        GroupKind::Priority { .. } => "priority".into(),
    }
}

/// `a` = 1 with users p and q (1 each); `b` = 0 with users x and y, who have 0 shares too
/// (refused before: "it and all its siblings have 0 shares"). Usage p 100, the rest 0.
///
/// Targets: a 1, p 1/2, q 1/2, b 0, x 0, y 0 (x and y split b's nothing).
/// Fair Tree: LF(a) = (1/1)/(100/100) = 1, LF(b) = 0 (0 shares): a's subtree first. In a:
/// q has shares and no usage, LF inf (rank 4); p (1/2)/(100/100) = 1/2 (rank 3). In b: x and
/// y have LF 0 and tie at rank 2, below everyone with shares, though they used nothing.
/// Multifactor's fair-share factors: q 1, p 3/4, x and y 2/4.
/// SAM: x's and y's target is 0, so they always go back; q (0 + 1)/(100 + 1) < 1/2: front.
#[test]
fn siblings_with_zero_shares_are_accepted_and_rank_last() {
    let p = policy("a = 1\n\"a/p\" = 1\n\"a/q\" = 1\nb = 0\n\"b/x\" = 0\n\"b/y\" = 0");
    assert_eq!(
        ["a/p", "a/q", "b/x", "b/y"].map(|g| target(&p, g)),
        ["1/2", "1/2", "0/1", "0/1"]
    );
    assert_eq!(p.tree.nodes[node(&p, "b")].fraction.to_string(), "0/1");
    let u = usage(&p, &[("a/p", 100)]);
    let ft = fair_tree(&p.tree, &leaf_usage(&p, &u));
    assert_eq!(ft.level_fs[node(&p, "a")].exact(), "1/1");
    assert_eq!(ft.level_fs[node(&p, "b")].exact(), "0/1");
    assert_eq!(ft.level_fs[node(&p, "b/x")].exact(), "0/1");
    assert_eq!(ft.level_fs[node(&p, "a/q")], LevelFs::Infinite);
    let rank = |g: &str| ft.rank[node(&p, g)];
    assert_eq!(
        ["a/q", "a/p", "b/x", "b/y"].map(rank),
        [Some(4), Some(3), Some(2), Some(2)]
    );
    assert_eq!(ft.fairshare(node(&p, "b/x")), Some(0.5));
    assert_eq!(class_of(&p, &u, "b/x"), Class::Back);
    assert_eq!(class_of(&p, &u, "a/q"), Class::Front);
    // Even with no usage at all anywhere, a target of 0 goes back.
    assert_eq!(class_of(&p, &usage(&p, &[]), "b/y"), Class::Back);
    // x using a lot does not move b: it has no shares, LF stays 0, still last.
    let u = usage(&p, &[("a/p", 100), ("b/x", 1_000)]);
    let ft = fair_tree(&p.tree, &leaf_usage(&p, &u));
    assert_eq!(ft.rank[node(&p, "b/x")], Some(2));
    assert_eq!(ft.rank[node(&p, "a/p")], Some(3));
    // A whole level of zeros is accepted too: everyone ties, everyone goes back.
    let p = policy("c = 0\nd = 0");
    let u = usage(&p, &[("c", 5)]);
    let ft = fair_tree(&p.tree, &leaf_usage(&p, &u));
    assert_eq!((ft.rank[0], ft.rank[1]), (Some(2), Some(2)));
    assert_eq!(class_of(&p, &u, "d"), Class::Back);
}

/// atlas = 1 with alice and bob `"parent"` and carol 2; cms = 1 with dan and eve 1 each.
/// Usage: alice 5, bob 0, carol 55 (atlas 60), dan 20, eve 20 (cms 40); all 100.
///
/// Targets: atlas 1/2; alice and bob take atlas's, 1/2; carol is the only sibling with shares:
/// 2/2 of atlas, 1/2; cms 1/2, dan and eve 1/4.
/// SAM judges alice and bob by atlas: (60 + 1)/(100 + 1) = 0.604 >= 1/2: back, though alice
/// alone used 5 (as an ordinary user with a target of 1/2 she would go front). carol:
/// 56/101 >= 1/2: back. dan: 21/101 < 1/4: front.
/// Fair Tree: LF(atlas) = (1/2)/(60/100) = 5/6, LF(cms) = (1/2)/(40/100) = 5/4: cms first,
/// dan and eve (1/2)/(20/40) = 1 tie at rank 5. In atlas alice and bob have LF inf (Slurm: a
/// FairShare=parent user ranks first in its account), tie at rank 3; carol (2/2)/(55/60) =
/// 12/11, rank 1. Multifactor's factors: alice 3/5, carol 1/5, dan 1.
#[test]
fn parent_leaves_stand_as_their_parent() {
    let p = policy(
        "atlas = 1\n\"atlas/alice\" = \"parent\"\n\"atlas/bob\" = \"parent\"\n\"atlas/carol\" = 2\ncms = 1\n\"cms/dan\" = 1\n\"cms/eve\" = 1",
    );
    assert_eq!(
        ["atlas/alice", "atlas/bob", "atlas/carol", "cms/dan"].map(|g| target(&p, g)),
        ["1/2", "1/2", "1/2", "1/4"]
    );
    let alice = node(&p, "atlas/alice");
    assert!(p.tree.nodes[alice].use_parent);
    assert_eq!(p.tree.standing(alice), node(&p, "atlas"));
    let u = usage(
        &p,
        &[
            ("atlas/alice", 5),
            ("atlas/carol", 55),
            ("cms/dan", 20),
            ("cms/eve", 20),
        ],
    );
    let g_alice = p.group_by_path("atlas/alice").unwrap();
    assert_eq!(standing_value(&p, &u, g_alice), 60);
    assert_eq!(
        ["atlas/alice", "atlas/bob", "atlas/carol", "cms/dan"].map(|g| class_of(&p, &u, g)),
        [Class::Back, Class::Back, Class::Back, Class::Front]
    );
    let ft = fair_tree(&p.tree, &leaf_usage(&p, &u));
    assert_eq!(ft.level_fs[node(&p, "atlas")].exact(), "5/6");
    assert_eq!(ft.level_fs[node(&p, "cms")].exact(), "5/4");
    assert_eq!(ft.level_fs[alice], LevelFs::Infinite);
    assert_eq!(ft.level_fs[node(&p, "atlas/carol")].exact(), "12/11");
    let rank = |g: &str| ft.rank[node(&p, g)];
    assert_eq!(
        [
            "cms/dan",
            "cms/eve",
            "atlas/alice",
            "atlas/bob",
            "atlas/carol"
        ]
        .map(rank),
        [Some(5), Some(5), Some(3), Some(3), Some(1)]
    );
    assert_eq!(ft.fairshare(alice), Some(0.6));
    // When atlas is the under-served account, its parent leaves rank at the very top.
    let u2 = usage(&p, &[("atlas/alice", 30), ("cms/dan", 70)]);
    let ft = fair_tree(&p.tree, &leaf_usage(&p, &u2));
    assert_eq!(ft.rank[alice], Some(5));
    assert_eq!(class_of(&p, &u2, "atlas/alice"), Class::Front);
    // `mssbroker shares` shows it: the row says so and the table prints `parent`.
    let view = build(&p, &u, 0, None);
    let row = view
        .groups
        .iter()
        .find(|r| r.path == "atlas/alice")
        .unwrap();
    assert!(row.use_parent && row.shares == 0 && row.target_fraction == "1/2");
    // Its fs_delta compares atlas's 60% with the 50% target: -0.1.
    assert!((row.fs_delta.unwrap() + 0.1).abs() < 1e-12, "{row:?}");
    let table = render_table(&view);
    let line = table.lines().find(|l| l.contains("alice")).unwrap();
    assert!(line.contains("parent"), "{table}");
}

#[test]
fn parent_is_for_leaves_under_a_parent() {
    let text = "[policy]\np_front = 20\np_back = 10\n[shares]\ntop = \"parent\"\na = 1\n\"a/b\" = \"parent\"\n\"a/b/c\" = 1\nd = \"half\"\n[mss]\nadapter = \"http\"\nurl = \"http://127.0.0.1:1\"\n";
    let err = Settings::parse(text, "t").unwrap_err().to_string();
    assert!(
        err.contains("shares.\"top\": \"parent\" needs a parent"),
        "{err}"
    );
    assert!(
        err.contains("shares.\"a/b\": \"parent\" is for leaves"),
        "{err}"
    );
    assert!(
        err.contains("shares.\"d\": relative shares must be a non-negative integer or \"parent\""),
        "{err}"
    );
}

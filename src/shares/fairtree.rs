//! The Fair Tree rule (seed 001; Slurm's and Flux's fair tree): at each level a node's level
//! fair-share is `LF = S / U`, with `S` its shares over its siblings' shares and `U` its usage
//! over its parent's usage. Zero shares ranks last (LF 0); shares with zero usage ranks first
//! (LF infinite). Siblings are visited by LF descending, depth first, so every descendant of an
//! under-served account (higher LF) ranks above every descendant of a better-served sibling.
//! Leaves get ranks from N (the number of leaves) down to 1 in visiting order;
//! `fairshare = rank / N`.
//!
//! Ties (exact: LF values are compared as fractions of big integers, never as floats):
//! - sibling leaves with equal LF share a rank, and the next rank skips (competition ranking);
//! - sibling inner nodes with equal LF have their children merged and ordered as one level;
//! - on equal LF a leaf is visited before an inner node, and the inner node's first leaf ties
//!   with it.
//!
//! Within equal keys the order of the configuration decides, so the ranking is deterministic.
//!
//! Siblings that all have 0 shares all have LF 0 and tie, last at their level (their place
//! among other subtrees is their parent's). A `"parent"` leaf has LF infinite: it ranks first
//! among its siblings, so it is placed where its parent is.

use std::cmp::Ordering;

use num_bigint::BigUint;
use num_rational::Ratio;

use crate::domain::ShareTree;

/// A level fair-share value. Equal values compare equal whatever their terms.
#[derive(Debug, Clone)]
pub enum LevelFs {
    /// `S / U`, exactly, numerator and denominator not reduced and each within a `u128` (the
    /// usual case, compared without allocating); 0 for a node with zero shares.
    Small { num: u128, den: u128 },
    /// `S / U`, exactly, when a part passes `u128`.
    Finite(Ratio<BigUint>),
    /// Shares but no usage.
    Infinite,
}

impl PartialEq for LevelFs {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for LevelFs {}

/// `a * b` as (high, low) 128-bit halves.
fn mul_wide(a: u128, b: u128) -> (u128, u128) {
    const LOW: u128 = u64::MAX as u128;
    let (a1, a0) = (a >> 64, a & LOW);
    let (b1, b0) = (b >> 64, b & LOW);
    let (p00, p01, p10, p11) = (a0 * b0, a0 * b1, a1 * b0, a1 * b1);
    // The middle column: the high half of p00 plus the low halves of p01 and p10 (< 3 * 2^64).
    let mid = (p00 >> 64) + (p01 & LOW) + (p10 & LOW);
    let low = (p00 & LOW) | (mid << 64);
    let high = p11 + (p01 >> 64) + (p10 >> 64) + (mid >> 64);
    (high, low)
}

fn big(num: u128, den: u128) -> Ratio<BigUint> {
    Ratio::new_raw(BigUint::from(num), BigUint::from(den))
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl LevelFs {
    /// For display: `None` for infinite.
    pub fn to_f64(&self) -> Option<f64> {
        match self {
            LevelFs::Infinite => None,
            LevelFs::Small { num, den } => Some(ratio_to_f64(&big(*num, *den))),
            LevelFs::Finite(r) => Some(ratio_to_f64(r)),
        }
    }

    /// The exact value in lowest terms, e.g. `3/2`, or `inf`.
    pub fn exact(&self) -> String {
        match self {
            LevelFs::Infinite => "inf".into(),
            LevelFs::Small { num, den } => {
                let g = gcd(*num, *den).max(1);
                format!("{}/{}", num / g, den / g)
            }
            LevelFs::Finite(r) => {
                let r = r.reduced();
                format!("{}/{}", r.numer(), r.denom())
            }
        }
    }
}

fn ratio_to_f64(r: &Ratio<BigUint>) -> f64 {
    use num_traits::ToPrimitive;
    // Scale so the quotient keeps ~60 significant bits whatever the magnitudes.
    let n = r.numer();
    let d = r.denom();
    let shift = d.bits() as i64 - n.bits() as i64 + 64;
    let q = if shift >= 0 {
        (n << shift as u64) / d
    } else {
        n / (d << (-shift) as u64)
    };
    q.to_f64().unwrap_or(f64::INFINITY) * (-(shift as f64)).exp2()
}

impl PartialOrd for LevelFs {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for LevelFs {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (LevelFs::Infinite, LevelFs::Infinite) => Ordering::Equal,
            (LevelFs::Infinite, _) => Ordering::Greater,
            (_, LevelFs::Infinite) => Ordering::Less,
            (LevelFs::Small { num: a, den: b }, LevelFs::Small { num: c, den: d }) => {
                // a/b against c/d, denominators positive: a*d against c*b, exactly.
                mul_wide(*a, *d).cmp(&mul_wide(*c, *b))
            }
            (LevelFs::Small { num, den }, LevelFs::Finite(r)) => big(*num, *den).cmp(r),
            (LevelFs::Finite(r), LevelFs::Small { num, den }) => r.cmp(&big(*num, *den)),
            (LevelFs::Finite(a), LevelFs::Finite(b)) => a.cmp(b),
        }
    }
}

/// `LF = (shares / sibling_shares) / (usage / parent_usage)`.
pub fn level_fs(shares: u64, sibling_shares: u64, usage: u128, parent_usage: u128) -> LevelFs {
    if shares == 0 || sibling_shares == 0 {
        return LevelFs::Small { num: 0, den: 1 };
    }
    if usage == 0 {
        return LevelFs::Infinite;
    }
    // usage > 0 implies parent_usage >= usage > 0. Not reduced: `Ratio` compares by value
    // (cross-multiplying), and a ranking compares far more often than it displays, while the
    // gcd of a reduction was most of a Fair Tree rebuild (docs/benchmarks.md).
    let num = u128::from(shares).checked_mul(parent_usage);
    let den = u128::from(sibling_shares).checked_mul(usage);
    if let (Some(num), Some(den)) = (num, den) {
        return LevelFs::Small { num, den };
    }
    LevelFs::Finite(Ratio::new_raw(
        BigUint::from(shares) * BigUint::from(parent_usage),
        BigUint::from(sibling_shares) * BigUint::from(usage),
    ))
}

/// The Fair Tree figures of every node of a tree.
#[derive(Debug, Clone, PartialEq)]
pub struct FairTree {
    /// Per node: usage (the sum of its leaves').
    pub usage: Vec<u128>,
    pub level_fs: Vec<LevelFs>,
    /// Per node: the rank of a leaf, N..1 (`None` for inner nodes).
    pub rank: Vec<Option<u32>>,
    /// Number of leaves.
    pub leaves: u32,
}

impl FairTree {
    /// `rank / N` of a leaf.
    pub fn fairshare(&self, node: usize) -> Option<f64> {
        let r = self.rank.get(node).copied().flatten()?;
        Some(f64::from(r) / f64::from(self.leaves.max(1)))
    }
}

/// Rank the leaves of `tree` given each leaf's usage (`leaf_usage[node]`, ignored for inner
/// nodes).
pub fn fair_tree(tree: &ShareTree, leaf_usage: &[u128]) -> FairTree {
    let n = tree.nodes.len();
    let mut usage = vec![0u128; n];
    // Children always come after their parent in `nodes`: sum bottom-up in reverse.
    for i in (0..n).rev() {
        if tree.nodes[i].is_leaf() {
            usage[i] = leaf_usage.get(i).copied().unwrap_or(0);
        }
        if let Some(p) = tree.nodes[i].parent {
            usage[p] = usage[p].saturating_add(usage[i]);
        }
    }
    let roots: Vec<usize> = (0..n).filter(|&i| tree.nodes[i].parent.is_none()).collect();
    let root_usage: u128 = roots.iter().map(|&i| usage[i]).sum();
    let root_shares: u64 = roots.iter().map(|&i| tree.nodes[i].shares).sum();
    let mut lf = vec![LevelFs::Infinite; n];
    for i in 0..n {
        let (sib, parent_usage) = match tree.nodes[i].parent {
            Some(p) => (
                tree.nodes[p]
                    .children
                    .iter()
                    .map(|&c| tree.nodes[c].shares)
                    .sum(),
                usage[p],
            ),
            None => (root_shares, root_usage),
        };
        // A `parent` leaf ranks where its parent does: SchedMD/slurm
        // src/plugins/priority/multifactor/fair_tree.c:189-198 (`_calc_assoc_fs`) gives a
        // FairShare=parent user level_fs INFINITY, first in its account.
        lf[i] = if tree.nodes[i].use_parent {
            LevelFs::Infinite
        } else {
            level_fs(tree.nodes[i].shares, sib, usage[i], parent_usage)
        };
    }
    let leaves = tree.nodes.iter().filter(|x| x.is_leaf()).count() as u32;
    let mut ranker = Ranker {
        tree,
        lf: &lf,
        rank: vec![None; n],
        current: leaves,
        no_ties: leaves,
    };
    ranker.visit(roots, false);
    let rank = ranker.rank;
    FairTree {
        usage,
        level_fs: lf,
        rank,
        leaves,
    }
}

struct Ranker<'a> {
    tree: &'a ShareTree,
    lf: &'a [LevelFs],
    rank: Vec<Option<u32>>,
    /// The rank the last leaf got.
    current: u32,
    /// The rank the next leaf gets if it ties with nothing.
    no_ties: u32,
}

impl Ranker<'_> {
    fn visit(&mut self, mut level: Vec<usize>, starts_tied: bool) {
        let tree = self.tree;
        let lf = self.lf;
        // LF descending; on equal LF leaves first; then configuration order (stable sort).
        level.sort_by(|&a, &b| {
            lf[b]
                .cmp(&lf[a])
                .then_with(|| tree.nodes[b].is_leaf().cmp(&tree.nodes[a].is_leaf()))
        });
        let mut i = 0;
        while i < level.len() {
            let node = level[i];
            let tied = if i == 0 {
                starts_tied
            } else {
                lf[level[i - 1]] == lf[node]
            };
            if tree.nodes[node].is_leaf() {
                if !tied {
                    self.current = self.no_ties;
                }
                self.rank[node] = Some(self.current);
                self.no_ties = self.no_ties.saturating_sub(1);
                i += 1;
            } else {
                // Merge every following inner sibling with the same LF.
                let mut merged: Vec<usize> = tree.nodes[node].children.clone();
                let mut j = i + 1;
                while j < level.len() && !tree.nodes[level[j]].is_leaf() && lf[level[j]] == lf[node]
                {
                    merged.extend(tree.nodes[level[j]].children.iter().copied());
                    j += 1;
                }
                self.visit(merged, tied);
                i = j;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;
    use proptest::prelude::*;

    /// A tree from `[shares]` lines.
    fn tree(shares: &str) -> ShareTree {
        let text = format!(
            "[policy]\np_front = 20\np_back = 10\n[shares]\n{shares}\n[mss]\nadapter = \"http\"\nurl = \"http://127.0.0.1:1\"\n"
        );
        Settings::parse(&text, "t").unwrap().policy.tree.clone()
    }

    fn node(t: &ShareTree, path: &str) -> usize {
        t.nodes
            .iter()
            .position(|n| n.path.as_str() == path)
            .unwrap()
    }

    fn with_usage(t: &ShareTree, usage: &[(&str, u128)]) -> Vec<u128> {
        let mut v = vec![0; t.nodes.len()];
        for (p, u) in usage {
            v[node(t, p)] = *u;
        }
        v
    }

    fn ranks(t: &ShareTree, f: &FairTree) -> Vec<(String, u32)> {
        t.depth_first()
            .into_iter()
            .filter_map(|i| f.rank[i].map(|r| (t.nodes[i].path.to_string(), r)))
            .collect()
    }

    /// Worked by hand. Accounts A and B have 1 share each; A used 100 of 400 in all, B 300.
    /// LF(A) = (1/2)/(100/400) = 2, LF(B) = (1/2)/(300/400) = 2/3: A is under-served, so every
    /// user of A ranks above every user of B, even a2, who used all of A's usage, above b2,
    /// who used almost nothing of B's.
    ///   a1: 1 share of 2, usage 0   -> LF inf
    ///   a2: 1 share of 2, usage 100 -> LF (1/2)/(100/100) = 1/2
    ///   b1: 3 shares of 4, usage 299 -> LF (3/4)/(299/300) = 225/299
    ///   b2: 1 share of 4,  usage 1   -> LF (1/4)/(1/300) = 75
    /// Order: a1 (inf), a2 (1/2), b2 (75), b1 (225/299): ranks 4, 3, 2, 1 of N = 4.
    #[test]
    fn under_served_account_puts_all_its_users_first() {
        let t = tree("a = 1\n\"a/a1\" = 1\n\"a/a2\" = 1\nb = 1\n\"b/b1\" = 3\n\"b/b2\" = 1");
        let u = with_usage(
            &t,
            &[("a/a1", 0), ("a/a2", 100), ("b/b1", 299), ("b/b2", 1)],
        );
        let f = fair_tree(&t, &u);
        assert_eq!(f.level_fs[node(&t, "a")].exact(), "2/1");
        assert_eq!(f.level_fs[node(&t, "b")].exact(), "2/3");
        assert_eq!(f.level_fs[node(&t, "a/a1")], LevelFs::Infinite);
        assert_eq!(f.level_fs[node(&t, "a/a2")].exact(), "1/2");
        assert_eq!(f.level_fs[node(&t, "b/b1")].exact(), "225/299");
        assert_eq!(f.level_fs[node(&t, "b/b2")].exact(), "75/1");
        assert_eq!(
            ranks(&t, &f),
            [("a/a1", 4), ("a/a2", 3), ("b/b1", 1), ("b/b2", 2)].map(|(p, r)| (p.to_string(), r))
        );
        assert_eq!(f.fairshare(node(&t, "a/a2")), Some(0.75));
        assert_eq!(f.usage[node(&t, "b")], 300);
    }

    #[test]
    fn zero_shares_rank_last_and_zero_usage_first() {
        let t = tree("x = 0\ny = 1\nz = 1");
        // x has no shares and no usage: still last. z has shares and no usage: first.
        let u = with_usage(&t, &[("x", 0), ("y", 50), ("z", 0)]);
        let f = fair_tree(&t, &u);
        assert_eq!(f.level_fs[node(&t, "x")].exact(), "0/1");
        assert_eq!(f.level_fs[node(&t, "z")], LevelFs::Infinite);
        assert_eq!(
            ranks(&t, &f),
            [("x", 1), ("y", 2), ("z", 3)].map(|(p, r)| (p.to_string(), r))
        );
        // Nobody used anything: every group with shares ties first, zero shares last.
        let f = fair_tree(&t, &[0, 0, 0]);
        assert_eq!(
            ranks(&t, &f),
            [("x", 1), ("y", 3), ("z", 3)].map(|(p, r)| (p.to_string(), r))
        );
    }

    /// The same ratio computed two ways ties; ratios a hair apart do not.
    /// The 256-bit product against BigUint's, and a small value against the same value in
    /// big terms.
    #[test]
    fn small_values_compare_exactly() {
        let cases = [
            (0u128, 0u128),
            (u128::MAX, u128::MAX),
            (u128::MAX, 2),
            (1 << 64, (1 << 64) + 1),
            (
                0x1234_5678_9abc_def0_1111_2222_3333_4444,
                0xffff_0000_ffff_0000_1234_5678_9abc_def0,
            ),
        ];
        for (a, b) in cases {
            let (hi, lo) = mul_wide(a, b);
            let want = BigUint::from(a) * BigUint::from(b);
            assert_eq!(
                (BigUint::from(hi) << 128u32) + BigUint::from(lo),
                want,
                "{a} * {b}"
            );
        }
        let half = LevelFs::Small { num: 1, den: 2 };
        assert_eq!(half, LevelFs::Small { num: 3, den: 6 });
        assert_eq!(
            half,
            LevelFs::Finite(Ratio::new_raw(BigUint::from(5u8), BigUint::from(10u8)))
        );
        assert!(
            LevelFs::Small {
                num: u128::MAX,
                den: u128::MAX - 1
            } > LevelFs::Small { num: 1, den: 1 }
        );
        assert!(
            LevelFs::Small { num: 0, den: 1 }
                < LevelFs::Small {
                    num: 1,
                    den: u128::MAX
                }
        );
        assert_eq!(LevelFs::Small { num: 6, den: 4 }.exact(), "3/2");
        // A part past u128 falls back to big terms.
        let huge = level_fs(u64::MAX, 1, 1, u128::MAX);
        assert!(matches!(huge, LevelFs::Finite(_)));
        assert!(
            huge > LevelFs::Small {
                num: u128::MAX,
                den: 1
            }
        );
    }

    #[test]
    fn ties_are_exact_and_competition_ranked() {
        // p: 1 of 3 shares with 100 of 300 usage; q: 2 of 3 with 200 of 300: both LF 1.
        let t = tree("p = 1\nq = 2\nr = 3");
        let u = with_usage(&t, &[("p", 100), ("q", 200), ("r", 300)]);
        let f = fair_tree(&t, &u);
        // (1/6)/(100/600) = (2/6)/(200/600) = (3/6)/(300/600) = 1: all tie at rank 3.
        assert_eq!(
            ranks(&t, &f),
            [("p", 3), ("q", 3), ("r", 3)].map(|(p, r)| (p.to_string(), r))
        );
        // 1/3 as 0.1 + 0.2 in floats is not 0.3, but these exact values must not tie either:
        let u = with_usage(
            &t,
            &[
                ("p", 100_000_000_000_000_001),
                ("q", 200_000_000_000_000_000),
                ("r", 300_000_000_000_000_000),
            ],
        );
        let f = fair_tree(&t, &u);
        assert_eq!(
            ranks(&t, &f),
            [("p", 1), ("q", 3), ("r", 3)].map(|(p, r)| (p.to_string(), r))
        );
        // Competition ranking: a tie at the top takes ranks 4 and 4, the next is 2.
        let t = tree("a = 1\nb = 1\nc = 1\nd = 1");
        let u = with_usage(&t, &[("a", 10), ("b", 10), ("c", 20), ("d", 30)]);
        let f = fair_tree(&t, &u);
        assert_eq!(
            ranks(&t, &f),
            [("a", 4), ("b", 4), ("c", 2), ("d", 1)].map(|(p, r)| (p.to_string(), r))
        );
    }

    #[test]
    fn tied_accounts_merge_their_children() {
        // A and B tie (same shares, same usage); their users are ordered together by their
        // own LF: b1 (LF 2) before a1 (LF 1, a1 = a2) before b2 (LF 2/3).
        let t = tree("a = 1\n\"a/a1\" = 1\n\"a/a2\" = 1\nb = 1\n\"b/b1\" = 1\n\"b/b2\" = 1");
        let u = with_usage(
            &t,
            &[("a/a1", 50), ("a/a2", 50), ("b/b1", 25), ("b/b2", 75)],
        );
        let f = fair_tree(&t, &u);
        assert_eq!(
            ranks(&t, &f),
            [("a/a1", 3), ("a/a2", 3), ("b/b1", 4), ("b/b2", 1)].map(|(p, r)| (p.to_string(), r))
        );
    }

    /// A random tree: (parent index or none, shares) per node, parents before children.
    fn random_tree() -> impl Strategy<Value = (String, Vec<u128>)> {
        proptest::collection::vec(
            (
                0usize..100,
                prop_oneof![3 => 1u64..4, 1 => Just(0u64)],
                0u128..6,
            ),
            1..14,
        )
        .prop_map(|spec| {
            let mut paths: Vec<String> = Vec::new();
            let mut lines = String::new();
            let mut usage = Vec::new();
            for (k, (parent, shares, u)) in spec.into_iter().enumerate() {
                // A node's parent is an earlier node (or the root).
                let path = if k == 0 || parent % (k + 1) == k {
                    format!("n{k}")
                } else {
                    format!("{}/n{k}", paths[parent % k])
                };
                lines.push_str(&format!("\"{path}\" = {shares}\n"));
                paths.push(path);
                usage.push(u * 10);
            }
            (lines, usage)
        })
    }

    proptest! {
        /// For random trees and usage: (1) for any two siblings with LF(A) > LF(B), every leaf
        /// under A ranks strictly above every leaf under B; (2) sibling leaves with equal LF
        /// share a rank; (3) the ranks are a competition ranking of N leaves.
        #[test]
        fn ranks_respect_the_fair_tree_rule((lines, usage) in random_tree()) {
            // Siblings may all have 0 shares; a configuration refused (fractions too fine) is skipped.
            let text = format!(
                "[policy]\np_front = 20\np_back = 10\n[shares]\n{lines}\n[mss]\nadapter = \"http\"\nurl = \"http://127.0.0.1:1\"\n"
            );
            let Ok(settings) = Settings::parse(&text, "t") else { return Ok(()) };
            let t = &settings.policy.tree;
            // Usage by node position in the file order; the tree sorts nodes by depth.
            let mut u = vec![0u128; t.nodes.len()];
            for (k, line) in lines.lines().enumerate() {
                let path = line.split('"').nth(1).unwrap();
                u[node(t, path)] = usage[k];
            }
            let f = fair_tree(t, &u);
            let leaves_under = |i: usize| -> Vec<usize> {
                let mut out = Vec::new();
                let mut stack = vec![i];
                while let Some(x) = stack.pop() {
                    if t.nodes[x].is_leaf() { out.push(x) } else { stack.extend(&t.nodes[x].children) }
                }
                out
            };
            for a in 0..t.nodes.len() {
                for b in 0..t.nodes.len() {
                    if a == b || t.nodes[a].parent != t.nodes[b].parent { continue; }
                    if f.level_fs[a] > f.level_fs[b] {
                        let lowest_a = leaves_under(a).iter().map(|&x| f.rank[x].unwrap()).min().unwrap();
                        let highest_b = leaves_under(b).iter().map(|&x| f.rank[x].unwrap()).max().unwrap();
                        prop_assert!(lowest_a > highest_b, "{} above {}", t.nodes[a].path, t.nodes[b].path);
                    }
                    if f.level_fs[a] == f.level_fs[b] && t.nodes[a].is_leaf() && t.nodes[b].is_leaf() {
                        prop_assert_eq!(f.rank[a], f.rank[b]);
                    }
                }
            }
            let mut r: Vec<u32> = f.rank.iter().flatten().copied().collect();
            r.sort_unstable_by(|x, y| y.cmp(x));
            prop_assert_eq!(r.len() as u32, f.leaves);
            // Competition ranking: the k-th best (0-based) leaf's rank is N - (number of
            // leaves strictly better).
            for (k, &rank) in r.iter().enumerate() {
                let better = r.iter().filter(|&&x| x > rank).count() as u32;
                prop_assert_eq!(rank, f.leaves - better, "ranks {:?} at {}", r, k);
            }
        }
    }
}

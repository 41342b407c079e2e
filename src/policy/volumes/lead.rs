//! The group that leads a volume's next batch: the policy's choice among a library's waiting
//! groups, one placement per group (its oldest request), never per request; and the groups it
//! ranks first, ties included (who may keep a mounted volume).

use std::cmp::Reverse;

use super::state::Lib;
use super::Index;
use crate::domain::GroupId;
use crate::policy::order::Candidate;
use crate::policy::order::{place, Algorithm, OrderSettings, ShareSnapshot};
use crate::shares::UsageLookup;

/// The group the policy ranks first among those with waiting requests in `lib` that `allowed`
/// admits: a starved group (oldest request waited `max_wait`) first, oldest first; FBSNG by queue
/// priority; otherwise the highest placement of the group's oldest request (oldest first on a
/// tie). One placement per group, never per request.
pub(super) fn lead_group<U: UsageLookup>(
    order: &OrderSettings,
    standing: &ShareSnapshot<'_, U>,
    at: (&str, &Lib, &Index),
    now_ms: i64,
    allowed: impl Fn(GroupId) -> bool,
) -> Option<GroupId> {
    match rank(order, standing, at, now_ms, allowed)? {
        Ranked::One(g) => Some(g),
        Ranked::Scored(scored) => scored
            .iter()
            .map(|(g, score, c)| (Reverse(Score(*score)), c.id, *g))
            .min()
            .map(|(_, _, g)| g),
    }
}

/// Every group the policy ranks first among those with waiting requests in `lib`: the one
/// [`lead_group`] picks and every group whose placement ties with it. Under SAM a placement is
/// front or back (seed 000), so every front group is first in the policy's own terms, and when
/// none is front, every group; the oldest request only orders them. A starved group and FBSNG's
/// first queue have no ties.
pub(super) fn ranked_first<U: UsageLookup>(
    order: &OrderSettings,
    standing: &ShareSnapshot<'_, U>,
    at: (&str, &Lib, &Index),
    now_ms: i64,
) -> Vec<GroupId> {
    match rank(order, standing, at, now_ms, |_| true) {
        None => Vec::new(),
        Some(Ranked::One(g)) => vec![g],
        Some(Ranked::Scored(scored)) => {
            let top = scored.iter().map(|(_, s, _)| Score(*s)).max();
            (scored.iter())
                .filter(|(_, s, _)| Some(Score(*s)) == top)
                .map(|(g, _, _)| *g)
                .collect()
        }
    }
}

/// How the policy ranks a library's waiting groups: one group outright (starved, or FBSNG's
/// first queue), or each group's placement score with its oldest request.
enum Ranked {
    One(GroupId),
    Scored(Vec<(GroupId, f64, Candidate)>),
}

/// [`Ranked`] over the groups `allowed` admits; `None` when there are none.
fn rank<U: UsageLookup>(
    order: &OrderSettings,
    standing: &ShareSnapshot<'_, U>,
    (library, lib, index): (&str, &Lib, &Index),
    now_ms: i64,
    allowed: impl Fn(GroupId) -> bool,
) -> Option<Ranked> {
    let oldest = |g: GroupId| {
        let id = lib.oldest_of(g)?;
        let (_, vol, pos) = index.get(&id)?;
        lib.waiting(library, vol, id, *pos)
    };
    let groups: Vec<(GroupId, Candidate)> = lib
        .groups
        .keys()
        .filter(|&&g| allowed(g))
        .filter_map(|&g| Some((g, oldest(g)?)))
        .collect();
    if groups.is_empty() {
        return None;
    }
    if let Some(max_wait) = order.max_wait_ms {
        let starved = groups
            .iter()
            .filter(|(_, c)| now_ms - c.created_ms >= max_wait)
            .min_by_key(|(_, c)| (c.created_ms, c.id));
        if let Some((g, _)) = starved {
            return Some(Ranked::One(*g));
        }
    }
    if order.algorithm == Algorithm::Fbsng {
        let q = standing
            .queues
            .order(groups.iter().map(|(g, _)| g.0))
            .into_iter()
            .next()?;
        return Some(Ranked::One(GroupId(q)));
    }
    let scored = groups
        .into_iter()
        .map(|(g, c)| (g, place(order, standing, &c, now_ms).score, c))
        .collect();
    Some(Ranked::Scored(scored))
}

/// A score ordered by `total_cmp`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Score(f64);
impl Eq for Score {}
impl PartialOrd for Score {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Score {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&o.0)
    }
}

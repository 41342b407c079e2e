//! The broker's own queue in the held release mode: fair-share requests waiting for room at the
//! MSS, per library and group in arrival order, and the choice of which one goes next. Pure: the
//! ledger writer keeps one (the rows in SQLite are the durable copy) and the virtual-time
//! harness keeps another, and both ask [`HeldQueue::pick`].

use std::collections::{BTreeMap, HashMap};

use super::fbsng::{pick_section, Section};
use super::order::{place, Algorithm, Candidate, OrderSettings, Placement, Standing};
use crate::config::GroupId;
use crate::shares::UsageLookup;

/// Waiting requests: library -> group -> id -> request.
#[derive(Debug, Clone, Default)]
pub struct HeldQueue {
    libs: BTreeMap<String, BTreeMap<GroupId, BTreeMap<i64, Candidate>>>,
    index: HashMap<i64, (String, GroupId)>,
}

/// The request to release next.
#[derive(Debug, Clone)]
pub struct Pick {
    pub candidate: Candidate,
    pub placement: Placement,
    /// FBSNG: earlier requests of the same queue it passed (their section priority rises).
    pub passed_over: Vec<i64>,
}

impl HeldQueue {
    pub fn push(&mut self, c: Candidate) {
        self.index.insert(c.id, (c.library.clone(), c.group));
        self.libs
            .entry(c.library.clone())
            .or_default()
            .entry(c.group)
            .or_default()
            .insert(c.id, c);
    }

    pub fn remove(&mut self, id: i64) -> Option<Candidate> {
        let (lib, g) = self.index.remove(&id)?;
        let groups = self.libs.get_mut(&lib)?;
        let reqs = groups.get_mut(&g)?;
        let c = reqs.remove(&id);
        if reqs.is_empty() {
            groups.remove(&g);
        }
        if groups.is_empty() {
            self.libs.remove(&lib);
        }
        c
    }

    pub fn get(&self, id: i64) -> Option<&Candidate> {
        let (lib, g) = self.index.get(&id)?;
        self.libs.get(lib)?.get(g)?.get(&id)
    }

    pub fn get_mut(&mut self, id: i64) -> Option<&mut Candidate> {
        let (lib, g) = self.index.get(&id)?;
        self.libs.get_mut(lib)?.get_mut(g)?.get_mut(&id)
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Requests waiting for `library`.
    pub fn library_len(&self, library: &str) -> usize {
        self.libs
            .get(library)
            .map_or(0, |g| g.values().map(BTreeMap::len).sum())
    }

    /// Libraries with waiting requests.
    pub fn libraries(&self) -> Vec<String> {
        self.libs.keys().cloned().collect()
    }

    /// Waiting requests per group, over all libraries.
    pub fn waiting_per_group(&self) -> BTreeMap<GroupId, usize> {
        let mut out = BTreeMap::new();
        for groups in self.libs.values() {
            for (g, reqs) in groups {
                *out.entry(*g).or_default() += reqs.len();
            }
        }
        out
    }

    /// The request of `library` to release now with `free` slots, if any. Starved requests
    /// (waited `max_wait`) go first, oldest first; then the policy's order: SAM front before
    /// back, Fair Tree rank, multifactor score (each oldest first on a tie), or FBSNG's queue
    /// scheduler. Only FBSNG lets a request that fits pass one that does not.
    pub fn pick<U: UsageLookup>(
        &self,
        order: &OrderSettings,
        standing: &Standing<'_, U>,
        library: &str,
        free: u32,
        now_ms: i64,
    ) -> Option<Pick> {
        let groups = self.libs.get(library)?;
        if let Some(c) = self.oldest_starved(order, groups, now_ms) {
            return (c.slots <= free).then(|| pick_of(order, standing, c, now_ms, Vec::new()));
        }
        if order.algorithm == Algorithm::Fbsng {
            return self.pick_fbsng(order, standing, groups, free, now_ms);
        }
        let mut best: Option<(f64, i64, &Candidate)> = None;
        for reqs in groups.values() {
            let considered: Box<dyn Iterator<Item = &Candidate>> = match order.algorithm {
                // Per-request factors: every request competes.
                Algorithm::Multifactor(_) => Box::new(reqs.values()),
                // Group-level order: the group's oldest request stands for it.
                _ => Box::new(reqs.values().take(1)),
            };
            for c in considered {
                let score = place(order, standing, c, now_ms).score;
                let better = match best {
                    None => true,
                    Some((s, id, _)) => score > s || (score == s && c.id < id),
                };
                if better {
                    best = Some((score, c.id, c));
                }
            }
        }
        let (_, _, c) = best?;
        (c.slots <= free).then(|| pick_of(order, standing, c, now_ms, Vec::new()))
    }

    fn oldest_starved<'q>(
        &self,
        order: &OrderSettings,
        groups: &'q BTreeMap<GroupId, BTreeMap<i64, Candidate>>,
        now_ms: i64,
    ) -> Option<&'q Candidate> {
        let max_wait = order.max_wait_ms?;
        groups
            .values()
            .filter_map(|reqs| reqs.values().next())
            .filter(|c| now_ms - c.created_ms >= max_wait)
            .min_by_key(|c| (c.created_ms, c.id))
    }

    fn pick_fbsng<U: UsageLookup>(
        &self,
        order: &OrderSettings,
        standing: &Standing<'_, U>,
        groups: &BTreeMap<GroupId, BTreeMap<i64, Candidate>>,
        free: u32,
        now_ms: i64,
    ) -> Option<Pick> {
        let queues = standing.queues;
        let mut stuck: Vec<usize> = Vec::new();
        for q in queues.order(groups.keys().map(|g| g.0)) {
            if stuck.iter().any(|&h| queues.holds(&order.fbsng, h, q)) {
                continue;
            }
            let reqs = groups.get(&GroupId(q))?;
            let spg = order.fbsng.get(q).map_or(0, |p| p.spg);
            let sections = reqs.values().map(|c| Section {
                slots: c.slots,
                passed: c.passed,
            });
            match pick_section(spg, sections, free) {
                Some(i) => {
                    // Only the first waiting request that did not fit is passed: it is the one
                    // the section gap protects (the next one counts from when it is first).
                    let passed_over: Vec<i64> =
                        reqs.values().take(i.min(1)).map(|c| c.id).collect();
                    let c = reqs.values().nth(i)?;
                    return Some(pick_of(order, standing, c, now_ms, passed_over));
                }
                None => stuck.push(q),
            }
        }
        None
    }

    /// 1-based position of a waiting request in its library's release order if nothing changed
    /// (an estimate for `explain`: FBSNG's order changes with every start).
    pub fn position<U: UsageLookup>(
        &self,
        order: &OrderSettings,
        standing: &Standing<'_, U>,
        id: i64,
        now_ms: i64,
    ) -> Option<usize> {
        let (lib, _) = self.index.get(&id)?;
        let groups = self.libs.get(lib)?;
        let key = |c: &Candidate| {
            let p = place(order, standing, c, now_ms);
            (p.starved, if p.starved { 0.0 } else { p.score })
        };
        let me = self.get(id)?;
        let (my_starved, my_score) = key(me);
        let ahead = groups
            .values()
            .flat_map(|reqs| reqs.values())
            .filter(|c| c.id != id)
            .filter(|c| {
                let (s, score) = key(c);
                match (s, my_starved) {
                    (true, false) => true,
                    (false, true) => false,
                    (true, true) => (c.created_ms, c.id) < (me.created_ms, me.id),
                    (false, false) => score > my_score || (score == my_score && c.id < id),
                }
            })
            .count();
        Some(ahead + 1)
    }
}

fn pick_of<U: UsageLookup>(
    order: &OrderSettings,
    standing: &Standing<'_, U>,
    c: &Candidate,
    now_ms: i64,
    passed_over: Vec<i64>,
) -> Pick {
    Pick {
        candidate: c.clone(),
        placement: place(order, standing, c, now_ms),
        passed_over,
    }
}

//! The broker's own queue in the held release mode: fair-share requests waiting for room at the
//! MSS, per library and group in arrival order, and the choice of which one goes next. Pure: the
//! ledger writer keeps one (the rows in SQLite are the durable copy) and the virtual-time
//! harness keeps another, and both ask [`HeldQueue::pick`]. [`Ranking`] orders a snapshot of the
//! queue for explain's positions.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};

use super::fbsng::{pick_section, Section};
use super::order::{place, Algorithm, Candidate, OrderSettings, Placement, ShareSnapshot};
use crate::domain::order::Multifactor;
use crate::domain::GroupId;
use crate::shares::UsageLookup;

/// Waiting requests: library -> group -> requests in id order ([`Run`]).
///
/// Memory (1M queued, `bench backlog`): the per-group runs hold the requests themselves; the
/// index finds a request's map from its id with 16 bytes an entry (a library number and the
/// group), not a copy of the library's name (40 bytes and, for a named library, an allocation).
#[derive(Debug, Clone, Default)]
pub struct HeldQueue {
    /// By library number ([`LibraryNames`]): a push turns the name into its number with one
    /// hash lookup, a pick looks the name up, and a removal goes by number alone.
    libs: BTreeMap<u32, BTreeMap<GroupId, Run>>,
    index: HashMap<i64, (u32, u32)>,
    names: LibraryNames,
    /// Multifactor's per-request order ([`by_score`]), built at the first multifactor pick
    /// and kept in step from then on (rebuilt if the weights change).
    by_score: RefCell<Option<by_score::ByScore>>,
}

mod by_score;
mod run;

use run::Run;
pub(crate) use run::Waiting;

/// Library names by number, each counted by the requests waiting for it (a name goes when its
/// last request does, so free-text names cannot pile up).
#[derive(Debug, Clone, Default)]
struct LibraryNames {
    numbers: HashMap<String, u32>,
    /// Name and waiting requests; `None`: a free number.
    slots: Vec<Option<(String, usize)>>,
    free: Vec<u32>,
}

impl LibraryNames {
    fn acquire(&mut self, name: &str) -> u32 {
        self.acquire_n(name, 1)
    }

    /// The number of `name`, counting `n` more requests for it.
    fn acquire_n(&mut self, name: &str, n: usize) -> u32 {
        if let Some(&number) = self.numbers.get(name) {
            if let Some(Some((_, count))) = self.slots.get_mut(number as usize) {
                *count += n;
            }
            return number;
        }
        let slot = Some((name.to_string(), n));
        let n = match self.free.pop() {
            Some(n) => {
                self.slots[n as usize] = slot;
                n
            }
            None => {
                self.slots.push(slot);
                u32::try_from(self.slots.len() - 1).unwrap_or(u32::MAX)
            }
        };
        self.numbers.insert(name.to_string(), n);
        n
    }

    fn name(&self, n: u32) -> Option<&str> {
        self.slots
            .get(n as usize)?
            .as_ref()
            .map(|(s, _)| s.as_str())
    }

    fn release(&mut self, n: u32) {
        let Some(entry) = self.slots.get_mut(n as usize) else {
            return;
        };
        if let Some((name, count)) = entry {
            *count -= 1;
            if *count == 0 {
                self.numbers.remove(name.as_str());
                *entry = None;
                self.free.push(n);
            }
        }
    }
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
        if self.index.contains_key(&c.id) {
            self.remove(c.id);
        }
        let lib = self.names.acquire(&c.library);
        let group = u32::try_from(c.group.0).unwrap_or(u32::MAX);
        self.index.insert(c.id, (lib, group));
        if let Some(b) = self.by_score.get_mut() {
            b.insert(lib, &c);
        }
        let groups = self.libs.entry(lib).or_default();
        groups.entry(c.group).or_default().insert(Waiting::of(c));
    }

    pub fn remove(&mut self, id: i64) -> Option<Candidate> {
        let (lib, g) = self.index.remove(&id)?;
        let name = self.names.name(lib)?;
        let groups = self.libs.get_mut(&lib)?;
        let g = GroupId(g as usize);
        let reqs = groups.get_mut(&g)?;
        let c = reqs.remove(&id).map(|w| w.candidate(g, name));
        if let (Some(b), Some(c)) = (self.by_score.get_mut(), &c) {
            b.remove(lib, c);
        }
        if reqs.is_empty() {
            groups.remove(&g);
        }
        if groups.is_empty() {
            self.libs.remove(&lib);
        }
        self.names.release(lib);
        c
    }

    pub fn get(&self, id: i64) -> Option<Candidate> {
        let &(lib, g) = self.index.get(&id)?;
        let g = GroupId(g as usize);
        let w = self.libs.get(&lib)?.get(&g)?.get(&id)?;
        Some(w.candidate(g, self.names.name(lib)?))
    }

    /// FBSNG's `passed` of a waiting request, to change (it does not order the queue).
    pub fn passed_mut(&mut self, id: i64) -> Option<&mut u32> {
        let &(lib, g) = self.index.get(&id)?;
        let w = (self.libs.get_mut(&lib)?)
            .get_mut(&GroupId(g as usize))?
            .get_mut(&id)?;
        Some(&mut w.passed)
    }

    /// A queue of `waiting`, about `expected` requests (start-up and reload): pushed in id
    /// order, as the rows are read, each group's chunks are appended to and stay full, and
    /// the index is sized once (grown by doubling, a map leaves its outgrown tables to the
    /// allocator). Any order is right, only less compact.
    pub fn from_waiting(
        waiting: impl IntoIterator<Item = Candidate>,
        expected: usize,
    ) -> HeldQueue {
        let mut q = HeldQueue::default();
        q.index.reserve(expected);
        for c in waiting {
            q.push(c);
        }
        q
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Requests waiting for `library`.
    pub fn library_len(&self, library: &str) -> usize {
        self.groups_of(library)
            .map_or(0, |g| g.values().map(Run::len).sum())
    }

    /// The groups waiting for `library`.
    fn groups_of(&self, library: &str) -> Option<&BTreeMap<GroupId, Run>> {
        self.libs.get(self.names.numbers.get(library)?)
    }

    /// Requests waiting per library (O(libraries)), for explain's `waiting`.
    pub fn waiting_by_library(&self) -> Vec<(String, usize)> {
        let slots = self.names.slots.iter().flatten();
        slots.map(|(name, n)| (name.clone(), *n)).collect()
    }

    /// Libraries with waiting requests, by name.
    pub fn libraries(&self) -> Vec<String> {
        let names = self.libs.keys().filter_map(|&n| self.names.name(n));
        let mut names: Vec<String> = names.map(str::to_string).collect();
        names.sort_unstable();
        names
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
        standing: &ShareSnapshot<'_, U>,
        library: &str,
        free: u32,
        now_ms: i64,
    ) -> Option<Pick> {
        let lib = *self.names.numbers.get(library)?;
        let groups = self.libs.get(&lib)?;
        if let Some(c) = oldest_starved(order, (library, groups), now_ms) {
            return best_of((order, standing), [c], free, now_ms);
        }
        if order.algorithm == Algorithm::Fbsng {
            return pick_fbsng((order, standing), (library, groups), free, now_ms);
        }
        if let Algorithm::Multifactor(m) = &order.algorithm {
            return self.pick_multifactor(m, (order, standing), (lib, library), free, now_ms);
        }
        // Group-level order: the group's oldest request stands for it.
        let oldest = (groups.iter())
            .filter_map(|(g, reqs)| Some(reqs.values().next()?.candidate(*g, library)));
        best_of((order, standing), oldest, free, now_ms)
    }

    /// Multifactor: every request competes, through [`by_score`]'s candidates (a few per
    /// group), not a scan of the queue.
    fn pick_multifactor<U: UsageLookup>(
        &self,
        m: &Multifactor,
        (order, standing): (&OrderSettings, &ShareSnapshot<'_, U>),
        (lib, library): (u32, &str),
        free: u32,
        now_ms: i64,
    ) -> Option<Pick> {
        let groups = self.libs.get(&lib)?;
        let mut by_score = self.by_score.borrow_mut();
        if by_score.as_ref().is_none_or(|b| !b.fits(m, now_ms)) {
            *by_score = Some(self.build_by_score(m, now_ms));
        }
        let b = by_score.as_mut()?;
        b.age(lib, now_ms, |g, id| {
            Some(groups.get(&g)?.get(&id)?.candidate(g, library))
        });
        let mut candidates: Vec<Candidate> = Vec::new();
        for (g, reqs) in groups {
            let of = |w: &Waiting| w.candidate(*g, library);
            if !super::order::is_fair(standing.policy, *g) {
                // A group a reload made a priority class: every request scores the same (the
                // scan takes the smallest id).
                candidates.extend(reqs.values().next().map(of));
                continue;
            }
            let ids = b.candidates(lib, *g, now_ms);
            candidates.extend(ids.iter().filter_map(|id| reqs.get(id)).map(of));
        }
        best_of((order, standing), candidates, free, now_ms)
    }

    fn build_by_score(&self, m: &Multifactor, now_ms: i64) -> by_score::ByScore {
        let mut b = by_score::ByScore::new(m.clone(), now_ms);
        for (id, &(lib, _)) in &self.index {
            if let Some(c) = self.get(*id) {
                b.insert(lib, &c);
            }
        }
        b
    }

    /// Multifactor by scoring every waiting request of `library`: what [`Self::pick`] must
    /// agree with (a property test checks).
    #[cfg(test)]
    pub(crate) fn pick_by_scan<U: UsageLookup>(
        &self,
        order: &OrderSettings,
        standing: &ShareSnapshot<'_, U>,
        library: &str,
        free: u32,
        now_ms: i64,
    ) -> Option<Pick> {
        let groups = self.groups_of(library)?;
        if let Some(c) = oldest_starved(order, (library, groups), now_ms) {
            return best_of((order, standing), [c], free, now_ms);
        }
        let every = (groups.iter())
            .flat_map(|(g, reqs)| reqs.values().map(move |w| w.candidate(*g, library)));
        best_of((order, standing), every, free, now_ms)
    }

    /// Where waiting request `id` goes now: one placement, whatever the queue's length (what
    /// the writer computes for an explain; its position comes from a [`Ranking`]).
    pub fn placement<U: UsageLookup>(
        &self,
        order: &OrderSettings,
        standing: &ShareSnapshot<'_, U>,
        id: i64,
        now_ms: i64,
    ) -> Option<Placement> {
        Some(place(order, standing, &self.get(id)?, now_ms))
    }
}

/// The oldest of `library`'s groups' front requests that has waited `max_wait`, if any.
fn oldest_starved(
    order: &OrderSettings,
    (library, groups): (&str, &BTreeMap<GroupId, Run>),
    now_ms: i64,
) -> Option<Candidate> {
    let max_wait = order.max_wait_ms?;
    (groups.iter())
        .filter_map(|(g, reqs)| Some((g, reqs.values().next()?)))
        .filter(|(_, w)| now_ms - w.created_ms() >= max_wait)
        .min_by_key(|(_, w)| (w.created_ms(), w.id))
        .map(|(g, w)| w.candidate(*g, library))
}

fn pick_fbsng<U: UsageLookup>(
    (order, standing): (&OrderSettings, &ShareSnapshot<'_, U>),
    (library, groups): (&str, &BTreeMap<GroupId, Run>),
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
        let sections = reqs.values().map(|w| Section {
            slots: w.slots,
            passed: w.passed,
        });
        match pick_section(spg, sections, free) {
            Some(i) => {
                // Only the first waiting request that did not fit is passed: it is the one
                // the section gap protects (the next one counts from when it is first).
                let passed_over: Vec<i64> = reqs.values().take(i.min(1)).map(|w| w.id).collect();
                let c = reqs.values().nth(i)?.candidate(GroupId(q), library);
                return Some(pick_of(order, standing, c, now_ms, passed_over));
            }
            None => stuck.push(q),
        }
    }
    None
}

/// The pick among `candidates`: the highest score, the smallest id on a tie; none if it does
/// not fit in `free` slots.
fn best_of<U: UsageLookup>(
    (order, standing): (&OrderSettings, &ShareSnapshot<'_, U>),
    candidates: impl IntoIterator<Item = Candidate>,
    free: u32,
    now_ms: i64,
) -> Option<Pick> {
    let mut best: Option<(f64, i64, Candidate)> = None;
    for c in candidates {
        let score = place(order, standing, &c, now_ms).score;
        let better = match best {
            None => true,
            Some((s, id, _)) => score > s || (score == s && c.id < id),
        };
        if better {
            best = Some((score, c.id, c));
        }
    }
    let (_, _, c) = best?;
    (c.slots <= free).then(|| pick_of(order, standing, c, now_ms, Vec::new()))
}

fn pick_of<U: UsageLookup>(
    order: &OrderSettings,
    standing: &ShareSnapshot<'_, U>,
    c: Candidate,
    now_ms: i64,
    passed_over: Vec<i64>,
) -> Pick {
    Pick {
        placement: place(order, standing, &c, now_ms),
        candidate: c,
        passed_over,
    }
}

/// A waiting request's place in a [`Ranking`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// 1-based position in its library's release order.
    pub position: usize,
    /// Requests waiting in its library.
    pub waiting: usize,
}

/// Every waiting request's position in its library's release order at one instant, if nothing
/// changed after: starved requests first (oldest first), then by the policy's score (highest
/// first), oldest first on a tie. An estimate of what [`HeldQueue::pick`] will do: each release
/// changes usage (and FBSNG's queue priorities), and the group-level policies release a group's
/// requests in arrival order. Built in `O(n log n)` off the ledger writer, from a read snapshot
/// of the queued rows; the writer never walks the queue for an explain. A request queued after
/// it is placed among the ranked ones by [`Ranking::estimate`].
#[derive(Debug, Clone, Default)]
pub struct Ranking {
    /// The instant (ms since the epoch) the order was computed for.
    pub at_ms: i64,
    /// (id, 1-based position, library number), sorted by id: 16 bytes a request (a
    /// `HashMap<i64, Place>` took about 50 MB with 1M queued, kept between explains).
    places: Vec<(i64, u32, u32)>,
    /// By library number.
    libraries: Vec<RankedLibrary>,
}

/// One library of a [`Ranking`].
#[derive(Debug, Clone)]
struct RankedLibrary {
    name: String,
    /// Requests waiting in it.
    waiting: usize,
    /// Every `stride`-th key of its order, the first included: at most [`SAMPLE_KEYS`] keys
    /// (32 bytes each), so an estimate is exact below that many requests and within `stride`
    /// positions above.
    sample: Vec<RankKey>,
    stride: usize,
}

/// Most keys a library's sample keeps (128 KiB).
const SAMPLE_KEYS: usize = 4096;

/// What orders one request in a [`Ranking`]: its place as [`place`] computed it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RankKey {
    id: i64,
    starved: bool,
    created_ms: i64,
    score: f64,
}

impl RankKey {
    /// The key of `c` placed as `p`.
    pub fn of(c: &Candidate, p: &Placement) -> RankKey {
        RankKey {
            id: c.id,
            starved: p.starved,
            created_ms: c.created_ms,
            score: p.score,
        }
    }
}

fn release_order(a: &RankKey, b: &RankKey) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    match (a.starved, b.starved) {
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (true, true) => (a.created_ms, a.id).cmp(&(b.created_ms, b.id)),
        (false, false) => b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)),
    }
}

impl Ranking {
    /// Rank `waiting` (any order) at `now_ms`.
    pub fn new<U: UsageLookup>(
        order: &OrderSettings,
        standing: &ShareSnapshot<'_, U>,
        waiting: &[Candidate],
        now_ms: i64,
    ) -> Ranking {
        let mut b = RankingBuilder::new(order, standing, now_ms);
        for c in waiting {
            b.push(c);
        }
        b.finish()
    }

    /// Where request `id` stood (`None`: it was not waiting when ranked).
    pub fn get(&self, id: i64) -> Option<Place> {
        let at = self.places.binary_search_by_key(&id, |p| p.0).ok()?;
        let &(_, position, lib) = self.places.get(at)?;
        Some(Place {
            position: position as usize,
            waiting: self.libraries.get(lib as usize).map_or(0, |l| l.waiting),
        })
    }

    /// Where a request this ranking does not know (queued after it), keyed `key` at `library`,
    /// falls among the requests it ranked there: 1 + those ahead of it (exact while its library
    /// had at most [`SAMPLE_KEYS`] waiting, else the middle of the `stride` it falls in), of
    /// the ranked ones and itself. Requests queued after the ranking are not counted.
    pub fn estimate(&self, library: &str, key: &RankKey) -> Place {
        let Some(lib) = self.libraries.iter().find(|l| l.name == library) else {
            return Place {
                position: 1,
                waiting: 1,
            };
        };
        let before = lib
            .sample
            .partition_point(|k| release_order(k, key).is_lt());
        let ahead = match before {
            0 => 0,
            // The sample's key `before - 1` is ahead, so are the keys up to it; key `before`
            // (if any) is not, nor those after it.
            m => {
                let least = (m - 1) * lib.stride + 1;
                let most = (m * lib.stride).min(lib.waiting);
                least + (most.saturating_sub(least)) / 2
            }
        };
        Place {
            position: ahead + 1,
            waiting: lib.waiting + 1,
        }
    }

    pub fn len(&self) -> usize {
        self.places.len()
    }

    pub fn is_empty(&self) -> bool {
        self.places.is_empty()
    }
}

/// A [`Ranking`] built one request at a time (so the whole queue need not be in memory at once).
pub struct RankingBuilder<'s, 'a, U: UsageLookup> {
    order: &'s OrderSettings,
    standing: &'s ShareSnapshot<'a, U>,
    now_ms: i64,
    libs: HashMap<String, Vec<RankKey>>,
}

impl<'s, 'a, U: UsageLookup> RankingBuilder<'s, 'a, U> {
    pub fn new(order: &'s OrderSettings, standing: &'s ShareSnapshot<'a, U>, now_ms: i64) -> Self {
        RankingBuilder {
            order,
            standing,
            now_ms,
            libs: HashMap::new(),
        }
    }

    pub fn push(&mut self, c: &Candidate) {
        let key = RankKey::of(c, &place(self.order, self.standing, c, self.now_ms));
        match self.libs.get_mut(c.library.as_str()) {
            Some(keys) => keys.push(key),
            None => {
                self.libs.insert(c.library.clone(), vec![key]);
            }
        }
    }

    pub fn finish(self) -> Ranking {
        Ranking::of_keys(self.libs, self.now_ms)
    }
}

impl Ranking {
    /// The ranking of each library's keys (any order) at `at_ms`.
    fn of_keys(libs: HashMap<String, Vec<RankKey>>, at_ms: i64) -> Ranking {
        let mut places = Vec::with_capacity(libs.values().map(Vec::len).sum());
        let mut libraries = Vec::with_capacity(libs.len());
        for ((name, mut keys), lib) in libs.into_iter().zip(0u32..) {
            keys.sort_unstable_by(release_order);
            for (i, k) in keys.iter().enumerate() {
                places.push((k.id, u32::try_from(i + 1).unwrap_or(u32::MAX), lib));
            }
            let stride = keys.len().div_ceil(SAMPLE_KEYS).max(1);
            libraries.push(RankedLibrary {
                name,
                waiting: keys.len(),
                sample: keys.iter().step_by(stride).copied().collect(),
                stride,
            });
        }
        places.sort_unstable_by_key(|p| p.0);
        Ranking {
            at_ms,
            places,
            libraries,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::order::Qos;

    /// A waiting request of `group` at `library`, created at `id` ms.
    pub(super) fn waiting(id: i64, library: &str, group: usize) -> Candidate {
        Candidate {
            id,
            group: GroupId(group),
            library: library.to_string(),
            created_ms: id,
            size_bytes: 1,
            benefit: 1,
            qos: Qos::Normal,
            user: 1.0,
            queue: 1.0,
            slots: 1,
            passed: 0,
        }
    }

    #[test]
    fn a_library_name_goes_with_its_last_request_and_its_number_is_reused() {
        let mut q = HeldQueue::default();
        q.push(waiting(1, "lto", 0));
        q.push(waiting(2, "lto", 1));
        q.push(waiting(3, "t10k", 0));
        assert_eq!(q.libraries(), ["lto", "t10k"]);
        assert_eq!(q.remove(1).map(|c| c.id), Some(1));
        assert_eq!(q.names.numbers.len(), 2, "`lto` still has request 2");
        assert_eq!(q.remove(2).map(|c| c.library), Some("lto".to_string()));
        assert_eq!(q.libraries(), ["t10k"]);
        assert_eq!(q.names.numbers.len(), 1);
        assert_eq!(q.names.free.len(), 1);
        q.push(waiting(4, "enstore", 2));
        assert!(q.names.free.is_empty(), "the freed number is taken again");
        assert_eq!(q.names.slots.len(), 2);
        assert_eq!(q.get(4).map(|c| c.library), Some("enstore".to_string()));
        assert_eq!(q.get(3).map(|c| c.group), Some(GroupId(0)));
        assert_eq!(q.remove(1), None);
        assert_eq!(q.len(), 2);
    }

    #[test]
    fn a_request_pushed_again_is_moved_not_duplicated() {
        let mut q = HeldQueue::default();
        q.push(waiting(7, "lto", 0));
        q.push(waiting(7, "t10k", 1));
        assert_eq!(q.len(), 1);
        assert_eq!(q.libraries(), ["t10k"]);
        assert_eq!(q.waiting_per_group().get(&GroupId(1)), Some(&1));
        assert!(!q.names.numbers.contains_key("lto"));
    }

    #[test]
    fn a_loaded_queue_keeps_every_request_in_order_and_findable() {
        // Any order in: ids descending, and one id twice (the later copy stays, as a push).
        let first = waiting(7, "a", 3);
        let mut q = HeldQueue::from_waiting(
            std::iter::once(first).chain(
                (0..500)
                    .rev()
                    .map(|id| waiting(id, if id % 3 == 0 { "a" } else { "b" }, (id % 4) as usize)),
            ),
            500,
        );
        assert_eq!(q.len(), 500);
        assert_eq!(
            q.get(7).map(|c| (c.library, c.group)),
            Some(("b".to_string(), GroupId(3)))
        );
        assert_eq!(q.remove(250).map(|c| c.id), Some(250));
        assert_eq!(q.len(), 499);
        assert_eq!(q.library_len("a") + q.library_len("b"), 499);
        assert!(q.get(250).is_none());
        for id in (0..500).filter(|&id| id != 250) {
            assert_eq!(q.get(id).map(|c| c.id), Some(id));
        }
        if let Some(passed) = q.passed_mut(499) {
            *passed = 3;
        }
        assert_eq!(q.get(499).map(|c| c.passed), Some(3));
        let groups = &q.libs[&q.names.numbers["b"]];
        for reqs in groups.values() {
            let ids: Vec<i64> = reqs.keys().collect();
            assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids in order");
        }
        // Each library's name is counted by all of its requests: it goes with the last.
        for id in (0..500).filter(|id| id % 3 == 0) {
            q.remove(id);
        }
        assert_eq!(q.libraries(), ["b"]);
        assert!(!q.names.numbers.contains_key("a"));
        assert_eq!(q.len(), 333 - 1, "b's requests (id 250 removed)");
    }

    /// A key with `score` (not starved).
    fn key(id: i64, score: f64) -> RankKey {
        RankKey {
            id,
            starved: false,
            created_ms: id,
            score,
        }
    }

    /// An estimate places a request the ranking does not know exactly among a small library's
    /// ranked requests, and within one sample stride among a large one's; it counts itself in
    /// `waiting`, and a library the ranking never saw makes it first of one.
    #[test]
    fn an_estimate_falls_where_its_key_sorts_among_the_ranked() {
        let ranked = |n: i64| {
            // Scores n-1 .. 0 by id: id 0 is released first.
            let keys = (0..n).map(|id| key(id, (n - 1 - id) as f64)).collect();
            Ranking::of_keys(HashMap::from([("lto".to_string(), keys)]), 0)
        };
        let small = ranked(100);
        for (score, ahead) in [(1000.0, 0), (99.0, 1), (49.5, 50), (-1.0, 100)] {
            let got = small.estimate("lto", &key(500, score));
            assert_eq!(
                got,
                Place {
                    position: ahead + 1,
                    waiting: 101
                },
                "{score}"
            );
        }
        // A tie goes by id: a later request after the ranked one of its score.
        assert_eq!(small.estimate("lto", &key(500, 49.0)).position, 52);
        assert_eq!(
            small.estimate("t10k", &key(500, 1.0)),
            Place {
                position: 1,
                waiting: 1
            }
        );
        // 100,000 ranked keep a sample of 4,096 keys at most: within a stride of exact.
        let n = 100_000i64;
        let large = ranked(n);
        let stride = (n as usize).div_ceil(SAMPLE_KEYS);
        assert!(large.libraries[0].sample.len() <= SAMPLE_KEYS);
        for exact in [0usize, 1, 17, 4_999, 50_000, 99_999, 100_000] {
            let score = n as f64 - exact as f64 - 0.5;
            let got = large.estimate("lto", &key(n, score)).position - 1;
            assert!(
                got.abs_diff(exact) <= stride,
                "{got} for {exact} (stride {stride})"
            );
        }
        // A starved request goes before every request that is not.
        let starved = RankKey {
            starved: true,
            ..key(n, -1.0)
        };
        assert_eq!(large.estimate("lto", &starved).position, 1);
    }
}

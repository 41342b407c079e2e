//! The usage book: every group's usage under the configured model, in memory, pure. The ledger
//! writer owns one (loaded from the stored aggregates at start, changed by the same charges it
//! writes), so a decision costs arithmetic, not a query. Reads go through [`UsageLookup`], the
//! one interface the policy sees, implemented by the live book at an instant ([`BookAt`]) and by
//! a frozen [`Effective`] snapshot (reports, `mssbroker shares --usage`).

use std::collections::BTreeMap;

use super::model::{HalfLifeAcc, UsageModel};
use crate::domain::{GroupId, GroupKind, PolicySettings};

/// What the policy reads about usage at one instant. Values are exact integers in weighted
/// units (see [`UsageModel::unit`]).
pub trait UsageLookup {
    /// A group's effective usage.
    fn value(&self, g: GroupId) -> u128;
    /// `U`: the effective usage of all fair-share groups.
    fn fair_total(&self) -> u128;
    /// Weighted units one benefit unit charged now adds.
    fn unit(&self) -> u128;
    /// What feasibility caps count, in benefit units: the current window's usage for the
    /// windows model, the effective usage otherwise.
    fn measure(&self, g: GroupId) -> u128;
    /// The fair-share total of [`UsageLookup::measure`].
    fn fair_measure_total(&self) -> u128;
}

/// Per-group usage under one model.
#[derive(Debug, Clone)]
pub struct UsageBook {
    model: UsageModel,
    fair: Vec<bool>,
    cumulative: Vec<u128>,
    half: Option<HalfLifeAcc>,
    decayed: Vec<f64>,
    /// Per group, window index -> usage; only windows that can still count are kept.
    windows: Vec<BTreeMap<i64, i128>>,
    /// Sum over fair-share groups per window.
    fair_windows: BTreeMap<i64, i128>,
    /// The latest window seen: older ones beyond the depth are dropped.
    newest_window: i64,
    /// The sum of the fair-share groups' `cumulative`, kept as they change: the cumulative
    /// model's `U` in O(1).
    fair_cumulative: u128,
    /// Counts every change to the book, so what was computed from it can tell it is current
    /// (`policy::order::ShareSnapshotCache`).
    generation: u64,
}

impl UsageBook {
    /// An empty book; `t0_ms` is the half-life reference time (ignored by other models).
    pub fn new(policy: &PolicySettings, t0_ms: i64) -> UsageBook {
        let n = policy.groups.len();
        let half = match policy.usage_model {
            UsageModel::HalfLife { half_life_ms } => Some(HalfLifeAcc {
                half_life_ms,
                t0_ms,
            }),
            _ => None,
        };
        UsageBook {
            model: policy.usage_model.clone(),
            fair: policy
                .groups
                .iter()
                .map(|g| matches!(g.kind, GroupKind::FairShare { .. }))
                .collect(),
            cumulative: vec![0; n],
            half,
            decayed: vec![0.0; n],
            windows: vec![BTreeMap::new(); n],
            fair_windows: BTreeMap::new(),
            newest_window: i64::MIN,
            fair_cumulative: 0,
            generation: 0,
        }
    }

    /// Changes with every change to the book (charges, loads, rebases, window rolls).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether a group's usage changes with time alone (decay, window roll-over).
    pub fn moves_with_time(&self) -> bool {
        !matches!(self.model, UsageModel::Cumulative)
    }

    /// Set group `g`'s cumulative usage, keeping the fair-share total.
    fn set_cumulative(&mut self, g: GroupId, amount: u128) {
        let Some(slot) = self.cumulative.get_mut(g.0) else {
            return;
        };
        if self.fair[g.0] {
            self.fair_cumulative = (self.fair_cumulative - *slot).saturating_add(amount);
        }
        *slot = amount;
        self.generation += 1;
    }

    pub fn model(&self) -> &UsageModel {
        &self.model
    }

    pub fn half_life(&self) -> Option<HalfLifeAcc> {
        self.half
    }

    /// Stored aggregates, on load.
    pub fn load_cumulative(&mut self, g: GroupId, amount: u128) {
        self.set_cumulative(g, amount);
    }

    pub fn load_decayed(&mut self, g: GroupId, s: f64) {
        if let Some(slot) = self.decayed.get_mut(g.0) {
            *slot = s;
            self.generation += 1;
        }
    }

    pub fn load_window(&mut self, g: GroupId, window: i64, amount: i128) {
        self.add_window(g, window, amount);
    }

    /// Charge (positive) or refund (negative) `delta` benefit dated `at_ms`. A refund names the
    /// date of the charge it takes back.
    pub fn add(&mut self, g: GroupId, delta: i128, at_ms: i64) {
        let Some(&c) = self.cumulative.get(g.0) else {
            return;
        };
        self.set_cumulative(g, c.saturating_add_signed(delta));
        match (&self.model, self.half) {
            (UsageModel::HalfLife { .. }, Some(acc)) => {
                let s = &mut self.decayed[g.0];
                *s = (*s + acc.weight(delta as f64, at_ms)).max(0.0);
            }
            (UsageModel::Windows { .. }, _) => {
                let w = self.model.window_of(at_ms);
                self.add_window(g, w, delta);
            }
            _ => {}
        }
    }

    fn add_window(&mut self, g: GroupId, window: i64, delta: i128) {
        self.generation += 1;
        if window > self.newest_window {
            self.newest_window = window;
            self.prune();
        }
        if window <= self.newest_window - self.model.depth() as i64 {
            return; // too old to count again
        }
        let Some(map) = self.windows.get_mut(g.0) else {
            return;
        };
        *map.entry(window).or_default() += delta;
        if self.fair[g.0] {
            *self.fair_windows.entry(window).or_default() += delta;
        }
    }

    fn prune(&mut self) {
        let keep_from = self.newest_window - self.model.depth() as i64 + 1;
        for map in &mut self.windows {
            *map = map.split_off(&keep_from);
        }
        self.fair_windows = self.fair_windows.split_off(&keep_from);
    }

    /// Move the half-life reference time on if `now_ms` is far past it; returns the factor
    /// every stored `S` must be multiplied by (exactly), if it moved.
    pub fn rebase(&mut self, now_ms: i64) -> Option<f64> {
        let (next, factor) = self.half?.rebase(now_ms)?;
        self.half = Some(next);
        self.generation += 1;
        for s in &mut self.decayed {
            *s *= factor;
        }
        Some(factor)
    }

    /// Roll the windows forward to `now_ms` (drops windows past the depth).
    pub fn roll(&mut self, now_ms: i64) {
        if matches!(self.model, UsageModel::Windows { .. }) {
            let w = self.model.window_of(now_ms);
            if w > self.newest_window {
                self.newest_window = w;
                self.prune();
                self.generation += 1;
            }
        }
    }

    pub fn cumulative(&self, g: GroupId) -> u128 {
        self.cumulative.get(g.0).copied().unwrap_or(0)
    }

    /// The stored half-life accumulator `S` of a group.
    pub fn decayed(&self, g: GroupId) -> f64 {
        self.decayed.get(g.0).copied().unwrap_or(0.0)
    }

    /// The usage of group `g` in window `window` (0 when not kept).
    pub fn window(&self, g: GroupId, window: i64) -> u128 {
        self.windows
            .get(g.0)
            .and_then(|m| m.get(&window))
            .map_or(0, |v| (*v).max(0) as u128)
    }

    /// The book read at `now_ms`.
    pub fn at(&self, now_ms: i64) -> BookAt<'_> {
        BookAt {
            book: self,
            now_ms,
            decay: self.half.map_or(1.0, |acc| acc.factor_at(now_ms)),
            fair_total: None,
        }
    }

    /// [`UsageBook::at`] with `U` already known (computed from this book, unchanged since, at
    /// this instant): what `policy::order::ShareSnapshotCache` hands out.
    pub fn at_with_total(&self, now_ms: i64, fair_total: u128) -> BookAt<'_> {
        BookAt {
            fair_total: Some(fair_total),
            ..self.at(now_ms)
        }
    }

    /// `decay`: the half-life factor at `now_ms`, computed once per reading.
    fn value_at(&self, g: GroupId, now_ms: i64, decay: f64) -> u128 {
        match &self.model {
            UsageModel::Cumulative => self.cumulative(g),
            UsageModel::HalfLife { .. } => HalfLifeAcc::units(self.decayed(g) * decay),
            UsageModel::Windows { .. } => {
                let c = self.model.window_of(now_ms);
                (0..self.model.depth())
                    .map(|i| self.window(g, c - i as i64) * self.model.window_weight(i))
                    .sum()
            }
        }
    }

    fn fair_window(&self, window: i64) -> u128 {
        self.fair_windows
            .get(&window)
            .map_or(0, |v| (*v).max(0) as u128)
    }

    fn groups(&self) -> impl Iterator<Item = GroupId> + '_ {
        (0..self.fair.len()).map(GroupId)
    }

    /// Every figure at `now_ms`, frozen.
    pub fn snapshot(&self, now_ms: i64) -> Effective {
        let at = self.at(now_ms);
        Effective {
            values: self.groups().map(|g| at.value(g)).collect(),
            measures: self.groups().map(|g| at.measure(g)).collect(),
            cumulative: self.cumulative.clone(),
            fair: self.fair.clone(),
            unit: self.model.unit(),
            windows: match self.model {
                UsageModel::Windows { .. } => {
                    let c = self.model.window_of(now_ms);
                    self.groups()
                        .map(|g| {
                            (0..self.model.depth())
                                .map(|i| self.window(g, c - i as i64))
                                .collect()
                        })
                        .collect()
                }
                _ => Vec::new(),
            },
        }
    }
}

/// A [`UsageBook`] read at one instant.
pub struct BookAt<'a> {
    book: &'a UsageBook,
    now_ms: i64,
    /// Half-life model: `2^(-(now - t0) / H)`.
    decay: f64,
    /// `U`, when the reader knew it.
    fair_total: Option<u128>,
}

impl UsageLookup for BookAt<'_> {
    fn value(&self, g: GroupId) -> u128 {
        self.book.value_at(g, self.now_ms, self.decay)
    }

    fn fair_total(&self) -> u128 {
        if let Some(u) = self.fair_total {
            return u;
        }
        match self.book.model {
            UsageModel::Cumulative => self.book.fair_cumulative,
            // Exact per-window totals: O(depth), not O(groups).
            UsageModel::Windows { .. } => {
                let c = self.book.model.window_of(self.now_ms);
                (0..self.book.model.depth())
                    .map(|i| self.book.fair_window(c - i as i64) * self.book.model.window_weight(i))
                    .sum()
            }
            _ => self
                .book
                .groups()
                .filter(|g| self.book.fair[g.0])
                .map(|g| self.value(g))
                .sum(),
        }
    }

    fn unit(&self) -> u128 {
        self.book.model.unit()
    }

    fn measure(&self, g: GroupId) -> u128 {
        match self.book.model {
            UsageModel::Windows { .. } => {
                self.book.window(g, self.book.model.window_of(self.now_ms))
            }
            _ => self.value(g),
        }
    }

    fn fair_measure_total(&self) -> u128 {
        match self.book.model {
            UsageModel::Windows { .. } => self
                .book
                .fair_window(self.book.model.window_of(self.now_ms)),
            _ => self.fair_total(),
        }
    }
}

/// Usage frozen at one instant (or given by hand): what views and reports compute from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effective {
    /// Effective usage per group, weighted units.
    pub values: Vec<u128>,
    /// Feasibility measure per group, benefit units.
    pub measures: Vec<u128>,
    /// All-time cumulative benefit per group (past `u64` after enough heavy use).
    pub cumulative: Vec<u128>,
    pub fair: Vec<bool>,
    pub unit: u128,
    /// Windows model only: per group, usage of window 0 (current), 1, ... depth-1.
    pub windows: Vec<Vec<u128>>,
}

impl UsageLookup for Effective {
    fn value(&self, g: GroupId) -> u128 {
        self.values.get(g.0).copied().unwrap_or(0)
    }

    fn fair_total(&self) -> u128 {
        self.values
            .iter()
            .zip(&self.fair)
            .filter(|(_, f)| **f)
            .map(|(v, _)| v)
            .sum()
    }

    fn unit(&self) -> u128 {
        self.unit
    }

    fn measure(&self, g: GroupId) -> u128 {
        self.measures.get(g.0).copied().unwrap_or(0)
    }

    fn fair_measure_total(&self) -> u128 {
        self.measures
            .iter()
            .zip(&self.fair)
            .filter(|(_, f)| **f)
            .map(|(v, _)| v)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;
    use proptest::prelude::*;

    fn policy(usage: &str) -> std::sync::Arc<PolicySettings> {
        let text = format!(
            "[policy]\np_front = 20\np_back = 10\n[[priority_classes]]\naccess_mode = \"daq\"\nmss_priority = 100\n[usage]\n{usage}\n[shares]\na = 1\nb = 3\n[mss]\nadapter = \"http\"\nurl = \"http://127.0.0.1:1\"\n"
        );
        Settings::parse(&text, "t").unwrap().policy
    }

    const H: i64 = 3_600_000;

    #[test]
    fn windows_roll_over_at_interval_boundaries() {
        let p = policy("model = \"windows\"\ninterval_secs = 3600\ndepth = 3\ndecay = 0.5");
        let (a, b, daq) = (
            p.group_by_path("a").unwrap(),
            p.group_by_path("b").unwrap(),
            p.group_by_path("daq").unwrap(),
        );
        let mut book = UsageBook::new(&p, 0);
        book.add(a, 100, 10 * H); // window 10
        book.add(b, 300, 10 * H + H - 1); // still window 10
        book.add(daq, 1_000, 10 * H); // not fair share
        let at = |book: &UsageBook, t| {
            let v = book.at(t);
            (v.value(a), v.value(b), v.fair_total(), v.measure(a))
        };
        // unit = 2^2 = 4; weights 4, 2, 1.
        assert_eq!(at(&book, 10 * H), (400, 1200, 1600, 100));
        assert_eq!(at(&book, 11 * H - 1), (400, 1200, 1600, 100));
        // One boundary later the window weighs half; the current window is empty.
        assert_eq!(at(&book, 11 * H), (200, 600, 800, 0));
        assert_eq!(at(&book, 12 * H), (100, 300, 400, 0));
        // Past the depth it is forgotten.
        assert_eq!(at(&book, 13 * H), (0, 0, 0, 0));
        // A refund in the charge's own window takes it back.
        book.add(a, -100, 10 * H);
        assert_eq!(at(&book, 10 * H), (0, 1200, 1200, 0));
        // Charges beyond the depth are dropped once a newer window is seen.
        book.add(a, 50, 20 * H);
        book.add(a, 70, 10 * H);
        assert_eq!(book.window(a, 10), 0);
        assert_eq!(book.cumulative(a), 120, "cumulative keeps everything");
    }

    proptest! {
        /// Rolling windows forward in any steps, and the book read at any instant, gives the
        /// Maui sum over the last `depth` windows of the charges as dated.
        #[test]
        fn windows_match_the_definition(
            charges in proptest::collection::vec((0usize..2, 1i64..1_000, 0i64..20 * H), 1..40),
            depth in 1usize..6,
            read_at in 0i64..25 * H,
        ) {
            let p = policy(&format!("model = \"windows\"\ninterval_secs = 3600\ndepth = {depth}\ndecay = 0.75"));
            let ids = [p.group_by_path("a").unwrap(), p.group_by_path("b").unwrap()];
            let mut charges = charges;
            charges.sort_by_key(|c| c.2);
            let mut book = UsageBook::new(&p, 0);
            for &(g, amount, t) in &charges {
                if t <= read_at {
                    book.add(ids[g], i128::from(amount), t);
                }
            }
            book.roll(read_at);
            let c = read_at / H;
            let unit = 4u128.pow(depth as u32 - 1);
            let expect = |g: usize| -> u128 {
                charges.iter().filter(|x| x.0 == g && x.2 <= read_at).map(|&(_, amount, t)| {
                    let age = (c - t / H) as usize;
                    if age < depth { amount as u128 * 3u128.pow(age as u32) * 4u128.pow((depth - 1 - age) as u32) } else { 0 }
                }).sum()
            };
            let view = book.at(read_at);
            prop_assert_eq!(view.unit(), unit);
            prop_assert_eq!(view.value(ids[0]), expect(0));
            prop_assert_eq!(view.value(ids[1]), expect(1));
            prop_assert_eq!(view.fair_total(), expect(0) + expect(1));
            let snap = book.snapshot(read_at);
            prop_assert_eq!(snap.fair_total(), view.fair_total());
        }
    }
}

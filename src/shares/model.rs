//! How usage forgets: the three usage models and their exact arithmetic.
//!
//! Every model turns a group's charges into an *effective usage*, an exact non-negative integer
//! in "weighted units" of `unit()` per benefit unit, so that sums over tree nodes and every ratio
//! built from them compare exactly:
//!
//! - `Cumulative` (the seed's cumulative benefit): the sum of charges; `unit` = 1.
//! - `HalfLife` (Flux, Slurm): `sum_j b_j * 0.5^((now - t_j) / H)`, rounded to the nearest
//!   benefit unit; `unit` = 1. Computed from timestamps (see [`HalfLifeAcc`]), never by
//!   compounding periodic steps.
//! - `Windows` (Maui FSINTERVAL/FSDEPTH/FSDECAY): window `k` holds charges dated in
//!   `[k * interval, (k + 1) * interval)`; with the current window `c` and decay `p/q`,
//!   `sum_{i < depth} usage[c - i] * p^i * q^(depth - 1 - i)`, which is the Maui weighted sum
//!   `sum_i usage[c - i] * decay^i` times `unit = q^(depth - 1)`, exactly.

pub use crate::domain::settings::UsageModel;

/// Largest `q^(depth - 1)` a windows model may have, so weighted sums stay far inside u128.
pub const MAX_WINDOW_UNIT: u128 = 1 << 40;

impl UsageModel {
    pub fn name(&self) -> &'static str {
        match self {
            UsageModel::Cumulative => "none",
            UsageModel::HalfLife { .. } => "half_life",
            UsageModel::Windows { .. } => "windows",
        }
    }

    /// A string that changes whenever stored aggregates would have to be rebuilt.
    pub fn signature(&self) -> String {
        match self {
            UsageModel::Cumulative => "none".into(),
            UsageModel::HalfLife { half_life_ms } => format!("half_life:{half_life_ms}"),
            // Depth and decay only weigh the stored windows; the interval decides them.
            UsageModel::Windows { interval_ms, .. } => format!("windows:{interval_ms}"),
        }
    }

    /// Weighted units per benefit unit charged in the current window.
    pub fn unit(&self) -> u128 {
        match self {
            UsageModel::Windows { depth, decay, .. } => pow(decay.den(), depth.saturating_sub(1)),
            _ => 1,
        }
    }

    /// The weight of window age `i` (0 = current), for the windows model; 1 otherwise.
    pub fn window_weight(&self, i: usize) -> u128 {
        match self {
            UsageModel::Windows { depth, decay, .. } if i < *depth => {
                pow(decay.num(), i) * pow(decay.den(), depth - 1 - i)
            }
            UsageModel::Windows { .. } => 0,
            _ => 1,
        }
    }

    /// The window a charge at `at_ms` falls in (windows are aligned to the Unix epoch).
    pub fn window_of(&self, at_ms: i64) -> i64 {
        match self {
            UsageModel::Windows { interval_ms, .. } => at_ms.div_euclid(*interval_ms),
            _ => 0,
        }
    }

    pub fn depth(&self) -> usize {
        match self {
            UsageModel::Windows { depth, .. } => *depth,
            _ => 1,
        }
    }

    /// A one-line description for people.
    pub fn describe(&self) -> String {
        match self {
            UsageModel::Cumulative => "none (cumulative benefit, never forgotten)".into(),
            UsageModel::HalfLife { half_life_ms } => {
                format!("half_life = {}", human_ms(*half_life_ms))
            }
            UsageModel::Windows {
                interval_ms,
                depth,
                decay,
            } => format!(
                "windows: interval {}, depth {depth}, decay {} ({decay})",
                human_ms(*interval_ms),
                decay.to_f64()
            ),
        }
    }
}

fn pow(base: u128, exp: usize) -> u128 {
    (0..exp).fold(1u128, |acc, _| acc.saturating_mul(base))
}

/// `3d 4h`, `12h`, `90s`, `250ms`.
pub fn human_ms(ms: i64) -> String {
    let units = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1_000, "s"),
    ];
    let mut left = ms;
    let mut parts = Vec::new();
    for (size, name) in units {
        if left >= size {
            parts.push(format!("{}{name}", left / size));
            left %= size;
        }
    }
    if left > 0 || parts.is_empty() {
        parts.push(format!("{left}ms"));
    }
    parts.join(" ")
}

/// Half-life usage kept as `S = sum_j b_j * 2^((t_j - t0) / H)` against a reference time `t0`.
/// The usage at `now` is `S * 2^(-(now - t0) / H)`: one exponent from two timestamps, whatever
/// happened in between, so reading, restarting or charging in any number of steps never
/// compounds rounding. `t0` moves forward by whole half-lives when the exponent grows large,
/// scaling `S` by an exact power of two.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HalfLifeAcc {
    pub half_life_ms: i64,
    pub t0_ms: i64,
}

/// Half-lives after `t0` at which `t0` is moved on (2^600 is far inside f64's range).
const REBASE_AFTER: i64 = 600;
/// Half-lives `t0` keeps behind `now` after a move.
const REBASE_KEEP: i64 = 8;

impl HalfLifeAcc {
    /// What a charge of `amount` dated `at_ms` adds to `S`.
    pub fn weight(&self, amount: f64, at_ms: i64) -> f64 {
        amount * ((at_ms - self.t0_ms) as f64 / self.half_life_ms as f64).exp2()
    }

    /// What `S` is multiplied by to read it at `now_ms`: `2^(-(now - t0) / H)`.
    pub fn factor_at(&self, now_ms: i64) -> f64 {
        (-((now_ms - self.t0_ms) as f64) / self.half_life_ms as f64).exp2()
    }

    /// The decayed value of `s` at `now_ms`.
    pub fn value_at(&self, s: f64, now_ms: i64) -> f64 {
        (s * self.factor_at(now_ms)).max(0.0)
    }

    /// A decayed value rounded to a whole benefit unit.
    pub fn units(value: f64) -> u128 {
        let v = value.max(0.0).round();
        if v.is_finite() {
            v as u128
        } else {
            0
        }
    }

    /// If `t0` should move before `now_ms`: the new accumulator and the exact factor every `S`
    /// is multiplied by.
    pub fn rebase(&self, now_ms: i64) -> Option<(HalfLifeAcc, f64)> {
        let lives = (now_ms - self.t0_ms).div_euclid(self.half_life_ms);
        if lives < REBASE_AFTER {
            return None;
        }
        let k = (lives - REBASE_KEEP).min(1000);
        let next = HalfLifeAcc {
            half_life_ms: self.half_life_ms,
            t0_ms: self.t0_ms + k * self.half_life_ms,
        };
        // 2^-k exactly: the biased exponent of a normal double.
        let factor = f64::from_bits(((1023 - k) as u64) << 52);
        Some((next, factor))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Fraction;
    use proptest::prelude::*;

    fn windows(depth: usize, num: u128, den: u128) -> UsageModel {
        UsageModel::Windows {
            interval_ms: 12 * 3_600_000,
            depth,
            decay: Fraction::new(num, den).unwrap(),
        }
    }

    /// Maui's user John (seed 004): FSDEPTH 4, FSDECAY 0.5, windows 60/110, 0/125, 10/100,
    /// 50/150. Usage = (60 + .5*0 + .25*10 + .125*50) / (110 + .5*125 + .25*100 + .125*150)
    /// = 68.75 / 216.25.
    #[test]
    fn maui_john() {
        let m = windows(4, 1, 2);
        let john = [60u128, 0, 10, 50];
        let total = [110u128, 125, 100, 150];
        let weigh = |v: &[u128]| -> u128 {
            v.iter()
                .enumerate()
                .map(|(i, u)| u * m.window_weight(i))
                .sum()
        };
        assert_eq!(m.unit(), 8);
        assert_eq!(weigh(&john), 550); // 68.75 * 8
        assert_eq!(weigh(&total), 1730); // 216.25 * 8
        assert_eq!(weigh(&john) as f64 / m.unit() as f64, 68.75);
        assert_eq!(weigh(&total) as f64 / m.unit() as f64, 216.25);
    }

    #[test]
    fn maui_decay_table() {
        // The seed's table: decay 0.75 gives 100%, 75%, 56%, 42% for windows 0..3.
        let m = windows(4, 3, 4);
        let pct: Vec<u128> = (0..4)
            .map(|i| (m.window_weight(i) * 100 + m.unit() / 2) / m.unit())
            .collect();
        assert_eq!(pct, [100, 75, 56, 42]);
        assert_eq!(m.window_weight(4), 0, "beyond the depth");
    }

    #[test]
    fn windows_are_aligned_to_the_epoch() {
        let m = windows(4, 1, 2);
        let h12 = 12 * 3_600_000;
        assert_eq!(m.window_of(0), 0);
        assert_eq!(m.window_of(h12 - 1), 0);
        assert_eq!(m.window_of(h12), 1);
        assert_eq!(m.window_of(-1), -1);
    }

    #[test]
    fn human_durations() {
        assert_eq!(human_ms(7 * 86_400_000), "7d");
        assert_eq!(human_ms(43_200_000), "12h");
        assert_eq!(human_ms(90_500), "1m 30s 500ms");
    }

    #[test]
    fn rebase_keeps_values() {
        let acc = HalfLifeAcc {
            half_life_ms: 1000,
            t0_ms: 0,
        };
        let s = acc.weight(1e12, 5_000);
        let now = 700_000;
        let (next, factor) = acc.rebase(now).expect("600 half-lives passed");
        assert_eq!(next.t0_ms, 692_000);
        assert_eq!(acc.value_at(s, now), next.value_at(s * factor, now));
        assert!(acc.rebase(1000).is_none());
    }

    proptest! {
        /// Decay over `t` in one go equals decay in steps summing to `t`: the accumulator is
        /// read at any instants and charged at any instants in between, and the value at the
        /// end is the closed form `sum b * 0.5^((end - t_j)/H)`, to 1e-12 relative.
        #[test]
        fn half_life_once_or_in_steps(
            (half_life_ms, charges) in (1_000i64..1_000_000_000).prop_flat_map(|h| (
                Just(h),
                // Within 400 half-lives of t0: the writer moves t0 on after 600 (see rebase).
                proptest::collection::vec((0u64..1 << 40, 0i64..400 * h), 1..20),
            )),
            steps in proptest::collection::vec(0i64..1_000_000_000, 1..10),
        ) {
            let acc = HalfLifeAcc { half_life_ms, t0_ms: 0 };
            let mut charges = charges;
            charges.sort_by_key(|c| c.1);
            let end = charges.last().map_or(0, |c| c.1) + steps.iter().sum::<i64>();
            let mut s = 0.0;
            for &(b, t) in &charges {
                s += acc.weight(b as f64, t);
            }
            // Reading at every intermediate step never changes S.
            let mut at = charges.last().map_or(0, |c| c.1);
            let mut prev = acc.value_at(s, at);
            for step in &steps {
                at += step;
                let now = acc.value_at(s, at);
                prop_assert!(now <= prev * (1.0 + 1e-12));
                // Decaying the previous reading by the step equals reading afresh.
                let stepped = prev * (-(*step as f64) / half_life_ms as f64).exp2();
                prop_assert!((stepped - now).abs() <= 1e-12 * now.max(1.0), "{} vs {}", stepped, now);
                prev = now;
            }
            let closed: f64 = charges
                .iter()
                .map(|&(b, t)| b as f64 * (-((end - t) as f64) / half_life_ms as f64).exp2())
                .sum();
            let got = acc.value_at(s, end);
            prop_assert!((got - closed).abs() <= 1e-9 * closed.max(1.0), "{} vs {}", got, closed);
            // One half-life halves it.
            let later = acc.value_at(s, end + half_life_ms);
            prop_assert!((later * 2.0 - got).abs() <= 1e-9 * got.max(1.0));
        }
    }
}

//! The multi-factor priority of seed 002 (Flux's job priority plugin), pure:
//!
//! ```text
//! priority = wait_weight * wait + fair_share_weight * fair_share + qos_weight * qos
//!          + queue_weight * queue + size_weight * size + user_weight * user
//! ```
//!
//! every factor normalised to [0, 1]: wait = waited / max_wait (capped at 1); fair share = the
//! group's Fair Tree `fairshare` (rank / N: 1 the most under-served); QoS = 1 expedite, 0.5
//! normal, 0 standby; queue = a configured factor per access mode; size = bytes / size_ref
//! (capped at 1), or one minus that when small requests are favoured; user = what the submitter
//! asked for, which can only lower it (1 by default). The weighted sum, over the sum of the
//! weights, maps onto the band of MSS priorities `[band_low, band_high]` below the priority
//! classes.
//!
//! Selected with `[policy] algorithm = "multifactor"`; see [`super::order`].

pub use crate::domain::order::{Multifactor, Qos, SizeFavours};

use super::order::{Candidate, Detail, FairPlacement};

impl Qos {
    pub fn parse(s: &str) -> Option<Qos> {
        match s {
            "expedite" => Some(Qos::Expedite),
            "normal" => Some(Qos::Normal),
            "standby" => Some(Qos::Standby),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Qos::Expedite => "expedite",
            Qos::Normal => "normal",
            Qos::Standby => "standby",
        }
    }

    pub fn factor(self) -> f64 {
        match self {
            Qos::Expedite => 1.0,
            Qos::Normal => 0.5,
            Qos::Standby => 0.0,
        }
    }
}

/// What the factors are computed from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Inputs {
    pub waited_ms: i64,
    /// The group's Fair Tree fairshare, rank / N.
    pub fairshare: f64,
    pub qos: Qos,
    /// The configured factor of the request's queue (access mode), [0, 1].
    pub queue: f64,
    pub size_bytes: u64,
    /// The submitter's factor, [0, 1]; 1 leaves the priority as it is.
    pub user: f64,
}

/// The normalised factors (or their weighted values), for `explain`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Factors {
    pub wait: f64,
    pub fair_share: f64,
    pub qos: f64,
    pub queue: f64,
    pub size: f64,
    pub user: f64,
}

fn unit(v: f64) -> f64 {
    if v.is_nan() {
        0.0
    } else {
        v.clamp(0.0, 1.0)
    }
}

impl Multifactor {
    /// Multifactor's placement of request `c`: its factors (fair share from the group's Fair
    /// Tree `rank` of `leaves`), their weighted sum onto the band.
    pub(super) fn place(
        &self,
        band: [i64; 2],
        (rank, leaves): (u32, u32),
        c: &Candidate,
        waited_ms: i64,
    ) -> FairPlacement {
        let factors = self.factors(&Self::inputs((rank, leaves), c, waited_ms));
        let score = self.score(&factors);
        FairPlacement {
            mss_priority: self.mss_priority(score),
            score,
            detail: Detail::Multifactor {
                factors,
                weighted: self.weighted(&factors),
                score,
                total_weight: self.total_weight(),
                band,
            },
        }
    }

    /// [`Self::place`]'s MSS priority alone, computed the same way, without the figures
    /// explain shows (pass-through's re-prioritisation asks it of every pending request); and
    /// the wait before which it cannot change while `rank` stays: the priority is the same for
    /// every wait in `waited_ms..until` (`None`: for every longer wait).
    pub(super) fn mss_priority_until(
        &self,
        rank: (u32, u32),
        c: &Candidate,
        waited_ms: i64,
    ) -> (i64, Option<i64>) {
        let factors = self.factors(&Self::inputs(rank, c, waited_ms));
        let score = self.score(&factors);
        (self.mss_priority(score), self.holds_until(score, waited_ms))
    }

    /// The wait before which a request's priority, at `score` after `waited_ms`, cannot rise.
    /// Only the wait factor moves with time, and each step from it to the priority (division,
    /// product, sum, clamp, rounding) is monotone, so the priority can only rise, and only
    /// once the score reaches the next rounding boundary. In real numbers the score grows by
    /// `wait_weight / wait cap` per millisecond until the cap; the bound stops short of the
    /// boundary by a billionth of the weights' sum, far above the floating-point error of a
    /// few operations, so a computed priority never changes before it. `None` when nothing
    /// moves (no wait weight, the cap reached, or the priority already the band's top). With
    /// weights so small that the margin or the rate is not a normal float (the arithmetic's
    /// error is then no longer relative), it may change at the next millisecond.
    fn holds_until(&self, score: f64, waited_ms: i64) -> Option<i64> {
        let (total, cap) = (self.total_weight(), self.max_wait_ms.max(1));
        let band = (self.band_high - self.band_low) as f64;
        let moves = self.wait_weight > 0.0 && total > 0.0 && band > 0.0;
        if !moves || waited_ms >= cap {
            return None;
        }
        let step = (band * unit(score / total)).round();
        if step >= band {
            return None;
        }
        let boundary = (step + 0.5) / band * total;
        let (margin, per_ms) = (total * 1e-9, self.wait_weight / cap as f64);
        if !(margin.is_normal() && per_ms.is_normal()) {
            return Some(waited_ms.saturating_add(1));
        }
        let room = boundary - margin - score;
        // Saturating: a room of billions of years is no change.
        let more = if room > 0.0 {
            (room / per_ms).floor() as i64
        } else {
            0
        };
        let until = waited_ms.saturating_add(more.max(1));
        (until <= cap).then_some(until)
    }

    fn inputs((rank, leaves): (u32, u32), c: &Candidate, waited_ms: i64) -> Inputs {
        Inputs {
            waited_ms,
            fairshare: f64::from(rank) / f64::from(leaves),
            qos: c.qos,
            queue: c.queue,
            size_bytes: c.size_bytes,
            user: c.user,
        }
    }

    pub fn factors(&self, i: &Inputs) -> Factors {
        let size = unit(i.size_bytes as f64 / self.size_ref_bytes.max(1) as f64);
        Factors {
            wait: unit(i.waited_ms as f64 / self.max_wait_ms.max(1) as f64),
            fair_share: unit(i.fairshare),
            qos: i.qos.factor(),
            queue: unit(i.queue),
            size: match self.size_favours {
                SizeFavours::Large => size,
                SizeFavours::Small => 1.0 - size,
            },
            user: unit(i.user),
        }
    }

    /// Each factor times its weight.
    pub fn weighted(&self, f: &Factors) -> Factors {
        Factors {
            wait: self.wait_weight * f.wait,
            fair_share: self.fair_share_weight * f.fair_share,
            qos: self.qos_weight * f.qos,
            queue: self.queue_weight * f.queue,
            size: self.size_weight * f.size,
            user: self.user_weight * f.user,
        }
    }

    /// The weighted sum.
    pub fn score(&self, f: &Factors) -> f64 {
        self.wait_weight * f.wait
            + self.fair_share_weight * f.fair_share
            + self.qos_weight * f.qos
            + self.queue_weight * f.queue
            + self.size_weight * f.size
            + self.user_weight * f.user
    }

    pub fn total_weight(&self) -> f64 {
        self.wait_weight
            + self.fair_share_weight
            + self.qos_weight
            + self.queue_weight
            + self.size_weight
            + self.user_weight
    }

    /// The integer MSS priority of a score: its fraction of the total weight, onto the band.
    pub fn mss_priority(&self, score: f64) -> i64 {
        let total = self.total_weight();
        let x = if total > 0.0 {
            unit(score / total)
        } else {
            0.0
        };
        self.band_low + ((self.band_high - self.band_low) as f64 * x).round() as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Multifactor {
        Multifactor {
            wait_weight: 1000.0,
            fair_share_weight: 10_000.0,
            qos_weight: 2000.0,
            queue_weight: 0.0,
            size_weight: 500.0,
            user_weight: 1000.0,
            max_wait_ms: 86_400_000,
            size_ref_bytes: 100_000_000_000,
            size_favours: SizeFavours::Large,
            band_low: 11,
            band_high: 39,
        }
    }

    /// Worked by hand: 6 h of a 24 h max wait (0.25 x 1000 = 250), fairshare 0.75 (7500),
    /// expedite (2000), 50 GB of 100 GB favouring large (0.5 x 500 = 250), user 1 (1000): 11000
    /// of 14500, 0.7586 of the band 11..39 = 11 + 21.24 -> 32.
    #[test]
    fn hand_worked_priority() {
        let p = policy();
        let f = p.factors(&Inputs {
            waited_ms: 6 * 3_600_000,
            fairshare: 0.75,
            qos: Qos::Expedite,
            queue: 0.3,
            size_bytes: 50_000_000_000,
            user: 1.0,
        });
        assert_eq!(
            (f.wait, f.fair_share, f.qos, f.size, f.user),
            (0.25, 0.75, 1.0, 0.5, 1.0)
        );
        assert_eq!(p.score(&f), 11_000.0);
        assert_eq!(p.mss_priority(p.score(&f)), 32);
    }

    /// Worked by hand: fair share 0.25 (2500), normal QoS (1000), no size, user 1 (1000): a
    /// score of 4500 of 14500 with no wait, 8.69 of the band's 28 steps -> 20. It rounds up
    /// at 9.5 steps, a score of 9.5 / 28 x 14500 = 4919.64, 419.64 more, which the wait adds
    /// (1000 per 86,400,000 ms) after 36,257,142.9 ms: the bound falls a millisecond or two
    /// short of it, where the priority still holds, and it rises just after. Once the wait
    /// is capped nothing moves.
    #[test]
    fn a_priority_holds_until_the_wait_reaches_its_next_step() {
        let p = policy();
        let at = |waited_ms: i64| {
            let f = p.factors(&Inputs {
                waited_ms,
                fairshare: 0.25,
                qos: Qos::Normal,
                queue: 0.0,
                size_bytes: 0,
                user: 1.0,
            });
            let score = p.score(&f);
            (p.mss_priority(score), p.holds_until(score, waited_ms))
        };
        let (first, until) = at(0);
        assert_eq!((first, until), (20, Some(36_257_141)));
        assert_eq!(at(36_257_140).0, 20);
        assert_eq!(at(36_257_143).0, 21);
        // From just before the step, the bound is the next millisecond.
        assert_eq!(at(36_257_142), (20, Some(36_257_143)));
        assert_eq!(at(86_400_000), (22, None));
        assert_eq!(at(100_000_000), (22, None));
        let still = Multifactor {
            wait_weight: 0.0,
            ..policy()
        };
        assert_eq!(still.holds_until(4500.0, 0), None);
        // Subnormal weights (the configuration takes any finite weight): no bound past the
        // next millisecond, the float error being no longer small against the margin.
        let tiny = Multifactor {
            wait_weight: 7e-321,
            fair_share_weight: 1e-320,
            qos_weight: 9e-321,
            size_weight: 1e-320,
            queue_weight: 0.0,
            user_weight: 0.0,
            max_wait_ms: 3_600_000,
            ..policy()
        };
        assert_eq!(tiny.holds_until(1e-320, 5), Some(6));
    }

    #[test]
    fn factors_stay_in_range_and_the_user_can_only_lower() {
        let p = policy();
        let base = Inputs {
            waited_ms: 10 * 86_400_000,
            fairshare: 1.7,
            qos: Qos::Standby,
            queue: -3.0,
            size_bytes: u64::MAX,
            user: 5.0,
        };
        let f = p.factors(&base);
        assert_eq!(
            (f.wait, f.fair_share, f.queue, f.size, f.user),
            (1.0, 1.0, 0.0, 1.0, 1.0)
        );
        let lowered = p.factors(&Inputs { user: 0.2, ..base });
        assert!(p.score(&lowered) < p.score(&f));
        assert_eq!(p.mss_priority(f64::MAX), 39);
        assert_eq!(p.mss_priority(-1.0), 11);
        let small = Multifactor {
            size_favours: SizeFavours::Small,
            ..policy()
        };
        let tiny = small.factors(&Inputs {
            size_bytes: 0,
            ..base
        });
        assert_eq!(tiny.size, 1.0);
    }
}

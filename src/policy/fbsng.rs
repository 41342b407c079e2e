//! FBSNG's dynamic queue priorities (seed 003), pure.
//!
//! Every fair-share group is a queue with a priority `P`. The seed gives the parameters and
//! their intent but not every step, so this is the reading the code implements (docs/departures.md
//! lists it as a choice):
//!
//! - A queue starts at `qp_min`.
//! - **Start**: when a request starts from queue `q`, `P_q -= qpd_q` and every other queue
//!   `P_o += qpi_o` ("relative queue priority is growing as long as the Scheduler starts sections
//!   from other queues, but not from this one"; an idle queue grows too, which is what lets the
//!   seed's occasional high-priority project start at once). Then, if any queue is under its
//!   `qp_min`, every queue is raised by the largest shortfall (priorities are relative: clamping
//!   one queue at its floor would erase the difference QPD makes and turn 3:7 into 50/50), and
//!   each is capped at its `qp_max`.
//! - **Order**: queues with waiting requests by `P` descending (ties: configuration order).
//! - **Gap** (`qpg`): a queue `h` with waiting requests that cannot start now holds every queue
//!   `o` below it with `P_h - P_o >= qpg_h`, until a request starts from `h`, even if capacity
//!   stays unused meanwhile (the seed's "stuck" queue).
//! - **Section gap** (`spg`, per queue, 0 = off): within a queue, requests are taken in arrival
//!   order; the first waiting request that does not fit gains a section priority point each
//!   time a later request of its queue starts past it, and once it is `spg` points above the
//!   requests behind it, it holds them until it starts (so about one such request starts per
//!   `spg` that pass it: the seed's one bulk per N light).
//!
//! With `qpi = 1` everywhere and both queues always busy, each start from A moves `P_A - P_B` by
//! `-(qpd_A + qpi_B)` and each start from B by `+(qpd_B + qpi_A)`, so starts come in the ratio
//! `(qpd_B + qpi_A) : (qpd_A + qpi_B)`: the seed's QPD 3:7 gives 8:4, two thirds to A ("about
//! 70/30"; exactly inverse to QPD as `qpi` becomes small against `qpd`).

pub use crate::domain::order::QueueParams;

use super::order::{Detail, FairPlacement};

impl Default for QueueParams {
    fn default() -> Self {
        QueueParams {
            qp_min: 0,
            qp_max: 100,
            qpi: 1,
            qpd: 1,
            qpg: 100,
            spg: 0,
        }
    }
}

/// Every queue's priority, indexed like the groups (`GroupId.0`); entries of priority classes
/// are carried but never used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queues {
    pub priority: Vec<i64>,
}

impl Queues {
    /// Every queue at its `qp_min`.
    pub fn new(params: &[QueueParams]) -> Queues {
        Queues {
            priority: params.iter().map(|p| p.qp_min).collect(),
        }
    }

    pub fn get(&self, q: usize) -> i64 {
        self.priority.get(q).copied().unwrap_or(0)
    }

    /// A request started from queue `q`. `fair[i]` says whether queue `i` is a fair-share
    /// queue (priority classes do not take part).
    pub fn started(&mut self, params: &[QueueParams], fair: &[bool], q: usize) {
        let n = self.priority.len().min(params.len()).min(fair.len());
        for i in 0..n {
            if !fair[i] {
                continue;
            }
            if i == q {
                self.priority[i] = self.priority[i].saturating_sub(params[i].qpd);
            } else {
                self.priority[i] = self.priority[i].saturating_add(params[i].qpi);
            }
        }
        let shortfall = (0..n)
            .filter(|&i| fair[i])
            .map(|i| params[i].qp_min.saturating_sub(self.priority[i]))
            .max()
            .unwrap_or(0);
        for i in (0..n).filter(|&i| fair[i]) {
            if shortfall > 0 {
                self.priority[i] = self.priority[i].saturating_add(shortfall);
            }
            self.priority[i] = self.priority[i].min(params[i].qp_max);
        }
    }

    /// Whether queue `h`, waiting and unable to start, holds the lower queue `o`.
    pub fn holds(&self, params: &[QueueParams], h: usize, o: usize) -> bool {
        let gap = params.get(h).map_or(i64::MAX, |p| p.qpg);
        self.get(h).saturating_sub(self.get(o)) >= gap
    }

    /// Queue indices in the order the scheduler looks at them: priority descending, then index.
    pub fn order(&self, waiting: impl IntoIterator<Item = usize>) -> Vec<usize> {
        let mut v: Vec<usize> = waiting.into_iter().collect();
        v.sort_by_key(|&q| (std::cmp::Reverse(self.get(q)), q));
        v
    }
}

/// One waiting request as the section rule sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Section {
    pub slots: u32,
    /// Section priority: later requests of the queue that started while this one waited.
    pub passed: u32,
}

/// FBSNG's placement of a request whose group's queue has `queue_priority`: its priority
/// above the `lowest` queue's, from the band's low end, capped at its high end; in held mode
/// the queue priority is the score. `passed` is the request's section priority, for explain.
pub(super) fn place(
    band: [i64; 2],
    queue_priority: i64,
    lowest: i64,
    passed: u32,
) -> FairPlacement {
    let [low, high] = band;
    FairPlacement {
        mss_priority: low
            .saturating_add(queue_priority.saturating_sub(lowest))
            .min(high),
        score: queue_priority as f64,
        detail: Detail::Fbsng {
            queue_priority,
            lowest_queue_priority: lowest,
            section_priority: passed,
            band,
        },
    }
}

/// Within one queue, which waiting request (index in arrival order) starts with `free` slots,
/// if any: the first that fits, unless an earlier one that does not fit is `spg` or more above
/// it in section priority.
pub fn pick_section(
    spg: u32,
    sections: impl IntoIterator<Item = Section>,
    free: u32,
) -> Option<usize> {
    let mut blocking: Option<u32> = None;
    for (i, s) in sections.into_iter().enumerate() {
        if let Some(top) = blocking {
            if spg > 0 && top.saturating_sub(s.passed) >= spg {
                return None;
            }
        }
        if s.slots <= free {
            return Some(i);
        }
        blocking = Some(blocking.map_or(s.passed, |b| b.max(s.passed)));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two(a: QueueParams, b: QueueParams) -> (Vec<QueueParams>, Vec<bool>) {
        (vec![a, b], vec![true, true])
    }

    #[test]
    fn start_lowers_the_queue_and_raises_the_others_keeping_differences() {
        let a = QueueParams {
            qpd: 3,
            ..QueueParams::default()
        };
        let b = QueueParams {
            qpd: 7,
            ..QueueParams::default()
        };
        let (p, fair) = two(a, b);
        let mut q = Queues::new(&p);
        q.started(&p, &fair, 0);
        // A: 0 - 3 = -3, B: 0 + 1 = 1; shift by 3 so A is back at its floor.
        assert_eq!(q.priority, [0, 4]);
        q.started(&p, &fair, 1);
        // A: 0 + 1 = 1, B: 4 - 7 = -3; shift by 3.
        assert_eq!(q.priority, [4, 0]);
    }

    #[test]
    fn qpd_three_to_seven_with_qpi_one_starts_two_to_one() {
        let (p, fair) = two(
            QueueParams {
                qpd: 3,
                ..QueueParams::default()
            },
            QueueParams {
                qpd: 7,
                ..QueueParams::default()
            },
        );
        let mut q = Queues::new(&p);
        let mut starts = [0u32; 2];
        for _ in 0..1200 {
            let first = q.order([0, 1])[0];
            starts[first] += 1;
            q.started(&p, &fair, first);
        }
        // (qpd_B + qpi_A) : (qpd_A + qpi_B) = 8 : 4.
        assert_eq!(starts, [800, 400]);
    }

    #[test]
    fn priorities_are_capped_at_qp_max_and_a_gap_holds_lower_queues() {
        let hi = QueueParams {
            qp_min: 5,
            qpi: 3,
            qpg: 7,
            ..QueueParams::default()
        };
        let (p, fair) = two(hi, QueueParams::default());
        let mut q = Queues::new(&p);
        for _ in 0..100 {
            q.started(&p, &fair, 1);
        }
        assert_eq!(q.priority, [100, 0]);
        assert!(q.holds(&p, 0, 1));
        assert!(!q.holds(&p, 1, 0));
    }

    #[test]
    fn section_gap_holds_later_small_requests_behind_a_passed_big_one() {
        let s = |slots, passed| Section { slots, passed };
        // The big one does not fit; the small one behind it may start while the gap is small.
        assert_eq!(pick_section(3, [s(4, 2), s(1, 0)], 2), Some(1));
        // Three passes: now it holds the queue.
        assert_eq!(pick_section(3, [s(4, 3), s(1, 0)], 2), None);
        // spg 0: never holds.
        assert_eq!(pick_section(0, [s(4, 30), s(1, 0)], 2), Some(1));
        assert_eq!(pick_section(3, [s(4, 3), s(1, 0)], 4), Some(0));
    }
}

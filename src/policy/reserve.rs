//! A drive for data taking when it needs one (issue 39, docs/volumes.md "A drive for data
//! taking"): while a priority class has requests waiting at the MSS, or had some within
//! `[release.reserve] window_secs`, the `held` and `volumes` release modes keep
//! `[release.reserve] drives` of a library's slots (`held`: `limit`; `volumes`: `max_volumes`,
//! a drive each) free of fair-share work, and while a priority request waits the `volumes` mode
//! neither extends a sticky volume nor lets other groups ride. Pure: the caller (the ledger
//! writer, `simulate::engine`) says what it sees of the priority classes ([`PriorityDemand`])
//! and the time; [`reservation`] says what is held back and until when.

pub use crate::domain::order::ReserveSettings;

impl ReserveSettings {
    /// The drives reserved at `library`.
    pub fn drives_of(&self, library: &str) -> u32 {
        self.libraries.get(library).copied().unwrap_or(self.drives)
    }
}

/// What the caller sees of the priority classes: requests waiting now (released to the MSS, not
/// yet running), and the last instant one was seen (arriving, waiting or starting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PriorityDemand {
    pub waiting: u64,
    pub last_seen_ms: Option<i64>,
}

impl PriorityDemand {
    /// A priority request was seen at `now_ms` (arrived, moved or started).
    pub fn seen(&mut self, now_ms: i64) {
        self.last_seen_ms = Some(self.last_seen_ms.map_or(now_ms, |t| t.max(now_ms)));
    }
}

/// What the reservation holds back at a library at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reservation {
    /// Slots (drives) fair-share work may not take.
    pub reserved: u32,
    /// A priority request is waiting: no sticky extension, no riders.
    pub priority_waiting: bool,
    /// When the reservation lapses unless priority demand is seen again (`None`: it lasts
    /// while a request waits, or there is none).
    pub until_ms: Option<i64>,
}

impl Reservation {
    /// Whether anything is held back.
    pub fn holds(&self) -> bool {
        self.reserved > 0
    }

    /// Of a library's `cap` slots, how many fair-share work may fill now. Never below 0; the
    /// configuration keeps `drives` below every cap (`config::order`), so fair share keeps at
    /// least one.
    pub fn fair_cap(&self, cap: u32) -> u32 {
        cap.saturating_sub(self.reserved)
    }

    /// The `held` mode's free slots for fair-share work at a library of `cap` slots with
    /// `outstanding` slots taken, `priority` of them by priority classes: what the limit leaves,
    /// and no more than the fair-share slots under [`Self::fair_cap`] leave (priority work in
    /// flight counts against the library's limit, not against the fair-share cap).
    pub fn fair_free(&self, cap: u32, outstanding: u32, priority: u32) -> u32 {
        let fair = outstanding.saturating_sub(priority);
        let free = cap.saturating_sub(outstanding);
        free.min(self.fair_cap(cap).saturating_sub(fair))
    }
}

/// The reservation at `library` at `now_ms`: `drives_of(library)` slots while a priority
/// request waits, or for `window_ms` after one was last seen (`last_seen_ms + window_ms`
/// excluded); nothing otherwise.
pub fn reservation(
    s: &ReserveSettings,
    library: &str,
    demand: PriorityDemand,
    now_ms: i64,
) -> Reservation {
    let drives = s.drives_of(library);
    if drives == 0 {
        return Reservation::default();
    }
    let until = demand.last_seen_ms.map(|t| t.saturating_add(s.window_ms));
    let waiting = demand.waiting > 0;
    if waiting || until.is_some_and(|u| now_ms < u) {
        Reservation {
            reserved: drives,
            priority_waiting: waiting,
            until_ms: (!waiting).then_some(until).flatten(),
        }
    } else {
        Reservation::default()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn one_drive(window_ms: i64) -> ReserveSettings {
        ReserveSettings {
            drives: 1,
            window_ms,
            libraries: BTreeMap::from([("big".to_string(), 2), ("none".to_string(), 0)]),
        }
    }

    /// No priority demand, ever: nothing is reserved, whatever the settings.
    #[test]
    fn no_reservation_without_priority_demand() {
        let r = reservation(&one_drive(600_000), "", PriorityDemand::default(), 5_000);
        assert!(!r.holds());
        assert_eq!(r.fair_cap(6), 6);
    }

    /// A waiting request reserves the library's drives (per library), stops stickiness and has
    /// no end of its own; with `drives = 0` nothing is reserved.
    #[test]
    fn a_waiting_priority_request_reserves_the_librarys_drives() {
        let s = one_drive(600_000);
        let d = PriorityDemand {
            waiting: 1,
            last_seen_ms: Some(0),
        };
        let r = reservation(&s, "", d, 10_000_000);
        assert_eq!(
            (r.reserved, r.priority_waiting, r.until_ms),
            (1, true, None)
        );
        assert_eq!(r.fair_cap(6), 5);
        assert_eq!(reservation(&s, "big", d, 0).fair_cap(6), 4);
        assert!(!reservation(&s, "none", d, 0).holds());
        let off = ReserveSettings::default();
        assert!(!reservation(&off, "", d, 0).holds());
    }

    /// After the last priority request was seen the drives stay reserved for the window, up to
    /// its last millisecond and not at its end; stickiness comes back at once.
    #[test]
    fn the_window_holds_the_drives_up_to_its_boundary() {
        let s = one_drive(600_000);
        let d = PriorityDemand {
            waiting: 0,
            last_seen_ms: Some(1_000),
        };
        let inside = reservation(&s, "", d, 600_999);
        assert_eq!(
            (inside.reserved, inside.priority_waiting, inside.until_ms),
            (1, false, Some(601_000))
        );
        assert!(!reservation(&s, "", d, 601_000).holds());
        assert!(!reservation(&s, "", d, 700_000).holds());
        let no_window = one_drive(0);
        assert!(!reservation(&no_window, "", d, 1_000).holds());
    }

    /// Held mode: without a reservation the limit alone counts (priority slots included); with
    /// one, fair share fills at most `cap - reserved`, priority slots apart.
    #[test]
    fn held_free_slots_leave_the_reserved_ones() {
        let none = Reservation::default();
        assert_eq!(none.fair_free(6, 4, 1), 2);
        assert_eq!(none.fair_free(6, 7, 1), 0);
        let one = Reservation {
            reserved: 1,
            ..Reservation::default()
        };
        assert_eq!(one.fair_free(6, 4, 0), 1);
        assert_eq!(one.fair_free(6, 5, 0), 0);
        assert_eq!(one.fair_free(6, 5, 1), 1);
        assert_eq!(one.fair_free(6, 6, 1), 0);
    }

    #[test]
    fn seen_keeps_the_latest_instant() {
        let mut d = PriorityDemand::default();
        d.seen(5);
        d.seen(3);
        assert_eq!(d.last_seen_ms, Some(5));
    }
}

//! Lookup answers by path, each for `ttl`, at most `capacity` of them (the oldest put in goes
//! first when full).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use super::Located;

pub(super) struct Cache {
    capacity: usize,
    ttl: Duration,
    by_path: HashMap<String, (Located, Instant)>,
    /// Paths in the order they were put in (an entry put in again is found stale here and
    /// skipped: its instant differs).
    order: VecDeque<(String, Instant)>,
}

impl Cache {
    pub fn new(capacity: usize, ttl: Duration) -> Cache {
        Cache {
            capacity,
            ttl,
            by_path: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    pub fn get(&self, path: &str, now: Instant) -> Option<Located> {
        let (found, at) = self.by_path.get(path)?;
        (now.saturating_duration_since(*at) < self.ttl).then(|| found.clone())
    }

    pub fn insert(&mut self, path: &str, found: Located, now: Instant) {
        if self.capacity == 0 || self.ttl.is_zero() {
            return;
        }
        while self.by_path.len() >= self.capacity || self.order.len() >= 2 * self.capacity {
            let Some((old, at)) = self.order.pop_front() else {
                break;
            };
            if self.by_path.get(&old).is_some_and(|(_, t)| *t == at) {
                self.by_path.remove(&old);
            }
        }
        self.by_path.insert(path.to_string(), (found, now));
        self.order.push_back((path.to_string(), now));
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_path.len()
    }
}

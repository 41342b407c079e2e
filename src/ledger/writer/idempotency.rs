//! Replays of (station, client_request_id): a fingerprint of the pair maps to the request ids
//! that carry it, confirmed against the row before a replay is answered.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

/// Fingerprint -> request ids. Almost every fingerprint has one id; the rare collision keeps the
/// others in `more`.
#[derive(Default)]
pub(super) struct Idempotency {
    first: HashMap<u64, i64>,
    more: HashMap<u64, Vec<i64>>,
}

impl Idempotency {
    pub(super) fn with_capacity(fingerprints: usize) -> Idempotency {
        Idempotency {
            first: HashMap::with_capacity(fingerprints),
            more: HashMap::new(),
        }
    }

    pub(super) fn candidates(&self, fp: u64) -> impl Iterator<Item = i64> + '_ {
        self.first
            .get(&fp)
            .copied()
            .into_iter()
            .chain(self.more.get(&fp).into_iter().flatten().copied())
    }

    pub(super) fn insert(&mut self, fp: u64, id: i64) {
        match self.first.entry(fp) {
            Entry::Vacant(e) => {
                e.insert(id);
            }
            Entry::Occupied(_) => self.more.entry(fp).or_default().push(id),
        }
    }

    /// Undo an `insert` of a rolled-back transaction.
    pub(super) fn remove(&mut self, fp: u64, id: i64) {
        if let Some(v) = self.more.get_mut(&fp) {
            v.retain(|&x| x != id);
            if v.is_empty() {
                self.more.remove(&fp);
            }
        }
        if self.first.get(&fp) == Some(&id) {
            self.first.remove(&fp);
        }
    }

    /// Requests known (one per distinct fingerprint; for the start-up log).
    pub(super) fn len(&self) -> usize {
        self.first.len()
    }
}

/// A stable 64-bit fingerprint of (station, client_request_id): FNV-1a with a splitmix
/// finaliser. Stored on disk, so it must never change; 0xff cannot occur in UTF-8 and separates
/// the two strings unambiguously.
pub(in crate::ledger) fn fingerprint(station: &str, client_request_id: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in station
        .bytes()
        .chain([0xff])
        .chain(client_request_id.bytes())
    {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_are_stable_and_separate_the_fields() {
        // Stored on disk: this value must never change.
        assert_eq!(fingerprint("st", "c1"), fingerprint("st", "c1"));
        assert_ne!(fingerprint("ab", "c"), fingerprint("a", "bc"));
        assert_ne!(fingerprint("st", "c1"), fingerprint("st", "c2"));
        // Golden value, computed independently (Python) from the definition.
        assert_eq!(fingerprint("station-a", "req-1"), 0xfb5991509a323d33);
    }

    #[test]
    fn colliding_fingerprints_keep_every_id_and_undo_cleanly() {
        let mut m = Idempotency::default();
        m.insert(7, 1);
        m.insert(7, 2);
        m.insert(7, 3);
        assert_eq!(m.candidates(7).collect::<Vec<_>>(), [1, 2, 3]);
        m.remove(7, 2);
        assert_eq!(m.candidates(7).collect::<Vec<_>>(), [1, 3]);
        m.remove(7, 3);
        m.remove(7, 1);
        assert_eq!(m.candidates(7).count(), 0);
        assert!(m.more.is_empty() && m.first.is_empty());
    }
}

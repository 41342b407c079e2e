//! Replays of (station, client_request_id): a fingerprint of the pair maps to the request ids
//! that carry it, confirmed against the row before a replay is answered.
//!
//! Unfinished requests' fingerprints are in memory ([`Idempotency`], loaded from the
//! `idempotency` table); a finished request's move to the `idempotency_finished` table, keyed by
//! fingerprint, in the transaction that makes it final ([`Txn::key_finished`]). A new request
//! that misses in memory is looked up there ([`Txn::finished_with`]): an index probe instead of
//! a map entry for every request ever accepted, so memory follows what is unfinished, and
//! replays stay exact however old the request. The ingest path reads that index, never inserts
//! into it: finished fingerprints are written at the rate requests end.
//!
//! A probe of that index costs the writer a page read (and evicting a page of its transaction)
//! once the index outgrows SQLite's page cache: with 2M requests finished, ingest alone fell
//! from 37k to 14k requests/s. So a new request is probed only when [`FinishedFilter`], a
//! Bloom filter of every finished fingerprint of a fixed size, says it may be there: almost
//! never for a new key, always for a replay.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use crate::ledger::db::{params, DbResult};

use super::state::Txn;

/// Fingerprint -> request ids of unfinished requests. Almost every fingerprint has one id; the
/// rare collision keeps the others in `more`. With the filter of the finished ones.
#[derive(Default)]
pub(super) struct Idempotency {
    first: HashMap<u64, i64>,
    more: HashMap<u64, Vec<i64>>,
    finished: FinishedFilter,
}

impl Idempotency {
    /// Room for `fingerprints` unfinished requests, and a filter for finished ones.
    pub(super) fn with_capacity(fingerprints: usize) -> Idempotency {
        Idempotency {
            first: HashMap::with_capacity(fingerprints),
            more: HashMap::new(),
            finished: FinishedFilter::sized(),
        }
    }

    /// Whether a finished request may carry `fp` (`false`: none does).
    pub(super) fn may_have_finished(&self, fp: u64) -> bool {
        self.finished.may_contain(fp)
    }

    /// A request with `fp` finished (its key is in `idempotency_finished` from this
    /// transaction on; a rollback leaves the bits set, which only costs a probe).
    pub(super) fn finished(&mut self, fp: u64) {
        self.finished.insert(fp);
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

    /// Take `id` out (it finished, or its `insert` was rolled back). The map gives back memory
    /// once it is a quarter full, so it follows what is unfinished now, not its peak.
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
        let (len, room) = (self.first.len(), self.first.capacity());
        if room > SHRINK_FROM && len < room / 4 {
            self.first.shrink_to(len * 2);
        }
    }

    /// Every (fingerprint, id), sorted (tests: the audit).
    #[cfg(test)]
    pub(super) fn entries(&self) -> Vec<(u64, i64)> {
        let firsts = self.first.iter().map(|(&fp, &id)| (fp, id));
        let more = (self.more.iter()).flat_map(|(&fp, ids)| ids.iter().map(move |&id| (fp, id)));
        let mut all: Vec<(u64, i64)> = firsts.chain(more).collect();
        all.sort_unstable();
        all
    }

    /// Requests known (one per distinct fingerprint; for the start-up log).
    pub(super) fn len(&self) -> usize {
        self.first.len()
    }
}

/// Below this many entries' room the map is not shrunk (it would only churn).
const SHRINK_FROM: usize = 4096;

/// Which fingerprints may be in `idempotency_finished`: a Bloom filter of 2^28 bits (32 MiB
/// whatever the history) and 4 bit positions a key, from the fingerprint by double hashing
/// (it is a hash already). False positives cost an index probe, never a wrong answer: about 1
/// new request in 2,700 with 10M requests finished, 1 in 60 with 30M, and a probe for nearly
/// every one past 200M (then as without the filter). Built at start from the table (a pass
/// over it), and kept as requests finish. Empty (`Default`): every key may be there.
#[derive(Default)]
pub(super) struct FinishedFilter {
    words: Vec<u64>,
}

/// The filter's size in 64-bit words (2^28 bits).
const FILTER_WORDS: usize = 1 << 22;
/// Bit positions per key.
const FILTER_HASHES: u64 = 4;

impl FinishedFilter {
    fn sized() -> FinishedFilter {
        FinishedFilter {
            words: vec![0; FILTER_WORDS],
        }
    }

    /// The key's bit positions.
    fn positions(fp: u64) -> impl Iterator<Item = usize> {
        let step = (fp.rotate_left(32) ^ 0x9e37_79b9_7f4a_7c15) | 1;
        let mask = (FILTER_WORDS * 64 - 1) as u64;
        (0..FILTER_HASHES).map(move |i| (fp.wrapping_add(i.wrapping_mul(step)) & mask) as usize)
    }

    pub(super) fn insert(&mut self, fp: u64) {
        if self.words.is_empty() {
            return;
        }
        for p in Self::positions(fp) {
            self.words[p / 64] |= 1 << (p % 64);
        }
    }

    pub(super) fn may_contain(&self, fp: u64) -> bool {
        self.words.is_empty()
            || Self::positions(fp).all(|p| self.words[p / 64] & (1 << (p % 64)) != 0)
    }
}

impl Txn<'_, '_> {
    /// Finished requests that may carry fingerprint `fp` (confirmed against the row by the
    /// caller): an index probe of `idempotency_finished`.
    pub fn finished_with(&self, fp: u64) -> DbResult<Vec<i64>> {
        if !self.st.idempotency.may_have_finished(fp) {
            return Ok(Vec::new());
        }
        self.tx.query_rows(
            "SELECT id FROM idempotency_finished WHERE fingerprint = ?1",
            params![fp as i64],
            |r| r.get(0),
        )
    }

    /// Request `id` became final: its fingerprint moves from memory and the `idempotency` table
    /// to `idempotency_finished` (a rollback puts the memory back).
    pub fn key_finished(&mut self, id: i64) -> DbResult<()> {
        let fp: Option<i64> = self.tx.query_opt(
            "DELETE FROM idempotency WHERE id = ?1 RETURNING fingerprint",
            params![id],
            |r| r.get(0),
        )?;
        let Some(fp) = fp else {
            return Ok(()); // moved already
        };
        self.tx.execute(
            "INSERT INTO idempotency_finished (fingerprint, id) VALUES (?1, ?2) \
             ON CONFLICT DO NOTHING",
            params![fp, id],
        )?;
        self.st.idempotency.finished(fp as u64);
        self.st.forget(fp as u64, id);
        Ok(())
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

    /// The filter never forgets a key; a key never inserted is rarely taken for one.
    #[test]
    fn the_finished_filter_keeps_every_key_and_rarely_takes_a_new_one() {
        let mut f = FinishedFilter::sized();
        let keys: Vec<u64> = (0..100_000)
            .map(|i| fingerprint("st", &format!("k{i}")))
            .collect();
        for &k in &keys {
            f.insert(k);
        }
        assert!(keys.iter().all(|&k| f.may_contain(k)));
        let taken = (0..100_000)
            .filter(|i| f.may_contain(fingerprint("st", &format!("new{i}"))))
            .count();
        assert!(taken <= 2, "{taken} false positives in 100,000");
        // Empty, it knows nothing: every key may be there.
        assert!(FinishedFilter::default().may_contain(fingerprint("st", "x")));
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

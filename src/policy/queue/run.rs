//! One group's waiting requests of one library, in id order: a sorted list kept in chunks of at
//! most [`CHUNK`] requests. The held queue mostly appends (new requests have the largest ids)
//! and takes from the front; a `BTreeMap` splits a full node in two on every append, so nodes
//! filled that way stay about half empty (about 210 bytes a queued 96-byte `Candidate`). Here
//! an append past a full last chunk starts a new one, so appended chunks are full; an insert in
//! the middle of a full chunk splits it, and a removal that leaves a chunk a quarter full
//! shrinks its allocation. Entries are [`Waiting`]s: 64 bytes a request, about 66 in all.

use std::collections::BTreeMap;

use crate::domain::order::Qos;
use crate::domain::GroupId;
use crate::policy::order::Candidate;

/// Requests per chunk (64 bytes each: one allocation of 2 KB).
const CHUNK: usize = 32;

/// A waiting request as the queue keeps it: a [`Candidate`] without its library and group,
/// which its place in the queue says (64 bytes instead of 96).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Waiting {
    pub(crate) id: i64,
    created_ms: i64,
    size_bytes: u64,
    benefit: u64,
    user: f64,
    queue: f64,
    pub(super) slots: u32,
    pub(super) passed: u32,
    qos: Qos,
}

impl Waiting {
    pub(crate) fn of(c: Candidate) -> Waiting {
        Waiting {
            id: c.id,
            created_ms: c.created_ms,
            size_bytes: c.size_bytes,
            benefit: c.benefit,
            user: c.user,
            queue: c.queue,
            slots: c.slots,
            passed: c.passed,
            qos: c.qos,
        }
    }

    /// The request as the policy sees it, waiting in `group` of `library`.
    pub(crate) fn candidate(&self, group: GroupId, library: &str) -> Candidate {
        Candidate {
            id: self.id,
            group,
            library: library.to_string(),
            created_ms: self.created_ms,
            size_bytes: self.size_bytes,
            benefit: self.benefit,
            qos: self.qos,
            user: self.user,
            queue: self.queue,
            slots: self.slots,
            passed: self.passed,
        }
    }

    pub(crate) fn created_ms(&self) -> i64 {
        self.created_ms
    }

    pub(crate) fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    pub(crate) fn benefit(&self) -> u64 {
        self.benefit
    }
}

/// Sorted by id. Invariant: each chunk is non-empty and sorted, its key is at most its first
/// id, and its last id is below the next chunk's key.
#[derive(Debug, Clone, Default)]
pub(super) struct Run {
    chunks: BTreeMap<i64, Vec<Waiting>>,
    len: usize,
}

impl Run {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The waiting requests, oldest (smallest id) first.
    pub(super) fn values(&self) -> impl Iterator<Item = &Waiting> + '_ {
        self.chunks.values().flatten()
    }

    #[cfg(test)]
    pub(super) fn keys(&self) -> impl Iterator<Item = i64> + '_ {
        self.values().map(|c| c.id)
    }

    /// The chunk that holds `id` if any request does.
    fn chunk_key(&self, id: i64) -> Option<i64> {
        self.chunks.range(..=id).next_back().map(|(k, _)| *k)
    }

    pub(super) fn get(&self, id: &i64) -> Option<&Waiting> {
        let chunk = self.chunks.get(&self.chunk_key(*id)?)?;
        let at = chunk.binary_search_by_key(id, |c| c.id).ok()?;
        chunk.get(at)
    }

    pub(super) fn get_mut(&mut self, id: &i64) -> Option<&mut Waiting> {
        let key = self.chunk_key(*id)?;
        let chunk = self.chunks.get_mut(&key)?;
        let at = chunk.binary_search_by_key(id, |c| c.id).ok()?;
        chunk.get_mut(at)
    }

    /// Add `w`, replacing (and returning) a request with its id.
    pub(super) fn insert(&mut self, w: Waiting) -> Option<Waiting> {
        let id = w.id;
        let key = match (self.chunk_key(id), self.chunks.first_key_value()) {
            (Some(key), _) => key,
            // Before every chunk: the first one takes it, filed under its new first id.
            (None, Some((&first, _))) => {
                let chunk = self.chunks.remove(&first)?;
                self.chunks.insert(id, chunk);
                id
            }
            (None, None) => {
                self.chunks.insert(id, chunk_of(w));
                self.len = 1;
                return None;
            }
        };
        let chunk = self.chunks.get_mut(&key)?;
        let at = match chunk.binary_search_by_key(&id, |w| w.id) {
            Ok(at) => return Some(std::mem::replace(&mut chunk[at], w)),
            Err(at) => at,
        };
        self.len += 1;
        if chunk.len() < CHUNK {
            if chunk.len() == chunk.capacity() {
                // Grown by hand: `Vec` would double past `CHUNK`.
                let room = (chunk.capacity() * 2).clamp(4, CHUNK);
                chunk.reserve_exact(room - chunk.len());
            }
            chunk.insert(at, w);
        } else if at == CHUNK {
            // Past a full chunk's end (appends): a new chunk, and both stay full.
            self.chunks.insert(id, chunk_of(w));
        } else {
            // The left half keeps its key (at most its first id, `w` included).
            let mut right = Vec::with_capacity(CHUNK);
            right.extend(chunk.drain(CHUNK / 2..));
            if at <= CHUNK / 2 {
                chunk.insert(at, w);
            } else {
                right.insert(at - CHUNK / 2, w);
            }
            if let Some(first) = right.first() {
                self.chunks.insert(first.id, right);
            }
        }
        None
    }

    pub(super) fn remove(&mut self, id: &i64) -> Option<Waiting> {
        let key = self.chunk_key(*id)?;
        let chunk = self.chunks.get_mut(&key)?;
        let at = chunk.binary_search_by_key(id, |c| c.id).ok()?;
        let c = chunk.remove(at);
        self.len -= 1;
        if chunk.is_empty() {
            self.chunks.remove(&key);
        } else if chunk.capacity() > 4 && chunk.len() <= chunk.capacity() / 4 {
            chunk.shrink_to(chunk.len() * 2);
        }
        Some(c)
    }
}

/// A new chunk holding `w`.
fn chunk_of(w: Waiting) -> Vec<Waiting> {
    let mut chunk = Vec::with_capacity(CHUNK);
    chunk.push(w);
    chunk
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn waiting(id: i64, passed: u32) -> Waiting {
        Waiting::of(Candidate {
            passed,
            ..crate::policy::queue::tests::waiting(id, "", 0)
        })
    }

    fn check_invariant(run: &Run) {
        let mut last = None;
        let mut len = 0;
        let keys: Vec<i64> = run.chunks.keys().copied().collect();
        for (i, (key, chunk)) in run.chunks.iter().enumerate() {
            assert!(!chunk.is_empty(), "no empty chunk");
            assert!(chunk.len() <= CHUNK);
            assert!(chunk.capacity() <= CHUNK, "never grown past a chunk");
            assert!(*key <= chunk[0].id, "key at most the first id");
            if let Some(next) = keys.get(i + 1) {
                assert!(chunk[chunk.len() - 1].id < *next, "below the next key");
            }
            for c in chunk {
                assert!(last < Some(c.id), "sorted");
                last = Some(c.id);
                len += 1;
            }
        }
        assert_eq!(run.len(), len);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(i64, u32),
        Remove(i64),
        SetPassed(i64, u32),
        /// A request after every other (a new arrival).
        Append,
        /// The first request goes (a release).
        PopFront,
    }

    fn op() -> impl Strategy<Value = Op> {
        // Small ids so inserts, removals and replacements meet; appends and releases from the
        // front as in the queue, with inserts in the middle and removals anywhere.
        prop_oneof![
            3 => (0i64..400, any::<u32>()).prop_map(|(id, p)| Op::Insert(id, p)),
            2 => (0i64..400).prop_map(Op::Remove),
            1 => (0i64..400, any::<u32>()).prop_map(|(id, p)| Op::SetPassed(id, p)),
            3 => Just(Op::Append),
            2 => Just(Op::PopFront),
        ]
    }

    /// A run of `ids`, inserted in their order.
    fn run_of(ids: impl IntoIterator<Item = i64>) -> Run {
        let mut run = Run::default();
        for id in ids {
            run.insert(waiting(id, 0));
        }
        run
    }

    proptest! {
        /// Whatever is inserted, replaced and removed, the run answers as a `BTreeMap` would.
        #[test]
        fn a_run_agrees_with_a_btreemap(
            start in proptest::collection::btree_set(0i64..400, 0..200),
            ops in proptest::collection::vec(op(), 0..400),
        ) {
            let mut model: BTreeMap<i64, Waiting> =
                start.iter().map(|&id| (id, waiting(id, 0))).collect();
            let mut run = run_of(start.iter().copied());
            check_invariant(&run);
            for op in ops {
                match op {
                    Op::Append => {
                        let id = model.keys().next_back().map_or(0, |&last| last + 1);
                        prop_assert!(run.insert(waiting(id, 0)).is_none());
                        model.insert(id, waiting(id, 0));
                    }
                    Op::PopFront => {
                        let first = model.keys().next().copied();
                        if let Some(id) = first {
                            prop_assert_eq!(run.remove(&id).map(|c| c.id), model.remove(&id).map(|c| c.id));
                        }
                    }
                    Op::Insert(id, p) => {
                        let old = run.insert(waiting(id, p)).map(|c| (c.id, c.passed));
                        let expected = model.insert(id, waiting(id, p)).map(|c| (c.id, c.passed));
                        prop_assert_eq!(old, expected);
                    }
                    Op::Remove(id) => {
                        let got = run.remove(&id).map(|c| c.id);
                        prop_assert_eq!(got, model.remove(&id).map(|c| c.id));
                    }
                    Op::SetPassed(id, p) => {
                        if let Some(c) = run.get_mut(&id) {
                            c.passed = p;
                        }
                        if let Some(c) = model.get_mut(&id) {
                            c.passed = p;
                        }
                    }
                }
                check_invariant(&run);
            }
            let got: Vec<(i64, u32)> = run.values().map(|c| (c.id, c.passed)).collect();
            let expected: Vec<(i64, u32)> = model.values().map(|c| (c.id, c.passed)).collect();
            prop_assert_eq!(got, expected);
            prop_assert_eq!(run.is_empty(), model.is_empty());
            let top = model.keys().next_back().map_or(0, |&last| last + 1);
            for id in 0..top.max(400) {
                prop_assert_eq!(run.get(&id).map(|c| c.id), model.get(&id).map(|c| c.id));
            }
        }

        /// Arrivals and releases alone: every chunk between the first and the last is full.
        #[test]
        fn arrivals_and_releases_leave_full_chunks(
            ops in proptest::collection::vec(prop_oneof![3 => Just(true), 2 => Just(false)], 0..2000),
        ) {
            let mut run = Run::default();
            let (mut next, mut front) = (0i64, 0i64);
            for append in ops {
                if append {
                    run.insert(waiting(next, 0));
                    next += 1;
                } else if front < next {
                    prop_assert_eq!(run.remove(&front).map(|c| c.id), Some(front));
                    front += 1;
                }
            }
            check_invariant(&run);
            let n = run.chunks.len();
            for (i, chunk) in run.chunks.values().enumerate() {
                if i > 0 && i + 1 < n {
                    prop_assert_eq!(chunk.len(), CHUNK);
                }
            }
        }
    }

    #[test]
    fn an_insert_before_a_full_first_chunk_splits_it_under_the_new_first_id() {
        let mut run = run_of(10..10 + CHUNK as i64);
        assert_eq!(run.chunks.len(), 1);
        assert!(run.insert(waiting(5, 0)).is_none());
        check_invariant(&run);
        assert_eq!(
            run.chunks.keys().copied().collect::<Vec<_>>(),
            [5, 10 + CHUNK as i64 / 2]
        );
        assert_eq!(run.remove(&5).map(|c| c.id), Some(5));
        assert!(run.insert(waiting(6, 1)).is_none());
        check_invariant(&run);
        assert_eq!(run.get(&6).map(|c| c.passed), Some(1));
        assert_eq!(run.values().next().map(|c| c.id), Some(6));
        assert_eq!(run.len(), CHUNK + 1);
    }

    #[test]
    fn appended_requests_fill_their_chunks() {
        let mut run = Run::default();
        for id in 0..(CHUNK as i64 * 10) {
            assert!(run.insert(waiting(id, 0)).is_none());
        }
        check_invariant(&run);
        assert_eq!(
            run.chunks.len(),
            10,
            "ten full chunks, not twenty half-full ones"
        );
        assert!(run.chunks.values().all(|c| c.len() == CHUNK));
        // Released from the front: the chunks go one by one.
        for id in 0..(CHUNK as i64 * 10 - 1) {
            assert_eq!(run.remove(&id).map(|c| c.id), Some(id));
        }
        check_invariant(&run);
        assert_eq!(run.chunks.len(), 1);
        assert!(run.chunks.values().all(|c| c.capacity() <= 4));
    }
}

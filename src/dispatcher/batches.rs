//! Cutting a read of ready requests at a `volumes` batch's edge, so a batch reaches the MSS in
//! one call.

use crate::ledger::ToSubmit;

/// `ready`, read up to `limit`, without a `volumes` batch cut off at its end: when the read was
/// full and ends inside a run of one volume's consecutive `release_seq`s, that run waits for the
/// next call, so a batch reaches the MSS in one call (unless it alone fills a call: then it goes
/// in order over several).
pub(super) fn keep_batches_whole(mut ready: Vec<ToSubmit>, limit: usize) -> Vec<ToSubmit> {
    if ready.len() < limit || ready.is_empty() {
        return ready;
    }
    let same_batch = |a: &ToSubmit, b: &ToSubmit| {
        a.volume == b.volume
            && matches!((a.release_seq, b.release_seq), (Some(x), Some(y)) if y == x + 1)
    };
    // The trailing run of one volume's consecutive numbers starts at `first`.
    let mut first = ready.len() - 1;
    while first > 0 && same_batch(&ready[first - 1], &ready[first]) {
        first -= 1;
    }
    let last_is_batch = ready.last().is_some_and(|r| r.release_seq.is_some());
    if last_is_batch && first > 0 {
        ready.truncate(first);
    }
    ready
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(id: i64, volume: Option<&str>, release_seq: Option<i64>) -> ToSubmit {
        ToSubmit {
            id,
            key: id.to_string(),
            attempt: 1,
            file: format!("/f{id}"),
            size_bytes: 1,
            mss_priority: 10,
            volume: volume.map(str::to_string),
            group: "mc".into(),
            direction: mss_adapters::Direction::Read,
            local_file: None,
            bfid: None,
            position: None,
            offset_bytes: None,
            release_seq,
        }
    }

    /// A full read that ends inside a volume batch leaves that batch for the next call; a batch
    /// that fills the read alone, a read that is not full, and requests of other modes go as
    /// they are.
    #[test]
    fn a_full_read_does_not_cut_a_volume_batch() {
        let ids = |v: &[ToSubmit]| v.iter().map(|r| r.id).collect::<Vec<_>>();
        let mixed = vec![
            ready(1, None, None),
            ready(2, Some("VA"), Some(7)),
            ready(3, Some("VA"), Some(8)),
            ready(4, Some("VB"), Some(9)),
            ready(5, Some("VB"), Some(10)),
        ];
        assert_eq!(ids(&keep_batches_whole(mixed.clone(), 5)), [1, 2, 3]);
        assert_eq!(ids(&keep_batches_whole(mixed.clone(), 6)), [1, 2, 3, 4, 5]);
        assert_eq!(ids(&keep_batches_whole(mixed[..3].to_vec(), 3)), [1]);
        let one_batch = mixed[3..].to_vec();
        assert_eq!(ids(&keep_batches_whole(one_batch, 2)), [4, 5]);
        // Not consecutive numbers: two batches of one volume, the first kept.
        let two = vec![ready(6, Some("VA"), Some(1)), ready(7, Some("VA"), Some(3))];
        assert_eq!(ids(&keep_batches_whole(two, 2)), [6]);
        let plain = vec![ready(8, None, None), ready(9, Some("VA"), None)];
        assert_eq!(ids(&keep_batches_whole(plain, 2)), [8, 9]);
        assert!(keep_batches_whole(Vec::new(), 0).is_empty());
    }
}

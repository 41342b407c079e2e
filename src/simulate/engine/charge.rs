//! A request's charge in virtual time: made at its decision (`send`, and a rider's when its
//! carrier is, `engine/coalesce.rs`), and settled at its end by the writer's own rule
//! (`policy::transition::settle`).

use mss_adapters::sim::library::Micros;

use super::{Info, Run};
use crate::domain::Benefit;
use crate::policy::transition::{settle, Dated};

impl Run<'_> {
    /// Settle a request's charge when it ends at `at` by the writer's own rule
    /// (`policy::transition::settle`, which `ledger/writer/settle.rs`'s `finalize` calls): the
    /// estimate is taken back at its own date, and the benefit of the bytes done (none when it
    /// failed) is charged at `at`, when the end is known.
    pub(super) fn settle_charge(&mut self, info: &Info, done: Option<u64>, at: Micros) {
        let charged = Dated {
            benefit: info.charge,
            at_ms: info.charged_ms,
        };
        let settled = settle(
            charged,
            done.map(|bytes| self.worth(info, bytes)),
            (at / 1000) as i64,
        );
        let g = info.group;
        self.usage
            .add(g, -i128::from(settled.refund.benefit), settled.refund.at_ms);
        if let Some(actual) = settled.actual {
            self.usage.add(g, i128::from(actual.benefit), actual.at_ms);
            self.out.charged[g.0] += u128::from(actual.benefit);
        }
    }

    /// What `bytes` done are worth to `info`'s group. The library reports every request done
    /// with its own size: its estimate, whatever benefit the load gave it. A rider is done with
    /// its carrier's bytes, worth what its own access mode makes them: its estimate scaled by
    /// bytes over its size (its weight).
    fn worth(&self, info: &Info, bytes: u64) -> u64 {
        let size = usize::try_from(info.id - 1)
            .ok()
            .and_then(|i| self.load.get(i))
            .map(|a| a.size_bytes);
        match (size, &self.policy.benefit) {
            (Some(size), _) if size == bytes => info.charge,
            (_, Benefit::Bytes) => bytes,
            (_, Benefit::Files) => 1,
            (size, Benefit::WeightedBytes(_)) => {
                let scaled = u128::from(info.charge) * u128::from(bytes)
                    / u128::from(size.unwrap_or(1).max(1));
                u64::try_from(scaled).unwrap_or(u64::MAX)
            }
        }
    }
}

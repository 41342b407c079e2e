//! The library flags `simulate` and `mss-sim` both put over a configuration's `[mss.simulator]`
//! library: `--drives`, `--model`, `--drive` (a profile, keeping the configured access order),
//! `--order`, `--rate-mb-per-sec`, `--failure-rate`, `--seed`, `--admin-priority-from`. One
//! clap struct, flattened into both commands, and one reading, so the two commands document,
//! validate and model a flag alike.

use anyhow::bail;
use clap::Args;
use mss_adapters::sim::library::{DriveKind, LibraryConfig, Model, Order};

/// The library flags given on a command line (`None`: not given, the configuration's value
/// stands).
#[derive(Debug, Default, Args)]
pub(super) struct LibraryFlags {
    /// Tape drives in the library [default: `[mss.simulator] drives`, else 4].
    #[arg(long)]
    pub drives: Option<usize>,
    /// The library model: "priority" (strict priority over all pending transfers) or
    /// "enstore" (per-volume queues in tape order, the mounted volume first, a dismount delay)
    /// [default: `[mss.simulator] model` when set, else enstore for `simulate` and priority
    /// for `mss-sim`].
    #[arg(long)]
    pub model: Option<String>,
    /// Enstore model: the drive profile, lto8, lto9, ts1160 or custom (docs/enstore-model.md);
    /// a profile given here replaces the configuration's figures with its own [default:
    /// `[mss.simulator] drive` and its figures, else lto9].
    #[arg(long)]
    pub drive: Option<String>,
    /// Enstore model: the order of a mounted volume's reads, position (Enstore) or rao (CTA)
    /// [default: `[mss.simulator] order`, else position].
    #[arg(long)]
    pub order: Option<String>,
    /// Transfer rate of one drive, MB/s [default: `[mss.simulator] rate_mb_per_sec`, else the
    /// drive profile's].
    #[arg(long)]
    pub rate_mb_per_sec: Option<f64>,
    /// Fraction of transfers the library fails (retryably) at their end, 0..1; each is tried
    /// again as `[mss] retry_*` say [default: `[mss.simulator] failure_rate`, else 0].
    #[arg(long)]
    pub failure_rate: Option<f64>,
    /// Seed of the library's failures (and of `simulate`'s weighted_random) [default:
    /// `[mss.simulator] seed`, else 1].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Enstore model: transfers at or above this priority are admin requests (served first by
    /// an idle drive, and taking over a drive done with a regular transfer when none is idle),
    /// as a site's library manager configuration makes data taking's [default:
    /// `[mss.simulator] admin_priority_from`, else none].
    #[arg(long)]
    pub admin_priority_from: Option<i64>,
}

impl LibraryFlags {
    /// Put the flags given over `library`; an unknown name, a rate not above 0 or a failure
    /// rate outside 0..1 is refused, naming its flag.
    pub(super) fn apply(&self, library: &mut LibraryConfig) -> anyhow::Result<()> {
        if let Some(name) = &self.model {
            let Some(model) = Model::parse(name) else {
                bail!("--model {name}: expected enstore or priority");
            };
            library.model = model;
        }
        if let Some(name) = &self.drive {
            let Some(kind) = DriveKind::parse(name) else {
                bail!("--drive {name}: expected lto8, lto9, ts1160 or custom");
            };
            let order = library.tape.order;
            (library.bytes_per_sec, library.tape) = kind.profile();
            library.tape.order = order;
        }
        if let Some(name) = &self.order {
            let Some(order) = Order::parse(name) else {
                bail!("--order {name}: expected position or rao");
            };
            library.tape.order = order;
        }
        if let Some(rate) = self.rate_mb_per_sec {
            if !(rate > 0.0 && rate.is_finite()) {
                bail!("--rate-mb-per-sec {rate}: expected a rate above 0");
            }
            library.bytes_per_sec = (rate * 1e6).round() as u64;
        }
        self.apply_counts(library)
    }

    fn apply_counts(&self, library: &mut LibraryConfig) -> anyhow::Result<()> {
        if let Some(drives) = self.drives {
            library.drives = drives.max(1);
        }
        if let Some(rate) = self.failure_rate {
            if !(0.0..=1.0).contains(&rate) {
                bail!("--failure-rate {rate}: expected a fraction from 0 to 1");
            }
            library.failure_rate = rate;
        }
        if let Some(seed) = self.seed {
            library.seed = seed;
        }
        if self.admin_priority_from.is_some() {
            library.admin_from = self.admin_priority_from;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

//! The drive flags `simulate` and `mss-sim` both put over a configuration's `[mss.simulator]`
//! library: `--model`, `--drive` (a profile, keeping the configured access order), `--order`,
//! `--rate-mb-per-sec`. One reading, so the two commands model a flag alike.

use anyhow::bail;
use mss_adapters::sim::library::{DriveKind, LibraryConfig, Model, Order};

/// The drive flags given on a command line (`None`: not given).
pub(super) struct DriveFlags<'a> {
    pub model: Option<&'a str>,
    pub drive: Option<&'a str>,
    pub order: Option<&'a str>,
    pub rate_mb_per_sec: Option<f64>,
}

impl DriveFlags<'_> {
    /// Put the flags given over `library`; an unknown name or a rate not above 0 is refused,
    /// naming its flag.
    pub(super) fn apply(&self, library: &mut LibraryConfig) -> anyhow::Result<()> {
        if let Some(name) = self.model {
            let Some(model) = Model::parse(name) else {
                bail!("--model {name}: expected enstore or priority");
            };
            library.model = model;
        }
        if let Some(name) = self.drive {
            let Some(kind) = DriveKind::parse(name) else {
                bail!("--drive {name}: expected lto8, lto9, ts1160 or custom");
            };
            let order = library.tape.order;
            (library.bytes_per_sec, library.tape) = kind.profile();
            library.tape.order = order;
        }
        if let Some(name) = self.order {
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
        Ok(())
    }
}

//! How the simulated library behaves: [`LibraryConfig`], its [`Model`] and queue [`Aging`].

use super::tape::TapeDrive;
use super::Micros;

/// How the simulated library behaves.
#[derive(Debug, Clone, PartialEq)]
pub struct LibraryConfig {
    /// Which scheduling model (default [`Model::Priority`]).
    pub model: Model,
    pub drives: usize,
    /// [`Model::Priority`] only: time to mount a volume on a drive, the dismount of the volume
    /// the drive held included (under [`Model::Enstore`] the [`TapeDrive`] says).
    pub mount_micros: Micros,
    /// Transfer rate of one drive.
    pub bytes_per_sec: u64,
    /// Fraction of transfers that fail (retryably) at their end, in [0, 1].
    pub failure_rate: f64,
    pub seed: u64,
    /// Raise waiting transfers' priority with time, as Enstore does (`None`: never). Under
    /// [`Model::Priority`] each transfer ages from its arrival; under [`Model::Enstore`] a
    /// volume's best request ages from the creation of the volume's queue.
    pub aging: Option<Aging>,
    /// [`Model::Enstore`] only: the drives (geometry, locate, rewind, mount and unmount, per
    /// file, mover poll, order within a mount).
    pub tape: TapeDrive,
    /// [`Model::Enstore`] only: how long a drive with nothing more for its volume keeps it
    /// mounted (Enstore's mover `dismount_delay`, default 60 s).
    pub dismount_delay_micros: Micros,
    /// [`Model::Enstore`] only: transfers at or above this priority are *admin* requests, as a
    /// site's library manager `priority` configuration makes data taking's (Enstore's
    /// `priority_selector.py`; encp's `ENCP_DAQ` with a priority of 1000001 or more). An idle
    /// drive takes them before anything else, and a drive that finishes a regular transfer
    /// leaves its volume for one when no drive is idle. `None`: no admin requests.
    pub admin_from: Option<i64>,
}

/// The scheduling model of the simulated library.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Model {
    /// Strict priority then arrival over all pending transfers (the historical model).
    #[default]
    Priority,
    /// Enstore's library manager and mover: per-volume queues in position order, a bound drive
    /// keeps its volume while work for it waits, a dismount delay.
    Enstore,
}

impl Model {
    /// The name used in configuration files (`"priority"`, `"enstore"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Model::Priority => "priority",
            Model::Enstore => "enstore",
        }
    }

    /// The model named `name` in configuration files.
    pub fn parse(name: &str) -> Option<Model> {
        match name {
            "priority" => Some(Model::Priority),
            "enstore" => Some(Model::Enstore),
            _ => None,
        }
    }
}

/// Enstore's library manager ages its queues whatever the ticket asks: every `AGE_TIME` (30
/// minutes) a waiting queue gains `DELTA_PRI` (1), and the ticket's `--delpri`/`--age-time`
/// are not used (Enstore-org/enstore `src/manage_queue.py`, `SortedList.update`). Enstore ages
/// a volume's list from its creation and raises only the list's best request: [`Model::Enstore`]
/// does the same, [`Model::Priority`] ages each transfer from its arrival (the same for a list
/// of one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aging {
    /// Priority gained per period (`DELTA_PRI`).
    pub delta_pri: i64,
    /// The period (`AGE_TIME`), in virtual microseconds.
    pub every_micros: Micros,
}

impl Aging {
    /// Enstore's constants: 1 every 30 minutes.
    pub const ENSTORE: Aging = Aging {
        delta_pri: 1,
        every_micros: 30 * 60 * 1_000_000,
    };

    /// The priority gained after waiting `waited`.
    pub fn gain(&self, waited: Micros) -> i64 {
        let periods = waited / self.every_micros.max(1);
        self.delta_pri
            .saturating_mul(i64::try_from(periods).unwrap_or(i64::MAX))
    }
}

impl Default for LibraryConfig {
    /// Four LTO-9 drives ([`TapeDrive::lto9`], 400 MB/s), a 60 s mount under the priority
    /// model, and Enstore's 60 s dismount delay.
    fn default() -> Self {
        LibraryConfig {
            model: Model::Priority,
            drives: 4,
            mount_micros: 60_000_000,
            bytes_per_sec: 400_000_000,
            failure_rate: 0.0,
            seed: 1,
            aging: None,
            tape: TapeDrive::lto9(),
            dismount_delay_micros: 60_000_000,
            admin_from: None,
        }
    }
}

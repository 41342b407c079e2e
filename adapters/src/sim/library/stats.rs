//! What the simulated library's drives did with their time, for the simulator's report
//! (`mounts`, `mounts_per_tb`, `drive_efficiency`).

use super::Micros;

/// Where one drive's virtual time went. Under [`super::Model::Enstore`] the seven parts add up to
/// the time the library has run once every drive is back to idle; under
/// [`super::Model::Priority`] only `streaming` and `mounting` are kept (a transfer's are
/// counted when it starts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DriveTimes {
    /// Reading or writing data.
    pub streaming: Micros,
    /// Loading a volume.
    pub mounting: Micros,
    /// Positioning the tape before a transfer.
    pub locating: Micros,
    /// Rewinding and unloading a volume.
    pub unmounting: Micros,
    /// Per file, beyond locating and streaming (Enstore's callback, CRC, file marks).
    pub per_file: Micros,
    /// Idle (empty, or mounted waiting out the dismount delay) while some transfer was pending.
    pub idle_with_work: Micros,
    /// Idle while nothing was pending.
    pub idle_without_work: Micros,
}

impl DriveTimes {
    /// Time the drive cost: everything but idling with nothing to do.
    pub fn busy(&self) -> Micros {
        self.working() + self.idle_with_work
    }

    /// Time the drive was working: streaming, mounting, locating, unmounting or per file
    /// (idle left out).
    pub fn working(&self) -> Micros {
        self.streaming + self.mounting + self.locating + self.unmounting + self.per_file
    }

    /// Every part, idle without work included.
    pub fn total(&self) -> Micros {
        self.busy() + self.idle_without_work
    }

    /// Adds another drive's (or period's) times to these.
    pub fn add(&mut self, other: &DriveTimes) {
        self.streaming += other.streaming;
        self.mounting += other.mounting;
        self.locating += other.locating;
        self.unmounting += other.unmounting;
        self.per_file += other.per_file;
        self.idle_with_work += other.idle_with_work;
        self.idle_without_work += other.idle_without_work;
    }
}

/// The library's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LibraryStats {
    /// Volumes loaded.
    pub mounts: u64,
    /// Volumes unloaded (always 0 under [`super::Model::Priority`], whose mount includes it).
    pub unmounts: u64,
    /// Locates that moved the tape (the next file on tape needs none).
    pub locates: u64,
    /// Per drive, in drive order.
    pub drives: Vec<DriveTimes>,
}

impl LibraryStats {
    /// All drives' times summed.
    pub fn total(&self) -> DriveTimes {
        let mut sum = DriveTimes::default();
        for d in &self.drives {
            sum.add(d);
        }
        sum
    }

    /// Streaming over busy time, over all drives (`None` before any drive was busy).
    pub fn drive_efficiency(&self) -> Option<f64> {
        let t = self.total();
        let busy = t.busy();
        (busy > 0).then(|| t.streaming as f64 / busy as f64)
    }

    /// Streaming over working time (mounting, locating, streaming, unmounting), over all
    /// drives: what a mount costs the data moved, whatever the drives idled (`None` before any
    /// drive worked).
    pub fn working_efficiency(&self) -> Option<f64> {
        let t = self.total();
        let working = t.working();
        (working > 0).then(|| t.streaming as f64 / working as f64)
    }
}

//! Where a file lies on tape when the station does not say (issue 38): ask the MSS's name space
//! or a site command for the file's volume and its place on it, so the broker's `volumes`
//! release mode can batch the request with the other requests for that tape.
//!
//! Two lookups ([`Method`]):
//! - `enstore-layer4`: the file's layer 4 in Enstore's pnfs/Chimera name space, read through a
//!   mount of it. Read from Enstore's own source (`Enstore-org/enstore` at commit
//!   `a154041a1e969ea247a3298e74bebbc3188e5763`):
//!   - the layer's file name is `dir/.(use)(4)(name)` (`src/chimera.py` `layer_file`, L77-82,
//!     the same in `src/pnfs.py`; layer 4 is `XREF_LAYER` in `src/enstore_constants.py`);
//!   - its lines, written by `set_xreference` (`src/chimera.py` L2096-2119: eleven `%s\n`):
//!     volume, location cookie, size, file family, original name, volume map file, the file's
//!     id, the volume map's id, bfid, drive, crc; read back by `get_xreference` (L2159-2200),
//!     which strips each line and pads to eleven with `unknown` ("Early versions only contain
//!     9. Some contain 10.");
//!   - a tape location cookie is `'%04d_%09d_%07d' % (0, 0, n)` (`src/mover.py` `loc_to_cookie`,
//!     L825-830), recognised by `^[0-9]{4}(_)[0-9]{9}(_)[0-9]{7}$` and length 22
//!     (`src/enstore_functions3.py` `is_location_cookie_tape`): its third part `n` is the
//!     file's number on the tape, the order Enstore reads a volume's files in. Any other cookie
//!     (a disk cookie: a file inside a small-file package) has no tape place of its own, and the
//!     lookup fails.
//! - `command`: a site command given the file's path as its last argument, printing one line
//!   `VOLUME POSITION` (the position a file number, or an Enstore tape location cookie), run
//!   without a shell, with a timeout and a bounded output.
//!
//! Either is strict: anything else it reads is a failed lookup ([`LookupError`]), and a failed
//! lookup only means the request goes without a volume. Answers are cached by path for a while
//! ([`Locator`]). No error or log line carries the command's arguments or anything it printed.
//!
//! The files (`layer4.rs`, `command.rs`, `cache.rs`): where a file lies when the station does not
//! say: Enstore's layer 4 under a mount of the name space, or a site command; strict parsers of the
//! upstream format, each call bounded in time, output and concurrency, answers cached by path.

mod cache;
mod command;
mod layer4;
#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

pub use command::parse_output;
pub use layer4::{layer4_path, parse_layer4, tape_file_number};

/// Where a file lies: its tape volume and its place on that tape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    pub volume: String,
    /// The file's number on the tape (Enstore's location cookie's third part), or what the site
    /// command printed.
    pub position: u64,
}

/// Why a lookup found no place. Its text names the file's layer or the program, never what a
/// command printed or its arguments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// The path cannot be looked up (outside the name space's prefix, a `.` or `..` part, a
    /// special name).
    #[error("the path cannot be looked up: {0}")]
    Path(String),
    /// The name space or the command could not be read or run.
    #[error("{0}")]
    Unreadable(String),
    /// What was read is not a volume and a tape place.
    #[error("garbled answer: {0}")]
    Garbled(String),
    /// The lookup took longer than `timeout_secs`.
    #[error("timed out after {0:?}")]
    TimedOut(Duration),
}

/// How the place of a file is found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Method {
    /// The file's layer 4 under `mount`, where the station's `prefix` is mounted.
    EnstoreLayer4 { mount: PathBuf, prefix: String },
    /// `argv` with the file's path appended.
    Command { argv: Vec<String> },
}

impl Method {
    /// What explain and the rows call it.
    pub fn name(&self) -> &'static str {
        match self {
            Method::EnstoreLayer4 { .. } => "enstore-layer4",
            Method::Command { .. } => "command",
        }
    }
}

/// A validated lookup configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupSettings {
    pub method: Method,
    /// Each lookup's bound.
    pub timeout: Duration,
    /// Lookups running at once.
    pub concurrency: usize,
    /// Answers kept, and for how long.
    pub cache_entries: usize,
    pub cache_ttl: Duration,
}

/// One lookup's outcome and whether the cache answered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    pub answer: Result<Located, LookupError>,
    pub cached: bool,
}

/// Runs lookups, at most `concurrency` at once, each within `timeout`, answers cached by path.
pub struct Locator {
    settings: LookupSettings,
    permits: Arc<Semaphore>,
    cache: Mutex<cache::Cache>,
}

impl Locator {
    pub fn new(settings: LookupSettings) -> Locator {
        Locator {
            permits: Arc::new(Semaphore::new(settings.concurrency.max(1))),
            cache: Mutex::new(cache::Cache::new(
                settings.cache_entries,
                settings.cache_ttl,
            )),
            settings,
        }
    }

    pub fn method(&self) -> &'static str {
        self.settings.method.name()
    }

    /// Where `path` lies. Waits for a free slot first (not counted against the timeout).
    pub async fn locate(&self, path: &str) -> Lookup {
        if let Some(hit) = self.cached(path) {
            return Lookup {
                answer: Ok(hit),
                cached: true,
            };
        }
        let Ok(permit) = self.permits.clone().acquire_owned().await else {
            let closed = LookupError::Unreadable("the locator is stopping".into());
            return Lookup {
                answer: Err(closed),
                cached: false,
            };
        };
        let timeout = self.settings.timeout;
        let answer = match &self.settings.method {
            Method::EnstoreLayer4 { mount, prefix } => {
                layer4::read(mount, prefix, path, timeout, permit).await
            }
            Method::Command { argv } => {
                let answer = command::run(argv, path, timeout).await;
                drop(permit);
                answer
            }
        };
        if let Ok(found) = &answer {
            if let Ok(mut c) = self.cache.lock() {
                c.insert(path, found.clone(), Instant::now());
            }
        }
        Lookup {
            answer,
            cached: false,
        }
    }

    fn cached(&self, path: &str) -> Option<Located> {
        self.cache.lock().ok()?.get(path, Instant::now())
    }
}

/// A volume label as a lookup may give one: 1 to 64 printable ASCII characters without blanks,
/// and not Enstore's filler `unknown`.
fn check_label(v: &str) -> Result<(), LookupError> {
    let ok = !v.is_empty()
        && v.len() <= 64
        && v.bytes().all(|b| b.is_ascii_graphic())
        && !v.eq_ignore_ascii_case("unknown");
    if ok {
        Ok(())
    } else {
        Err(LookupError::Garbled(
            "the volume is not a label (1 to 64 printable characters)".into(),
        ))
    }
}

//! The opening the adapters' `MssAdapter` impls share, written once ([`adapter_opening!`]):
//! the adapter's name, the capabilities its configuration states, and, for an adapter that
//! follows each transfer it submitted until the transfer ends (FTS3, Tape REST), its room: what
//! `max_outstanding` leaves of the transfers it follows.
//!
//! Where an adapter differs it says so in its own impl: encp's room is its free process slots
//! (`max_processes`), not a count of followed transfers, and a run frees one when it exits
//! (`room_freed`); the HTTP adapter has no configuration to ask and states full capabilities.

/// Inside `impl MssAdapter for X` whose `self.shared.cfg` is the adapter's configuration:
///
/// - `adapter_opening!("name");` writes `name` and `capabilities` (the configuration's);
/// - `adapter_opening!("name", room: followed up to max_outstanding);` also writes `room`:
///   `cfg.max_outstanding` less the transfers followed (`self.shared.lock().len()`), no limit
///   without it.
macro_rules! adapter_opening {
    ($name:literal) => {
        fn name(&self) -> &'static str {
            $name
        }

        fn capabilities(&self) -> $crate::Capabilities {
            self.shared.cfg.capabilities()
        }
    };
    ($name:literal, room: followed up to max_outstanding) => {
        $crate::opening::adapter_opening!($name);

        fn room(&self) -> Option<usize> {
            (self.shared.cfg.max_outstanding)
                .map(|max| max.saturating_sub(self.shared.lock().len()))
        }
    };
}

pub(crate) use adapter_opening;

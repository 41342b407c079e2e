//! Stand-ins of the real MSS interfaces, for tests: servers that answer like FTS3 and the WLCG
//! Tape REST API, check what they receive against what the real ones accept, and record every
//! call. The stand-in `encp` is a script (`adapters/tests/stand-ins/encp`); [`encp`] finds it
//! and reads what its runs recorded. They are part of the library, like the simulator, so the
//! broker's own tests drive them too.

pub mod encp;
pub mod fts3;
pub mod tape_rest;

pub use fts3::{Call, Fts3Standin, Plan};
pub use tape_rest::TapeRestStandin;

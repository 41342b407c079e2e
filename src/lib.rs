//! mssbroker: a fair-share broker for file-transfer requests in front of a tape mass storage
//! system. See ARCHITECTURE.md for the map.

pub mod config;
pub mod domain;
pub mod policy;
pub mod clock;
pub mod ledger;

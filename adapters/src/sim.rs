//! The Enstore-like MSS simulator: a pure library model ([`library`]) and the HTTP server that
//! runs it on a scaled wall clock and speaks the HTTP adapter's protocol ([`server`]).

pub mod bad_answer;
pub mod library;
pub mod server;

pub use library::{Aging, Library, LibraryConfig, LibraryStats, Model};
pub use server::{run, SimConfig};

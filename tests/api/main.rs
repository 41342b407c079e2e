//! Integration tests: the real broker over HTTP, with its own SQLite file and a real simulator.

mod adapters;
mod auth;
mod backup;
mod bad_input;
mod bench;
mod browser;
mod cli;
mod crash;
mod end_to_end;
mod failures;
mod faults;
mod helpers;
mod metrics;
mod metrics_conventions;
mod mss_answers;
mod openapi;
mod overflow;
mod policies;
mod process;
mod report;
mod shares;
mod simulate;
mod simulate_volumes;
mod trace_export;
mod volumes;

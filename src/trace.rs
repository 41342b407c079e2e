//! Request traces: the JSON-lines format (`format`) a simulation replays and `trace export`
//! writes, and the synthetic generator (`synth`). Pure: no I/O but the `BufRead`/`Write` handed
//! in. See docs/traces.md.
//!
//! Request traces (docs/traces.md), pure: I/O only through the `BufRead`/`Write` handed in.
//! `format.rs`: `TraceRecord` (JSON lines), `read_trace` (strict: unknown or missing fields, a
//! negative or decreasing `t`, named by line and field), `write_record`, `own_volume` (the
//! `file:<path>` volume an exported request without one gets); `synth.rs` and `synth/params.rs`:
//! `generate(&GenParams, out) -> Summary`, the synthetic generator (on/off MMPP arrivals, demand
//! mix, campaigns and Zipf scattered recalls (a group's own volumes, `v % groups`, at
//! `volumes.own_fraction`), lognormal sizes, a data-taking stream) with every parameter's default
//! in `GenParams`; `synth/summary.rs`: `Summary` (JSON and a text table); `rng.rs`: xoshiro256**
//! and its distributions on the module's own `ln`/`exp`, so a seed gives the same bytes on every
//! platform. `examples/traces/mixed.jsonl` is regenerated from its `.params.toml` by a test.

pub mod format;
mod rng;
pub mod synth;

pub use format::{read_trace, write_record, Direction, TraceRecord};
pub use synth::{generate, GenParams, Summary};

/// What reading or generating a trace can fail with.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// A line of a trace that is not a valid record: its number (from 1) and the field.
    #[error("trace line {line}, field {field}: {message}")]
    Invalid {
        line: usize,
        field: String,
        message: String,
    },
    /// A generator parameter out of its documented bounds, named by its key.
    #[error("trace parameters: {0}")]
    Param(String),
    #[error("trace I/O: {0}")]
    Io(#[from] std::io::Error),
}

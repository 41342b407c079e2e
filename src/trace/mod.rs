//! Request traces: the JSON-lines format (`format`) a simulation replays and `trace export`
//! writes, and the synthetic generator (`synth`). Pure: no I/O but the `BufRead`/`Write` handed
//! in. See docs/traces.md.

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

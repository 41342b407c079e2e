//! The `mssbroker` binary: a thin shell around [`mssbroker::cli::run`].
//!
//! Sets the allocator and calls `cli::run()`; prints the error once.

use std::process::ExitCode;

// Many threads (HTTP workers, the ledger writer) allocate and free small JSON and SQL buffers;
// mimalloc's per-thread heaps avoid glibc malloc's contention there.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    match mssbroker::cli::run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("mssbroker: {}", chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes, as `{:#}` writes them, but without a cause whose text the error
/// it caused already holds (an error that prints its source, and also returns it as its source,
/// would otherwise say it twice).
fn chain(e: &anyhow::Error) -> String {
    let mut out = e.to_string();
    let mut caused = out.clone();
    for cause in e.chain().skip(1) {
        let text = cause.to_string();
        if !caused.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        caused = text;
    }
    out
}

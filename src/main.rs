//! The `mssbroker` binary: a thin shell around [`mssbroker::cli::run`].

use std::process::ExitCode;

// Many threads (HTTP workers, the ledger writer) allocate and free small JSON and SQL buffers;
// mimalloc's per-thread heaps avoid glibc malloc's contention there.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    match mssbroker::cli::run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("mssbroker: {e:#}");
            ExitCode::FAILURE
        }
    }
}

//! The `mssbroker` binary: a thin shell around [`mssbroker::cli::run`].

use std::process::ExitCode;

// Many threads (HTTP workers, the ledger writer) allocate and free small JSON and SQL buffers;
// mimalloc's per-thread heaps avoid glibc malloc's contention there.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay`: the 16th entry of `mi_option_e` in the `mimalloc.h` of
/// mimalloc v3, which libmimalloc-sys 0.1.49 builds (the crate names no constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// The batch commands (`simulate`, `trace`) grow large maps and vectors and free the outgrown
/// ones as they go. mimalloc hands freed memory back to the kernel after a delay (1 s in v3),
/// and the kernel zeroes it again when it is reused: a `simulate --mode volumes` of 200k
/// requests purged 280 MB beside 271 MB committed (`MIMALLOC_VERBOSE=1`), and keeping the
/// freed pages made it 14% faster (docs/benchmarks.md). Those commands end in seconds, so they
/// keep freed pages; `serve` keeps the default and gives memory back.
fn keep_freed_pages_for_batch_commands() {
    let command = std::env::args_os().nth(1);
    let batch = command.is_some_and(|c| c == "simulate" || c == "trace");
    if batch {
        // SAFETY: mi_option_set stores one option value; it runs before any other thread
        // exists (mimalloc documents the option functions as not thread safe).
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    }
}

fn main() -> ExitCode {
    keep_freed_pages_for_batch_commands();
    match mssbroker::cli::run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("mssbroker: {e:#}");
            ExitCode::FAILURE
        }
    }
}

//! The `mssbroker` binary: a thin shell around [`mssbroker::cli::run`].

use std::process::ExitCode;

fn main() -> ExitCode {
    match mssbroker::cli::run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("mssbroker: {e:#}");
            ExitCode::FAILURE
        }
    }
}

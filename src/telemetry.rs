//! Logging: structured `tracing` output to stderr, filtered by `RUST_LOG` (default `info`).

use tracing_subscriber::EnvFilter;

/// Install the global subscriber; `json` switches to one JSON object per line.
pub fn init(json: bool) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // Already installed (a second call in tests) is fine.
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

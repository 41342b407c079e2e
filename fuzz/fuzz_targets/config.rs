//! Configuration and token files: any text must validate or be refused with a message that names
//! the key, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mssbroker::auth::TokenTable;
use mssbroker::config::{ConfigError, Settings};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(ConfigError::Invalid { issues, .. }) = Settings::parse(text, "fuzz") {
        assert!(
            issues.iter().all(|i| !i.key.is_empty()),
            "an issue without a key"
        );
    }
    let _ = TokenTable::parse(text, "fuzz");
});

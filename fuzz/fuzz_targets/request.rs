//! Request bodies: any bytes must give a request or a refusal that names a field, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mssbroker::api::wire::{parse_batch, parse_json, RequestInput};
use mssbroker::config::InputLimits;

fuzz_target!(|data: &[u8]| {
    let limits = InputLimits {
        station_rate_per_sec: 1,
        station_burst: 100,
        max_body_bytes: 1 << 20,
        max_batch: 100,
        max_size_bytes: 1 << 40,
        max_string_len: 64,
        max_path_len: 256,
    };
    if let Err(e) = RequestInput::from_slice(data, &limits) {
        assert!(e.field.is_some(), "a refusal without a field: {e:?}");
    }
    if let Ok(value) = parse_json(data) {
        if let Ok(items) = parse_batch(value, &limits) {
            for (i, item) in items.iter().enumerate() {
                if let Err(e) = RequestInput::parse(item, &limits, &format!("requests[{i}].")) {
                    assert!(e.field.is_some(), "a refusal without a field: {e:?}");
                }
            }
        }
    }
});

//! Request bodies: any bytes must give a request or a refusal that names a field, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mssbroker::api::request::{batch_items, RequestInput};
use mssbroker::api::InputLimits;

fuzz_target!(|data: &[u8]| {
    let limits = InputLimits {
        station_rate_per_sec: 1,
        station_burst: 100,
        max_body_bytes: 1 << 20,
        max_batch: 100,
        max_size_bytes: 1 << 40,
        max_string_len: 64,
        max_path_len: 256,
        max_report_buckets: 100,
    };
    if let Err(e) = RequestInput::from_slice(data, &limits) {
        assert!(e.field.is_some(), "a refusal without a field: {e:?}");
    }
    match batch_items(data, &limits) {
        Err(e) => assert!(e.field.is_some(), "a refusal without a field: {e:?}"),
        Ok(items) => {
            for (i, item) in items.iter().enumerate() {
                let prefix = format!("requests[{i}].");
                if let Err(e) = RequestInput::from_slice_at(item.get().as_bytes(), &limits, &prefix)
                {
                    assert!(e.field.is_some(), "a refusal without a field: {e:?}");
                }
            }
        }
    }
});

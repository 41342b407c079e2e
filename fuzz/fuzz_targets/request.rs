//! Request bodies: any bytes must give a request or a refusal that names a field, never a panic.
#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use mssbroker::api::request::{batch_items, RequestInput};
use mssbroker::api::InputLimits;
use mssbroker::config::Settings;

/// The limits of the shipped configuration (`config/broker.toml`): the ones a broker runs with
/// unless a site changes them, and never out of date with `InputLimits`' fields.
fn limits() -> &'static InputLimits {
    static LIMITS: OnceLock<InputLimits> = OnceLock::new();
    LIMITS.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config");
        let text = include_str!("../../config/broker.toml");
        match Settings::parse_in(text, "config/broker.toml", &dir) {
            Ok(settings) => settings.limits,
            Err(e) => panic!("the shipped configuration does not validate: {e}"),
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let limits = limits();
    if let Err(e) = RequestInput::from_slice(data, limits) {
        assert!(e.field.is_some(), "a refusal without a field: {e:?}");
    }
    match batch_items(data, limits) {
        Err(e) => assert!(e.field.is_some(), "a refusal without a field: {e:?}"),
        Ok(items) => {
            for (i, item) in items.iter().enumerate() {
                let prefix = format!("requests[{i}].");
                if let Err(e) = RequestInput::from_slice_at(item.get().as_bytes(), limits, &prefix)
                {
                    assert!(e.field.is_some(), "a refusal without a field: {e:?}");
                }
            }
        }
    }
});

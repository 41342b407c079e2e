//! The shared test configuration (tests only): `tests/fixtures/base.toml`, the base the HTTP
//! tests use too, with an HTTP MSS that is never called, plus what a test adds.

use crate::config::Settings;

/// The base every test configuration starts from.
pub(crate) const BASE: &str = include_str!("../tests/fixtures/base.toml");

/// A test configuration: the base, then overlays. An overlay's `[shares]` and
/// `[[priority_classes]]` replace the base's (a tree or a class list is one whole); every other
/// table merges key by key.
pub(crate) struct TestConfig {
    table: toml::Table,
}

impl TestConfig {
    /// The base with `[mss] adapter = "http"` at an address nothing listens on.
    pub(crate) fn new() -> TestConfig {
        let table = toml::from_str(BASE).expect("tests/fixtures/base.toml is TOML");
        TestConfig { table }.with("[mss]\nadapter = \"http\"\nurl = \"http://127.0.0.1:1\"\n")
    }

    /// Add `overlay` (TOML text) to the configuration.
    pub(crate) fn with(mut self, overlay: &str) -> TestConfig {
        let overlay: toml::Table = toml::from_str(overlay)
            .unwrap_or_else(|e| panic!("a test overlay is TOML: {e}\n{overlay}"));
        for (key, value) in overlay {
            let whole = key == "shares" || key == "priority_classes";
            match (self.table.get_mut(&key), value) {
                (Some(toml::Value::Table(base)), toml::Value::Table(over)) if !whole => {
                    merge(base, over)
                }
                (_, value) => {
                    self.table.insert(key, value);
                }
            }
        }
        self
    }

    /// The configuration as TOML text.
    pub(crate) fn text(&self) -> String {
        toml::to_string(&self.table).expect("a TOML table serialises")
    }

    /// The validated settings; a test whose configuration is refused panics with the text.
    pub(crate) fn settings(&self) -> Settings {
        let text = self.text();
        match Settings::parse(&text, "t") {
            Ok(s) => s,
            Err(e) => panic!("{e}\n{text}"),
        }
    }
}

fn merge(base: &mut toml::Table, over: toml::Table) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

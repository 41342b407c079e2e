//! Copies the shipped configuration (`config/broker.toml`, `config/demo-tokens.toml`) into
//! OUT_DIR, where the crate embeds it (`config::EMBEDDED`, `auth::EMBEDDED_DEMO_TOKENS`): the
//! defaults of a binary run away from a checkout (`cargo install`).
//!
//! The copy is refreshed whenever the crate's code is rebuilt (a change under src/, to this
//! script or to Cargo.toml), and never for an edit of the configuration alone: embedding the
//! files themselves (`include_str!("../config/broker.toml")`) made every edit of the
//! configuration a rebuild of the whole crate, although a binary run from a checkout reads the
//! file at run time and never uses the embedded copy.

use std::path::Path;

fn main() {
    for watched in ["build.rs", "Cargo.toml", "src"] {
        println!("cargo:rerun-if-changed={watched}");
    }
    let out = std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR for a build script");
    for file in ["broker.toml", "demo-tokens.toml"] {
        let from = Path::new("config").join(file);
        if let Err(e) = std::fs::copy(&from, Path::new(&out).join(file)) {
            panic!("cannot copy {} to OUT_DIR: {e}", from.display());
        }
    }
}

//! UniFFI's binding generator at the version `statelm-ffi` uses: writes the Kotlin and Swift
//! sources for `crates/ffi/src/mobile.rs` from the built library, e.g.
//!
//! ```text
//! uniffi-bindgen generate --library target/debug/libstatelm_ffi.so --language kotlin --out-dir out
//! ```
//! (`scripts/mobile` and `tests/kotlin.rs` run it). The package names come from
//! `crates/ffi/uniffi.toml`.
#![forbid(unsafe_code)]

fn main() {
    uniffi::uniffi_bindgen_main()
}

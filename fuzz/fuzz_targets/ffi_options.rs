//! Fuzzes the C ABI's JSON option parsers (load options, engine config, session options,
//! inputs, generation params): any string gives a value or a typed error, never a panic.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    statelm_ffi::fuzzing::options(sel, &String::from_utf8_lossy(rest));
});

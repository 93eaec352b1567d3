//! Fuzzes what the server does with a request's bytes before the engine sees it: the JSON body
//! of a chat or completion request parsed and validated (sampling ranges, `logit_bias`,
//! messages), and the Host / Origin / Authorization checks. Must never panic.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    statelm_server::fuzzing::request(sel & 1 == 0, rest);
    let text = String::from_utf8_lossy(rest);
    let mut parts = text.splitn(3, '\n');
    let host = parts.next().unwrap_or("");
    let origin = parts.next().unwrap_or("");
    let auth = parts.next().unwrap_or("");
    statelm_server::fuzzing::headers(host, origin, auth);
});

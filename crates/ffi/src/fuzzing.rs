//! Entry points for the fuzz targets (feature `fuzzing`; not part of the C ABI): the parsers of
//! the JSON strings a host passes in.

use statelm_engine::ChatDefaults;

/// Parses `json` as the option string `which` selects (load options, engine config, session
/// options, an input, generation params). Must return, never panic.
pub fn options(which: u8, json: &str) {
    match which % 5 {
        0 => drop(crate::options::load_options(Some(json))),
        1 => drop(crate::options::engine_config(Some(json))),
        2 => drop(crate::options::session_options(Some(json))),
        3 => drop(crate::options::input(json)),
        _ => {
            let defaults = ChatDefaults::default();
            let input = statelm_engine::Input::Text("x".into());
            drop(crate::options::request(1, input, Some(json), &defaults));
        }
    }
}

//! `-m MODEL`: a path to any GGUF file, or the short name of a model statelm can fetch.

use crate::fetch;
use anyhow::{bail, Result};
use statelm_model::registry::{self, DEFAULT_MODEL};
use std::path::{Path, PathBuf};

/// Resolves `-m` to a file: an existing path as is; a known short name (default:
/// [`DEFAULT_MODEL`]) from the cache, pulled first when missing.
pub fn resolve(arg: Option<&str>, cache_flag: Option<&Path>, quiet: bool) -> Result<PathBuf> {
    let name = arg.unwrap_or(DEFAULT_MODEL);
    let as_path = Path::new(name);
    if as_path.is_file() {
        return Ok(as_path.to_path_buf());
    }
    match registry::find(name) {
        Some(spec) => {
            let cache = fetch::cache_dir(cache_flag);
            fetch::pull(&cache, spec, quiet)
        }
        None => {
            let known: Vec<&str> = registry::MODELS.iter().map(|m| m.name).collect();
            bail!(
                "{name:?} is neither a file nor a known model (known: {})",
                known.join(", ")
            )
        }
    }
}

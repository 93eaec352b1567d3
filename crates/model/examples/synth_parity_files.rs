//! Writes the architecture parity files (`statelm_model::testing::parity_set`) into a
//! directory, for `tools/parity/synth_reference.py` to score with llama.cpp:
//!
//! ```sh
//! cargo run -p statelm-model --features testing --example synth_parity_files -- /tmp/synth
//! PYTHONPATH=/tmp/lcp336 python3 tools/parity/synth_reference.py /tmp/synth reference/synthetic
//! ```

use statelm_model::testing::{parity_set, write_synthetic_model};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .ok_or("usage: synth_parity_files DIR")?;
    std::fs::create_dir_all(&dir)?;
    for (name, spec) in parity_set() {
        let path = std::path::Path::new(&dir).join(format!("{name}.gguf"));
        write_synthetic_model(&path, &spec)?;
        println!("{}", path.display());
    }
    Ok(())
}

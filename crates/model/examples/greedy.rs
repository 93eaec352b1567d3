//! Greedy text of a model on the kernel table `STATELM_ISA` selects, for `scripts/cross`: under
//! qemu it runs on each ARM table and the texts must equal the scalar table's. A model-crate
//! example rather than `statelm run` so that the aarch64 build is the one `arch_parity` needs
//! anyway (the CLI's own release tree, server and all, took ~260 s of CI to build for aarch64).
//!
//! ```text
//! greedy MODEL.gguf PROMPT N      # stdout: the N tokens' text; stderr: "kernels TABLE"
//! ```
use statelm_model::{argmax, LoadOptions, Model};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, path, prompt, n] = args.as_slice() else {
        return Err("usage: greedy MODEL.gguf PROMPT N".into());
    };
    let n: usize = n.parse()?;
    let model = Model::load(path, &LoadOptions::default())?;
    eprintln!("kernels {}", statelm_quant::active_isa());
    let tokenizer = model.tokenizer();
    let mut ids = tokenizer.encode_prompt(prompt, true)?;
    let mut state = model.new_state(ids.len() + n);
    let mut next = ids.clone();
    let start = ids.len();
    for _ in 0..n {
        let logits = model.forward(&mut state, &next)?;
        let best = argmax(logits.last());
        if tokenizer.is_eog(best) {
            break;
        }
        ids.push(best);
        next = vec![best];
    }
    println!("{}", tokenizer.decode(&ids[start..]));
    Ok(())
}

//! How long encoding takes for a hostile prompt spelling out every special token of a model
//! (the server's 1 MiB body limit): `cargo run --release -p statelm-tokenizer --example
//! hostile_specials -- MODEL.gguf`.

use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: hostile_specials MODEL.gguf")?;
    let f = statelm_gguf::GgufFile::open(&path)?;
    let tok = statelm_tokenizer::Tokenizer::from_gguf(&f)?;
    let specials: Vec<String> = (0..tok.vocab_size() as u32)
        .filter(|&id| tok.is_control(id))
        .filter_map(|id| tok.token_text(id).map(str::to_string))
        .collect();
    let mut text = String::new();
    while text.len() < (1 << 20) - 64 {
        for s in &specials {
            text.push_str(s);
            text.push('x');
        }
    }
    let mut end = 1 << 20;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    for parse in [false, true] {
        let t = Instant::now();
        let ids = tok.encode(&text, true, parse)?;
        println!(
            "{} control tokens, {} bytes, parse_special {parse}: {} ids in {:.3} s",
            specials.len(),
            text.len(),
            ids.len(),
            t.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

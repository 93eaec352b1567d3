//! Debugging aid: runs one batch with the trace hook and writes every named intermediate to
//! `OUT.bin` (f32 little-endian) and `OUT.json` (name, layer, tokens, offset, length), so a
//! mismatch against another implementation can be bisected layer by layer.
//! `cargo run --release -p statelm-model --example trace_dump -- MODEL OUT 2,818,5279 [f32|f16]`
use statelm_model::{ForwardOptions, KvType, LoadOptions, Model, Numerics, StateOptions, Trace};
use std::io::Write;

/// Collects the records in memory.
#[derive(Default)]
struct Collect {
    data: Vec<f32>,
    index: Vec<serde_json::Value>,
}

impl Trace for Collect {
    fn record(&mut self, layer: Option<usize>, name: &str, n_tokens: usize, data: &[f32]) {
        self.index.push(serde_json::json!({
            "name": name, "layer": layer, "n_tokens": n_tokens,
            "offset": self.data.len(), "len": data.len(),
        }));
        self.data.extend_from_slice(data);
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().collect();
    let [_, model, out, tokens, rest @ ..] = a.as_slice() else {
        return Err("usage: trace_dump MODEL OUT TOKENS [kv-type]".into());
    };
    let opts = LoadOptions {
        numerics: Numerics::LlamaCpp,
        ..LoadOptions::default()
    };
    let model = Model::load(model, &opts)?;
    let toks = tokens
        .split(',')
        .map(str::parse::<u32>)
        .collect::<Result<Vec<_>, _>>()?;
    let kv_type = KvType::parse(rest.first().map_or("f32", String::as_str)).ok_or("kv type")?;
    let mut state = model.new_state_with(StateOptions {
        capacity: toks.len(),
        kv_type,
    })?;
    let mut collect = Collect::default();
    let logits = model.forward_with(
        &mut state,
        &toks,
        ForwardOptions {
            trace: Some(&mut collect),
            ..Default::default()
        },
    )?;
    collect.index.push(serde_json::json!({
        "name": "logits_last", "layer": null, "n_tokens": 1,
        "offset": collect.data.len(), "len": logits.last().len(),
    }));
    collect.data.extend_from_slice(logits.last());
    let mut bin = std::io::BufWriter::new(std::fs::File::create(format!("{out}.bin"))?);
    for v in &collect.data {
        bin.write_all(&v.to_le_bytes())?;
    }
    std::fs::write(
        format!("{out}.json"),
        serde_json::to_string(&collect.index)?,
    )?;
    Ok(())
}

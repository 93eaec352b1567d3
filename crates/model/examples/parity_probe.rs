//! Debugging aid: prints signed logit differences against a reference file for one prompt.
//! `cargo run --release -p statelm-model --example parity_probe -- MODEL REF_JSON PROMPT_NAME [f32|f16]`
use serde_json::Value;
use statelm_model::{ForwardOptions, KvType, LoadOptions, LogitsMode, Model, StateOptions};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let model = Model::load(&a[1], &LoadOptions::default()).expect("model");
    let refs: Value =
        serde_json::from_str(&std::fs::read_to_string(&a[2]).expect("ref")).expect("json");
    let p = refs
        .as_array()
        .expect("list")
        .iter()
        .find(|p| p["name"] == a[3].as_str())
        .expect("prompt");
    let kv = KvType::parse(a.get(4).map_or("f32", |s| s.as_str())).expect("kv");
    let ids = |v: &Value| {
        v.as_array()
            .expect("ids")
            .iter()
            .map(|x| x.as_u64().expect("id") as u32)
            .collect::<Vec<_>>()
    };
    let steps = p["steps"].as_array().expect("steps");
    let mut toks = ids(&p["prompt_ids"]);
    toks.extend(
        steps[..steps.len() - 1]
            .iter()
            .map(|s| s["token"].as_u64().expect("t") as u32),
    );
    let mut st = model
        .new_state_with(StateOptions {
            capacity: toks.len(),
            kv_type: kv,
        })
        .expect("state");
    let lg = model
        .forward_with(
            &mut st,
            &toks,
            ForwardOptions {
                logits: Some(LogitsMode::LastN(steps.len())),
                ..Default::default()
            },
        )
        .expect("forward");
    for (i, s) in steps.iter().enumerate() {
        let row = lg.row(i);
        let lse = statelm_model::ops::log_sum_exp(row);
        let top = s["top"].as_array().expect("top");
        let d: Vec<f32> = top
            .iter()
            .map(|e| row[e[0].as_u64().expect("id") as usize] - e[1].as_f64().expect("l") as f32)
            .collect();
        let mean_signed = d.iter().sum::<f32>() / d.len() as f32;
        let spread = d.iter().map(|x| (x - mean_signed).abs()).sum::<f32>() / d.len() as f32;
        println!(
            "step {i:>2}: ref lse {:.3} ours {:.3} | signed mean {:+.3} spread {:.3} | ref top {} ours {}",
            s["lse"].as_f64().expect("lse"), lse, mean_signed, spread, s["token"], statelm_model::argmax(row)
        );
    }
}

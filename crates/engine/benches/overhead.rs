//! Engine overhead per token against calling `model.forward` in a loop, and aggregate decode
//! throughput with 1, 2 and 4 concurrent sessions (Gemma 3 270M, greedy).
//!
//! `cargo bench -p statelm-engine --bench overhead` (plain `Instant` timing; best of a few
//! rounds, since other work on the machine only ever makes a round slower).

use futures::StreamExt;
use statelm_engine::{
    Engine, EngineConfig, EngineHandle, Event, GenerateRequest, Input, SamplingParams,
};
use statelm_model::{LoadOptions, Model};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PROMPT: &str = "The history of the city begins with";
const TOKENS: usize = 128;
const ROUNDS: usize = 5;

/// Greedy with end-of-generation tokens banned, so every run decodes `TOKENS` tokens.
fn sampling(model: &Model) -> SamplingParams {
    let mut p = SamplingParams::greedy();
    for &id in model.tokenizer().eog_ids() {
        p.logit_bias.insert(id, f32::NEG_INFINITY);
    }
    p
}

/// CPU seconds used by this process so far (all threads), from `/proc/self/stat`; less
/// sensitive than wall time to other work on the machine. `None` where unavailable.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0) // USER_HZ is 100 on Linux
}

/// Seconds (wall, CPU) per decoded token calling the model directly (prefill excluded).
fn direct(model: &Model, prompt: &[u32]) -> (f64, Option<f64>) {
    let mut state = model.new_state(1024);
    let logits = model.forward(&mut state, prompt).expect("prefill");
    let mut next = statelm_model::argmax(logits.last());
    let (start, cpu) = (Instant::now(), cpu_seconds());
    for _ in 0..TOKENS {
        let logits = model.forward(&mut state, &[next]).expect("decode");
        next = statelm_model::argmax(logits.last());
    }
    let cpu = cpu.zip(cpu_seconds()).map(|(a, b)| (b - a) / TOKENS as f64);
    (start.elapsed().as_secs_f64() / TOKENS as f64, cpu)
}

/// Runs one request; returns (tokens, time from the first to the last token, CPU seconds in
/// that time).
async fn generate(engine: &EngineHandle, model: &Model) -> (usize, Duration, Option<f64>) {
    let session = engine
        .create_session(Default::default())
        .await
        .expect("session");
    let req = GenerateRequest {
        session: session.into(),
        input: Input::Text(PROMPT.into()),
        sampling: sampling(model),
        stop: Vec::new(),
        max_tokens: TOKENS + 1,
    };
    let mut stream = engine.generate(req).await.expect("the request starts");
    let (mut first, mut last, mut n) = (None, Instant::now(), 0);
    let (mut cpu_first, mut cpu_last) = (None, None);
    while let Some(ev) = stream.next().await {
        if let Event::Token { .. } = ev.expect("event") {
            last = Instant::now();
            cpu_last = cpu_seconds();
            if first.is_none() {
                first = Some(last);
                cpu_first = cpu_last;
            }
            n += 1;
        }
    }
    engine.close_session(session).await.expect("close");
    let cpu = cpu_first.zip(cpu_last).map(|(a, b)| b - a);
    (n, last - first.unwrap_or(last), cpu)
}

/// Aggregate decode tokens per second with `n` sessions at once (wall time from the start of
/// the requests to the last token, prefills included).
async fn throughput(engine: &EngineHandle, model: &Model, n: usize) -> f64 {
    let start = Instant::now();
    let runs = futures::future::join_all((0..n).map(|_| generate(engine, model))).await;
    let tokens: usize = runs.iter().map(|r| r.0).sum();
    tokens as f64 / start.elapsed().as_secs_f64()
}

/// Microseconds per `Sampler::sample` call on real logits.
fn sampling_cost(logits: &[f32], params: SamplingParams) -> f64 {
    let mut sampler = statelm_engine::sampling::Sampler::new(params);
    let recent: Vec<u32> = (0..64).collect();
    let mut buf = logits.to_vec();
    let n = 200;
    let start = Instant::now();
    for _ in 0..n {
        buf.copy_from_slice(logits);
        std::hint::black_box(sampler.sample(&mut buf, &recent));
    }
    start.elapsed().as_secs_f64() * 1e6 / n as f64
}

fn report_sampling(model: &Model, prompt: &[u32]) {
    let mut state = model.new_state(256);
    let logits = model
        .forward(&mut state, prompt)
        .expect("prefill")
        .into_vec();
    let seeded = |p: SamplingParams| SamplingParams { seed: Some(1), ..p };
    let cases = [
        ("greedy", SamplingParams::greedy()),
        (
            "default (top-k 40, top-p 0.95, min-p 0.05)",
            SamplingParams::default(),
        ),
        (
            "full vocabulary (top-k off, top-p 0.95, penalties)",
            SamplingParams {
                top_k: 0,
                repeat_penalty: 1.1,
                frequency_penalty: 0.1,
                ..SamplingParams::default()
            },
        ),
    ];
    println!("sampling cost per token ({} logits):", logits.len());
    let mut buf = logits.clone();
    let start = Instant::now();
    for _ in 0..200 {
        buf.copy_from_slice(&logits);
        std::hint::black_box(statelm_model::argmax(&buf));
    }
    let base = start.elapsed().as_secs_f64() * 1e6 / 200.0;
    println!(
        "  {:52} {base:8.1} us",
        "(reference: copy + statelm_model::argmax)"
    );
    for (name, p) in cases {
        println!("  {name:52} {:8.1} us", sampling_cost(&logits, seeded(p)));
    }
}

fn main() {
    let Some(path) = statelm_model::testing::gemma_path() else {
        return;
    };
    let model: Arc<Model> = Model::load(path, &LoadOptions::default()).expect("model");
    let prompt = model
        .tokenizer()
        .encode(PROMPT, true, true)
        .expect("tokenize");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    report_sampling(&model, &prompt);
    let engine = Engine::start(model.clone(), EngineConfig::default());
    let _ = direct(&model, &prompt); // warm-up
    rt.block_on(generate(&engine, &model));
    // Interleaved rounds: each round times both ways back to back, so load from other work on
    // the machine hits both alike; the median of the per-round ratios is the overhead. CPU
    // time (all threads of the process) is reported too: it is far less sensitive to load.
    let (mut best_direct, mut best_engine) = (f64::MAX, f64::MAX);
    let (mut ratios, mut cpu_ratios) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let (d, d_cpu) = direct(&model, &prompt);
        let (n, t, e_cpu) = rt.block_on(generate(&engine, &model));
        let e = t.as_secs_f64() / (n - 1) as f64;
        best_direct = best_direct.min(d);
        best_engine = best_engine.min(e);
        ratios.push(e / d);
        if let (Some(dc), Some(ec)) = (d_cpu, e_cpu) {
            cpu_ratios.push(ec / (n - 1) as f64 / dc);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).map_or(f64::NAN, |r| (r - 1.0) * 100.0)
    };
    println!("decode, {TOKENS} tokens, best of {ROUNDS} interleaved rounds:");
    println!(
        "  model.forward loop  {:8.3} ms/token  ({:6.1} tok/s)",
        best_direct * 1e3,
        1.0 / best_direct
    );
    println!(
        "  engine stream       {:8.3} ms/token  ({:6.1} tok/s)",
        best_engine * 1e3,
        1.0 / best_engine
    );
    println!(
        "  engine overhead, wall time  {:+7.2} % (median of rounds)",
        median(&mut ratios)
    );
    println!(
        "  engine overhead, CPU time   {:+7.2} % (median of rounds)",
        median(&mut cpu_ratios)
    );
    println!("aggregate throughput (prefill included), best of {ROUNDS}:");
    for n in [1, 2, 4] {
        let best = (0..ROUNDS)
            .map(|_| rt.block_on(throughput(&engine, &model, n)))
            .fold(0.0, f64::max);
        println!("  {n} session(s)        {best:8.1} tok/s");
    }
}

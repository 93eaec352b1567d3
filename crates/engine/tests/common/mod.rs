//! Shared helpers for the engine's real-model tests.
#![allow(dead_code)]

use futures::StreamExt;
use statelm_engine::{
    DoneStats, Engine, EngineConfig, EngineError, EngineHandle, Event, GenerateRequest, Input,
    SamplingParams, SessionId, Target,
};
use statelm_model::{LoadOptions, Model};
use std::sync::{Arc, OnceLock};

/// The Gemma model, loaded once per test binary (`None`: skipped).
pub fn gemma() -> Option<Arc<Model>> {
    static MODEL: OnceLock<Option<Arc<Model>>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let path = statelm_model::testing::gemma_path()?;
            Some(Model::load(path, &LoadOptions::default()).expect("gemma loads"))
        })
        .clone()
}

/// Gemma in llama.cpp's numerics, where a batch computes exactly what token-by-token decoding
/// does: recomputing a cache (after an eviction) gives the same logits, so the same greedy
/// text. (The default numerics compute batches with f32 GEMM, a last-bit difference that can
/// flip a near-tie; where a recompute lands depends on timing.)
pub fn gemma_exact() -> Option<Arc<Model>> {
    static MODEL: OnceLock<Option<Arc<Model>>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let path = statelm_model::testing::gemma_path()?;
            let opts = LoadOptions {
                numerics: statelm_model::Numerics::LlamaCpp,
                ..LoadOptions::default()
            };
            Some(Model::load(path, &opts).expect("gemma loads"))
        })
        .clone()
}

/// An engine over Gemma with small, test-friendly settings.
pub fn engine(config: EngineConfig) -> Option<(Arc<Model>, EngineHandle)> {
    let model = gemma()?;
    let engine = Engine::start(model.clone(), config);
    Some((model, engine))
}

/// A test configuration: small states, a private spill directory.
pub fn config(spill: &std::path::Path) -> EngineConfig {
    EngineConfig {
        session_capacity: 1024,
        token_budget: 1024,
        spill_dir: spill.to_path_buf(),
        ..EngineConfig::default()
    }
}

/// Everything one generation streamed.
#[derive(Debug, Default, Clone)]
pub struct Run {
    pub tokens: Vec<u32>,
    pub text: String,
    pub events: Vec<Event>,
    pub done: Option<DoneStats>,
    pub error: Option<String>,
}

impl Run {
    pub fn done(&self) -> &DoneStats {
        self.done
            .as_ref()
            .unwrap_or_else(|| panic!("no Done event: {self:?}"))
    }
}

/// Collects a whole stream.
pub async fn collect(mut stream: statelm_engine::GenerationStream) -> Run {
    let mut run = Run::default();
    while let Some(item) = stream.next().await {
        match item {
            Ok(ev) => record(&mut run, ev),
            Err(e) => run.error = Some(e.to_string()),
        }
    }
    run
}

/// Adds one event to `run`.
pub fn record(run: &mut Run, ev: Event) {
    match &ev {
        Event::Token { id, text } => {
            run.tokens.push(*id);
            run.text.push_str(text);
        }
        Event::Text { text } => run.text.push_str(text),
        Event::Done(d) => run.done = Some(d.clone()),
        _ => {}
    }
    run.events.push(ev);
}

/// A greedy request.
pub fn greedy(session: impl Into<Target>, input: Input, max_tokens: usize) -> GenerateRequest {
    GenerateRequest {
        session: session.into(),
        input,
        sampling: SamplingParams::greedy(),
        stop: Vec::new(),
        max_tokens,
    }
}

/// Greedy sampling with every end-of-generation token banned (so runs have a known length).
pub fn no_eog(model: &Model) -> SamplingParams {
    let mut p = SamplingParams::greedy();
    for &id in model.tokenizer().eog_ids() {
        p.logit_bias.insert(id, f32::NEG_INFINITY);
    }
    p
}

/// Runs one request to the end.
pub async fn run(engine: &EngineHandle, req: GenerateRequest) -> Run {
    match engine.generate(req).await {
        Ok(stream) => collect(stream).await,
        Err(e) => Run {
            error: Some(e.to_string()),
            ..Run::default()
        },
    }
}

/// Creates a session with default options.
pub async fn session(engine: &EngineHandle) -> Result<SessionId, EngineError> {
    engine.create_session(Default::default()).await
}

/// Copies the files of a session directory: what a kill at this moment leaves on disk.
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// Waits until `f` holds (polling the engine), or fails after a few seconds.
pub async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..500 {
        if f().await {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

//! Test servers on 127.0.0.1:0 over the real default model, and the Python `openai` client.

use statelm_engine::{Engine, EngineConfig, EngineHandle};
use statelm_model::{LoadOptions, Model};
use statelm_server::ServerConfig;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::oneshot;

pub const KEY: &str = "test-key-123";

/// Gemma, loaded once per test binary (`None`: skipped).
pub fn gemma() -> Option<Arc<Model>> {
    static MODEL: OnceLock<Option<Arc<Model>>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let path = statelm_model::testing::gemma_path()?;
            Some(Model::load(path, &LoadOptions::default()).expect("gemma loads"))
        })
        .clone()
}

/// Qwen2.5-Coder, loaded once per test binary (`None`: skipped).
pub fn qwen() -> Option<Arc<Model>> {
    static MODEL: OnceLock<Option<Arc<Model>>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let path = statelm_model::testing::qwen_path()?;
            Some(Model::load(path, &LoadOptions::default()).expect("qwen loads"))
        })
        .clone()
}

/// A running test server.
pub struct TestServer {
    pub addr: SocketAddr,
    pub engine: EngineHandle,
    pub model: Arc<Model>,
    stop: Option<oneshot::Sender<()>>,
    pub task: Option<tokio::task::JoinHandle<Result<(), statelm_server::ServerError>>>,
    _spill: tempfile::TempDir,
}

impl TestServer {
    pub fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Signals shutdown (as SIGTERM would).
    pub fn shutdown(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Test engine settings: small states, a private spill directory.
pub fn engine_config(spill: &std::path::Path) -> EngineConfig {
    EngineConfig {
        session_capacity: 1024,
        token_budget: 1024,
        spill_dir: spill.to_path_buf(),
        ..EngineConfig::default()
    }
}

/// Starts a server with the API key [`KEY`]; `tune` adjusts the configurations.
pub async fn start(tune: impl FnOnce(&mut EngineConfig, &mut ServerConfig)) -> Option<TestServer> {
    Some(start_with(gemma()?, "gemma3-270m", tune).await)
}

/// [`start`] on `model`, served as `id`.
pub async fn start_with(
    model: Arc<Model>,
    id: &str,
    tune: impl FnOnce(&mut EngineConfig, &mut ServerConfig),
) -> TestServer {
    let spill = tempfile::tempdir().expect("tempdir");
    let mut ecfg = engine_config(spill.path());
    let mut cfg = ServerConfig::new(model.clone(), id);
    cfg.api_keys = vec![KEY.to_string()];
    cfg.shutdown_grace = Duration::from_secs(2);
    tune(&mut ecfg, &mut cfg);
    let engine = Engine::start(model.clone(), ecfg);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = oneshot::channel::<()>();
    let signal = async move {
        let _ = rx.await;
    };
    let task = tokio::spawn(statelm_server::serve_with_shutdown(
        listener,
        engine.clone(),
        cfg,
        signal,
    ));
    TestServer {
        addr,
        engine,
        model,
        stop: Some(tx),
        task: Some(task),
        _spill: spill,
    }
}

/// Whether the `openai` Python package is importable.
pub fn have_openai() -> bool {
    std::process::Command::new("python3")
        .args(["-c", "import openai"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs a Python script with `BASE` (the server's /v1 URL) and `KEY` in its environment and
/// returns its stdout parsed as JSON (its last line).
pub async fn python(server: &TestServer, script: &str) -> serde_json::Value {
    let args = vec!["-c".to_string(), script.to_string()];
    let (stdout, _) = python_with(args, vec![("BASE", server.url()), ("KEY", KEY.into())]).await;
    let last = stdout.lines().last().unwrap_or("");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

/// Runs `python3 args` with `env` added; returns its stdout and stderr (it must succeed).
pub async fn python_with(args: Vec<String>, env: Vec<(&'static str, String)>) -> (String, String) {
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .args(&args)
            .envs(env)
            .output()
            .expect("python3 runs")
    })
    .await
    .expect("join");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "python failed: {}\n{stdout}\n{stderr}",
        out.status
    );
    (stdout, stderr)
}

/// The value of an unlabelled metric on the `/metrics` page.
pub fn metric(page: &str, name: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no metric {name} in\n{page}"))
}

/// `logit_bias` banning every end-of-generation token (runs of a known length).
pub fn no_eog(model: &Model) -> serde_json::Value {
    let bias: serde_json::Map<String, serde_json::Value> = (model.tokenizer().eog_ids().iter())
        .map(|id| (id.to_string(), serde_json::json!(-100)))
        .collect();
    serde_json::Value::Object(bias)
}

/// Runs `tests/data/SCRIPT` (a Python script using the stock `openai` client) against a server
/// on Qwen2.5-Coder, with `BASE`, `KEY`, `MODEL` and `DATA` (the data directory) in its
/// environment; returns its last stdout line as JSON (`None`: the model is not here).
pub async fn qwen_script(script: &str) -> Option<serde_json::Value> {
    assert!(
        have_openai(),
        "the `openai` Python package is missing (scripts/test installs it)"
    );
    let model = qwen()?;
    let server = start_with(model, "qwen2.5-coder-0.5b", |_, _| {}).await;
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");
    let (stdout, stderr) = python_with(
        vec![format!("{data}/{script}")],
        vec![
            ("BASE", server.url()),
            ("KEY", KEY.into()),
            ("MODEL", "qwen2.5-coder-0.5b".into()),
            ("DATA", data.into()),
        ],
    )
    .await;
    let out = serde_json::from_str(stdout.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));
    Some(out)
}

/// Posts a one-message chat request with the fields of `extra` added, expects a 400, and
/// returns its `error` object.
pub async fn chat_400(server: &TestServer, extra: &serde_json::Value) -> serde_json::Value {
    let mut body =
        serde_json::json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let r = crate::http::request(
        server.addr,
        "POST",
        "/v1/chat/completions",
        Some(KEY),
        body.to_string().as_bytes(),
    )
    .await;
    assert_eq!(r.status, 400, "{body}: {}", r.text());
    r.json()["error"].clone()
}

//! Trims a user can live with: `bench/trimmed_chat.py` (a real HTTP client resending the
//! conversation, as OpenAI clients do) plays a nine-question chat, greedy, 64 tokens per
//! answer, on each model with a tight token budget and without one. After many trims the
//! system prompt's name is still obeyed, no more answers loop than without the budget, and
//! every trim the engine made reached the client.

use crate::common::{self, metric, TestServer};
use serde_json::Value;
use statelm_model::Model;
use std::sync::Arc;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/trimmed_chat.py");

/// Tokens an answer may take: the script's 120 made Gemma's two chats ~90 s of CI; at 64 the
/// chat still passes the budgets below several times.
const MAX_TOKENS: &str = "64";

/// Plays the chat (DRY off: the bare trims) on a server with `budget`; returns the record.
async fn play(model: Arc<Model>, id: &str, budget: usize) -> (Value, TestServer) {
    let server = common::start_with(model, id, |e, c| {
        e.token_budget = budget;
        e.session_capacity = budget;
        c.token_budget = Some(budget);
    })
    .await;
    let url = format!("http://{}", server.addr);
    let args = [
        SCRIPT,
        "--url",
        &url,
        "--dry",
        "off",
        "--json",
        "-",
        "-m",
        id,
        "--max-tokens",
        MAX_TOKENS,
    ];
    let args = args.map(String::from).to_vec();
    let env = vec![("STATELM_API_KEY", common::KEY.to_string())];
    let (stdout, stderr) = common::python_with(args, env).await;
    eprintln!("{id}, budget {budget}:\n{stderr}");
    let mut records: Vec<Value> = serde_json::from_str(stdout.trim()).expect("JSON records");
    (records.remove(0), server)
}

/// Plays the chat on `model` under `budget` and without one. The budget is one the chat passes
/// several times: Qwen's greedy answers are short, and on a CPU without VNNI (other sums, other
/// near-ties) its chat passed 384 tokens once only, so Qwen gets 256 (three trims there).
async fn trimmed_chat_keeps_the_name(model: Option<Arc<Model>>, id: &str, budget: usize) {
    let Some(model) = model else {
        return;
    };
    let (tight, server) = play(model.clone(), id, budget).await;
    let page = metrics_page(&server).await;
    let (free, _) = play(model, id, 4096).await;
    let trims = tight["trims"].as_u64().expect("trims");
    assert!(
        trims >= 2,
        "{id}: the chat should pass {budget} tokens several times"
    );
    // Every trim is announced: the client saw as many as the engine made.
    assert_eq!(
        metric(&page, "statelm_context_trims_total") as u64,
        trims,
        "{id}"
    );
    assert_eq!(
        tight["named"], true,
        "{id}: the name is lost after the trims: {tight}"
    );
    assert_eq!(free["named"], true, "{id}: {free}");
    let (a, b) = (tight["looping"].as_u64(), free["looping"].as_u64());
    assert!(
        a <= b,
        "{id}: {a:?} looping answers with the budget, {b:?} without"
    );
    // Whole turns were dropped, never part of one.
    for turn in tight["turns"].as_array().expect("turns") {
        for t in turn["trims"].as_array().expect("trims") {
            let reason = t["reason"].as_str().unwrap_or("");
            assert!(reason.contains("whole turns"), "{id}: {reason}");
        }
    }
}

/// The `/metrics` page of `server`.
async fn metrics_page(server: &TestServer) -> String {
    let r = crate::http::request(server.addr, "GET", "/metrics", Some(common::KEY), b"").await;
    String::from_utf8_lossy(&r.body).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trimmed_chat_keeps_the_name_on_qwen() {
    trimmed_chat_keeps_the_name(common::qwen(), "qwen2.5-coder-0.5b", 256).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trimmed_chat_keeps_the_name_on_gemma() {
    trimmed_chat_keeps_the_name(common::gemma(), "gemma3-270m", 384).await;
}

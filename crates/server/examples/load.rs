//! Load test of the OpenAI-compatible server: requests/s, tokens/s and time to first token
//! with 1, 4 and 8 concurrent streaming clients, measured by the clients over HTTP.
//!
//! ```sh
//! cargo run --release -p statelm-server --example load
//! cargo run --release -p statelm-server --example load -- --model path.gguf --requests 16 --max-tokens 64
//! ```
//!
//! Each client sends streaming chat requests one after the other, each with a different
//! prompt (no conversation reuse), greedy, with end-of-generation banned so that every
//! request generates exactly `--max-tokens` tokens.

use statelm_engine::{Engine, EngineConfig};
use statelm_model::{LoadOptions, Model};
use statelm_server::ServerConfig;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Opts {
    model: Option<String>,
    requests: usize,
    max_tokens: usize,
    levels: Vec<usize>,
}

fn parse_args() -> Opts {
    let mut o = Opts {
        model: None,
        requests: 16,
        max_tokens: 32,
        levels: vec![1, 4, 8],
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let value = pair.get(1).cloned().unwrap_or_default();
        match pair[0].as_str() {
            "--model" => o.model = Some(value),
            "--requests" => o.requests = value.parse().unwrap_or(o.requests),
            "--max-tokens" => o.max_tokens = value.parse().unwrap_or(o.max_tokens),
            "--concurrency" => {
                o.levels = value.split(',').filter_map(|s| s.parse().ok()).collect();
            }
            other => eprintln!("ignoring unknown argument {other}"),
        }
    }
    o
}

/// One streamed request: time to first content, and content chunks received.
async fn one_request(addr: SocketAddr, body: String) -> std::io::Result<(Duration, usize)> {
    let t0 = Instant::now();
    let mut s = TcpStream::connect(addr).await?;
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await?;
    let (mut ttft, mut chunks, mut pending) = (None, 0usize, String::new());
    let mut buf = [0u8; 8192];
    loop {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        pending.push_str(&String::from_utf8_lossy(&buf[..n]));
        while let Some(end) = pending.find('\n') {
            let line: String = pending.drain(..=end).collect();
            if line.starts_with("data: ") && line.contains("\"content\":\"") {
                if line.contains("\"content\":\"\"") {
                    continue;
                }
                ttft.get_or_insert_with(|| t0.elapsed());
                chunks += 1;
            }
        }
    }
    Ok((ttft.unwrap_or_else(|| t0.elapsed()), chunks))
}

fn percentile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(((v.len().saturating_sub(1)) as f64 * q).round() as usize)
        .copied()
        .unwrap_or(0.0)
}

const TOPICS: &[&str] = &[
    "the sea",
    "a mountain",
    "a robot",
    "the moon",
    "a city",
    "a forest",
    "a river",
    "a clock",
];

async fn level(addr: SocketAddr, clients: usize, o: &Opts, ban: &str, round: usize) {
    let per_client = o.requests.div_ceil(clients);
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let max_tokens = o.max_tokens;
        let ban = ban.to_string();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for i in 0..per_client {
                let topic = TOPICS[(c + i) % TOPICS.len()];
                let body = format!(
                    r#"{{"messages": [{{"role": "user", "content": "Round {round}, client {c}, request {i}: write about {topic}."}}], "max_tokens": {max_tokens}, "temperature": 0, "stream": true, "logit_bias": {{{ban}}}}}"#
                );
                out.push(one_request(addr, body).await);
            }
            out
        }));
    }
    let (mut ttfts, mut tokens, mut ok) = (Vec::new(), 0usize, 0usize);
    for t in tasks {
        for r in t.await.expect("client task").into_iter().flatten() {
            ttfts.push(r.0.as_secs_f64() * 1e3);
            tokens += r.1;
            ok += 1;
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "{clients:>2} clients: {ok:>3} requests in {secs:6.2} s = {:5.2} req/s, {:6.1} tok/s; \
         TTFT p50 {:6.0} ms, p99 {:6.0} ms",
        ok as f64 / secs,
        tokens as f64 / secs,
        percentile(&mut ttfts, 0.5),
        percentile(&mut ttfts, 0.99)
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let o = parse_args();
    let path = match &o.model {
        Some(p) => p.into(),
        None => statelm_model::testing::gemma_path().expect("the default model (statelm pull)"),
    };
    let model = Model::load(&path, &LoadOptions::default()).expect("model loads");
    let ban: Vec<String> = (model.tokenizer().eog_ids().iter())
        .map(|id| format!("\"{id}\": -100"))
        .collect();
    let spill = std::env::temp_dir().join(format!("statelm-load-{}", std::process::id()));
    let engine = Engine::start(
        model.clone(),
        EngineConfig {
            spill_dir: spill,
            ..EngineConfig::default()
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let cfg = ServerConfig::new(model.clone(), "load");
    tokio::spawn(statelm_server::serve_with_shutdown(
        listener,
        engine.clone(),
        cfg,
        std::future::pending(),
    ));
    println!(
        "model {} ({} threads), {} requests per level, {} tokens each, streaming, greedy",
        path.display(),
        model.threads(),
        o.requests,
        o.max_tokens
    );
    for (round, &clients) in o.levels.iter().enumerate() {
        level(addr, clients.max(1), &o, &ban.join(", "), round).await;
    }
    let s = engine.stats().await;
    println!(
        "engine: {} requests, {} tokens generated, mean decode {:.1} tok/s per stream",
        s.requests_total, s.generated_tokens_total, s.mean_decode_tokens_per_s
    );
}

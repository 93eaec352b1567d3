//! Clients that vanish while their request waits leave nothing behind: every session of the
//! engine's pool can serve afterwards.

use crate::common::{metric, start, KEY};
use crate::http::{open, request};
use serde_json::json;
use std::time::Duration;

const COMPLETIONS: &str = "/v1/completions";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_dropped_while_waiting_leak_nothing() {
    let Some(server) = start(|e, _| {
        e.max_sessions = 2;
        e.prefill_chunk = 1024;
    })
    .await
    else {
        return;
    };
    let a = server.addr;
    // A long prefill keeps the engine busy, so session creations queue behind its steps.
    let long = "The quick brown fox jumps over the lazy dog. ".repeat(90);
    let busy = json!({"prompt": long, "max_tokens": 1, "temperature": 0}).to_string();
    let busy =
        tokio::spawn(
            async move { request(a, "POST", COMPLETIONS, Some(KEY), busy.as_bytes()).await },
        );
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Clients that give up while their request waits for the engine.
    for i in 0..4 {
        let body = json!({"prompt": format!("Question {i}?"), "max_tokens": 1}).to_string();
        let s = open(a, COMPLETIONS, Some(KEY), body.as_bytes()).await;
        tokio::time::sleep(Duration::from_millis(30)).await;
        drop(s);
    }
    assert_eq!(busy.await.unwrap().status, 200);
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Both sessions can serve at once: nothing is left busy.
    let body = |q: &str| json!({"prompt": q, "max_tokens": 24, "temperature": 0}).to_string();
    let (b1, b2) = (body("One plus one is"), body("The sky is"));
    let (r1, r2) = tokio::join!(
        request(a, "POST", COMPLETIONS, Some(KEY), b1.as_bytes()),
        request(a, "POST", COMPLETIONS, Some(KEY), b2.as_bytes()),
    );
    assert_eq!(
        (r1.status, r2.status),
        (200, 200),
        "{} / {}",
        r1.text(),
        r2.text()
    );
    let page = request(a, "GET", "/metrics", None, b"").await.text();
    assert!(metric(&page, "statelm_sessions") <= 2.0, "{page}");
}

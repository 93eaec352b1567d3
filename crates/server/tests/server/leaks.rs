//! Clients that vanish while their session is being created leave nothing behind: every
//! slot of the pool can be filled afterwards, and the server's pool and the engine agree.

use crate::common::{metric, start, KEY};
use crate::http::{open, request};
use serde_json::json;
use std::time::Duration;

const COMPLETIONS: &str = "/v1/completions";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_dropped_during_session_creation_leak_nothing() {
    let Some(server) = start(|e, cfg| {
        cfg.max_sessions = 2;
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
    // Clients that give up while their session is being created.
    for i in 0..4 {
        let body = json!({"prompt": format!("Question {i}?"), "max_tokens": 1}).to_string();
        let s = open(a, COMPLETIONS, Some(KEY), body.as_bytes()).await;
        tokio::time::sleep(Duration::from_millis(30)).await;
        drop(s);
    }
    assert_eq!(busy.await.unwrap().status, 200);
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Both slots can serve at once: nothing is stuck in creation or orphaned.
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
    assert_eq!(
        metric(&page, "statelm_sessions"),
        metric(&page, "statelm_server_sessions"),
        "{page}"
    );
    assert!(metric(&page, "statelm_sessions") <= 2.0, "{page}");
}

/// The pool is reconciled with the engine in the background: an engine session nothing in the
/// pool knows (an orphan) is closed after two passes, and a pool slot whose engine session
/// vanished is forgotten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_is_reconciled_with_the_engine() {
    let Some(server) = start(|_, cfg| cfg.reconcile_interval = Duration::from_millis(100)).await
    else {
        return;
    };
    let a = server.addr;
    let body = json!({"prompt": "Hello", "max_tokens": 1}).to_string();
    assert_eq!(
        request(a, "POST", COMPLETIONS, Some(KEY), body.as_bytes())
            .await
            .status,
        200
    );
    let pooled = server.engine.session_ids().await.unwrap();
    assert_eq!(pooled.len(), 1);
    let orphan = server
        .engine
        .create_session(Default::default())
        .await
        .unwrap();
    server.engine.close_session(pooled[0]).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let ids = server.engine.session_ids().await.unwrap();
        let page = request(a, "GET", "/metrics", None, b"").await.text();
        if !ids.contains(&orphan) && metric(&page, "statelm_server_sessions") == 0.0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{ids:?}\n{page}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The server still serves.
    assert_eq!(
        request(a, "POST", COMPLETIONS, Some(KEY), body.as_bytes())
            .await
            .status,
        200
    );
}

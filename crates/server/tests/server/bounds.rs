//! Bounded everything: a client that sends half a request or sits idle is cut off, connections
//! beyond the cap get 503 at once, generations beyond the concurrency cap queue fairly and
//! beyond the queue get 503 with `Retry-After`, a generation stops at the wall-clock limit and
//! says so, and a non-streaming client that leaves is counted.

use crate::common::{metric, no_eog, start, KEY};
use crate::http::{open, parse, read_events, request};
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Reads until the server closes the connection (or `limit` passes); returns what was read
/// and how long it took.
async fn until_closed(s: &mut TcpStream, limit: Duration) -> (Vec<u8>, Duration) {
    let t = Instant::now();
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(limit, s.read_to_end(&mut buf)).await;
    (buf, t.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_and_idle_connections_are_cut_off() {
    let Some(server) = start(|_, cfg| cfg.header_read_timeout = Duration::from_millis(400)).await
    else {
        return;
    };
    // Half a request: the headers never end.
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    s.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n")
        .await
        .unwrap();
    let (_, took) = until_closed(&mut s, Duration::from_secs(10)).await;
    assert!(took < Duration::from_secs(5), "closed after {took:?}");
    // A connection that never sends anything.
    let mut idle = TcpStream::connect(server.addr).await.unwrap();
    let (_, took) = until_closed(&mut idle, Duration::from_secs(10)).await;
    assert!(took < Duration::from_secs(5), "idle closed after {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_get_503() {
    let Some(server) = start(|_, cfg| cfg.max_connections = 2).await else {
        return;
    };
    let held = [
        TcpStream::connect(server.addr).await.unwrap(),
        TcpStream::connect(server.addr).await.unwrap(),
    ];
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut third = TcpStream::connect(server.addr).await.unwrap();
    let (raw, _) = until_closed(&mut third, Duration::from_secs(5)).await;
    let r = parse(&raw);
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("retry-after"), Some("1"));
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let ok = request(server.addr, "GET", "/health", None, b"").await;
    assert_eq!(ok.status, 200);
    let page = request(server.addr, "GET", "/metrics", None, b"")
        .await
        .text();
    assert_eq!(metric(&page, "statelm_connections_refused_total"), 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generations_queue_fairly_then_get_503_and_stop_at_the_time_limit() {
    let Some(server) = start(|_, cfg| {
        cfg.max_concurrent = Some(1);
        cfg.max_queued = 1;
        cfg.max_generation_time = Duration::from_millis(1500);
    })
    .await
    else {
        return;
    };
    let a = server.addr;
    let long = json!({"prompt": "Once upon a time", "max_tokens": 4000, "temperature": 0,
                      "stream": true, "logit_bias": no_eog(&server.model)});
    let mut first = open(a, "/v1/completions", Some(KEY), long.to_string().as_bytes()).await;
    read_events(&mut first, 2).await;
    // The second waits for the slot...
    let short = json!({"prompt": "Hello", "max_tokens": 2, "temperature": 0}).to_string();
    let queued = tokio::spawn(async move {
        request(a, "POST", "/v1/completions", Some(KEY), short.as_bytes())
            .await
            .status
    });
    // It is queued when the server says so (no guess at how long that takes).
    let mut waiting = 0.0;
    for _ in 0..1000 {
        let page = request(a, "GET", "/metrics", None, b"").await.text();
        waiting = metric(&page, "statelm_generations_waiting");
        if waiting == 1.0 {
            assert_eq!(metric(&page, "statelm_generations_running"), 1.0, "{page}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(waiting, 1.0, "the second request never queued");
    // ...the third finds the queue full.
    let body = json!({"prompt": "Hi", "max_tokens": 2}).to_string();
    let r = request(a, "POST", "/v1/completions", Some(KEY), body.as_bytes()).await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("retry-after"), Some("1"));
    // The first stops at the time limit and says so; then the second runs.
    let (rest, _) = until_closed(&mut first, Duration::from_secs(30)).await;
    let rest = String::from_utf8_lossy(&rest);
    assert!(rest.contains("time_limit"), "{rest}");
    assert!(rest.contains("[DONE]"), "{rest}");
    assert_eq!(
        queued.await.unwrap(),
        200,
        "the queued one ran once the slot was free"
    );
    // The same limit applies to a whole (non-streaming) reply.
    let mut whole = long.clone();
    whole["stream"] = json!(false);
    let r = request(
        a,
        "POST",
        "/v1/completions",
        Some(KEY),
        whole.to_string().as_bytes(),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json()["statelm"]["events"][0]["event"],
        "time_limit",
        "{}",
        r.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_streaming_client_that_leaves_is_counted() {
    let Some(server) = start(|_, _| {}).await else {
        return;
    };
    let long = json!({"prompt": "Once upon a time", "max_tokens": 4000, "temperature": 0,
                      "logit_bias": no_eog(&server.model)});
    let s = open(
        server.addr,
        "/v1/completions",
        Some(KEY),
        long.to_string().as_bytes(),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(s);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let page = request(server.addr, "GET", "/metrics", None, b"")
            .await
            .text();
        if metric(&page, "statelm_requests_abandoned_total") == 1.0 {
            assert_eq!(metric(&page, "statelm_generations_running"), 0.0, "{page}");
            break;
        }
        assert!(Instant::now() < deadline, "{page}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

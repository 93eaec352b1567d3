//! Memory events in replies, client disconnects, graceful shutdown.

use crate::common::{metric, no_eog, start, KEY};
use crate::http::{self, request, sse_data};
use serde_json::{json, Value};
use statelm_engine::PressureLevel;
use std::time::{Duration, Instant};

const CHAT: &str = "/v1/chat/completions";

async fn metrics(addr: std::net::SocketAddr) -> String {
    request(addr, "GET", "/metrics", None, b"").await.text()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trims_are_reported_in_streams_headers_and_bodies() {
    let Some(server) = start(|_, cfg| cfg.token_budget = Some(48)).await else {
        return;
    };
    let a = server.addr;
    let long = "The quick brown fox jumps over the lazy dog. ".repeat(8);
    let body = json!({"messages": [{"role": "user", "content": long}], "max_tokens": 4,
                      "temperature": 0});
    let r = request(a, "POST", CHAT, Some(KEY), body.to_string().as_bytes()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let header = r
        .header("x-statelm-events")
        .expect("x-statelm-events header");
    assert!(header.starts_with("context_trimmed;kept="), "{header}");
    let v = r.json();
    let ev = &v["statelm"]["events"][0];
    assert_eq!(ev["event"], "context_trimmed", "{v}");
    assert!(ev["kept"].as_u64().unwrap() <= 48 && ev["dropped"].as_u64().unwrap() > 0);
    assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() > 48);
    // Streaming: the event arrives as a chunk with an empty delta and a `statelm` field.
    let mut body = body.clone();
    body["stream"] = json!(true);
    body["messages"][0]["content"] = json!(format!("{long} Again."));
    let r = request(a, "POST", CHAT, Some(KEY), body.to_string().as_bytes()).await;
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .unwrap_or("")
        .starts_with("text/event-stream"));
    let data = sse_data(&r.text());
    assert_eq!(data.last(), Some(&json!("[DONE]")), "{data:?}");
    let ev = data
        .iter()
        .find(|d| d.get("statelm").is_some())
        .unwrap_or_else(|| panic!("no event chunk in {data:?}"));
    assert_eq!(ev["statelm"]["event"], "context_trimmed");
    assert_eq!(ev["choices"][0]["delta"], json!({}));
    assert!(ev["choices"][0]["finish_reason"].is_null());
    let page = metrics(a).await;
    assert!(
        metric(&page, "statelm_context_trims_total") >= 2.0,
        "{page}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spilled_session_is_restored_and_reported() {
    let Some(server) = start(|e, _| e.idle_after = Duration::ZERO).await else {
        return;
    };
    let a = server.addr;
    let mut msgs = vec![json!({"role": "user", "content": "Name a fruit."})];
    let body = |msgs: &Vec<Value>| {
        json!({"messages": msgs, "max_tokens": 6, "temperature": 0}).to_string()
    };
    let r = request(a, "POST", CHAT, Some(KEY), body(&msgs).as_bytes()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let reply = r.json()["choices"][0]["message"]["content"].clone();
    server.engine.memory_warning(PressureLevel::Warning);
    let t0 = Instant::now();
    while server.engine.stats().await.spilled == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the idle session was not spilled"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.engine.memory_warning(PressureLevel::Normal);
    msgs.push(json!({"role": "assistant", "content": reply}));
    msgs.push(json!({"role": "user", "content": "And a vegetable?"}));
    let r = request(a, "POST", CHAT, Some(KEY), body(&msgs).as_bytes()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let events: Vec<&str> = (v["statelm"]["events"].as_array().unwrap().iter())
        .filter_map(|e| e["event"].as_str())
        .collect();
    assert!(
        events.contains(&"spilled") || events.contains(&"restored"),
        "{v}"
    );
    assert!(
        r.header("x-statelm-events")
            .unwrap_or("")
            .contains("restored"),
        "{v}"
    );
    assert!(
        v["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            > 0,
        "{v}"
    );
    let page = metrics(a).await;
    assert!(metric(&page, "statelm_spills_total") >= 1.0);
    assert!(metric(&page, "statelm_restores_total") >= 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_after_a_spill_notice_carries_it_and_fits_in_memory() {
    let body = |msgs: &Vec<Value>, max: usize| {
        json!({"messages": msgs, "max_tokens": max, "temperature": 0}).to_string()
    };
    let mut msgs = vec![json!({"role": "user", "content": "Name a fruit."})];
    // One short conversation's State and the scratch, without a ceiling.
    let Some(probe) = start(|_, _| {}).await else {
        return;
    };
    let r = request(
        probe.addr,
        "POST",
        CHAT,
        Some(KEY),
        body(&msgs, 4).as_bytes(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let stats = probe.engine.stats().await;
    let room = stats.scratch_bytes + 3 * stats.state_bytes_total;
    let ceiling = probe.model.file_bytes() + room;
    drop(probe);

    // Room to restore that conversation (its file and its State at once), not to answer at
    // length: the second turn is held to what fits in memory (trimmed, not refused) and its
    // reply carries the spill announced before it. (A turn refused after such a notice
    // carries it the same way: `error::tests::an_error_reply_carries_its_events`.)
    let Some(server) = start(|e, _| {
        e.idle_after = Duration::ZERO;
        e.memory_ceiling = Some(ceiling);
        (e.token_budget, e.session_capacity) = (4096, 4096);
    })
    .await
    else {
        return;
    };
    let a = server.addr;
    let r = request(a, "POST", CHAT, Some(KEY), body(&msgs, 4).as_bytes()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let reply = r.json()["choices"][0]["message"]["content"].clone();
    server.engine.memory_warning(PressureLevel::Warning);
    let t0 = Instant::now();
    while server.engine.stats().await.spilled == 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "not spilled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.engine.memory_warning(PressureLevel::Normal);
    msgs.push(json!({"role": "assistant", "content": reply}));
    msgs.push(json!({"role": "user", "content": "Now write a long story about it."}));
    let r = request(a, "POST", CHAT, Some(KEY), body(&msgs, 3000).as_bytes()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert!(
        v["choices"][0]["message"]["content"].as_str().is_some(),
        "{v}"
    );
    let events: Vec<&str> = (v["statelm"]["events"].as_array().into_iter().flatten())
        .filter_map(|e| e["event"].as_str())
        .collect();
    assert!(events.contains(&"spilled"), "{v}");
    assert!(
        (r.header("x-statelm-events").unwrap_or("")).contains("spilled"),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_disconnect_cancels_the_generation() {
    let Some(server) = start(|_, _| {}).await else {
        return;
    };
    let a = server.addr;
    let body = json!({"messages": [{"role": "user", "content": "Tell me a long story."}],
                      "max_tokens": 4000, "temperature": 0, "stream": true,
                      "logit_bias": no_eog(&server.model)});
    let mut conn = http::open(a, CHAT, Some(KEY), body.to_string().as_bytes()).await;
    let got = http::read_events(&mut conn, 4).await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    drop(conn);
    let t0 = Instant::now();
    loop {
        let page = metrics(a).await;
        if metric(&page, "statelm_active_generations") == 0.0
            && metric(&page, "statelm_client_disconnects_total") >= 1.0
        {
            let generated = metric(&page, "statelm_generated_tokens_total");
            assert!(
                generated < 1000.0,
                "generation went on after the disconnect: {generated}"
            );
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "not cancelled:\n{page}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The session is free again and usable.
    let body = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3});
    let r = request(a, "POST", CHAT, Some(KEY), body.to_string().as_bytes()).await;
    assert_eq!(r.status, 200, "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_streams_end_then_cancels_them() {
    let Some(mut server) = start(|_, cfg| cfg.shutdown_grace = Duration::from_millis(500)).await
    else {
        return;
    };
    let a = server.addr;
    let body = json!({"messages": [{"role": "user", "content": "Tell me a long story."}],
                      "max_tokens": 4000, "temperature": 0, "stream": true,
                      "logit_bias": no_eog(&server.model)});
    let mut conn = http::open(a, CHAT, Some(KEY), body.to_string().as_bytes()).await;
    http::read_events(&mut conn, 2).await;
    server.shutdown();
    let t0 = Instant::now();
    // The stream still ends properly: a finish chunk and [DONE].
    let mut rest = Vec::new();
    tokio::io::AsyncReadExt::read_to_end(&mut conn, &mut rest)
        .await
        .expect("read");
    let text = String::from_utf8_lossy(&rest);
    assert!(text.contains("data: [DONE]"), "{text}");
    assert!(text.contains("\"finish_reason\":\"stop\""), "{text}");
    let task = server.task.take().unwrap();
    let result = tokio::time::timeout(Duration::from_secs(10), task).await;
    assert!(matches!(result, Ok(Ok(Ok(())))), "{result:?}");
    assert!(t0.elapsed() < Duration::from_secs(10));
    // No longer accepting.
    assert!(tokio::net::TcpStream::connect(a).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_guard_and_dry_are_request_fields() {
    let Some(server) = start(|_, _| {}).await else {
        return;
    };
    let a = server.addr;
    let post = |extra: Value| async move {
        let mut body = json!({"prompt": "A A A A A A A A A A A A", "max_tokens": 80,
                              "temperature": 0});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        request(
            a,
            "POST",
            "/v1/completions",
            Some(KEY),
            body.to_string().as_bytes(),
        )
        .await
    };
    let r = post(json!({"loop_guard": false, "dry_multiplier": 0})).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["statelm"]["stop_reason"], "max_tokens");
    // On by default (the server's chat defaults), and on request.
    for extra in [json!({}), json!({"loop_guard": true, "dry_multiplier": 0})] {
        let v = post(extra).await.json();
        assert_eq!(v["statelm"]["stop_reason"], "repetition", "{v}");
        assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
        assert!(
            v["usage"]["completion_tokens"].as_u64().unwrap() < 80,
            "{v}"
        );
    }
    let r = post(
        json!({"dry_multiplier": 0.8, "dry_sequence_breakers": ["\n"],
                        "loop_guard": false}),
    )
    .await;
    let v = r.json();
    let text = v["choices"][0]["text"].as_str().unwrap();
    assert!(!text.contains(&"A ".repeat(12)), "{v}");
    for bad in [
        json!({"dry_multiplier": -1}),
        json!({"dry_base": 0.5}),
        json!({"dry_allowed_length": -2}),
        json!({"dry_sequence_breakers": [""]}),
    ] {
        let r = post(bad.clone()).await;
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
    }
}

/// A step that panics (a bug in a kernel or a sampler; injected here) fails only its request
/// with a 500: other conversations keep their cache, later requests are served, and `/health`
/// and `/metrics` count it. `/health` follows the engine's real liveness.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_step_fails_only_its_request() {
    let Some(server) = start(|_, _| {}).await else {
        return;
    };
    let a = server.addr;
    let post = |body: Value| async move {
        let body = body.to_string();
        request(a, "POST", "/v1/completions", Some(KEY), body.as_bytes()).await
    };
    let ask = |prompt: &str| json!({"prompt": prompt, "max_tokens": 2, "temperature": 0});
    let story = "Once upon a time there was a lighthouse keeper who";
    assert_eq!(post(ask(story)).await.status, 200);
    let marker = statelm_engine::faults::PANIC_MARKER;
    let r = post(ask(&format!("Hello {marker}"))).await;
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(
        r.text().contains("the engine failed on this request"),
        "{}",
        r.text()
    );
    // The other conversation kept its cache; new requests are served.
    let again = post(ask(&format!("{story} lived"))).await;
    assert_eq!(again.status, 200, "{}", again.text());
    let cached = &again.json()["usage"]["prompt_tokens_details"]["cached_tokens"];
    assert!(cached.as_u64().unwrap_or(0) > 5, "{}", again.text());
    let health = request(a, "GET", "/health", None, b"").await;
    assert_eq!(health.status, 200);
    assert_eq!(health.json()["panics"], 1, "{}", health.text());
    assert_eq!(metric(&metrics(a).await, "statelm_panics_total"), 1.0);
    assert!(server.engine.is_running());
}

/// `/health` answers from the engine's real liveness: once the engine thread is gone (an
/// uncontained panic, injected here) it says 503, and requests get 503 instead of hanging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_follows_the_engine_thread() {
    let Some(server) = start(|_, _| {}).await else {
        return;
    };
    let a = server.addr;
    assert_eq!(request(a, "GET", "/health", None, b"").await.status, 200);
    let kill = statelm_engine::faults::KILL_MARKER;
    let body = json!({"prompt": format!("Hi {kill}"), "max_tokens": 2}).to_string();
    let r = request(a, "POST", "/v1/completions", Some(KEY), body.as_bytes()).await;
    assert!(r.status >= 500, "{}", r.text());
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.engine.is_running() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let health = request(a, "GET", "/health", None, b"").await;
    assert_eq!(health.status, 503, "{}", health.text());
    assert_eq!(health.json()["status"], "engine_stopped");
    let body = json!({"prompt": "Hi", "max_tokens": 2}).to_string();
    let r = request(a, "POST", "/v1/completions", Some(KEY), body.as_bytes()).await;
    assert_eq!(r.status, 503, "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_request_on_a_busy_conversation_fails_at_once() {
    let Some(server) = start(|e, s| {
        e.session_dir = Some(e.spill_dir.join("sessions"));
        s.durable_sessions = true;
    })
    .await
    else {
        return;
    };
    let a = server.addr;
    let body = json!({"messages": [{"role": "user", "content": "Tell me a long story."}],
                      "max_tokens": 4000, "temperature": 0, "stream": true, "user": "alice",
                      "logit_bias": no_eog(&server.model)});
    let mut conn = http::open(a, CHAT, Some(KEY), body.to_string().as_bytes()).await;
    let got = http::read_events(&mut conn, 4).await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    // The same conversation again while the first request streams: refused at once (no
    // waiting for the first to end), and the first one is still running afterwards.
    let second = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3,
                        "user": "alice"});
    let r = request(a, "POST", CHAT, Some(KEY), second.to_string().as_bytes()).await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.text().contains("is running"), "{}", r.text());
    let page = metrics(a).await;
    assert_eq!(metric(&page, "statelm_active_generations"), 1.0, "{page}");
    // Another conversation runs beside it.
    let other = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3,
                       "user": "bob"});
    let r = request(a, "POST", CHAT, Some(KEY), other.to_string().as_bytes()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    drop(conn);
}

/// `POST /admin/host`: the background holds requests (sessions on disk, nothing computed)
/// until the foreground; the thermal state sets the threads; bad bodies are 400s naming what
/// is wrong; the endpoint needs the API key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_endpoint_reports_lifecycle_and_thermal_states() {
    let Some(server) = start(|_, _| {}).await else {
        return;
    };
    let a = server.addr;
    let host = |body: Value| async move {
        request(
            a,
            "POST",
            "/admin/host",
            Some(KEY),
            body.to_string().as_bytes(),
        )
        .await
    };
    let r = host(json!({"lifecycle": "background"})).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["lifecycle"], "background");
    let body = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
                      "temperature": 0});
    let chat = tokio::spawn(async move {
        request(a, "POST", CHAT, Some(KEY), body.to_string().as_bytes()).await
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!chat.is_finished(), "nothing is computed in the background");
    let r = host(json!({"lifecycle": "foreground", "thermal": "critical"})).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(
        (v["lifecycle"].as_str(), v["thermal"].as_str()),
        (Some("foreground"), Some("critical"))
    );
    assert_eq!(v["threads"], 1, "{v}");
    let r = chat.await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let health = request(a, "GET", "/health", None, b"").await.json();
    assert_eq!(health["thermal"], "critical", "{health}");
    assert_eq!(host(json!({"thermal": "nominal"})).await.status, 200);
    for (bad, words) in [
        (json!({"lifecycle": "asleep"}), "unknown variant `asleep`"),
        (json!({"mood": "fine"}), "unknown field `mood`"),
        (json!({}), "give `lifecycle`"),
    ] {
        let r = host(bad).await;
        assert_eq!(r.status, 400, "{}", r.text());
        assert!(r.text().contains(words), "{}", r.text());
    }
    let r = request(
        a,
        "POST",
        "/admin/host",
        None,
        br#"{"lifecycle":"background"}"#,
    )
    .await;
    assert_eq!(r.status, 401, "{}", r.text());
}

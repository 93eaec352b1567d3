//! Browser safety: what a web page could make the user's browser send to a local server —
//! a rebound host name, a cross-site origin, a `text/plain` "simple request" — is refused;
//! an origin the operator allowed gets CORS headers and its preflight answered.

use crate::common::{start, KEY};
use crate::http::{raw, Resp};

const BODY: &str = r#"{"prompt":"Hi","max_tokens":1,"temperature":0}"#;

/// A POST to /v1/completions with `headers` (each ending in CRLF) and a JSON body.
async fn post(addr: std::net::SocketAddr, headers: &str) -> Resp {
    raw(
        addr,
        &format!(
            "POST /v1/completions HTTP/1.1\r\nConnection: close\r\nAuthorization: Bearer {KEY}\r\n\
             {headers}Content-Length: {}\r\n\r\n{BODY}",
            BODY.len()
        ),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebound_hosts_cross_site_origins_and_plain_text_are_refused() {
    let Some(server) = start(|_, cfg| {
        cfg.allowed_hosts = vec!["box.lan".into()];
        cfg.cors_origins = vec!["http://app.example".into()];
    })
    .await
    else {
        return;
    };
    let a = server.addr;
    let json = "Content-Type: application/json\r\n";
    let ok = |host: &str| format!("Host: {host}\r\n{json}");
    for host in ["localhost:8080", "127.0.0.1", "[::1]:1", "box.lan"] {
        let r = post(a, &ok(host)).await;
        assert_eq!(r.status, 200, "{host}: {}", r.text());
    }
    // DNS rebinding: a page's own name resolving to this machine.
    let r = post(a, &ok("evil.example:8080")).await;
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_str()),
        (403, Some("host_not_allowed"))
    );
    let metrics = raw(
        a,
        "GET /metrics HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(metrics.await.status, 403);
    // A cross-site page, even with the right Host.
    let r = post(
        a,
        &format!("{}Origin: http://evil.example\r\n", ok("localhost")),
    )
    .await;
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_str()),
        (403, Some("origin_not_allowed"))
    );
    // The server's own origin, and the allowed one (with CORS headers).
    let r = post(
        a,
        &format!("{}Origin: http://localhost:8080\r\n", ok("localhost:8080")),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = post(
        a,
        &format!("{}Origin: http://app.example\r\n", ok("localhost")),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("http://app.example")
    );
    let pre = raw(
        a,
        "OPTIONS /v1/completions HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
         Origin: http://app.example\r\nAccess-Control-Request-Method: POST\r\n\r\n",
    )
    .await;
    assert_eq!(pre.status, 204);
    assert!(pre
        .header("access-control-allow-headers")
        .unwrap()
        .contains("authorization"));
    // Simple requests a page can send without a preflight.
    for ct in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    ] {
        let r = post(a, &format!("Host: localhost\r\nContent-Type: {ct}\r\n")).await;
        assert_eq!(r.status, 415, "{ct}: {}", r.text());
        assert_eq!(r.json()["error"]["code"], "unsupported_media_type");
    }
    let r = post(a, "Host: localhost\r\n").await;
    assert_eq!(r.status, 415, "no Content-Type: {}", r.text());
}

//! `statelm serve` as a process: it answers over HTTP and stops cleanly on SIGINT.

mod cli_common;

use cli_common::{gemma, statelm};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Stdio;

fn post(addr: &str, path: &str, key: &str, body: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connect");
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn serve_answers_and_stops_on_sigint() {
    let Some(model) = gemma() else { return };
    let mut child = statelm()
        .args([
            "serve",
            "-m",
            &model,
            "--port",
            "0",
            "--budget",
            "256",
            "--no-monitor",
        ])
        .env("STATELM_API_KEY", "k3y")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("statelm serve starts");
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert!(line.contains("API key required"), "{line}");
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|s| s.split('/').next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    let body = r#"{"model": "gemma3-270m", "prompt": "The capital of France is", "max_tokens": 4, "temperature": 0}"#;
    let resp = post(&addr, "/v1/completions", "k3y", body);
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(resp.contains("\"object\":\"text_completion\""), "{resp}");
    let resp = post(&addr, "/v1/completions", "wrong", body);
    assert!(resp.starts_with("HTTP/1.1 401"), "{resp}");
    let kill = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = child.wait().unwrap();
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    assert_eq!(status.code(), Some(0), "{rest}");
    assert!(rest.contains("stopped"), "{rest}");
}

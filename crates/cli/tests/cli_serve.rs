//! `statelm serve` as a process: it answers over HTTP and stops cleanly on SIGINT.

mod cli_common;

use cli_common::{gemma, statelm};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, ChildStderr, Stdio};

fn post(addr: &str, path: &str, key: &str, body: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connect");
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// A running `statelm serve` on Gemma with `args` and API key `k3y`: the child, its stderr
/// after the first line, that line and the address it names.
fn serve(model: &str, args: &[&str]) -> (Child, BufReader<ChildStderr>, String, String) {
    let mut child = statelm()
        .args(["serve", "-m", model, "--port", "0"])
        .args(args)
        .env("STATELM_API_KEY", "k3y")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("statelm serve starts");
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|s| s.split('/').next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    (child, stderr, line, addr)
}

#[test]
fn serve_answers_and_stops_on_sigint() {
    let Some(model) = gemma() else { return };
    let (mut child, mut stderr, line, addr) = serve(&model, &["--budget", "256", "--no-monitor"]);
    assert!(line.contains("API key required"), "{line}");
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

/// The memory-pressure level `GET /metrics` reports.
fn pressure(addr: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connect");
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: Bearer k3y\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.lines()
        .find_map(|l| l.strip_prefix("statelm_memory_pressure{level=\""))
        .and_then(|l| l.split('"').next())
        .unwrap_or_else(|| panic!("no pressure level in {out}"))
        .to_string()
}

/// Polls `GET /metrics` until the level is `want` (10 s at most).
fn await_pressure(addr: &str, want: &str) {
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_secs(10) {
        if pressure(addr) == want {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("pressure never became {want} (now {})", pressure(addr));
}

fn signal(child: &std::process::Child, sig: &str) {
    let status = std::process::Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn sigusr_levels_hold_lapse_and_escalate_as_the_c_abi_levels() {
    let Some(model) = gemma() else { return };
    let (mut child, _stderr, _, addr) =
        serve(&model, &["--no-monitor", "--pressure-hold-ms", "1500"]);
    assert_eq!(pressure(&addr), "normal");
    // SIGUSR1 is a WARNING that holds, then lapses by itself (nothing says "pressure over").
    signal(&child, "-USR1");
    await_pressure(&addr, "warning");
    await_pressure(&addr, "normal");
    // A second WARNING within the hold is CRITICAL; SIGUSR2 is CRITICAL at once.
    signal(&child, "-USR1");
    await_pressure(&addr, "warning");
    signal(&child, "-USR1");
    await_pressure(&addr, "critical");
    await_pressure(&addr, "normal");
    signal(&child, "-USR2");
    await_pressure(&addr, "critical");
    // The server still answers, and stops cleanly.
    let body = r#"{"model": "gemma3-270m", "prompt": "Hello", "max_tokens": 2, "temperature": 0}"#;
    let resp = post(&addr, "/v1/completions", "k3y", body);
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    signal(&child, "-INT");
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

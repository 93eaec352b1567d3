//! A minimal HTTP/1.1 client over a raw TCP stream: exactly the bytes a test means to send,
//! including malformed and oversized requests.

use serde_json::Value;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A response.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "status {}: body is not JSON ({e}): {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn head(method: &str, path: &str, key: Option<&str>, len: usize) -> String {
    let auth = key.map_or(String::new(), |k| format!("Authorization: Bearer {k}\r\n"));
    format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{auth}\
         Content-Type: application/json\r\nContent-Length: {len}\r\n\r\n"
    )
}

/// Sends a request and reads the whole response (the server closes the connection).
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: &[u8],
) -> Resp {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let (mut rd, mut wr) = s.split();
    let mut req = head(method, path, key, body.len()).into_bytes();
    req.extend_from_slice(body);
    // Write and read at once: the server may answer (413) before reading a large body.
    let write = async {
        let _ = wr.write_all(&req).await;
    };
    let read = async {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 16384];
        loop {
            match rd.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf
    };
    let ((), raw) = tokio::join!(write, read);
    parse(&raw)
}

/// Parses a raw response (Content-Length or chunked).
pub fn parse(raw: &[u8]) -> Resp {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let rest = &raw[split + 4..];
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_vec()
    };
    Resp {
        status,
        headers,
        body,
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let size =
            usize::from_str_radix(String::from_utf8_lossy(&b[..eol]).trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = eol + 2;
        let end = (start + size).min(b.len());
        out.extend_from_slice(&b[start..end]);
        b = &b[(end + 2).min(b.len())..];
    }
    out
}

/// Opens a streaming request and returns the connection after the request is written.
pub async fn open(addr: SocketAddr, path: &str, key: Option<&str>, body: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let mut req = head("POST", path, key, body.len()).into_bytes();
    req.extend_from_slice(body);
    s.write_all(&req).await.expect("write");
    s
}

/// Reads from `s` until `data:` lines appear `n` times; returns what was read.
pub async fn read_events(s: &mut TcpStream, n: usize) -> String {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while String::from_utf8_lossy(&buf).matches("data: ").count() < n {
        let k = s.read(&mut chunk).await.expect("read");
        assert!(
            k > 0,
            "stream ended early: {}",
            String::from_utf8_lossy(&buf)
        );
        buf.extend_from_slice(&chunk[..k]);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// The JSON payloads of the `data:` lines of an SSE body (`[DONE]` as a string).
pub fn sse_data(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap_or(Value::String(d.to_string())))
        .collect()
}

/// Sends `raw` (a whole request, head and body) and reads the response.
pub async fn raw(addr: SocketAddr, raw: &str) -> Resp {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(raw.as_bytes()).await.expect("write");
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf).await;
    parse(&buf)
}

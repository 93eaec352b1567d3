//! A durable chat survives a real kill: `statelm chat --session-dir` is killed in the middle
//! of a later turn — by the kernel's OOM killer inside a real memory cgroup when this machine
//! lets the test create one (root, cgroup v1 or v2 memory controller), else by SIGKILL — and
//! `--resume` brings back every completed turn and answers the next one.

mod cli_common;

use cli_common::{gemma, statelm, text};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TURN_1: &str = "My name is Ada and my favourite colour is teal. Say hello.";
const TURN_2: &str = "What is two plus two?";
const TURN_3: &str = "Write a long story about a lighthouse keeper and the sea.";
/// The turn killed when the engine answered turn 3 within the cgroup's limit.
const TURN_4: &str = "Write a long story about a fisherman and the storm.";
/// What turn 3 adds to its prompt: a few hundred tokens, so its prefill grows the KV cache
/// by more than the cgroup's margin.
const TURN_3_CONTEXT: &str = " The sea was calm and grey that morning, and the gulls were quiet.";

/// A memory cgroup this test made (removed on drop, after its processes are gone).
struct Cgroup {
    dir: PathBuf,
    v1: bool,
}

impl Cgroup {
    /// A fresh memory cgroup, if this machine lets us make one.
    fn create() -> Option<Cgroup> {
        let name = format!("statelm-durable-test-{}", std::process::id());
        let v1 = Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists();
        let parent = if v1 {
            PathBuf::from("/sys/fs/cgroup/memory")
        } else {
            let root = PathBuf::from("/sys/fs/cgroup");
            let ctl = std::fs::read_to_string(root.join("cgroup.subtree_control")).ok()?;
            if !ctl.split_whitespace().any(|c| c == "memory") {
                return None;
            }
            root
        };
        let dir = parent.join(name);
        std::fs::create_dir(&dir).ok()?;
        Some(Cgroup { dir, v1 })
    }

    fn file(&self, v1: &str, v2: &str) -> PathBuf {
        self.dir.join(if self.v1 { v1 } else { v2 })
    }

    fn usage(&self) -> Option<u64> {
        let f = self.file("memory.usage_in_bytes", "memory.current");
        std::fs::read_to_string(f).ok()?.trim().parse().ok()
    }

    fn set_limit(&self, bytes: u64) -> bool {
        let f = self.file("memory.limit_in_bytes", "memory.max");
        std::fs::write(f, bytes.to_string()).is_ok()
    }

    /// OOM kills the kernel counted in this cgroup (`None`: not reported here).
    fn oom_kills(&self) -> Option<u64> {
        let f = self.file("memory.oom_control", "memory.events");
        let text = std::fs::read_to_string(f).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("warning: could not remove {}", self.dir.display());
    }
}

/// A running chat whose stdout and stderr are collected on threads.
struct Chat {
    child: Child,
    stdin: ChildStdin,
    out: Arc<Mutex<String>>,
    err: Arc<Mutex<String>>,
}

fn collect(mut r: impl Read + Send + 'static) -> Arc<Mutex<String>> {
    let buf = Arc::new(Mutex::new(String::new()));
    let b = buf.clone();
    std::thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = r.read(&mut chunk) {
            if n == 0 {
                break;
            }
            b.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&chunk[..n]));
        }
    });
    buf
}

impl Chat {
    /// Starts `statelm chat ARGS`, inside `cgroup` if given.
    fn start(args: &[&str], cgroup: Option<&Cgroup>) -> Chat {
        let mut cmd = statelm();
        if let Some(cg) = cgroup {
            // The shell joins the cgroup, then becomes statelm (same pid).
            let procs = cg.dir.join("cgroup.procs");
            let script = format!("echo $$ > '{}' && exec \"$0\" \"$@\"", procs.display());
            let program = cmd.get_program().to_owned();
            let envs: Vec<_> = cmd
                .get_envs()
                .map(|(k, v)| (k.to_owned(), v.map(|v| v.to_owned())))
                .collect();
            cmd = std::process::Command::new("sh");
            cmd.arg("-c").arg(script).arg(program);
            for (k, v) in envs {
                match v {
                    Some(v) => cmd.env(k, v),
                    None => cmd.env_remove(k),
                };
            }
        }
        let mut child = cmd
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("statelm starts");
        let stdin = child.stdin.take().expect("stdin");
        let out = collect(child.stdout.take().expect("stdout"));
        let err = collect(child.stderr.take().expect("stderr"));
        Chat {
            child,
            stdin,
            out,
            err,
        }
    }

    fn send(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").expect("write to chat");
        self.stdin.flush().expect("flush");
    }

    fn out(&self) -> String {
        self.out.lock().unwrap().clone()
    }

    fn err(&self) -> String {
        self.err.lock().unwrap().clone()
    }

    /// Waits until `cond(stdout, stderr)` holds (panics after a minute or if the chat ended).
    fn wait_for(&mut self, what: &str, cond: impl Fn(&str, &str) -> bool) {
        let start = Instant::now();
        while !cond(&self.out(), &self.err()) {
            let ended = self.child.try_wait().expect("try_wait");
            assert!(
                ended.is_none() && start.elapsed() < Duration::from_secs(90),
                "waiting for {what}: {ended:?}\nstdout {}\nstderr {}",
                self.out(),
                self.err()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends a message, waits for its answer to finish (a `/stats` line after it), and
    /// returns the answer.
    fn turn(&mut self, message: &str) -> String {
        let (before, stats) = (self.out().len(), self.err().matches("[state ").count());
        self.send(message);
        self.send("/stats");
        self.wait_for("an answer", |_, e| e.matches("[state ").count() > stats);
        self.out()[before..].trim().to_string()
    }
}

/// How [`kill_mid_turn`] ended the chat.
struct Killed {
    /// In words.
    how: &'static str,
    /// The message whose answer was cut short (never a completed turn).
    message: &'static str,
    /// Turn 3's answer, when the engine answered it within the cgroup's limit (held to what
    /// fits) and a later turn was the one killed.
    answered_under_limit: Option<String>,
}

/// Kills the chat in the middle of a turn: by the OOM killer inside `cgroup` (its limit set
/// just above what the chat uses now), else by SIGKILL once the answer has started. The engine
/// reads the cgroup's limit too and keeps within it: it may refuse turn 3 (then the limit is
/// lifted and the turn sent again) or answer it with the conversation trimmed to what fits
/// (then the limit is lifted and turn 4 is the one killed). Either way the chat dies by a real
/// signal in the middle of an answer.
fn kill_mid_turn(chat: &mut Chat, cgroup: Option<&Cgroup>) -> Killed {
    use std::os::unix::process::ExitStatusExt;
    let (before, errors) = (chat.out().len(), chat.err().matches("error:").count());
    let stats = chat.err().matches("[state ").count();
    let mut limited = cgroup.and_then(|cg| {
        let usage = cg.usage()?;
        cg.set_limit(usage + (2 << 20)).then_some(cg)
    });
    let long_turn = |m: &str| format!("{m}{}", TURN_3_CONTEXT.repeat(30));
    chat.send(&long_turn(TURN_3));
    // Printed once turn 3 is over (the chat reads its next line after the answer).
    chat.send("/stats");
    let start = Instant::now();
    let (mut message, mut answered_under_limit, mut before) = (TURN_3, None, before);
    let how = loop {
        if let Some(status) = chat.child.try_wait().expect("try_wait") {
            assert_eq!(status.signal(), Some(9), "killed by the kernel: {status:?}");
            break "OOM-killed under a real cgroup memory limit";
        }
        if let Some(cg) = limited {
            let refused = chat.err().matches("error:").count() > errors;
            let answered = chat.err().matches("[state ").count() > stats;
            if refused || answered {
                assert!(
                    !refused || chat.err().contains("memory"),
                    "refused for memory: {}",
                    chat.err()
                );
                eprintln!(
                    "the engine {} turn 3 under the limit; lifting it",
                    if refused { "refused" } else { "answered" }
                );
                if answered && !refused {
                    answered_under_limit = Some(chat.out()[before..].trim().to_string());
                    message = TURN_4;
                }
                assert!(cg.set_limit(u64::MAX >> 2), "lift the limit");
                limited = None;
                before = chat.out().len();
                chat.send(&long_turn(message));
            }
        }
        let started = chat.out().len() > before + 8;
        let patience = if limited.is_some() { 30 } else { 0 };
        if started && start.elapsed() > Duration::from_secs(patience) {
            chat.child.kill().expect("SIGKILL");
            chat.child.wait().expect("wait");
            break "SIGKILLed mid-answer";
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "turn 3 never ran"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    if let (Some(cg), "OOM-killed under a real cgroup memory limit") = (cgroup, how) {
        if let Some(n) = cg.oom_kills() {
            assert!(n >= 1, "the cgroup counted no OOM kill");
        }
    }
    Killed {
        how,
        message,
        answered_under_limit,
    }
}

#[test]
fn a_killed_chat_resumes_with_every_completed_turn() {
    let Some(model) = gemma() else { return };
    let dir = tempfile::tempdir().unwrap();
    let sessions = dir.path().join("sessions");
    let sessions = sessions.to_str().unwrap();
    // The weights become page cache charged to this process's cgroup, not the test's.
    let _ = std::io::copy(
        &mut std::fs::File::open(&model).unwrap(),
        &mut std::io::sink(),
    );
    let cgroup = Cgroup::create();
    let args = [
        "chat",
        "-m",
        &model,
        "--temp",
        "0",
        "--max-tokens",
        "200",
        "--no-monitor",
        "--session-dir",
        sessions,
        "--session",
        "ada",
    ];
    let mut chat = Chat::start(&args, cgroup.as_ref());
    let answer_1 = chat.turn(TURN_1);
    let answer_2 = chat.turn(TURN_2);
    assert!(!answer_1.is_empty() && !answer_2.is_empty());
    let killed = kill_mid_turn(&mut chat, cgroup.as_ref());
    eprintln!("the chat was {}", killed.how);
    let partial = chat.out();
    drop(chat);
    drop(cgroup);

    // Restart: every completed turn is back, the killed one is not, and the next turn answers.
    let mut resume_args = args.to_vec();
    let n = resume_args.len();
    resume_args[n - 2] = "--resume";
    let mut o = statelm()
        .args(&resume_args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let script = "/history\n/stats\nWhat is my name?\n/quit\n";
    o.stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let o = o.wait_with_output().unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(err.contains("[conversation 'ada' resumed: "), "{err}");
    assert!(err.contains("re-prefilled]"), "the Resumed event: {err}");
    for part in [TURN_1, TURN_2, &answer_1, &answer_2] {
        assert!(
            out.contains(part),
            "{part:?} missing from {out}\n(killed run: {partial})"
        );
    }
    assert!(
        !out.contains(killed.message),
        "the killed turn is not a completed one: {out}"
    );
    let last_answer = killed.answered_under_limit.unwrap_or(answer_2);
    assert!(
        out.contains(&last_answer),
        "{last_answer:?} (answered under the limit) missing from {out}"
    );
    let history_end = out.find(&last_answer).unwrap() + last_answer.len();
    let answer_4 = out[history_end..].trim();
    assert!(!answer_4.is_empty(), "the next turn answers: {out}\n{err}");

    bad_names_are_errors(&args);
}

/// Resuming a name that was never used is an error, not a new conversation; a name that is
/// not a plain file name is refused.
fn bad_names_are_errors(args: &[&str]) {
    let n = args.len();
    let mut bad = args.to_vec();
    bad[n - 2] = "--resume";
    bad[n - 1] = "nobody";
    let o = cli_common::run(&bad, "");
    assert_eq!(o.status.code(), Some(1), "{:?}", text(&o));
    let mut bad = args.to_vec();
    bad[n - 1] = "../escape";
    let o = cli_common::run(&bad, "");
    assert_eq!(o.status.code(), Some(1), "{:?}", text(&o));
    assert!(
        text(&o).1.contains("invalid session name"),
        "{:?}",
        text(&o)
    );
}

/// Starts `statelm serve ARGS` on a free port; returns it with its address.
fn serve(args: &[&str]) -> (Child, String) {
    use std::io::BufRead;
    let mut child = statelm()
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("statelm serve starts");
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|s| s.split('/').next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    (child, addr)
}

/// One chat request of conversation `user`; the reply's JSON.
fn chat(addr: &str, user: &str, messages: &[(&str, &str)], max_tokens: usize) -> String {
    let messages: Vec<_> = messages
        .iter()
        .map(|(role, content)| serde_json::json!({"role": role, "content": content}))
        .collect();
    let body = serde_json::json!({
        "messages": messages, "user": user, "max_tokens": max_tokens, "temperature": 0,
    })
    .to_string();
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.split_once("\r\n\r\n")
        .map_or(out.clone(), |(_, b)| b.to_string())
}

fn answer(reply: &str) -> String {
    let v: serde_json::Value =
        serde_json::from_str(reply).unwrap_or_else(|e| panic!("{e}: {reply}"));
    v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_else(|| panic!("no answer in {reply}"))
        .to_string()
}

#[test]
fn a_killed_server_resumes_a_users_conversation() {
    let Some(model) = gemma() else { return };
    let dir = tempfile::tempdir().unwrap();
    let sessions = dir.path().join("sessions");
    let args = [
        "serve",
        "-m",
        &model,
        "--port",
        "0",
        "--no-monitor",
        "--session-dir",
        sessions.to_str().unwrap(),
    ];
    let (mut server, addr) = serve(&args);
    let a1 = answer(&chat(&addr, "ada", &[("user", TURN_1)], 24));
    let reply_2 = chat(
        &addr,
        "ada",
        &[("user", TURN_1), ("assistant", &a1), ("user", TURN_2)],
        24,
    );
    let a2 = answer(&reply_2);
    let usage_2: serde_json::Value = serde_json::from_str(&reply_2).unwrap();
    let usage_2 = &usage_2["usage"];
    // The conversation's history after turn 2: its prompt and its answer's tokens.
    let after_2 =
        usage_2["prompt_tokens"].as_u64().unwrap() + usage_2["completion_tokens"].as_u64().unwrap();
    // A third turn is generating when the server is killed.
    let third = {
        let (addr, a1, a2) = (addr.clone(), a1.clone(), a2.clone());
        std::thread::spawn(move || {
            let conv = [
                ("user", TURN_1),
                ("assistant", &a1),
                ("user", TURN_2),
                ("assistant", &a2),
                ("user", TURN_3),
            ];
            chat(&addr, "ada", &conv, 400)
        })
    };
    std::thread::sleep(Duration::from_millis(700));
    server.kill().expect("SIGKILL");
    server.wait().unwrap();
    let third_finished = third.join().unwrap_or_default().contains("\"choices\"");

    let (mut server, addr) = serve(&args);
    let conv = [
        ("user", TURN_1),
        ("assistant", a1.as_str()),
        ("user", TURN_2),
        ("assistant", a2.as_str()),
        ("user", "What is my name?"),
    ];
    let reply = chat(&addr, "ada", &conv, 16);
    assert!(!answer(&reply).is_empty(), "{reply}");
    let v: serde_json::Value = serde_json::from_str(&reply).unwrap();
    let resumed = v["statelm"]["events"]
        .as_array()
        .and_then(|evs| evs.iter().find(|e| e["event"] == "resumed"))
        .unwrap_or_else(|| panic!("no resumed event in {reply}"))
        .clone();
    assert_eq!(resumed["name"], "ada");
    // Every completed turn is back, and nothing of the one that was killed.
    let history = resumed["history_tokens"].as_u64().unwrap();
    if third_finished {
        assert!(history > after_2, "{resumed}");
    } else {
        assert_eq!(history, after_2, "{resumed}");
    }
    let (restored, reprefilled) = (
        resumed["restored_tokens"].as_u64().unwrap(),
        resumed["reprefilled_tokens"].as_u64().unwrap(),
    );
    assert_eq!(restored + reprefilled, history, "{resumed}");
    // A bad name is refused, not a path.
    let bad = chat(&addr, "../x", &[("user", "hi")], 4);
    assert!(bad.contains("invalid session name"), "{bad}");
    server.kill().unwrap();
    server.wait().unwrap();
}

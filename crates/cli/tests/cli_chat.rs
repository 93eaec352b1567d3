//! A scripted `statelm chat` session (stdin piped): answers, commands, the trim indicator.

mod cli_common;

use cli_common::{gemma, run, text};

#[test]
fn scripted_chat_shows_trims_and_runs_commands() {
    let Some(model) = gemma() else { return };
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("conversation.session");
    let saved = saved.to_str().unwrap();
    let script = format!(
        "Hello! Who are you?\n\
         Tell me about the ocean.\n\
         /stats\n\
         What is the capital of France?\n\
         /save {saved}\n\
         /reset\n\
         /stats\n\
         /load {saved}\n\
         Thanks!\n\
         /bogus\n\
         /quit\n\
         This line is never read.\n"
    );
    let o = run(
        &[
            "chat",
            "-m",
            &model,
            "--budget",
            "64",
            "--max-tokens",
            "24",
            "--temp",
            "0",
            // Other tests of the suite squeeze memory on purpose (cgroup limits, balloons);
            // the machine-wide pressure they cause must not evict this chat's state.
            "--no-monitor",
        ],
        &script,
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    // One answer line (at least) per message, nothing after /quit.
    assert!(
        out.lines().filter(|l| !l.trim().is_empty()).count() >= 4,
        "{out}"
    );
    // The context passed the budget of 64: the indicator says what was kept.
    let trims: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("[context trimmed: kept "))
        .collect();
    assert!(!trims.is_empty(), "no trim indicator in {err}");
    for t in &trims {
        let nums: Vec<usize> = t
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|s| s.parse().ok())
            .collect();
        assert!(nums[0] < nums[1] && nums[0] <= 64, "{t}");
    }
    assert!(
        !err.contains('\x1b'),
        "no colour when stderr is not a terminal"
    );
    assert!(err.contains("budget 64"), "{err}");
    assert!(
        err.contains(", trimmed"),
        "/stats shows the trimmed state: {err}"
    );
    assert!(
        err.contains(&format!("[conversation saved to {saved}]")),
        "{err}"
    );
    assert!(err.contains("[conversation reset]"), "{err}");
    assert!(
        err.contains("[no conversation yet; token budget 64]"),
        "{err}"
    );
    assert!(
        err.contains(&format!("[conversation loaded from {saved}: ")),
        "{err}"
    );
    assert!(err.contains("[unknown command /bogus"), "{err}");
    assert!(!err.contains("error"), "{err}");
}

#[test]
fn chat_keeps_the_state_across_turns() {
    let Some(model) = gemma() else { return };
    let o = run(
        &[
            "chat",
            "-m",
            &model,
            "--max-tokens",
            "8",
            "--temp",
            "0",
            "-v",
            "--system",
            "Be brief.",
            "--no-monitor",
        ],
        "Hi!\nHow are you?\n/stats\n",
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    // -v logs each turn's statistics: the second turn reused the first one's State.
    let cached: Vec<usize> = err
        .lines()
        .filter_map(|l| l.split("tokens (").nth(1))
        .filter_map(|s| s.split(' ').next()?.parse().ok())
        .collect();
    assert_eq!(cached.len(), 2, "{err}");
    assert_eq!(cached[0], 0, "{err}");
    assert!(
        cached[1] > 10,
        "the second turn computed only itself: {err}"
    );
    assert!(err.contains("pinned "), "{err}");
    assert!(!err.contains("[context trimmed"), "{err}");
}

fn interrupt(child: &std::process::Child) {
    let ok = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -INT");
}

#[test]
fn ctrl_c_stops_the_answer_not_the_chat() {
    use std::io::{Read, Write};
    use std::process::Stdio;
    use std::time::Duration;
    let Some(model) = gemma() else { return };
    let mut child = cli_common::statelm()
        .args([
            "chat",
            "-m",
            &model,
            "--temp",
            "0",
            "--max-tokens",
            "3000",
            "--no-monitor",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("statelm chat starts");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    writeln!(stdin, "Count from 1 to 1000, separated by commas.").unwrap();
    // The answer has started: interrupt it.
    let mut first = [0u8; 1];
    stdout.read_exact(&mut first).unwrap();
    interrupt(&child);
    std::thread::sleep(Duration::from_millis(500));
    // The chat goes on...
    writeln!(stdin, "/stats").unwrap();
    std::thread::sleep(Duration::from_millis(500));
    // ...until Ctrl-C is pressed twice at the prompt.
    interrupt(&child);
    std::thread::sleep(Duration::from_millis(200));
    interrupt(&child);
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("[interrupted]"), "{err}");
    assert!(
        err.contains("[state "),
        "/stats ran after the interrupt: {err}"
    );
    assert!(err.contains("[Ctrl-C again to quit"), "{err}");
}

/// Whether some run of `n` words occurs `times` times or more in `text`.
fn repeats(text: &str, n: usize, times: usize) -> bool {
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut counts = std::collections::HashMap::new();
    words.windows(n).any(|w| {
        let c = counts.entry(w).or_insert(0);
        *c += 1;
        *c >= times
    })
}

/// `statelm chat --budget 300` on Qwen2.5-Coder with its chat defaults (DRY and the loop
/// guard on), greedy: three coding questions get answers, not an endless loop, across
/// whole-turn trims that are all announced.
#[test]
fn tight_budget_chat_answers_coding_questions_without_looping() {
    let Some(model) = cli_common::qwen() else {
        return;
    };
    let o = run(
        &[
            "chat",
            "-m",
            &model,
            "--budget",
            "300",
            "--max-tokens",
            "200",
            "--temp",
            "0",
            "--no-monitor",
        ],
        "Write a Python function that checks whether a number is prime.\n\
         Now write a unit test for it.\n\
         What was the first thing I asked you?\n",
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(err.contains("[context trimmed: kept "), "{err}");
    assert!(!repeats(&out, 8, 6), "an answer loops:\n{out}");
    assert!(out.contains("def "), "{out}");
}

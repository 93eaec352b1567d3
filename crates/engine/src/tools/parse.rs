//! Tool calls out of a streaming answer: text outside calls passes through, calls become
//! events as they are generated.

use super::ToolFormat;
use crate::events::Event;
use crate::rng::Rng;
use serde_json::Value;

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// What a piece of answer text became.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ToolOutput {
    /// The answer's text (outside calls).
    pub text: String,
    /// Tool-call events, in order.
    pub events: Vec<Event>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Where {
    /// Answer text (holding back what could start `<tool_call>`).
    Text,
    /// Inside a call, before its arguments: `{"name": "...", "arguments": `.
    Head,
    /// Inside the arguments (holding back what could be the call's end).
    Arguments,
    /// Inside a call whose head has another shape: read whole at its end.
    Raw,
}

/// Reads an answer's tool calls as its text streams ([`ToolCallParser::push`], then
/// [`ToolCallParser::finish`]).
#[derive(Debug)]
pub struct ToolCallParser {
    format: ToolFormat,
    at: Where,
    buf: String,
    /// The current call's arguments so far.
    args: String,
    /// Calls started so far.
    calls: usize,
    /// A call just ended: whitespace before the next one (or the end) is not answer text.
    after_call: bool,
    /// The answer began with text: a `{` later is text, not a bare call.
    seen_text: bool,
    /// The current call is a bare object (no tags): it ends with the answer.
    bare: bool,
    rng: Rng,
}

impl ToolCallParser {
    /// A parser for answers in `format`.
    pub fn new(format: ToolFormat) -> ToolCallParser {
        ToolCallParser {
            format,
            at: Where::Text,
            buf: String::new(),
            args: String::new(),
            calls: 0,
            after_call: false,
            seen_text: false,
            bare: false,
            rng: Rng::from_entropy(),
        }
    }

    /// How many calls the answer has started.
    pub fn calls(&self) -> usize {
        self.calls
    }

    /// Reads the next piece of the answer's text.
    pub fn push(&mut self, text: &str) -> ToolOutput {
        let mut out = ToolOutput::default();
        self.buf.push_str(text);
        if self.format != ToolFormat::Generic {
            while self.step(&mut out) {}
        }
        out
    }

    /// Ends the answer: what was held back, and a call cut off before its end as
    /// [`Event::ToolCallUnfinished`].
    pub fn finish(&mut self) -> ToolOutput {
        let mut out = ToolOutput::default();
        let rest = std::mem::take(&mut self.buf);
        match (self.format, self.at) {
            (ToolFormat::Generic, _) => self.generic(&rest, &mut out),
            (_, Where::Text) if self.after_call => out.text = rest.trim_start().to_string(),
            (_, Where::Text) => out.text = rest,
            (_, Where::Arguments) if self.bare && rest.trim() == "}" => {
                let index = self.calls - 1;
                let arguments = std::mem::take(&mut self.args);
                match serde_json::from_str::<Value>(&arguments) {
                    Ok(_) => out.events.push(Event::ToolCallEnd { index, arguments }),
                    Err(_) => out.events.push(Event::ToolCallUnfinished {
                        index,
                        text: arguments,
                    }),
                }
            }
            (_, Where::Arguments) => {
                self.args.push_str(&rest);
                out.events.push(Event::ToolCallUnfinished {
                    index: self.calls - 1,
                    text: std::mem::take(&mut self.args),
                });
            }
            (_, Where::Raw) if self.bare && serde_json::from_str::<Value>(&rest).is_ok() => {
                let v: Value = serde_json::from_str(&rest).unwrap_or_default();
                let key = if v.get("parameters").is_some() {
                    "parameters"
                } else {
                    "arguments"
                };
                self.whole_call(&v, key, &mut out);
            }
            (_, Where::Head | Where::Raw) => {
                self.calls += 1;
                out.events.push(Event::ToolCallUnfinished {
                    index: self.calls - 1,
                    text: rest,
                });
            }
        }
        self.at = Where::Text;
        out
    }

    /// One step of the Hermes reader; `false` when it needs more text.
    fn step(&mut self, out: &mut ToolOutput) -> bool {
        if self.at == Where::Text && self.after_call {
            let ws = self.buf.len() - self.buf.trim_start().len();
            self.buf.drain(..ws);
            if self.buf.is_empty() {
                return false;
            }
            self.after_call = false;
        }
        if self.at == Where::Text && !self.seen_text && self.calls == 0 {
            // The answer's start: a bare call object, or text.
            let t = self.buf.trim_start();
            if t.is_empty() {
                return false;
            }
            if t.starts_with('{') {
                let ws = self.buf.len() - t.len();
                self.buf.drain(..ws);
                self.bare = true;
                self.at = Where::Head;
                return true;
            }
            self.seen_text = true;
        }
        match self.at {
            Where::Text => match self.buf.find(OPEN) {
                Some(i) => {
                    out.text.push_str(&self.buf[..i]);
                    self.buf.drain(..i + OPEN.len());
                    self.at = Where::Head;
                    self.bare = false;
                    true
                }
                None => {
                    let keep = held_prefix(&self.buf, OPEN);
                    out.text.push_str(&self.buf[..self.buf.len() - keep]);
                    self.buf.drain(..self.buf.len() - keep);
                    false
                }
            },
            Where::Head => match head(&self.buf) {
                Head::Incomplete => false,
                Head::Other => {
                    self.at = Where::Raw;
                    true
                }
                Head::Call { name, len } => {
                    out.events.push(Event::ToolCallStart {
                        index: self.calls,
                        id: self.new_id(),
                        name,
                    });
                    self.calls += 1;
                    self.buf.drain(..len);
                    self.args.clear();
                    self.at = Where::Arguments;
                    true
                }
            },
            Where::Arguments => self.arguments(out),
            Where::Raw => self.raw(out),
        }
    }

    /// Streams arguments, holding back from the last `}` what could end the call.
    fn arguments(&mut self, out: &mut ToolOutput) -> bool {
        let index = self.calls - 1;
        if let Some(j) = self.buf.find(CLOSE).filter(|_| !self.bare) {
            let body = self.buf[..j].trim_end();
            let piece = body.strip_suffix('}').unwrap_or(body).to_string();
            self.buf.drain(..j + CLOSE.len());
            self.emit_args(index, piece, out);
            out.events.push(Event::ToolCallEnd {
                index,
                arguments: std::mem::take(&mut self.args),
            });
            self.at = Where::Text;
            self.after_call = true;
            return true;
        }
        let hold = match self.buf.rfind('}') {
            Some(k) if CLOSE.starts_with(self.buf[k + 1..].trim_start()) => self.buf.len() - k,
            _ => 0,
        };
        let piece: String = self.buf.drain(..self.buf.len() - hold).collect();
        self.emit_args(index, piece, out);
        false
    }

    fn emit_args(&mut self, index: usize, piece: String, out: &mut ToolOutput) {
        if !piece.is_empty() {
            self.args.push_str(&piece);
            out.events
                .push(Event::ToolCallArguments { index, text: piece });
        }
    }

    /// A call of another shape: read whole at `</tool_call>`.
    fn raw(&mut self, out: &mut ToolOutput) -> bool {
        let Some(j) = self.buf.find(CLOSE).filter(|_| !self.bare) else {
            return false;
        };
        let body: String = self.buf.drain(..j + CLOSE.len()).collect();
        let body = &body[..j];
        match serde_json::from_str::<Value>(body) {
            Ok(v) => self.whole_call(&v, "arguments", out),
            Err(_) => {
                self.calls += 1;
                out.events.push(Event::ToolCallUnfinished {
                    index: self.calls - 1,
                    text: body.to_string(),
                });
            }
        }
        self.at = Where::Text;
        self.after_call = true;
        true
    }

    /// A call given whole (`{"name": ..., key: {...}}`) as its three events.
    fn whole_call(&mut self, v: &Value, key: &str, out: &mut ToolOutput) {
        let index = self.calls;
        self.calls += 1;
        let name = v["name"].as_str().unwrap_or_default().to_string();
        let arguments = v
            .get(key)
            .map_or_else(|| "{}".to_string(), Value::to_string);
        out.events.push(Event::ToolCallStart {
            index,
            id: self.new_id(),
            name,
        });
        out.events.push(Event::ToolCallArguments {
            index,
            text: arguments.clone(),
        });
        out.events.push(Event::ToolCallEnd { index, arguments });
    }

    /// The generic format's one JSON object: calls, or the answer's text.
    fn generic(&mut self, text: &str, out: &mut ToolOutput) {
        let v: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(_) if text.trim_start().starts_with('{') => {
                out.events.push(Event::ToolCallUnfinished {
                    index: self.calls,
                    text: text.to_string(),
                });
                self.calls += 1;
                return;
            }
            Err(_) => {
                out.text = text.to_string();
                return;
            }
        };
        if let Some(r) = v.get("response").and_then(Value::as_str) {
            out.text = r.to_string();
        } else if let Some(c) = v.get("tool_call") {
            self.whole_call(c, "arguments", out);
        } else if let Some(calls) = v.get("tool_calls").and_then(Value::as_array) {
            for c in calls {
                self.whole_call(c, "arguments", out);
            }
        } else {
            out.text = text.to_string();
        }
    }

    fn new_id(&mut self) -> String {
        let (a, b) = (self.rng.next_u64(), self.rng.next_u64());
        format!("call_{a:016x}{:08x}", b >> 32)
    }
}

/// How many bytes at the end of `s` could be the start of `word`.
fn held_prefix(s: &str, word: &str) -> usize {
    (1..word.len().min(s.len() + 1))
        .rev()
        .find(|&n| s.is_char_boundary(s.len() - n) && word.starts_with(&s[s.len() - n..]))
        .unwrap_or(0)
}

enum Head {
    Incomplete,
    Other,
    Call { name: String, len: usize },
}

/// Reads `\s*{"name": "NAME", "arguments": ` (any whitespace) at the start of `s`.
fn head(s: &str) -> Head {
    let mut rest = s;
    let mut name = String::new();
    for part in [
        "{",
        "\"name\"",
        ":",
        "\"",
        "NAME",
        ",",
        "\"arguments\"",
        ":",
    ] {
        rest = rest.trim_start();
        if part == "NAME" {
            let Some(end) = rest.find('"') else {
                return Head::Incomplete;
            };
            name = rest[..end].to_string();
            rest = &rest[end + 1..];
            continue;
        }
        if rest.len() < part.len() {
            return match part.starts_with(rest) {
                true => Head::Incomplete,
                false => Head::Other,
            };
        }
        match rest.strip_prefix(part) {
            Some(r) => rest = r,
            None => return Head::Other,
        }
    }
    let rest = rest.trim_start();
    if rest.is_empty() {
        return Head::Incomplete;
    }
    Head::Call {
        name,
        len: s.len() - rest.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(format: ToolFormat, pieces: &[&str]) -> (String, Vec<Event>) {
        let mut p = ToolCallParser::new(format);
        let (mut text, mut events) = (String::new(), Vec::new());
        for piece in pieces {
            let o = p.push(piece);
            text.push_str(&o.text);
            events.extend(o.events);
        }
        let o = p.finish();
        text.push_str(&o.text);
        events.extend(o.events);
        (text, events)
    }

    fn calls(events: &[Event]) -> Vec<(String, String, bool)> {
        let mut out: Vec<(String, String, bool)> = Vec::new();
        for e in events {
            match e {
                Event::ToolCallStart { name, .. } => out.push((name.clone(), String::new(), false)),
                Event::ToolCallArguments { index, text } => out[*index].1.push_str(text),
                Event::ToolCallEnd { index, arguments } => {
                    assert_eq!(&out[*index].1, arguments);
                    out[*index].2 = true;
                }
                _ => {}
            }
        }
        out
    }

    const ANSWER: &str = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"at\": {\"h\": 9}}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";

    #[test]
    fn hermes_calls_stream_in_any_split() {
        let want = vec![
            (
                "get_weather".to_string(),
                "{\"city\": \"Paris\", \"at\": {\"h\": 9}}".to_string(),
                true,
            ),
            ("get_time".to_string(), "{}".to_string(), true),
        ];
        // Every split into pieces of 1, 2, 3 and 7 bytes (on character boundaries).
        for size in [1, 2, 3, 7, ANSWER.len()] {
            let pieces: Vec<&str> = (0..ANSWER.len())
                .step_by(size)
                .map(|i| &ANSWER[i..(i + size).min(ANSWER.len())])
                .collect();
            let (text, events) = run(ToolFormat::Hermes, &pieces);
            assert_eq!(text, "Let me check.\n", "{size}");
            assert_eq!(calls(&events), want, "{size}");
        }
    }

    #[test]
    fn cut_off_calls_are_unfinished_and_plain_text_passes() {
        let (text, events) = run(
            ToolFormat::Hermes,
            &["<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1"],
        );
        assert_eq!(text, "");
        assert!(matches!(&events[1], Event::ToolCallArguments { text, .. } if text == "{\"a\": 1"));
        assert!(
            matches!(&events[2], Event::ToolCallUnfinished { index: 0, .. }),
            "{events:?}"
        );
        let (text, events) = run(ToolFormat::Hermes, &["a < b and <tool", "s> are fine"]);
        assert_eq!(text, "a < b and <tools> are fine");
        assert!(events.is_empty());
    }

    #[test]
    fn a_bare_call_object_is_a_call() {
        let answer = " {\"name\": \"f\", \"arguments\": {\"a\": {\"b\": 1}}}";
        for size in [1, 3, answer.len()] {
            let pieces: Vec<&str> = (0..answer.len())
                .step_by(size)
                .map(|i| &answer[i..(i + size).min(answer.len())])
                .collect();
            let (text, events) = run(ToolFormat::Hermes, &pieces);
            assert_eq!(text, "");
            let want = vec![("f".to_string(), "{\"a\": {\"b\": 1}}".to_string(), true)];
            assert_eq!(calls(&events), want, "{size}");
        }
        // Llama 3's key.
        let (_, events) = run(
            ToolFormat::Llama3,
            &["{\"name\": \"g\", \"param", "eters\": {}}"],
        );
        assert_eq!(
            calls(&events),
            vec![("g".to_string(), "{}".to_string(), true)]
        );
        // Text first: a brace later is text.
        let (text, events) = run(ToolFormat::Hermes, &["Use {x} here"]);
        assert_eq!((text.as_str(), events.len()), ("Use {x} here", 0));
    }

    #[test]
    fn the_generic_format_gives_calls_or_text() {
        let (text, events) = run(
            ToolFormat::Generic,
            &[
                "{\"tool_calls\": [{\"name\": \"f\", ",
                "\"arguments\": {\"x\": 2}}]}",
            ],
        );
        assert_eq!(text, "");
        assert_eq!(
            calls(&events),
            vec![("f".to_string(), "{\"x\":2}".to_string(), true)]
        );
        let (text, events) = run(ToolFormat::Generic, &["{\"response\": \"hi\"}"]);
        assert_eq!((text.as_str(), events.len()), ("hi", 0));
        let (_, events) = run(ToolFormat::Generic, &["{\"tool_call\": {\"na"]);
        assert!(matches!(&events[0], Event::ToolCallUnfinished { .. }));
    }
}

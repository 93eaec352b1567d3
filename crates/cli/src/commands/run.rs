//! `statelm run`: generate text from a prompt, streaming tokens to stdout.

use crate::common::{
    exit_interrupted, load_model, memory_notice, non_negative, runtime, stats_line, stop_name,
    Style,
};
use crate::Ctx;
use anyhow::{Context, Result};
use futures::StreamExt;
use serde_json::json;
use statelm_engine::{
    ChatDefaults, ChatMessage, Engine, EngineConfig, EngineHandle, Event, GenerateRequest, Input,
    SamplingParams, SessionOptions,
};
use statelm_model::KvType;
use std::io::Write;

/// Generate text from a prompt, streaming tokens to stdout
///
/// Sampling follows the model's defaults, as in chat and serve (the file's
/// `general.sampling.*`, else temperature 0.7, top-k 40, top-p 0.95, min-p 0.05), with the DRY
/// penalty and the loop guard; `--temp 0` is plain greedy decoding. The statistics line names
/// the settings in force. The prompt is not echoed when stdout is not a terminal. A
/// statistics line goes to stderr.
/// Ctrl-C stops the generation (exit code 130).
///
/// Examples:
///   statelm run -p "The capital of France is"
///   statelm run -p "Once upon a time" -n 200 --temp 0.8 --seed 42
///   statelm run -m qwen2.5-coder-0.5b --chat -p "Write a haiku about Rust."
///   statelm run -m model.gguf -p "def fib(n):" --stop "\n\n" --json
///   statelm run -m qwen2.5-coder-0.5b --chat -p "Paris: name and country as JSON" \
///     --json-schema '{"type":"object","properties":{"name":{"type":"string"}}}'
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct RunArgs {
    /// Model file or short name (default: gemma3-270m, fetched when missing).
    #[arg(short, long)]
    model: Option<String>,
    /// The prompt.
    #[arg(short, long)]
    prompt: String,
    /// Most tokens to generate.
    #[arg(short = 'n', long, default_value_t = 128)]
    max_tokens: usize,
    /// Sampling temperature; 0 is greedy, with DRY and the loop guard off unless asked for
    /// [default: the model file's `general.sampling.temp`, else 0.7, as in chat and serve].
    #[arg(long, value_parser = non_negative)]
    temp: Option<f32>,
    /// Random seed (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// Keep only the K most likely tokens (0: off) [default: the model's, else 40].
    #[arg(long)]
    top_k: Option<usize>,
    /// Nucleus sampling threshold (1: off) [default: the model's, else 0.95].
    #[arg(long, value_parser = unit_interval)]
    top_p: Option<f32>,
    /// Drop tokens less likely than this fraction of the best one (0: off) [default: the
    /// model's, else 0.05].
    #[arg(long, value_parser = unit_interval)]
    min_p: Option<f32>,
    /// Repetition control.
    #[command(flatten)]
    repetition: crate::commands::repetition::RepetitionArgs,
    /// Prompt-lookup decoding.
    #[command(flatten)]
    lookup: crate::commands::repetition::LookupArgs,
    /// Structured output.
    #[command(flatten)]
    constraint: crate::commands::constraint::ConstraintArgs,
    /// Wrap the prompt as a user message in the model's chat template.
    #[arg(long)]
    chat: bool,
    /// Variables for the chat template, as a JSON object: '{"enable_thinking": false}' asks
    /// Qwen3 and SmolLM3 to answer without thinking.
    #[arg(long, value_name = "JSON", value_parser = crate::common::template_kwargs, requires = "chat")]
    chat_template_kwargs: Option<statelm_engine::TemplateVars>,
    /// System prompt (with --chat).
    #[arg(long, requires = "chat")]
    system: Option<String>,
    /// Stop before this text (repeatable; `\n` and `\t` are unescaped).
    #[arg(long, value_parser = unescape)]
    stop: Vec<String>,
    /// Token budget of the context (trimmed, with a notice, beyond it) [default: 4096, or the
    /// tier's budget with --tier].
    #[arg(long)]
    ctx: Option<usize>,
    /// KV cache type.
    #[arg(long, default_value = "f16")]
    kv_type: KvType,
    /// Print one JSON object (text and statistics) at the end instead of streaming.
    #[arg(long)]
    json: bool,
}

fn unit_interval(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("expected a number in [0, 1], got {s:?}")),
    }
}

/// `\n`, `\t` and `\\` in a command-line string, as the characters.
fn unescape(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('\\') => out.push('\\'),
            Some(other) => out.extend(['\\', other]),
            None => out.push('\\'),
        }
    }
    Ok(out)
}

impl RunArgs {
    /// Whether `--temp 0` asked for greedy decoding (plain: no DRY, no loop guard unless
    /// their own flags ask).
    fn greedy(&self) -> bool {
        self.temp == Some(0.0)
    }

    /// The sampling settings: the model's defaults (as `chat` and the server use them), or
    /// plain greedy decoding with `--temp 0`; each flag given overrides.
    fn sampling(&self, defaults: &ChatDefaults) -> SamplingParams {
        let mut p = match self.greedy() {
            true => SamplingParams::greedy(),
            false => defaults.sampling.clone(),
        };
        p.temperature = self.temp.unwrap_or(p.temperature);
        p.top_k = self.top_k.unwrap_or(p.top_k);
        p.top_p = self.top_p.unwrap_or(p.top_p);
        p.min_p = self.min_p.unwrap_or(p.min_p);
        p.seed = self.seed;
        self.repetition.apply(&mut p);
        self.lookup.apply(&mut p);
        self.constraint.apply(&mut p);
        p
    }

    fn input(&self) -> Input {
        if !self.chat {
            return Input::Text(self.prompt.clone());
        }
        let mut messages = Vec::new();
        if let Some(s) = &self.system {
            messages.push(ChatMessage::new("system", s.clone()));
        }
        messages.push(ChatMessage::new("user", self.prompt.clone()));
        Input::Chat(statelm_engine::Conversation {
            messages,
            vars: self.chat_template_kwargs.clone().unwrap_or_default(),
            tools: None,
        })
    }
}

/// Runs the command.
pub fn run(args: &RunArgs, ctx: &Ctx) -> Result<()> {
    let loaded = load_model(ctx, args.model.as_deref())?;
    let budget = loaded.budget(args.ctx);
    let config = EngineConfig {
        session_capacity: budget.max(statelm_engine::MIN_TOKEN_BUDGET),
        token_budget: budget,
        kv_type: args.kv_type,
        ..EngineConfig::default()
    };
    let defaults = ChatDefaults::for_model(&loaded.model);
    let sampling = args.sampling(&defaults);
    let in_force = match args.greedy() {
        true => "greedy (--temp 0)".to_string(),
        false => defaults_in_force(&sampling, &defaults),
    };
    let engine = Engine::start(loaded.model, config);
    let run = Run {
        args,
        sampling,
        in_force,
        budget,
    };
    let interrupted = runtime()?.block_on(generate(&run, &engine))?;
    if interrupted {
        exit_interrupted();
    }
    Ok(())
}

/// What one run needs: its arguments, its sampling and what to say about it, its budget.
struct Run<'a> {
    args: &'a RunArgs,
    sampling: SamplingParams,
    /// The sampling in force, for the statistics line.
    in_force: String,
    budget: usize,
}

/// The sampling in force, in words: each setting, and which came from the model file.
fn defaults_in_force(p: &SamplingParams, defaults: &ChatDefaults) -> String {
    let source = match defaults.from_file.is_empty() {
        true => "built-in defaults",
        false => "the model's defaults",
    };
    format!(
        "{source}: temperature {}, top-k {}, top-p {}, min-p {}, DRY {}, loop guard {}",
        p.temperature,
        p.top_k,
        p.top_p,
        p.min_p,
        p.dry_multiplier,
        if p.loop_guard { "on" } else { "off" }
    )
}

/// Streams one generation; true when Ctrl-C stopped it.
async fn generate(run: &Run<'_>, engine: &EngineHandle) -> Result<bool> {
    let (args, budget) = (run.args, run.budget);
    let style = Style::detect();
    let session = engine.create_session(SessionOptions::default()).await?;
    let mut stream = engine
        .generate(GenerateRequest {
            session: session.into(),
            input: args.input(),
            sampling: run.sampling.clone(),
            stop: args.stop.clone(),
            max_tokens: args.max_tokens,
        })
        .await?;
    if style.out_tty && !args.json && !args.chat {
        print!("{}", style.dim_out(&args.prompt));
    }
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let (mut interrupted, mut text, mut notices) = (false, String::new(), Vec::new());
    let mut out = std::io::stdout();
    let done = loop {
        let item = tokio::select! {
            item = stream.next() => item,
            _ = &mut ctrl_c, if !interrupted => {
                interrupted = true;
                stream.cancel();
                continue;
            }
        };
        let ev = match item {
            Some(ev) => ev.context("generation failed")?,
            None => anyhow::bail!("the engine stopped before the generation ended"),
        };
        match ev {
            Event::Token { text: t, .. } | Event::Text { text: t } => {
                if !args.json {
                    out.write_all(t.as_bytes())?;
                    out.flush()?;
                }
                text.push_str(&t);
            }
            Event::Done(d) => break d,
            other => {
                if let Some(n) = memory_notice(&other) {
                    if !args.json {
                        eprintln!("{}", style.dim_err(&n));
                    }
                    notices.push(n);
                }
            }
        }
    };
    if args.json {
        let v = json!({
            "text": text, "prompt_tokens": done.prompt_tokens,
            "generated_tokens": done.generated_tokens, "stop_reason": stop_name(&done.stop_reason),
            "time_to_first_token_ms": done.time_to_first_token.as_secs_f64() * 1e3,
            "decode_tokens_per_s": done.decode_tokens_per_s, "notices": notices,
            "drafted_tokens": done.drafted_tokens, "accepted_tokens": done.accepted_tokens,
            "token_budget": budget, "sampling": run.in_force,
        });
        println!("{v}");
    } else {
        println!();
        let line = stats_line(&done);
        let line = format!("{}; {}]", line.trim_end_matches(']'), run.in_force);
        eprintln!("{}", style.dim_err(&line));
    }
    Ok(interrupted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_strings_are_unescaped() {
        assert_eq!(unescape(r"a\nb\tc\\d\q\").unwrap(), "a\nb\tc\\d\\q\\");
        assert_eq!(unescape("plain").unwrap(), "plain");
    }

    #[test]
    fn notices_say_what_happened() {
        let ev = Event::ContextTrimmed {
            dropped: 1536,
            kept: 512,
            reason: String::new(),
            method: statelm_engine::TrimMethod::Shift,
        };
        let n = memory_notice(&ev).unwrap();
        assert_eq!(n, "[context trimmed: kept 512 of 2048 tokens]");
        assert_eq!(
            memory_notice(&Event::Restored).unwrap(),
            "[state restored from disk]"
        );
        assert!(memory_notice(&Event::Text { text: "x".into() }).is_none());
        assert_eq!(
            Style {
                out_tty: false,
                err_tty: false
            }
            .dim_err("x"),
            "x"
        );
        assert_eq!(
            Style {
                out_tty: false,
                err_tty: true
            }
            .dim_err("x"),
            "\x1b[2mx\x1b[0m"
        );
    }
}

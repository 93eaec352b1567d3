//! `statelm chat`: interactive chat that keeps the conversation's State across turns.
//!
//! Each turn appends only the new text to the session (the text that closes the previous
//! answer, the user's message and the generation prompt, derived from the model's chat
//! template), so the conversation is never recomputed. Whatever happens to the context —
//! trimmed under the token budget, spilled, restored, evicted under memory pressure — is shown
//! as a dim line on stderr, e.g. `[context trimmed: kept 512 of 2048 tokens]`.

use crate::common::{
    exit_interrupted, load_model, memory_notice, non_negative, runtime, stats_line, MemoryArgs,
    Style,
};
use crate::Ctx;
use anyhow::{Context, Result};
use futures::StreamExt;
use statelm_engine::ChatDefaults;
use statelm_engine::{
    ChatMessage, Engine, EngineConfig, EngineHandle, Event, GenerateRequest, Input, SamplingParams,
    SessionId, SessionOptions,
};
use statelm_model::{KvType, Model};
use statelm_tokenizer::TurnTexts;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::mpsc;

/// Interactive chat that keeps the conversation's State across turns
///
/// Type a message and press Enter; the answer streams as it is generated. Ctrl-C stops the
/// answer (at the prompt, pressed twice, it quits: exit code 130); Ctrl-D or /quit quits. With stdin not a terminal, each
/// line is one user message (or command) and the chat ends at end of input.
///
/// Commands: /reset, /save FILE, /load FILE, /stats, /history, /system TEXT, /help, /quit.
///
/// With --session-dir the conversation is durable: its token history is appended to
/// DIR/NAME.stlmlog and fsynced after every answer, and its KV snapshot written when memory
/// pressure spills or trims it and when the chat ends. After a crash or a kill (the OOM
/// killer, jetsam), --resume NAME picks the conversation up with every completed turn.
///
/// Examples:
///   statelm chat
///   statelm chat -m qwen2.5-coder-0.5b --system "You are a terse assistant."
///   statelm chat --budget 256 --max-tokens 64       # watch the context being trimmed
///   printf 'Hi!\n/stats\n' | statelm chat --temp 0
///   statelm chat --session-dir ~/.statelm/chats --session trip   # durable
///   statelm chat --session-dir ~/.statelm/chats --resume trip    # after a kill
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct ChatArgs {
    /// Model file or short name (default: gemma3-270m, fetched when missing).
    #[arg(short, long)]
    model: Option<String>,
    /// System prompt (kept when the context is trimmed).
    #[arg(long)]
    system: Option<String>,
    /// Token budget of the conversation: beyond it the middle is trimmed (with a notice)
    /// [default: 4096, or the tier's budget with --tier].
    #[arg(long, value_parser = clap::value_parser!(u32).range(8..))]
    budget: Option<u32>,
    /// Most tokens per answer [default: 512].
    #[arg(long)]
    max_tokens: Option<usize>,
    /// Sampling temperature (0: greedy) [default: the model file's `general.sampling.temp`,
    /// else 0.7]. Top-k, top-p, min-p and the repeat penalty also follow the file's
    /// `general.sampling.*` settings when it has them (`/stats` shows what is in force).
    #[arg(long, value_parser = non_negative)]
    temp: Option<f32>,
    /// Random seed (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// Repetition control (on by default in chat).
    #[command(flatten)]
    repetition: crate::commands::repetition::RepetitionArgs,
    /// Prompt-lookup decoding.
    #[command(flatten)]
    lookup: crate::commands::repetition::LookupArgs,
    /// Structured output: every answer matches the constraint.
    #[command(flatten)]
    constraint: crate::commands::constraint::ConstraintArgs,
    /// KV cache type.
    #[arg(long, default_value = "f16")]
    kv_type: KvType,
    /// Memory watching.
    #[command(flatten)]
    memory: MemoryArgs,
    /// Keep the conversation durably in this directory (created with mode 0700): it survives
    /// a crash or a kill and is picked up again with --resume.
    #[arg(long, value_name = "DIR")]
    session_dir: Option<PathBuf>,
    /// Name of the durable conversation (letters, digits, '_', '-'): continued if DIR holds
    /// it, else started [default: "chat"; needs --session-dir].
    #[arg(
        long,
        value_name = "NAME",
        requires = "session_dir",
        conflicts_with = "resume"
    )]
    session: Option<String>,
    /// Resume the durable conversation NAME from DIR (an error if there is none).
    #[arg(long, value_name = "NAME", requires = "session_dir")]
    resume: Option<String>,
    /// Hide a thinking model's reasoning (its `<think>` blocks; shown dimmed by default).
    #[arg(long)]
    hide_thinking: bool,
    /// Variables for the chat template, as a JSON object: '{"enable_thinking": false}' asks
    /// Qwen3 and SmolLM3 to answer without thinking.
    #[arg(long, value_name = "JSON", value_parser = crate::common::template_kwargs)]
    chat_template_kwargs: Option<statelm_engine::TemplateVars>,
}

impl ChatArgs {
    /// The durable conversation's name, if the chat is durable.
    fn durable_name(&self) -> Option<String> {
        self.session_dir.as_ref()?;
        Some(
            self.resume
                .clone()
                .or_else(|| self.session.clone())
                .unwrap_or_else(|| "chat".to_string()),
        )
    }
}

/// Runs the command.
pub fn run(args: &ChatArgs, ctx: &Ctx) -> Result<()> {
    let loaded = load_model(ctx, args.model.as_deref())?;
    let budget = loaded.budget(args.budget.map(|b| b as usize));
    let model = loaded.model;
    let config = EngineConfig {
        session_capacity: budget,
        token_budget: budget,
        kv_type: args.kv_type,
        pressure_hold: args.memory.hold(),
        real_memory: args.memory.real_memory(),
        session_dir: args.session_dir.clone(),
        ..EngineConfig::default()
    };
    if let Some(name) = args.durable_name() {
        statelm_engine::validate_session_name(&name)?;
    }
    let engine = Engine::start(model.clone(), config);
    let _memory = args.memory.watch(&engine);
    let mut repl = Repl::new(args, engine, model, budget);
    match runtime()?.block_on(repl.run())? {
        End::Eof if repl.failed > 0 && !repl.interactive => {
            anyhow::bail!("{} of the turns failed", repl.failed)
        }
        End::Eof => Ok(()),
        End::Interrupted => exit_interrupted(),
    }
}

/// How the REPL ended.
enum End {
    Eof,
    Interrupted,
}

/// What a command asks the loop to do.
enum Flow {
    Continue,
    Quit,
}

struct Repl<'a> {
    args: &'a ChatArgs,
    /// The conversation's token budget (`--budget`, else the tier's, else the default).
    budget: usize,
    engine: EngineHandle,
    model: Arc<Model>,
    style: Style,
    interactive: bool,
    system: Option<String>,
    session: Option<SessionId>,
    /// The conversation as messages (used when the template gives no [`TurnTexts`]).
    messages: Vec<ChatMessage>,
    turns: Option<TurnTexts>,
    /// Generation defaults for this model (flags override them).
    defaults: ChatDefaults,
    failed: usize,
    /// The durable conversation's name (`--session-dir`).
    durable: Option<String>,
}

/// Reads stdin lines on a thread (stdin reads block).
fn spawn_line_reader() -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel(16);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.blocking_send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Ctrl-C presses, as a channel (the handler stays installed: Ctrl-C never kills the chat).
fn spawn_interrupts() -> mpsc::Receiver<()> {
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(async move {
        while tokio::signal::ctrl_c().await.is_ok() {
            if tx.send(()).await.is_err() {
                break;
            }
        }
    });
    rx
}

impl<'a> Repl<'a> {
    fn new(args: &'a ChatArgs, engine: EngineHandle, model: Arc<Model>, budget: usize) -> Repl<'a> {
        let vars = args.chat_template_kwargs.clone().unwrap_or_default();
        let turns = model.tokenizer().turn_texts_with(&vars);
        let defaults = ChatDefaults::for_model(&model);
        if turns.is_none() {
            tracing::info!("chat template gives no turn texts; each turn resends the conversation");
        }
        Repl {
            args,
            budget,
            engine,
            model,
            style: Style::detect(),
            interactive: std::io::stdin().is_terminal(),
            system: args.system.clone(),
            session: None,
            messages: Vec::new(),
            turns,
            defaults,
            failed: 0,
            durable: args.durable_name(),
        }
    }

    fn notice(&self, text: &str) {
        eprintln!("{}", self.style.dim_err(text));
    }

    async fn run(&mut self) -> Result<End> {
        self.resume().await?;
        let mut lines = spawn_line_reader();
        let mut interrupts = spawn_interrupts();
        // Ctrl-C at the prompt quits only when pressed twice in a row.
        let mut armed = false;
        if self.interactive {
            self.notice(&format!(
                "statelm chat: token budget {}, /help for commands, Ctrl-D to quit",
                self.budget
            ));
        }
        loop {
            if self.interactive {
                print!("> ");
                std::io::stdout().flush()?;
            }
            let line = tokio::select! {
                line = lines.recv() => line,
                Some(()) = interrupts.recv() => {
                    if std::mem::replace(&mut armed, true) {
                        return Ok(End::Interrupted);
                    }
                    println!();
                    self.notice("[Ctrl-C again to quit, or Ctrl-D]");
                    continue;
                }
            };
            armed = false;
            let Some(line) = line else { break };
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let result = match line.strip_prefix('/') {
                Some(cmd) => self.command(cmd).await,
                None => self
                    .turn(line, &mut interrupts)
                    .await
                    .map(|()| Flow::Continue),
            };
            match result {
                Ok(Flow::Continue) => {}
                Ok(Flow::Quit) => break,
                Err(e) => {
                    self.failed += 1;
                    eprintln!("error: {e:#}");
                }
            }
        }
        if self.interactive {
            println!();
        }
        Ok(End::Eof)
    }

    /// The conversation so far plus `text`, with the system prompt first.
    fn conversation_with(&self, text: &str) -> Vec<ChatMessage> {
        let mut conv: Vec<ChatMessage> = self
            .system
            .iter()
            .map(|s| ChatMessage::new("system", s.clone()))
            .collect();
        conv.extend(self.messages.iter().cloned());
        conv.push(ChatMessage::new("user", text));
        conv
    }

    /// The engine input of a user message, and the session to run it in: the engine's own
    /// turn-diffing (the first message renders the conversation, later ones only their turn),
    /// or the whole conversation again when the template gives no turn texts.
    async fn prepare(&mut self, text: &str) -> Result<(SessionId, Input)> {
        let input = match &self.turns {
            Some(_) => Input::UserTurn(text.to_string()),
            None => Input::Chat(self.conversation_with(text).into()),
        };
        if let Some(id) = self.session {
            return Ok((id, input));
        }
        let opts = SessionOptions {
            token_budget: Some(self.budget),
            pinned_prefix: None,
            system_prompt: self.system.clone(),
            template_vars: self.args.chat_template_kwargs.clone().unwrap_or_default(),
        };
        let id = match &self.durable {
            Some(name) => self.engine.open_session(name, opts).await?,
            None => self.engine.create_session(opts).await?,
        };
        self.session = Some(id);
        Ok((id, input))
    }

    fn sampling(&self) -> SamplingParams {
        let mut p = self.defaults.sampling.clone();
        p.temperature = self.args.temp.unwrap_or(p.temperature);
        p.seed = self.args.seed;
        self.args.repetition.apply(&mut p);
        self.args.lookup.apply(&mut p);
        self.args.constraint.apply(&mut p);
        p
    }

    /// One user message and its streamed answer.
    async fn turn(&mut self, text: &str, interrupts: &mut mpsc::Receiver<()>) -> Result<()> {
        let (session, input) = self.prepare(text).await?;
        let mut stream = self
            .engine
            .generate(GenerateRequest {
                session: session.into(),
                input,
                sampling: self.sampling(),
                stop: Vec::new(),
                max_tokens: self.args.max_tokens.unwrap_or(self.defaults.max_tokens),
            })
            .await?;
        let (mut answer, mut line_open, mut cancelled) = (String::new(), false, false);
        let mut out = std::io::stdout();
        let done = loop {
            let item = tokio::select! {
                item = stream.next() => item,
                Some(()) = interrupts.recv(), if !cancelled => {
                    cancelled = true;
                    stream.cancel();
                    continue;
                }
            };
            match item
                .context("the engine stopped")?
                .context("generation failed")?
            {
                Event::Token { text: t, .. } | Event::Text { text: t } => {
                    let t = if answer.is_empty() {
                        t.trim_start().to_string()
                    } else {
                        t
                    };
                    out.write_all(t.as_bytes())?;
                    out.flush()?;
                    line_open |= !t.is_empty();
                    answer.push_str(&t);
                }
                Event::Reasoning { text } if !self.args.hide_thinking => {
                    // Dimmed on a terminal; never part of the answer (nor of its history).
                    let tty = std::io::IsTerminal::is_terminal(&out);
                    let shown = if tty {
                        format!("\x1b[2m{text}\x1b[0m")
                    } else {
                        text
                    };
                    out.write_all(shown.as_bytes())?;
                    out.flush()?;
                    line_open = true;
                }
                Event::Done(d) => break d,
                other => {
                    if let Some(n) = memory_notice(&other) {
                        // The notice starts its own line on a terminal; the break goes to
                        // stderr with it, so stdout carries exactly the answer.
                        if std::mem::take(&mut line_open) {
                            eprintln!();
                        }
                        self.notice(&n);
                    }
                }
            }
        };
        println!();
        if cancelled {
            self.notice("[interrupted]");
        }
        tracing::info!("{}", stats_line(&done));
        self.messages.push(ChatMessage::new("user", text));
        self.messages.push(ChatMessage::new("assistant", answer));
        Ok(())
    }

    async fn command(&mut self, cmd: &str) -> Result<Flow> {
        let (name, rest) = cmd.split_once(' ').unwrap_or((cmd, ""));
        let rest = rest.trim();
        match name {
            "quit" | "exit" | "q" => return Ok(Flow::Quit),
            "help" | "?" => self.notice(
                "/reset  /save FILE  /load FILE  /stats  /history  /system TEXT  /quit  (Ctrl-C stops an answer)",
            ),
            "reset" => {
                self.forget_session().await;
                self.notice("[conversation reset]");
            }
            "system" => {
                self.system = (!rest.is_empty()).then(|| rest.to_string());
                self.forget_session().await;
                self.notice(match self.system {
                    Some(_) => "[system prompt set; new conversation]",
                    None => "[system prompt cleared; new conversation]",
                });
            }
            "save" => self.save(rest).await?,
            "load" => self.load(rest).await?,
            "stats" => self.stats().await?,
            "history" => self.history().await?,
            other => self.notice(&format!("[unknown command /{other}; /help lists them]")),
        }
        Ok(Flow::Continue)
    }

    async fn forget_session(&mut self) {
        if let Some(id) = self.session.take() {
            if self.durable.is_some() {
                // Empties its files too, so the name starts over.
                let _ = self.engine.reset_session(id).await;
            }
            let _ = self.engine.close_session(id).await;
        }
        self.messages.clear();
    }

    async fn save(&self, file: &str) -> Result<()> {
        anyhow::ensure!(!file.is_empty(), "usage: /save FILE");
        let Some(id) = self.session else {
            self.notice("[nothing to save yet]");
            return Ok(());
        };
        self.engine
            .save_session(id, Path::new(file))
            .await
            .with_context(|| format!("cannot save to {file}"))?;
        self.notice(&format!("[conversation saved to {file}]"));
        Ok(())
    }

    async fn load(&mut self, file: &str) -> Result<()> {
        anyhow::ensure!(!file.is_empty(), "usage: /load FILE");
        let id = self
            .engine
            .load_session(Path::new(file))
            .await
            .with_context(|| format!("cannot load {file}"))?;
        self.forget_session().await;
        let info = self.engine.session_info(id).await?;
        self.session = Some(id);
        self.notice(&format!(
            "[conversation loaded from {file}: {} tokens]",
            info.history_tokens
        ));
        Ok(())
    }

    /// Opens the durable conversation at start: resumed if its directory holds it (an error
    /// with --resume if not), else started with the first message.
    async fn resume(&mut self) -> Result<()> {
        let Some(name) = self.durable.clone() else {
            return Ok(());
        };
        anyhow::ensure!(
            self.turns.is_some(),
            "this model's chat template cannot continue a durable conversation"
        );
        let id = self
            .engine
            .open_session(&name, SessionOptions::default())
            .await
            .with_context(|| format!("cannot open the conversation '{name}'"))?;
        let history = self.engine.session_info(id).await?.history_tokens;
        if history == 0 {
            // Nothing to resume: the first message starts it (with its pinned prefix).
            let _ = self.engine.close_session(id).await;
            anyhow::ensure!(
                self.args.resume.is_none(),
                "no conversation '{name}' to resume in the session directory"
            );
            return Ok(());
        }
        self.session = Some(id);
        self.notice(&format!(
            "[conversation '{name}' resumed: {history} tokens; /history shows it]"
        ));
        Ok(())
    }

    /// Prints the conversation the session holds (every token of its history).
    async fn history(&self) -> Result<()> {
        let Some(id) = self.session else {
            self.notice("[no conversation yet]");
            return Ok(());
        };
        let tokens = self.engine.session_history(id).await?;
        println!("{}", self.model.tokenizer().decode(&tokens));
        Ok(())
    }

    async fn stats(&self) -> Result<()> {
        let Some(id) = self.session else {
            self.notice(&format!(
                "[no conversation yet; token budget {}]",
                self.budget
            ));
            return Ok(());
        };
        let i = self.engine.session_info(id).await?;
        self.notice(&format!(
            "[state {} tokens (history {}), KV {:.1} KiB, budget {} (now {}), pinned {}, \
             last {:.1} tok/s{}{}]",
            i.state_tokens,
            i.history_tokens,
            i.kv_bytes as f64 / 1024.0,
            i.token_budget,
            i.effective_budget,
            i.pinned_prefix,
            i.last_decode_tokens_per_s,
            if i.trimmed { ", trimmed" } else { "" },
            if i.spilled { ", spilled" } else { "" },
        ));
        self.notice(&format!("[defaults: {}]", self.defaults.describe()));
        Ok(())
    }
}

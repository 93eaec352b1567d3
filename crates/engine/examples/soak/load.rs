//! The soak driver's load loop: sessions talked to round-robin, what each turn recorded, and
//! the report. Shared by the driver (`main.rs`) and `tests/soak_inprocess.rs`, which includes
//! this file as a module and drives it with injected memory warnings instead of a cgroup.

use futures::StreamExt;
use statelm_engine::{
    EngineHandle, EngineStats, Event, GenerateRequest, Input, SamplingParams, SessionId,
    SessionOptions, TrimMethod,
};
use statelm_governor::{MemorySource, Thresholds};
use statelm_model::Model;
use std::time::{Duration, Instant};

/// One mebibyte.
pub const MIB: u64 = 1024 * 1024;

/// What the load does: how many sessions and turns, and how big each turn is.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LoadConfig {
    /// Sessions talked to round-robin.
    pub sessions: usize,
    /// Turns in all (over every session).
    pub turns: usize,
    /// Words of each user message.
    pub words_per_turn: usize,
    /// Tokens generated per turn.
    pub max_tokens: usize,
    /// Seed of the user messages and of sampling.
    pub seed: u64,
    /// Every odd session rests (sits out) for this many rounds, then talks for as many (0:
    /// nobody rests).
    pub rest_rounds: usize,
    /// Greedy decoding instead of seeded sampling.
    pub greedy: bool,
    /// Stop (reporting the turns not run) after this long.
    #[serde(skip)]
    pub deadline: Option<Duration>,
}

impl Default for LoadConfig {
    fn default() -> Self {
        LoadConfig {
            sessions: 4,
            turns: 24,
            words_per_turn: 100,
            max_tokens: 6,
            seed: 7,
            rest_rounds: 2,
            greedy: false,
            deadline: None,
        }
    }
}

/// Declares [`EventCounts`] with its fields, and a method adding one count to another.
macro_rules! event_counts {
    ($($(#[$doc:meta])* $field:ident),* $(,)?) => {
        /// Events of one or more generations, by kind.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
        pub struct EventCounts {
            $($(#[$doc])* pub $field: u64,)*
        }

        impl EventCounts {
            /// Adds `o` to these counts.
            fn add(&mut self, o: &EventCounts) {
                $(self.$field += o.$field;)*
            }
        }
    };
}

event_counts! {
    /// `Token` events.
    tokens,
    /// `Text` events.
    text,
    /// `ContextTrimmed` events.
    trimmed,
    /// Of which by recomputing the kept tokens (the others shifted the keys in place).
    trimmed_reprefill,
    /// Tokens dropped by all the trims.
    trimmed_tokens,
    /// `CacheEvicted` events.
    evicted,
    /// `Spilled` events.
    spilled,
    /// `Restored` events.
    restored,
    /// `Done` events.
    done,
}

impl EventCounts {
    /// Counts `ev`.
    fn count(&mut self, ev: &Event) {
        match ev {
            Event::Token { .. } => self.tokens += 1,
            Event::Text { .. } => self.text += 1,
            Event::ContextTrimmed {
                dropped, method, ..
            } => {
                self.trimmed += 1;
                self.trimmed_tokens += *dropped as u64;
                self.trimmed_reprefill += u64::from(*method == TrimMethod::Reprefill);
            }
            Event::CacheEvicted { .. } => self.evicted += 1,
            Event::Spilled { .. } => self.spilled += 1,
            Event::Restored => self.restored += 1,
            Event::Done(_) => self.done += 1,
            _ => {}
        }
    }
}

/// Memory figures of this process (`/proc/self/status`), in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ProcMemory {
    /// `VmRSS`.
    pub rss: u64,
    /// `RssAnon` (heap: KV caches, scratch).
    pub rss_anon: u64,
    /// `RssFile` (mapped weights).
    pub rss_file: u64,
}

impl ProcMemory {
    /// Reads this process's figures (zeros where unreadable).
    pub fn read() -> ProcMemory {
        ProcMemory {
            rss: status_bytes("VmRSS"),
            rss_anon: status_bytes("RssAnon"),
            rss_file: status_bytes("RssFile"),
        }
    }
}

/// A `Key: N kB` field of `/proc/self/status`, in bytes (0 when unreadable).
fn status_bytes(key: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |v| v * 1024)
}

/// What happened in one turn.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct TurnRecord {
    /// Turn number (0-based, over every session).
    pub turn: usize,
    /// Index of the session (0-based).
    pub session: usize,
    /// Prompt tokens of the request (history plus new input).
    pub prompt_tokens: usize,
    /// Of which reused from the session's State.
    pub cached_tokens: usize,
    /// Tokens computed before the first new token.
    pub prefilled_tokens: usize,
    /// Tokens generated.
    pub generated_tokens: usize,
    /// Why the generation stopped (`None` when it failed).
    pub stop_reason: Option<String>,
    /// The error, when the turn failed.
    pub error: Option<String>,
    /// Events by kind.
    pub events: EventCounts,
    /// The reasons given by memory events (trims, spills, evictions).
    pub reasons: Vec<String>,
    /// Tokens in the session's State after the turn.
    pub state_tokens: usize,
    /// Its configured token budget.
    pub token_budget: usize,
    /// Its budget in force after the turn (lower under pressure).
    pub effective_budget: usize,
    /// KV bytes of every resident State after the turn.
    pub kv_bytes_total: u64,
    /// Bytes of every resident State (KV, history, scratch) after the turn.
    pub state_bytes_total: u64,
    /// Sessions spilled after the turn.
    pub spilled_sessions: usize,
    /// The pressure level the engine acted on last.
    pub pressure: String,
    /// Process memory after the turn.
    pub mem: ProcMemory,
    /// Bytes charged to the cgroup after the turn, if there is one.
    pub cgroup_usage: Option<u64>,
    /// Wall time of the turn, in milliseconds.
    pub ms: u64,
}

impl TurnRecord {
    /// Whether the turn ran to its end: no error, and stopped by its own rules (`MaxTokens`,
    /// end of generation, a stop string), not cut short by an eviction or a cancellation.
    pub fn completed(&self) -> bool {
        self.error.is_none()
            && matches!(
                self.stop_reason.as_deref(),
                Some(r) if r == "MaxTokens" || r == "Eog" || r.starts_with("StopString")
            )
    }

    /// Whether memory pressure evicted the session in the middle of this turn.
    pub fn evicted(&self) -> bool {
        self.stop_reason.as_deref() == Some("Evicted")
    }
}

/// RSS over the last third of the turns compared with the middle third: does memory plateau?
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Plateau {
    /// Largest RSS over the middle third of the turns.
    pub middle_max_rss: u64,
    /// Largest RSS over the last third.
    pub last_max_rss: u64,
    /// `last_max_rss / middle_max_rss` (1.0 when flat; 0 with fewer than 3 turns).
    pub rss_ratio: f64,
    /// Largest anonymous RSS (KV caches, scratch) over the middle third.
    pub middle_max_anon: u64,
    /// Largest anonymous RSS over the last third.
    pub last_max_anon: u64,
    /// `last_max_anon / middle_max_anon`.
    pub anon_ratio: f64,
}

impl Plateau {
    /// The figures for `turns`.
    pub fn of(turns: &[TurnRecord]) -> Plateau {
        let n = turns.len();
        let max = |r: std::ops::Range<usize>, f: fn(&ProcMemory) -> u64| {
            turns[r].iter().map(|t| f(&t.mem)).max().unwrap_or(0)
        };
        let (mid, last) = (n / 3..2 * n / 3, 2 * n / 3..n);
        let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        let (mr, lr) = (max(mid.clone(), |m| m.rss), max(last.clone(), |m| m.rss));
        let (ma, la) = (max(mid, |m| m.rss_anon), max(last, |m| m.rss_anon));
        Plateau {
            middle_max_rss: mr,
            last_max_rss: lr,
            rss_ratio: ratio(lr, mr),
            middle_max_anon: ma,
            last_max_anon: la,
            anon_ratio: ratio(la, ma),
        }
    }
}

/// The outcome of [`run_load`].
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct LoadReport {
    /// Turns the load was asked to run.
    pub turns_planned: usize,
    /// Turns that ran to their end.
    pub turns_completed: usize,
    /// Turns that did not: an error, or cut short (their records are in `turns`).
    pub turns_failed: usize,
    /// Of which cut short because memory pressure evicted the session mid-generation.
    pub turns_evicted: usize,
    /// Turns that generated no token at all.
    pub turns_without_tokens: usize,
    /// Why the load stopped before running every turn, if it did.
    pub stopped_early: Option<String>,
    /// Tokens generated.
    pub tokens_generated: u64,
    /// Tokens computed as prompt (new input and recomputed context).
    pub tokens_prefilled: u64,
    /// Prompt tokens reused from the States.
    pub tokens_cached: u64,
    /// Events by kind, over every turn.
    pub events: EventCounts,
    /// Largest RSS after a turn.
    pub peak_rss: u64,
    /// Largest anonymous RSS after a turn.
    pub peak_rss_anon: u64,
    /// Peak RSS as the kernel saw it (`VmHWM`).
    pub vm_hwm: u64,
    /// Largest cgroup usage after a turn.
    pub peak_cgroup_usage: Option<u64>,
    /// The plateau check's figures.
    pub plateau: Plateau,
    /// Most tokens a session's State held after a turn.
    pub max_state_tokens: usize,
    /// Turns after which the session held more tokens than its configured budget.
    pub over_budget_turns: usize,
    /// The engine's counters at the end.
    pub engine: EngineStats,
    /// Wall time, in seconds.
    pub elapsed_s: f64,
    /// Every turn.
    pub turns: Vec<TurnRecord>,
}

/// Words the user messages are made of.
const WORDS: &str = "memory kernel river garden violin orbit harbor lantern copper meadow signal \
    thunder pocket canyon marble engine winter saddle glacier compass lemon forest ladder planet \
    candle mirror island puzzle falcon velvet tunnel anchor bicycle cobalt desert ember feather \
    granite hammock igloo jungle kettle lagoon magnet nectar oyster pepper quartz rocket summit \
    teapot umbrella valley walnut yogurt zephyr cache token budget session spill restore trim \
    pressure window layer matrix vector tensor buffer stream socket thread mutex cursor ledger \
    parcel quiver ribbon sparrow thistle tundra vessel whistle almond basalt cedar dune fjord \
    geyser heron iris jasper kelp lilac moss nickel onyx pebble quill reef slate tulip uplink \
    vortex willow yarrow zinc explain why how please compare describe and the of with under";

/// A user message of `words` seeded words, in sentences.
pub fn user_message(rng: &mut statelm_engine::rng::Rng, words: usize) -> String {
    let vocab: Vec<&str> = WORDS.split_whitespace().collect();
    let mut out = String::new();
    let mut in_sentence = 0;
    for i in 0..words {
        let w = vocab[(rng.next_u64() % vocab.len() as u64) as usize];
        if in_sentence > 0 {
            out.push(' ');
            out.push_str(w);
        } else {
            if i > 0 {
                out.push(' ');
            }
            let mut c = w.chars();
            out.extend(c.next().map(|f| f.to_ascii_uppercase()));
            out.push_str(c.as_str());
        }
        in_sentence += 1;
        if in_sentence >= 6 + (rng.next_u64() % 9) as usize || i + 1 == words {
            out.push(if rng.next_u64().is_multiple_of(4) {
                '?'
            } else {
                '.'
            });
            in_sentence = 0;
        }
    }
    out
}

/// The (round, session) of every turn: round-robin, odd sessions resting every other stretch
/// of `rest` rounds.
pub fn schedule(sessions: usize, turns: usize, rest: usize) -> Vec<(usize, usize)> {
    let resting = |k: usize, r: usize| rest > 0 && k % 2 == 1 && (r / rest) % 2 == 1;
    let mut out = Vec::with_capacity(turns);
    let mut round = 0;
    while out.len() < turns && sessions > 0 {
        let talking = (0..sessions).filter(|&k| !resting(k, round));
        out.extend(talking.map(|k| (round, k)).take(turns - out.len()));
        round += 1;
    }
    out
}

/// Sampling for turn `turn`: seeded (or greedy), end-of-generation banned.
fn sampling(model: &Model, cfg: &LoadConfig, turn: usize) -> SamplingParams {
    let mut p = match cfg.greedy {
        true => SamplingParams::greedy(),
        false => SamplingParams {
            seed: Some(cfg.seed.wrapping_mul(1_000_003).wrapping_add(turn as u64)),
            repeat_penalty: 1.1,
            ..SamplingParams::default()
        },
    };
    for &id in model.tokenizer().eog_ids() {
        p.logit_bias.insert(id, f32::NEG_INFINITY);
    }
    p
}

/// Runs one turn and records what its stream said.
async fn run_turn(engine: &EngineHandle, req: GenerateRequest, rec: &mut TurnRecord) {
    let mut stream = match engine.generate(req).await {
        Ok(stream) => stream,
        Err(e) => {
            rec.error = Some(e.to_string());
            return;
        }
    };
    while let Some(item) = stream.next().await {
        let ev = match item {
            Ok(ev) => ev,
            Err(e) => {
                rec.error = Some(e.to_string());
                continue;
            }
        };
        rec.events.count(&ev);
        match ev {
            Event::ContextTrimmed { reason, .. }
            | Event::CacheEvicted { reason }
            | Event::Spilled { reason } => rec.reasons.push(reason),
            Event::Done(d) => {
                rec.prompt_tokens = d.prompt_tokens;
                rec.cached_tokens = d.cached_tokens;
                rec.prefilled_tokens = d.prefilled_tokens;
                rec.generated_tokens = d.generated_tokens;
                rec.stop_reason = Some(format!("{:?}", d.stop_reason));
            }
            _ => {}
        }
    }
}

/// Fills in the figures taken after a turn: the session, the engine, the process, the cgroup.
async fn observe(
    engine: &EngineHandle,
    sid: SessionId,
    probe: &mut Option<Box<dyn MemorySource>>,
    rec: &mut TurnRecord,
) {
    if let Ok(info) = engine.session_info(sid).await {
        rec.state_tokens = info.state_tokens;
        rec.token_budget = info.token_budget;
        rec.effective_budget = info.effective_budget;
    }
    let stats = engine.stats().await;
    rec.kv_bytes_total = stats.kv_bytes_total;
    rec.state_bytes_total = stats.state_bytes_total;
    rec.spilled_sessions = stats.spilled;
    rec.pressure = stats.pressure.to_string();
    rec.mem = ProcMemory::read();
    if let Some(Ok(r)) = probe.as_mut().map(|p| p.read()) {
        rec.cgroup_usage = r.usage;
    }
}

/// Runs the load on `engine` (whose model is `model`): creates the sessions, runs every turn,
/// and returns the report. `probe` (a memory source read after every turn, for the cgroup's
/// usage) is optional. `after_turn` is called after every turn (the in-process test injects
/// memory warnings there); it returns false to stop the load.
pub async fn run_load(
    engine: &EngineHandle,
    model: &Model,
    cfg: &LoadConfig,
    mut probe: Option<Box<dyn MemorySource>>,
    mut after_turn: impl FnMut(&EngineHandle, &TurnRecord) -> bool,
) -> LoadReport {
    let start = Instant::now();
    let mut report = LoadReport {
        turns_planned: cfg.turns,
        ..LoadReport::default()
    };
    let mut sessions = Vec::new();
    for _ in 0..cfg.sessions {
        let opts = SessionOptions {
            system_prompt: Some("You are a patient assistant in a very long conversation.".into()),
            ..SessionOptions::default()
        };
        match engine.create_session(opts).await {
            Ok(id) => sessions.push(id),
            Err(e) => {
                report.stopped_early = Some(format!("creating a session failed: {e}"));
                return finish(engine, report, start).await;
            }
        }
    }
    let mut rng = statelm_engine::rng::Rng::new(cfg.seed);
    let mut started = vec![false; sessions.len()];
    let plan = schedule(sessions.len(), cfg.turns, cfg.rest_rounds);
    for (turn, (_, k)) in plan.into_iter().enumerate() {
        if let Some(d) = cfg.deadline.filter(|d| start.elapsed() >= *d) {
            report.stopped_early = Some(format!("deadline of {} s reached", d.as_secs()));
            break;
        }
        let sep = if std::mem::replace(&mut started[k], true) {
            "\n"
        } else {
            ""
        };
        let words = user_message(&mut rng, cfg.words_per_turn);
        let req = GenerateRequest {
            session: sessions[k].into(),
            input: Input::Append(format!("{sep}User: {words}\nAssistant:")),
            sampling: sampling(model, cfg, turn),
            stop: Vec::new(),
            max_tokens: cfg.max_tokens,
        };
        let (t0, mut rec) = (Instant::now(), TurnRecord::default());
        (rec.turn, rec.session) = (turn, k);
        run_turn(engine, req, &mut rec).await;
        rec.ms = t0.elapsed().as_millis() as u64;
        observe(engine, sessions[k], &mut probe, &mut rec).await;
        progress(&rec, start);
        let go_on = after_turn(engine, &rec);
        report.turns.push(rec);
        if !go_on {
            report.stopped_early = Some("stopped by the caller".into());
            break;
        }
    }
    finish(engine, report, start).await
}

/// One progress line on stderr (the harness keeps the last one of a killed run).
fn progress(r: &TurnRecord, start: Instant) {
    let mib = |b: u64| format!("{:.1}MiB", b as f64 / MIB as f64);
    let e = &r.events;
    eprintln!(
        "soak: t={:.1}s turn={} s={} prompt={} prefilled={} gen={} state={}/{} kv={} rss={} \
         anon={} cg={} trim={} spill={} restore={} evict={} pressure={}{}",
        start.elapsed().as_secs_f64(),
        r.turn,
        r.session,
        r.prompt_tokens,
        r.prefilled_tokens,
        r.generated_tokens,
        r.state_tokens,
        r.effective_budget,
        mib(r.kv_bytes_total),
        mib(r.mem.rss),
        mib(r.mem.rss_anon),
        r.cgroup_usage.map_or("-".into(), mib),
        e.trimmed,
        e.spilled,
        e.restored,
        e.evicted,
        r.pressure,
        r.error
            .as_ref()
            .map_or(String::new(), |e| format!(" ERROR: {e}")),
    );
}

/// Totals the turns into the report.
async fn finish(engine: &EngineHandle, mut report: LoadReport, start: Instant) -> LoadReport {
    for t in &report.turns {
        report.turns_completed += usize::from(t.completed());
        report.turns_failed += usize::from(!t.completed());
        report.turns_evicted += usize::from(t.evicted());
        report.turns_without_tokens += usize::from(t.generated_tokens == 0);
        report.tokens_generated += t.generated_tokens as u64;
        report.tokens_prefilled += t.prefilled_tokens as u64;
        report.tokens_cached += t.cached_tokens as u64;
        report.events.add(&t.events);
        report.peak_rss = report.peak_rss.max(t.mem.rss);
        report.peak_rss_anon = report.peak_rss_anon.max(t.mem.rss_anon);
        report.max_state_tokens = report.max_state_tokens.max(t.state_tokens);
        report.over_budget_turns += usize::from(t.state_tokens > t.token_budget);
        if let Some(u) = t.cgroup_usage {
            report.peak_cgroup_usage = Some(report.peak_cgroup_usage.unwrap_or(0).max(u));
        }
    }
    if report.stopped_early.is_none() && report.turns.len() < report.turns_planned {
        report.stopped_early = Some("fewer turns than planned were scheduled".into());
    }
    report.plateau = Plateau::of(&report.turns);
    report.vm_hwm = status_bytes("VmHWM");
    report.engine = engine.stats().await;
    report.elapsed_s = start.elapsed().as_secs_f64();
    report
}

/// `--own-thresholds room`: the policy's thresholds for the engine's own level (`used /
/// ceiling`, `used` counting the weights) put Warning at the same fraction of the room the
/// ceiling leaves for States (`ceiling - weights`), and Critical only 10 % over the ceiling —
/// which admission control never lets `used` reach. With the defaults, weights that are most of
/// the ceiling put the engine at Warning or Critical as soon as one State exists, and Critical
/// from the engine's own accounting hard-trims and evicts the running generation although
/// admission control already keeps every State under the ceiling.
pub fn room_thresholds(defaults: Thresholds, weights: u64, ceiling: u64) -> Thresholds {
    let (w, c) = (weights as f64, ceiling as f64);
    Thresholds {
        warning: ((w + defaults.warning * (c - w).max(0.0)) / c).min(1.0),
        critical: 1.10,
    }
}

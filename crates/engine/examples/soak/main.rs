//! Soak-test load driver: sustained multi-session chat against the engine, under the kernel's
//! real memory enforcement (run it inside a memory cgroup; `scripts/soak` does).
//!
//! ```text
//! cargo run --release -p statelm-engine --example soak -- MODEL.gguf \
//!     --sessions 4 --turns 24 --words-per-turn 100 --max-tokens 6 \
//!     --budget 256 --capacity 8192 --kv f32 --governor on --report soak.json
//! ```
//!
//! Round-robin over the sessions, each turn appends a user message of `W` seeded words and
//! generates `M` tokens (end-of-generation banned, so every turn has a known length). Every
//! odd session rests for stretches of rounds, so that it goes idle and can be spilled.
//!
//! - `--governor on`: each session has the token budget `B`; the engine gets a memory ceiling
//!   of this process's cgroup limit minus `--margin-mib`, and a governor `Monitor` over the
//!   cgroup (its real `memory.pressure_level` events, or PSI on v2), so trims, spills and
//!   restores happen.
//! - `--governor off`: budget = capacity, no ceiling, no monitor: the KV caches just grow.
//!
//! Per turn it records tokens, events by kind, RSS (`/proc/self/status`) and the cgroup's
//! usage, prints a progress line to stderr, and at the end writes a JSON report (`--report`).
//! Exit status: 0 when every turn completed, 1 when one did not, 2 on bad arguments or setup.
//! `--plan` prints the memory figures the harness sizes its cgroup from, as JSON.
//!
//! The load loop (`load.rs`, [`load::run_load`]) is shared with `tests/soak_inprocess.rs`, which
//! includes that file as a module and drives it with injected memory warnings instead of a
//! cgroup.
#![forbid(unsafe_code)]

mod load;

use load::{room_thresholds, run_load, user_message, LoadConfig, LoadReport, ProcMemory, MIB};
use statelm_engine::{Engine, EngineConfig, EngineHandle, RealMemory};
use statelm_governor::{MemorySource, Monitor, MonitorConfig, MonitorEvent, Policy};
use statelm_model::{KvType, LoadOptions, Model, Scratch};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Command-line options of the driver.
#[derive(Debug, Clone, Default)]
struct Args {
    model: PathBuf,
    load: LoadConfig,
    budget: usize,
    capacity: usize,
    kv: KvType,
    governor: bool,
    report: Option<PathBuf>,
    spill_dir: Option<PathBuf>,
    margin_mib: u64,
    idle_ms: u64,
    plan: bool,
    room_thresholds: bool,
}

const USAGE: &str = "usage: soak MODEL.gguf [--sessions N] [--turns T] [--words-per-turn W] \
[--max-tokens M] [--budget B] [--capacity C] [--kv f16|f32|q8_0] [--governor on|off] \
[--report FILE] [--seed S] [--rest-rounds R] [--greedy] [--deadline-s S] [--margin-mib M] \
[--idle-ms MS] [--spill-dir DIR] [--own-thresholds default|room] [--plan]";

/// Parses the command line.
fn parse_args(argv: &[String]) -> Result<Args, String> {
    let mut a = Args {
        budget: 256,
        capacity: 8192,
        kv: KvType::F32,
        governor: true,
        margin_mib: 64,
        idle_ms: 500,
        ..Args::default()
    };
    let mut it = argv.iter();
    let mut model = None;
    while let Some(flag) = it.next() {
        let mut val = || it.next().cloned().ok_or(format!("{flag} needs a value"));
        let num = |v: String| {
            v.parse::<u64>()
                .map_err(|_| format!("{flag}: bad number {v:?}"))
        };
        let choice = |v: String, yes: &str, no: &str| match v {
            v if v == yes => Ok(true),
            v if v == no => Ok(false),
            v => Err(format!("{flag}: expected {yes}|{no}, got {v:?}")),
        };
        match flag.as_str() {
            "--sessions" => a.load.sessions = num(val()?)? as usize,
            "--turns" => a.load.turns = num(val()?)? as usize,
            "--words-per-turn" => a.load.words_per_turn = num(val()?)? as usize,
            "--max-tokens" => a.load.max_tokens = num(val()?)? as usize,
            "--seed" => a.load.seed = num(val()?)?,
            "--rest-rounds" => a.load.rest_rounds = num(val()?)? as usize,
            "--greedy" => a.load.greedy = true,
            "--deadline-s" => a.load.deadline = Some(Duration::from_secs(num(val()?)?)),
            "--budget" => a.budget = num(val()?)? as usize,
            "--capacity" => a.capacity = num(val()?)? as usize,
            "--kv" => {
                let v = val()?;
                a.kv = v.parse().map_err(|e| format!("--kv: {e}"))?;
            }
            "--governor" => a.governor = choice(val()?, "on", "off")?,
            "--own-thresholds" => a.room_thresholds = choice(val()?, "room", "default")?,
            "--report" => a.report = Some(PathBuf::from(val()?)),
            "--spill-dir" => a.spill_dir = Some(PathBuf::from(val()?)),
            "--margin-mib" => a.margin_mib = num(val()?)?,
            "--idle-ms" => a.idle_ms = num(val()?)?,
            "--plan" => a.plan = true,
            "-h" | "--help" => return Err(USAGE.into()),
            s if s.starts_with("--") => return Err(format!("unknown option {s}\n{USAGE}")),
            s if model.is_none() => model = Some(PathBuf::from(s)),
            s => return Err(format!("unexpected argument {s:?}\n{USAGE}")),
        }
    }
    a.model = model.ok_or(USAGE.to_string())?;
    Ok(a)
}

/// This process's memory cgroup as a memory source (v2 with the memory controller, else v1),
/// as the governor's `detect()` finds it, with the kernel's pressure events registered. The
/// `/proc` source is left out: host-wide pressure from other work on the machine is noise here.
fn own_cgroup() -> Option<Box<dyn MemorySource>> {
    statelm_governor::detect()
        .into_iter()
        .find(|s| s.name().starts_with("cgroup"))
}

/// The memory ceiling for `--governor on`: the cgroup's limit minus the margin.
fn ceiling(args: &Args, model: &Model) -> Result<u64, String> {
    let source = own_cgroup().ok_or("no memory cgroup found")?;
    let reading = { source }
        .read()
        .map_err(|e| format!("reading the cgroup: {e}"))?;
    let limit = reading
        .limit
        .ok_or("this process's memory cgroup has no limit")?;
    let ceiling = limit.saturating_sub(args.margin_mib * MIB);
    if ceiling <= model.file_bytes() {
        return Err(format!(
            "the cgroup limit ({} MiB) minus the margin leaves no room beyond the weights",
            limit / MIB
        ));
    }
    eprintln!(
        "soak: cgroup limit {} MiB, margin {} MiB: memory ceiling {} MiB (weights {} MiB)",
        limit / MIB,
        args.margin_mib,
        ceiling / MIB,
        model.file_bytes() / MIB
    );
    Ok(ceiling)
}

/// Attaches a governor [`Monitor`] over this process's cgroup that forwards every level change
/// to the engine (as `EngineHandle::attach_monitor` does) and logs it to stderr.
fn attach_monitor(engine: &EngineHandle) -> Result<Monitor, String> {
    let source = own_cgroup().ok_or("no memory cgroup to monitor")?;
    eprintln!("soak: monitoring {}", source.describe());
    let (weak, start) = (engine.downgrade(), Instant::now());
    let config = MonitorConfig {
        interval: Duration::from_millis(100),
        ..MonitorConfig::default()
    };
    let on_event = move |event| match event {
        MonitorEvent::LevelChanged {
            level,
            previous,
            reading: r,
            ..
        } => {
            let (ws, limit) = (r.working_set.unwrap_or(0), r.limit.unwrap_or(0));
            eprintln!(
                "soak: t={:.1}s pressure {previous} -> {level} (working set {} of {} MiB)",
                start.elapsed().as_secs_f64(),
                ws / MIB,
                limit / MIB
            );
            weak.upgrade().inspect(|e| e.pressure_level(level));
        }
        MonitorEvent::SourceError { source, error } => eprintln!("soak: {source}: {error}"),
        MonitorEvent::Reading { .. } => {}
    };
    Monitor::spawn(vec![source], config, on_event).map_err(|e| format!("monitor: {e}"))
}

/// The engine configuration for `args`.
fn engine_config(
    args: &Args,
    ceiling: Option<u64>,
    spill_dir: PathBuf,
    weights: u64,
) -> EngineConfig {
    let mut policy = Policy::default();
    if let (true, Some(c)) = (args.room_thresholds, ceiling) {
        policy.thresholds = room_thresholds(policy.thresholds, weights, c);
        let t = &policy.thresholds;
        eprintln!(
            "soak: own thresholds: warning {:.4}, critical {:.4}",
            t.warning, t.critical
        );
    }
    EngineConfig {
        max_sessions: args.load.sessions.max(1),
        session_capacity: args.capacity,
        token_budget: if args.governor {
            args.budget
        } else {
            args.capacity
        },
        kv_type: args.kv,
        spill_dir,
        memory_ceiling: ceiling,
        // The control run (governor off) must meet the kernel's limit unguarded.
        real_memory: RealMemory {
            enabled: args.governor,
            ..RealMemory::default()
        },
        idle_after: Duration::from_millis(args.idle_ms),
        policy,
        ..EngineConfig::default()
    }
}

/// KV bytes of a State holding `tokens` tokens ([`statelm_model::kv::kv_bytes_for`], with the
/// default micro-batch's sliding-window ring).
fn kv_bytes_for(model: &Model, kv: KvType, capacity: usize, tokens: usize) -> u64 {
    let ring = Some(model.ubatch());
    statelm_model::kv::kv_bytes_for(model.config(), kv, capacity, ring, tokens)
}

/// `--plan`: the memory figures the harness sizes the cgroup from. Runs one prefill chunk
/// (128 tokens) to measure a State's scratch buffers and the prefill speed.
fn plan(args: &Args) -> Result<serde_json::Value, String> {
    let model = Model::load(&args.model, &LoadOptions::default()).map_err(|e| e.to_string())?;
    let anon_before_state = ProcMemory::read().rss_anon;
    let opts = statelm_model::StateOptions {
        capacity: args.capacity,
        kv_type: args.kv,
    };
    let mut state = model.new_state_with(opts).map_err(|e| e.to_string())?;
    let mut scratch = Scratch::with_ubatch(EngineConfig::default().prefill_chunk);
    let text = user_message(&mut statelm_engine::rng::Rng::new(1), 200);
    let tok = model.tokenizer().encode(&text, true, false);
    let mut tokens = tok.map_err(|e| e.to_string())?;
    tokens.truncate(128);
    let t0 = Instant::now();
    let mut logits = statelm_model::Logits::default();
    let fwd = model.forward_into(
        &mut scratch,
        &mut state,
        &tokens,
        Default::default(),
        &mut logits,
    );
    fwd.map_err(|e| e.to_string())?;
    let secs = t0.elapsed().as_secs_f64();
    // The engine's one scratch and this State's history (a governed engine has one scratch
    // whatever the number of sessions; counting it per State keeps the sizing conservative).
    let scratch = (scratch.bytes() + state.bytes() - state.kv_bytes()) as u64;
    let kv = |n| kv_bytes_for(&model, args.kv, args.capacity, n);
    Ok(serde_json::json!({
        "weights_bytes": model.file_bytes(),
        "kv_bytes_per_token": (kv(args.capacity) - kv(args.capacity.saturating_sub(256))) / 256,
        "kv_bytes_at_budget": kv(args.budget),
        "state_scratch_bytes": scratch,
        "state_bytes_at_budget": kv(args.budget) + scratch,
        "anon_before_state": anon_before_state,
        "prefill_tokens_per_s": tokens.len() as f64 / secs.max(1e-9),
    }))
}

/// Loads the model, starts the engine (with the governor when asked), runs the load.
async fn drive(args: &Args) -> Result<LoadReport, String> {
    let model = Model::load(&args.model, &LoadOptions::default())
        .map_err(|e| format!("loading {}: {e}", args.model.display()))?;
    let spill_tmp = tempfile::tempdir().map_err(|e| format!("spill directory: {e}"))?;
    let spill_dir = args.spill_dir.clone().unwrap_or(spill_tmp.path().into());
    let ceiling = match args.governor {
        true => Some(ceiling(args, &model)?),
        false => None,
    };
    let config = engine_config(args, ceiling, spill_dir, model.file_bytes());
    let engine = Engine::start(model.clone(), config);
    let _monitor = match args.governor {
        true => Some(attach_monitor(&engine)?),
        false => None,
    };
    Ok(run_load(&engine, &model, &args.load, own_cgroup(), |_, _| true).await)
}

/// Runs what the command line asks; the exit status on success.
fn run(args: &Args) -> Result<ExitCode, String> {
    if args.plan {
        println!("{}", plan(args)?);
        return Ok(ExitCode::SUCCESS);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let report = runtime.block_on(drive(args))?;
    eprintln!(
        "soak: done: {}/{} turns completed ({} cut short by eviction), {} tokens generated, \
         {} prefilled, peak RSS {} MiB, {:?}",
        report.turns_completed,
        report.turns_planned,
        report.turns_evicted,
        report.tokens_generated,
        report.tokens_prefilled,
        report.peak_rss / MIB,
        report.events
    );
    if let Some(path) = &args.report {
        let doc = serde_json::json!({
            "model": args.model,
            "governor": args.governor,
            "budget": args.budget,
            "capacity": args.capacity,
            "kv": format!("{:?}", args.kv),
            "own_thresholds": if args.room_thresholds { "room" } else { "default" },
            "load": args.load,
            "report": report,
        });
        let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    let ok = report.turns_completed == report.turns_planned && report.turns_failed == 0;
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Entry point: exit status 0 when every turn completed, 1 when not, 2 on errors.
fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    match parse_args(&argv).and_then(|args| run(&args)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("soak: {e}");
            ExitCode::from(2)
        }
    }
}

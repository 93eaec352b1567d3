//! Constrained decoding on Qwen2.5-Coder (one model load for every assertion): JSON schemas,
//! JSON objects, regexes and Lark grammars give text that matches; prompt lookup keeps the
//! tokens of plain decoding under a constraint, greedy and seeded; a grammar that does not
//! compile is refused before anything runs.

mod common;

use common::{collect, Run};
use statelm_engine::{
    ChatMessage, Engine, EngineConfig, EngineError, EngineHandle, GenerateRequest, Grammar, Input,
    SamplingParams, SessionOptions, StopReason,
};
use statelm_model::{LoadOptions, Model};
use std::sync::{Arc, OnceLock};

fn engine() -> Option<EngineHandle> {
    static MODEL: OnceLock<Option<Arc<Model>>> = OnceLock::new();
    let model = MODEL
        .get_or_init(|| {
            let path = statelm_model::testing::qwen_path()?;
            Some(Model::load(path, &LoadOptions::default()).expect("qwen loads"))
        })
        .clone()?;
    Some(engine_on(model))
}

/// An engine over Qwen in llama.cpp's numerics, where a recomputed cache equals the one
/// token-by-token decoding built (the default numerics batch with f32 GEMM: a last-bit
/// difference that can flip a near-tie, and where a recompute lands depends on timing).
fn exact_engine() -> Option<EngineHandle> {
    static MODEL: OnceLock<Option<Arc<Model>>> = OnceLock::new();
    let model = MODEL
        .get_or_init(|| {
            let path = statelm_model::testing::qwen_path()?;
            let opts = LoadOptions {
                numerics: statelm_model::Numerics::LlamaCpp,
                ..LoadOptions::default()
            };
            Some(Model::load(path, &opts).expect("qwen loads"))
        })
        .clone()?;
    Some(engine_on(model))
}

fn engine_on(model: Arc<Model>) -> EngineHandle {
    let dir = tempfile::tempdir().unwrap();
    Engine::start(
        model,
        EngineConfig {
            session_capacity: 1024,
            token_budget: 1024,
            spill_dir: dir.keep(),
            // The engine stays a few tokens ahead of a reader: an interruption at a token
            // the reader sees lands in the middle of the answer.
            stream_buffer: 4,
            ..EngineConfig::default()
        },
    )
}

fn chat(text: &str) -> Input {
    Input::Chat(vec![ChatMessage::new("user", text)].into())
}

async fn ask(e: &EngineHandle, input: Input, sampling: SamplingParams, max: usize) -> Run {
    let s = e.create_session(SessionOptions::default()).await.unwrap();
    let req = GenerateRequest {
        sampling,
        ..GenerateRequest::new(s, input, max)
    };
    let run = collect(e.generate(req).await.expect("accepted")).await;
    e.close_session(s).await.unwrap();
    assert!(run.error.is_none(), "{run:?}");
    let d = run.done();
    eprintln!(
        "{:?} ({:?}, {} tokens, {:.1} tok/s)",
        run.text, d.stop_reason, d.generated_tokens, d.decode_tokens_per_s
    );
    run
}

fn constrained(g: Grammar) -> SamplingParams {
    SamplingParams {
        grammar: Some(g),
        ..SamplingParams::greedy()
    }
}

/// Asks session `s` for an answer under `g`, which must be refused before anything runs with
/// an `InvalidRequest` containing `words`.
async fn refused(e: &EngineHandle, s: statelm_engine::SessionId, g: Grammar, words: &str) {
    let req = GenerateRequest {
        sampling: constrained(g),
        ..GenerateRequest::new(s, chat("Hi"), 8)
    };
    match e.generate(req).await {
        Err(EngineError::InvalidRequest(m)) => assert!(m.contains(words), "{m}"),
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("{words}: accepted"),
    }
}

fn city_schema() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 40},
            "country": {"type": "string", "maxLength": 40},
            "population": {"type": "integer", "minimum": 0},
            "capital": {"type": "boolean"},
        },
        "required": ["city", "country", "population", "capital"],
        "additionalProperties": false,
    })
}

#[tokio::test]
async fn constrained_answers_match_their_grammars() {
    let Some(e) = engine() else {
        return;
    };
    // A JSON schema: a complete, valid object, and the generation ends with it.
    let prompt = chat("Describe Paris.");
    let run = ask(
        &e,
        prompt.clone(),
        constrained(Grammar::JsonSchema(city_schema())),
        120,
    )
    .await;
    assert_eq!(
        run.done().stop_reason,
        StopReason::Complete,
        "{:?}",
        run.text
    );
    let v: serde_json::Value = serde_json::from_str(&run.text).expect(&run.text);
    let obj = v.as_object().unwrap();
    assert_eq!(obj.len(), 4, "{v}");
    assert!(obj["city"].is_string() && obj["country"].is_string(), "{v}");
    assert!(
        obj["population"].is_u64() && obj["capital"].is_boolean(),
        "{v}"
    );

    // Any JSON object.
    let run = ask(
        &e,
        chat("List two colors as JSON."),
        constrained(Grammar::JsonObject),
        80,
    )
    .await;
    let v: serde_json::Value = serde_json::from_str(&run.text).expect(&run.text);
    assert!(v.is_object(), "{v}");

    // A regex, whole.
    let rx = Grammar::Regex("(yes|no), because [a-z ]{1,40}\\.".into());
    let run = ask(&e, chat("Is the sky blue?"), constrained(rx), 60).await;
    let re_ok = run.text.starts_with("yes, because ") || run.text.starts_with("no, because ");
    assert!(re_ok && run.text.ends_with('.'), "{:?}", run.text);
    assert_eq!(
        run.done().stop_reason,
        StopReason::Complete,
        "{:?}",
        run.text
    );

    // A Lark grammar.
    let lark = "start: \"Answer: \" NUM \" apples\"\nNUM: /[0-9]{1,3}/\n";
    let run = ask(
        &e,
        chat("How many apples are in a box of 12?"),
        constrained(Grammar::Lark(lark.into())),
        20,
    )
    .await;
    let digits = run
        .text
        .strip_prefix("Answer: ")
        .and_then(|t| t.strip_suffix(" apples"));
    assert!(
        digits.is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())),
        "{:?}",
        run.text
    );
}

#[tokio::test]
async fn lookup_gives_the_constrained_tokens_of_plain_decoding() {
    let models = [
        statelm_model::testing::qwen_path(),
        statelm_model::testing::gemma_path(),
    ];
    if models.iter().any(Option::is_none) {
        return;
    }
    // An answer that copies its input: the drafts come from the prompt.
    let prompt = chat(
        "Copy these fields into JSON: name Ana Lopez-Garcia, email \
         ana.lopez@example.com, city Springfield, street 742 Evergreen Terrace.",
    );
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 40},
            "email": {"type": "string", "maxLength": 40},
            "city": {"type": "string", "maxLength": 40},
            "street": {"type": "string", "maxLength": 40},
        },
        "required": ["name", "email", "city", "street"],
        "additionalProperties": false,
    });
    for path in models.into_iter().flatten() {
        let model = Model::load(&path, &LoadOptions::default()).unwrap();
        let e = engine_on(model);
        let params = |lookup, temperature| SamplingParams {
            temperature,
            seed: Some(11),
            lookup,
            grammar: Some(Grammar::JsonSchema(schema.clone())),
            ..SamplingParams::default()
        };
        // Greedy, then seeded sampling: with and without lookup, the same tokens.
        for temperature in [0.0, 0.9] {
            let plain = ask(&e, prompt.clone(), params(0, temperature), 120).await;
            let looked = ask(&e, prompt.clone(), params(8, temperature), 120).await;
            assert_eq!(
                looked.tokens, plain.tokens,
                "{:?} / {:?}",
                looked.text, plain.text
            );
            assert!(looked.done().accepted_tokens > 0, "{:?}", looked.done());
            let v: serde_json::Value = serde_json::from_str(&plain.text).expect(&plain.text);
            assert!(v["email"].is_string(), "{v}");
        }
    }
}

#[tokio::test]
async fn grammars_that_do_not_compile_are_refused() {
    let Some(e) = engine() else {
        return;
    };
    let s = e.create_session(SessionOptions::default()).await.unwrap();
    for (g, words) in [
        (Grammar::Regex("(unclosed".into()), "regex constraint"),
        (
            Grammar::Lark("start: missing_rule\n".into()),
            "lark constraint",
        ),
        (
            Grammar::JsonSchema(serde_json::json!({"type": "no-such-type"})),
            "json_schema constraint",
        ),
    ] {
        refused(&e, s, g, words).await;
    }
    // The session is still free.
    let run = collect(
        e.generate(GenerateRequest::new(s, chat("Hi"), 2))
            .await
            .unwrap(),
    )
    .await;
    assert!(run.error.is_none(), "{run:?}");
}

/// A constrained answer that outgrows its session's token budget is trimmed mid-answer (the
/// context's middle dropped, the trim announced) and still completes its grammar: the
/// constraint follows the answer's text, which a trim does not change.
#[tokio::test]
async fn a_trim_in_the_middle_of_a_constrained_answer_keeps_it_valid() {
    let Some(e) = engine() else {
        return;
    };
    let opts = SessionOptions {
        token_budget: Some(96),
        ..SessionOptions::default()
    };
    let s = e.create_session(opts).await.unwrap();
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"numbers": {"type": "array", "items": {"type": "integer",
            "minimum": 100, "maximum": 999}, "minItems": 40, "maxItems": 40}},
        "required": ["numbers"],
        "additionalProperties": false,
    });
    let req = GenerateRequest {
        sampling: constrained(Grammar::JsonSchema(schema)),
        ..GenerateRequest::new(s, chat("Count upwards from 100 as JSON."), 400)
    };
    let run = collect(e.generate(req).await.expect("accepted")).await;
    assert!(run.error.is_none(), "{run:?}");
    let trimmed =
        (run.events.iter()).any(|ev| matches!(ev, statelm_engine::Event::ContextTrimmed { .. }));
    assert!(trimmed, "no trim: {:?}", run.done());
    assert_eq!(run.done().stop_reason, StopReason::Complete, "{}", run.text);
    let v: serde_json::Value = serde_json::from_str(&run.text).expect(&run.text);
    assert_eq!(v["numbers"].as_array().map(Vec::len), Some(40), "{v}");
}

/// The grammar engine's memory is in the engine's accounting (its statistics) and a critical
/// memory warning frees it; the next constrained request builds it again.
#[tokio::test]
async fn the_grammar_engine_is_counted_and_freed_under_pressure() {
    let Some(e) = engine() else {
        return;
    };
    assert_eq!(e.stats().await.grammar_bytes, 0, "nothing before a grammar");
    let digits = || constrained(Grammar::Regex("[0-9]{3}".into()));
    let run = ask(&e, chat("A number?"), digits(), 8).await;
    assert_eq!(run.text.len(), 3, "{}", run.text);
    let held = e.stats().await.grammar_bytes;
    assert!(held > 20_000_000, "Qwen's trie is counted: {held}");
    e.memory_warning(statelm_engine::PressureLevel::Critical);
    let mut freed = false;
    for _ in 0..100 {
        if e.stats().await.grammar_bytes == 0 {
            freed = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(freed, "a critical warning frees the idle trie");
    let again = ask(&e, chat("A number?"), digits(), 8).await;
    assert_eq!(again.text, run.text, "rebuilt, the same answer");
    assert!(e.stats().await.grammar_bytes >= held);
}

/// A constrained answer with prompt lookup whose session loses its cache in the middle, both
/// ways the engine does that: evicted by critical pressure (prompt and answer so far are
/// recomputed), and written to disk when the app goes to the background (read back in the
/// foreground). Either way it goes on to the same tokens as an answer never interrupted: the
/// constraint and the drafts follow the text, which neither changes.
#[tokio::test]
async fn a_constrained_answer_interrupted_in_the_middle_gives_the_same_answer() {
    // In llama.cpp's numerics: a recompute gives the cache's bits back, and prompt lookup's
    // draft lengths (which adapt to measured step times, so to the interruption) do not change
    // a batch's result; in the default numerics either could flip a near-tie. (This test found
    // that drafts refused while the State was on disk stayed in it: "Springfield, " for
    // "Springfield"; they are cut when it is read back now.)
    let Some(exact) = exact_engine() else {
        return;
    };
    interrupted_constrained_answer(&exact, "spilled").await;
    interrupted_constrained_answer(&exact, "evicted").await;
}

async fn interrupted_constrained_answer(e: &EngineHandle, how: &str) {
    use futures::StreamExt;
    use statelm_engine::{Event, Lifecycle, PressureLevel};
    let prompt = chat(
        "Copy these fields into JSON: name Ana Lopez-Garcia, email ana.lopez@example.com, \
         city Springfield, street 742 Evergreen Terrace.",
    );
    let params = SamplingParams {
        lookup: 8,
        ..constrained(Grammar::JsonSchema(serde_json::json!({
            "type": "object",
            "properties": {
                "name": {"type": "string"}, "email": {"type": "string"},
                "city": {"type": "string"}, "street": {"type": "string"},
            },
            "required": ["name", "email", "city", "street"],
            "additionalProperties": false,
        })))
    };
    let expected = ask(e, prompt.clone(), params.clone(), 120).await;
    let s = e.create_session(SessionOptions::default()).await.unwrap();
    let req = GenerateRequest {
        sampling: params,
        ..GenerateRequest::new(s, prompt, 120)
    };
    let mut stream = e.generate(req).await.expect("accepted");
    let mut run = Run::default();
    let mut interrupted = false;
    while let Some(ev) = stream.next().await {
        let ev = ev.expect("no error");
        if run.tokens.len() == 8 && !interrupted {
            interrupted = true;
            if how == "evicted" {
                e.memory_warning(PressureLevel::Critical);
            } else {
                // Back to the foreground once the engine has spilled: a Background and a
                // Foreground that both arrive within one (slow) decode step leave nothing to
                // spill. (The stream announces the spill when the answer resumes.)
                let spills = e.stats().await.spills;
                e.lifecycle(Lifecycle::Background);
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
                while e.stats().await.spills == spills {
                    assert!(std::time::Instant::now() < deadline, "not spilled in 60 s");
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                e.lifecycle(Lifecycle::Foreground);
            }
        }
        common::record(&mut run, ev);
    }
    let notices = |f: fn(&Event) -> bool| run.events.iter().filter(|ev| f(ev)).count();
    if how == "evicted" {
        assert_eq!(
            notices(|ev| matches!(ev, Event::CacheEvicted { .. })),
            1,
            "{:?}",
            run.events
        );
    } else {
        assert_eq!(
            notices(|ev| matches!(ev, Event::Spilled { .. })),
            1,
            "{:?}",
            run.events
        );
        assert_eq!(
            notices(|ev| matches!(ev, Event::Restored)),
            1,
            "{:?}",
            run.events
        );
    }
    assert_eq!(run.done().stop_reason, StopReason::Complete, "{}", run.text);
    assert_eq!(
        run.tokens, expected.tokens,
        "{how}: {:?} / {:?}",
        run.text, expected.text
    );
    serde_json::from_str::<serde_json::Value>(&run.text).expect(&run.text);
}

/// llguidance's compiler recurses along chains of rule references: a chain of 1,000 Lark rules
/// or 500 `$ref`s used to overflow the compiling thread's stack and abort the process. Chains
/// at the caps compile (on the engine's compile thread) and constrain; one more is refused.
#[tokio::test]
async fn the_deepest_grammars_allowed_compile_and_deeper_ones_are_refused() {
    use statelm_engine::sampling::constraint::{MAX_REFS, MAX_RULES};
    let Some(e) = engine() else {
        return;
    };
    // `start` and rules r0..r{n-2}, each referring to the next: n definitions.
    let lark = |n: usize| {
        let mut src = String::from("start: r0\n");
        for i in 0..n - 2 {
            src += &format!("r{i}: r{}\n", i + 1);
        }
        Grammar::Lark(src + &format!("r{}: \"42\"\n", n - 2))
    };
    // n `$ref`s: a0 -> a1 -> ... -> a{n-1} -> a string.
    let schema = |n: usize| {
        let mut defs = serde_json::Map::new();
        for i in 0..n - 1 {
            defs.insert(
                format!("a{i}"),
                serde_json::json!({"$ref": format!("#/$defs/a{}", i + 1)}),
            );
        }
        defs.insert(
            format!("a{}", n - 1),
            serde_json::json!({"type": "string", "maxLength": 3}),
        );
        Grammar::JsonSchema(serde_json::json!({"$defs": defs, "$ref": "#/$defs/a0"}))
    };
    let run = ask(&e, chat("A number?"), constrained(lark(MAX_RULES)), 8).await;
    assert_eq!(run.text, "42");
    let run = ask(&e, chat("A word?"), constrained(schema(MAX_REFS)), 8).await;
    assert!(
        run.text.starts_with('"') && run.text.ends_with('"'),
        "{}",
        run.text
    );
    let s = e.create_session(SessionOptions::default()).await.unwrap();
    for (g, words) in [
        (
            lark(MAX_RULES + 1),
            "rule definitions, more than the 4096 allowed",
        ),
        (schema(MAX_REFS + 1), "`$ref`s, more than the 1024 allowed"),
    ] {
        refused(&e, s, g, words).await;
    }
}

/// The handle's futures need no tokio runtime, constrained ones included (their grammar is
/// compiled on a thread of its own then): the mobile bindings poll from Kotlin's and Swift's
/// executors.
#[test]
fn a_constrained_request_needs_no_tokio_runtime() {
    let Some(e) = engine() else {
        return;
    };
    let run = futures::executor::block_on(async {
        let s = e.create_session(SessionOptions::default()).await.unwrap();
        let req = GenerateRequest {
            sampling: constrained(Grammar::Regex("[0-9]{3}".into())),
            ..GenerateRequest::new(s, chat("A number?"), 8)
        };
        collect(e.generate(req).await.expect("accepted")).await
    });
    assert_eq!(run.done().stop_reason, StopReason::Complete, "{run:?}");
    assert_eq!(run.text.len(), 3, "{}", run.text);
}

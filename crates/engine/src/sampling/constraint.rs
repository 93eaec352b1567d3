//! Constrained decoding: the text a generation may produce, as a JSON schema, any JSON object,
//! a regular expression or a Lark-style grammar ([`Grammar`]).
//!
//! The grammar engine is [llguidance](https://github.com/guidance-ai/llguidance) (llama.cpp,
//! mistral.rs and vLLM use it too): it computes the set of allowed tokens of a 150k-token
//! vocabulary in tens of microseconds from a token trie, instead of walking the vocabulary
//! character by character. Our part is the vocabulary it sees and where the mask goes:
//! - [`Grammars`] (one per model) builds llguidance's trie from the tokenizer once, on the first
//!   constrained request, and keeps the last [`CACHE`] compiled grammars: a request whose
//!   grammar was seen before clones its compiled matcher.
//! - That trie is not small: 32 MB for Qwen's 151k-token vocabulary, 62 MB for Gemma's 262k
//!   (measured by `tests/grammar_memory.rs`). The engine counts [`Grammars::bytes`] in its
//!   memory accounting and frees the cache under pressure, and the trie too while no
//!   constrained generation uses it ([`Grammars::release`]); the next constrained request
//!   builds it again (a quarter to half a second).
//! - A token's bytes in the trie are exactly what the streaming detokenizer writes for it, so
//!   the grammar judges the text the user receives. Hidden tokens (control, unknown) write
//!   nothing; llguidance sees them as special tokens that free text never matches, except the
//!   end-of-generation tokens, which the mask allows once the text is complete.
//! - [`Constraint`] follows one generation: the mask is applied before every other sampling
//!   step (so penalties, top-k and the rest only ever see allowed tokens), and each sampled
//!   token is fed to it. Drafts of prompt lookup are cut at the first token the grammar
//!   refuses, so speculation keeps its exactness: every token is still sampled from masked
//!   logits.

use crate::error::EngineError;
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};
use statelm_model::Model;
use std::sync::{Arc, Mutex};

/// How many compiled grammars a model keeps for reuse.
pub const CACHE: usize = 32;

/// Most bytes of a grammar's source (a schema, a regex, a Lark grammar).
pub const MAX_GRAMMAR_BYTES: usize = 256 * 1024;

/// Most rule definitions of a Lark grammar, and most `$ref`s in a JSON schema. llguidance's
/// compiler recurses once per rule of a chain of references (`a: b`, `b: c`, ...): a chain of
/// 1,000 rules, or of 500 `$ref`s, overflows a 2 MiB thread stack and aborts the process.
/// Grammars are compiled on a thread of [`COMPILE_STACK`] bytes, which holds chains at these
/// caps with room to spare (measured: 16 MiB holds 4,096 chained rules and 1,024 chained
/// `$ref`s in a release build, 8 MiB does not); longer ones are refused before compiling.
pub const MAX_RULES: usize = 4096;

/// See [`MAX_RULES`].
pub const MAX_REFS: usize = 1024;

/// The stack of the thread a grammar is compiled on (reserved, and touched only as deep as
/// the grammar's chains go; the thread ends with the compile).
const COMPILE_STACK: usize = 64 << 20;

/// The one slice of the vocabulary llguidance precomputes beside its trie: the body of a JSON
/// string, where a mask would otherwise walk most of the vocabulary. llguidance's default is
/// four slices (whitespace, strings of up to 10 and 30 bytes, any string); on Qwen2.5-Coder
/// 0.5B that doubles the trie's memory (71 MB against 32 MB) for a mask that is no faster
/// (`statelm bench --json-schema`, a five-field city schema, 128 tokens, two runs each: 170 and
/// 173 µs a token with four slices, 152 and 161 µs with this one, 188 and 189 µs with none).
const STRING_BODY: &str = r#"[^"\\\x00-\x1F\x7F]+"#;

/// Bytes a compiled grammar in the cache is counted at, beside its source: the matcher's
/// lexer and parser tables (about 100 KB for a small schema, measured).
const COMPILED_BYTES: u64 = 128 * 1024;

/// What the generated text must match.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Grammar {
    /// A JSON value valid under this JSON schema (draft 2020-12 subset: types, properties,
    /// required, enums, consts, items, anyOf/oneOf/allOf, patterns, lengths, local `$ref`).
    JsonSchema(serde_json::Value),
    /// Any JSON object.
    JsonObject,
    /// Text matching this regular expression, whole.
    Regex(String),
    /// A Lark-style grammar (llguidance's dialect: `start: ...`, regex terminals, `%json`).
    Lark(String),
}

impl Grammar {
    /// The grammar's kind, as front ends name it (`json_schema`, `json_object`, `regex`,
    /// `lark`).
    pub fn kind(&self) -> &'static str {
        match self {
            Grammar::JsonSchema(_) => "json_schema",
            Grammar::JsonObject => "json_object",
            Grammar::Regex(_) => "regex",
            Grammar::Lark(_) => "lark",
        }
    }

    fn source_len(&self) -> usize {
        match self {
            Grammar::JsonSchema(v) => v.to_string().len(),
            Grammar::JsonObject => 0,
            Grammar::Regex(s) | Grammar::Lark(s) => s.len(),
        }
    }

    fn top_level(&self) -> TopLevelGrammar {
        match self {
            Grammar::JsonSchema(v) => TopLevelGrammar::from_json_schema(json_layout(v.clone())),
            Grammar::JsonObject => TopLevelGrammar::from_json_schema(json_layout(
                serde_json::json!({"type": "object"}),
            )),
            Grammar::Regex(rx) => TopLevelGrammar::from_regex(rx),
            Grammar::Lark(src) => TopLevelGrammar::from_lark(src.clone()),
        }
    }

    /// Refuses structures too deep to compile safely ([`MAX_RULES`], [`MAX_REFS`]).
    fn check_depth(&self) -> Result<(), String> {
        let (count, max, what) = match self {
            Grammar::JsonSchema(v) => (count_refs(v), MAX_REFS, "`$ref`s"),
            Grammar::Lark(src) => (count_rules(src), MAX_RULES, "rule definitions"),
            _ => return Ok(()),
        };
        if count > max {
            return Err(format!("{count} {what}, more than the {max} allowed"));
        }
        Ok(())
    }

    /// The cache key: the kind and the canonical source.
    fn key(&self) -> String {
        match self {
            Grammar::JsonSchema(v) => format!("json_schema\n{v}"),
            Grammar::JsonObject => "json_object".into(),
            Grammar::Regex(s) => format!("regex\n{s}"),
            Grammar::Lark(s) => format!("lark\n{s}"),
        }
    }
}

/// How many `$ref` keys `schema` holds, at any depth.
fn count_refs(schema: &serde_json::Value) -> usize {
    let mut stack = vec![schema];
    let mut n = 0;
    while let Some(v) = stack.pop() {
        match v {
            serde_json::Value::Object(o) => {
                n += usize::from(o.contains_key("$ref"));
                stack.extend(o.values());
            }
            serde_json::Value::Array(a) => stack.extend(a),
            _ => {}
        }
    }
    n
}

/// How many lines of a Lark grammar define a rule or a terminal (`name:`, `?name:`,
/// `NAME.2:`, `name{x}:`), an upper bound on its chains of references.
fn count_rules(src: &str) -> usize {
    src.lines()
        .filter(|line| {
            let l = line.trim_start().trim_start_matches(['?', '!']);
            let name = l
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(l, |end| &l[..end]);
            let rest = l[name.len()..].trim_start();
            !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && (rest.starts_with(':') || rest.starts_with('.') || rest.starts_with('{'))
        })
        .count()
}

/// JSON is written on one line, `{"key": value, "next": value}` (the separators of Python's
/// `json.dumps`), unless the schema says otherwise under llguidance's `x-guidance` key: free
/// whitespace would let a small model pad its answer with blank lines up to `max_tokens`.
fn json_layout(mut schema: serde_json::Value) -> serde_json::Value {
    if let Some(obj) = schema.as_object_mut() {
        obj.entry("x-guidance").or_insert_with(|| {
            serde_json::json!({
                "whitespace_flexible": false,
                "item_separator": ", ",
                "key_separator": ": ",
            })
        });
    }
    schema
}

/// The model's vocabulary as llguidance sees it.
struct Vocabulary {
    trie: TokTrie,
    model: Arc<Model>,
}

impl TokenizerEnv for Vocabulary {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<u32> {
        let tok = self.model.tokenizer();
        self.trie.tokenize_with_greedy_fallback(s, |text| {
            tok.encode_continuation(text).unwrap_or_default()
        })
    }
}

/// Each token's bytes for the trie: what the detokenizer writes, hidden tokens as special
/// (`0xFF` + their text), ids past the tokenizer's vocabulary (padding rows of the output
/// matrix) empty, which llguidance never allows.
fn token_words(model: &Model) -> Vec<Vec<u8>> {
    let tok = model.tokenizer();
    let n = model.config().n_vocab.max(tok.vocab_size());
    (0..n as u32)
        .map(|id| match tok.token_bytes(id) {
            Some(b) if tok.is_hidden(id) => {
                let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                w.extend_from_slice(b);
                w
            }
            Some(b) => b.to_vec(),
            None => Vec::new(),
        })
        .collect()
}

/// A built vocabulary view and what it is counted at.
struct Built {
    factory: ParserFactory,
    /// The estimate of [`trie_bytes`] for the trie and its slice.
    bytes: u64,
    /// References to the vocabulary when nothing but the factory holds it: more means a
    /// compiled grammar (cached or running) still uses it.
    idle_refs: usize,
    env: TokEnv,
}

/// What llguidance holds for a vocabulary whose trie has `nodes` nodes: about 100 bytes a node
/// (the trie, its slice and their tables), measured by the allocator: 97 on Qwen2.5's
/// vocabulary (333k nodes, 32.4 MB), 102 on Gemma 3's (601k nodes, 61.5 MB), checked to 15 %
/// by `tests/grammar_memory.rs`.
fn trie_bytes(nodes: usize) -> u64 {
    nodes as u64 * 100
}

fn build_factory(model: &Arc<Model>) -> Result<Built, String> {
    let tok = model.tokenizer();
    let words = token_words(model);
    let eos = tok.eos_id().or(tok.eog_ids().first().copied()).unwrap_or(0);
    let info = TokRxInfo::new(words.len() as u32, eos);
    let mut trie = TokTrie::from(&info, &words);
    if !tok.eog_ids().is_empty() {
        trie = trie.with_eos_tokens(tok.eog_ids());
    }
    let bytes = trie_bytes(trie.root().subtree_size());
    let env: TokEnv = Arc::new(Vocabulary {
        trie,
        model: model.clone(),
    });
    let slices = [STRING_BODY.to_string()];
    let mut factory =
        ParserFactory::new(&env, Default::default(), &slices).map_err(|e| e.to_string())?;
    factory.quiet();
    // Errors name the grammar's problem, not the prompt's tokens.
    factory.limits_mut().verbose_errors = false;
    let idle_refs = Arc::strong_count(&env);
    Ok(Built {
        factory,
        bytes,
        idle_refs,
        env,
    })
}

/// One model's grammar compiler: llguidance's view of the vocabulary (built on first use) and
/// the most recently used compiled grammars. The engine keeps one; `statelm bench
/// --json-schema` times one directly.
pub struct Grammars {
    model: Arc<Model>,
    built: Mutex<Option<Arc<Built>>>,
    cache: Mutex<Vec<(String, Matcher, u64)>>,
}

impl std::fmt::Debug for Grammars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grammars").finish_non_exhaustive()
    }
}

impl Grammars {
    /// A compiler for `model`'s vocabulary (nothing is built until the first grammar).
    pub fn new(model: Arc<Model>) -> Grammars {
        Grammars {
            model,
            built: Mutex::new(None),
            cache: Mutex::new(Vec::new()),
        }
    }

    /// The model whose vocabulary this compiles for.
    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// Builds llguidance's view of the vocabulary now (the first [`Grammars::constraint`]
    /// does otherwise).
    pub fn prepare(&self) -> Result<(), EngineError> {
        self.built().map(|_| ())
    }

    fn built(&self) -> Result<Arc<Built>, EngineError> {
        let mut built = self.built.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = built.as_ref() {
            return Ok(b.clone());
        }
        let b = build_factory(&self.model)
            .map(Arc::new)
            .map_err(|e| EngineError::Internal(format!("the grammar engine: {e}")))?;
        *built = Some(b.clone());
        Ok(b)
    }

    /// Bytes counted for the grammar engine: the vocabulary's trie once built, and the cached
    /// compiled grammars.
    pub fn bytes(&self) -> u64 {
        let trie = self
            .built
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map_or(0, |b| b.bytes);
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        trie + cache.iter().map(|e| e.2).sum::<u64>()
    }

    /// Frees memory under pressure: the compiled grammars' cache and, with `trie`, the
    /// vocabulary's trie if no constrained generation is running on it. Returns the bytes
    /// freed (by the accounting of [`Grammars::bytes`]).
    pub fn release(&self, trie: bool) -> u64 {
        let mut freed: u64 = {
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            cache.drain(..).map(|e| e.2).sum()
        };
        if trie {
            let mut built = self.built.lock().unwrap_or_else(|p| p.into_inner());
            let idle = built.as_ref().is_some_and(|b| {
                Arc::strong_count(b) == 1 && Arc::strong_count(&b.env) <= b.idle_refs
            });
            if idle {
                freed += built.take().map_or(0, |b| b.bytes);
            }
        }
        freed
    }

    /// A fresh constraint for `grammar`: compiled, or cloned from the cache. A grammar that
    /// does not compile is [`EngineError::InvalidRequest`] naming its kind and the reason.
    pub fn constraint(&self, grammar: &Grammar) -> Result<Constraint, EngineError> {
        let invalid = |why: String| {
            EngineError::InvalidRequest(format!("{} constraint: {why}", grammar.kind()))
        };
        if grammar.source_len() > MAX_GRAMMAR_BYTES {
            return Err(invalid(format!(
                "{} bytes, more than the {MAX_GRAMMAR_BYTES} allowed",
                grammar.source_len()
            )));
        }
        grammar.check_depth().map_err(invalid)?;
        let key = grammar.key();
        if let Some(m) = self.cached(&key) {
            return Ok(Constraint::new(m));
        }
        let built = self.built()?;
        let matcher = compile(&built.factory, grammar)?;
        if let Some(e) = matcher.get_error() {
            return Err(invalid(e));
        }
        let bytes = COMPILED_BYTES + grammar.source_len() as u64;
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= CACHE {
            cache.remove(0);
        }
        cache.push((key, matcher.clone(), bytes));
        Ok(Constraint::new(matcher))
    }

    fn cached(&self, key: &str) -> Option<Matcher> {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let i = cache.iter().position(|e| e.0 == key)?;
        let entry = cache.remove(i);
        let m = entry.1.clone();
        cache.push(entry);
        Some(m)
    }
}

/// Compiles `grammar` on a thread with a stack of [`COMPILE_STACK`] bytes (llguidance's
/// compiler recurses along the grammar's chains of references).
fn compile(factory: &ParserFactory, grammar: &Grammar) -> Result<Matcher, EngineError> {
    let lost = |e: &dyn std::fmt::Display| {
        EngineError::Internal(format!("compiling a {} constraint: {e}", grammar.kind()))
    };
    std::thread::scope(|scope| {
        let worker = std::thread::Builder::new()
            .name("statelm-grammar".into())
            .stack_size(COMPILE_STACK)
            .spawn_scoped(scope, || {
                Matcher::new(factory.create_parser(grammar.top_level()))
            })
            .map_err(|e| lost(&e))?;
        worker.join().map_err(|_| lost(&"the compiler panicked"))
    })
}

/// One generation's constraint: where its text is in the grammar.
pub struct Constraint {
    matcher: Matcher,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("stopped", &self.matcher.is_stopped())
            .finish_non_exhaustive()
    }
}

impl Clone for Constraint {
    fn clone(&self) -> Self {
        Constraint {
            matcher: self.matcher.deep_clone(),
        }
    }
}

impl Constraint {
    fn new(matcher: Matcher) -> Constraint {
        Constraint { matcher }
    }

    /// Sets every logit the grammar does not allow next to −∞. Once the text is complete only
    /// the end-of-generation tokens remain.
    pub fn mask(&mut self, logits: &mut [f32]) -> Result<(), EngineError> {
        let allowed = self.matcher.compute_mask_or_eos().map_err(failed)?;
        let words = allowed.as_slice();
        for (i, chunk) in logits.chunks_mut(32).enumerate() {
            let bits = words.get(i).copied().unwrap_or(0);
            if bits == u32::MAX {
                continue;
            }
            for (j, l) in chunk.iter_mut().enumerate() {
                if bits & (1 << j) == 0 {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        Ok(())
    }

    /// Feeds the sampled token `id` (a token outside the mask is an error).
    pub fn accept(&mut self, id: u32) -> Result<(), EngineError> {
        if self.matcher.is_stopped() {
            return Ok(());
        }
        self.matcher.consume_token(id).map_err(failed)
    }

    /// Whether the text is complete: the grammar allows no further token.
    pub fn is_complete(&self) -> bool {
        self.matcher.is_stopped() && !self.matcher.is_error()
    }

    /// How many of `drafts`, in order, the grammar allows from here (the state is unchanged).
    pub fn allowed_prefix(&mut self, drafts: &[u32]) -> usize {
        if self.matcher.is_stopped() {
            return 0;
        }
        self.matcher.validate_tokens(drafts).unwrap_or(0)
    }
}

fn failed(e: anyhow::Error) -> EngineError {
    EngineError::Constraint(e.to_string())
}

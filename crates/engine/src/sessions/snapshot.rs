//! Session files: a State snapshot plus the session's metadata, atomic and checksummed.
//!
//! Layout (little-endian): magic `STLMSESS`, u32 version, u64 metadata length, the metadata
//! (JSON: history, evaluated, trimmed, pinned prefix, budget, options), u64 snapshot length,
//! the State snapshot (the model crate's own checksummed format, which also pins the model),
//! and a CRC-32 of everything before it. Written to a temporary sibling, synced, renamed.

use crate::error::EngineError;
use crate::events::SessionId;
use crate::request::SessionOptions;
use crate::session::Session;
use statelm_model::{Model, State};
use std::path::Path;

const MAGIC: &[u8; 8] = b"STLMSESS";
const VERSION: u32 = 1;

#[derive(serde::Serialize, serde::Deserialize)]
struct Meta {
    history: Vec<u32>,
    evaluated: usize,
    trimmed: bool,
    pinned: usize,
    budget: usize,
    token_budget: Option<usize>,
    pinned_prefix: Option<usize>,
    system_prompt: Option<String>,
    /// The session's chat template variables (absent in files written before they existed).
    #[serde(default)]
    template_vars: statelm_tokenizer::TemplateVars,
}

fn bad(msg: impl Into<String>) -> EngineError {
    EngineError::BadSessionFile(msg.into())
}

/// The State snapshot bytes of `s`, whether resident or spilled.
fn state_bytes(s: &Session) -> Result<Vec<u8>, EngineError> {
    match (&s.state, &s.spill_path) {
        (Some(state), _) => {
            let mut b = Vec::with_capacity(state.kv_bytes() + 4096);
            state.save(&mut b)?;
            Ok(b)
        }
        (None, Some(path)) => {
            let bytes = std::fs::read(path)?;
            match statelm_model::files::FileKey::process().verify(&bytes, &s.spill_tag) {
                true => Ok(bytes),
                false => Err(bad("the spill file is not the one this process wrote")),
            }
        }
        (None, None) => Err(EngineError::Internal("session has no State".into())),
    }
}

/// Encodes session `s` as a session file image.
pub(crate) fn encode(s: &Session) -> Result<Vec<u8>, EngineError> {
    let meta = Meta {
        history: s.history.clone(),
        evaluated: s.evaluated,
        trimmed: s.trimmed,
        pinned: s.pinned,
        budget: s.budget,
        token_budget: s.opts.token_budget,
        pinned_prefix: s.opts.pinned_prefix,
        system_prompt: s.opts.system_prompt.clone(),
        template_vars: s.opts.template_vars.clone(),
    };
    let meta = serde_json::to_vec(&meta).map_err(|e| EngineError::Internal(e.to_string()))?;
    let state = state_bytes(s)?;
    let mut b = Vec::with_capacity(meta.len() + state.len() + 32);
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&(meta.len() as u64).to_le_bytes());
    b.extend_from_slice(&meta);
    b.extend_from_slice(&(state.len() as u64).to_le_bytes());
    b.extend_from_slice(&state);
    let crc = crc32fast::hash(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    Ok(b)
}

/// Writes session `s` to `path` atomically.
pub(crate) fn save(s: &Session, path: &Path) -> Result<(), EngineError> {
    let bytes = encode(s)?;
    statelm_model::write_file_atomic(path, &bytes)?;
    Ok(())
}

/// Splits `n` bytes off the front of `b`.
fn take<'a>(b: &mut &'a [u8], n: usize, what: &str) -> Result<&'a [u8], EngineError> {
    if b.len() < n {
        return Err(bad(format!("truncated in {what}")));
    }
    let (head, rest) = b.split_at(n);
    *b = rest;
    Ok(head)
}

fn take_u64(b: &mut &[u8], what: &str) -> Result<u64, EngineError> {
    let s = take(b, 8, what)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Ok(u64::from_le_bytes(a))
}

/// Decodes a session file image for `model` as session `id`.
pub(crate) fn decode(bytes: &[u8], model: &Model, id: SessionId) -> Result<Session, EngineError> {
    if bytes.len() < MAGIC.len() + 4 + 4 || &bytes[..8] != MAGIC {
        return Err(bad("not a statelm session file (bad magic)"));
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    if crc32fast::hash(body) != u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) {
        return Err(bad("checksum mismatch: the file is corrupt"));
    }
    let mut b = &body[8..];
    let version = u32::from_le_bytes(take(&mut b, 4, "header")?.try_into().unwrap_or([0; 4]));
    if version != VERSION {
        return Err(bad(format!(
            "format version {version} is not supported (this build reads {VERSION})"
        )));
    }
    let meta_len = take_u64(&mut b, "header")? as usize;
    let meta: Meta = serde_json::from_slice(take(&mut b, meta_len, "metadata")?)
        .map_err(|e| bad(format!("metadata: {e}")))?;
    let state_len = take_u64(&mut b, "header")? as usize;
    let mut snap = take(&mut b, state_len, "state")?;
    if !b.is_empty() {
        return Err(bad("trailing bytes"));
    }
    let state = State::load(&mut snap, model)?;
    validate(&meta, &state, model.config().n_vocab)?;
    let opts = SessionOptions {
        token_budget: meta.token_budget,
        pinned_prefix: meta.pinned_prefix,
        system_prompt: meta.system_prompt,
        template_vars: meta.template_vars,
    };
    let budget = meta.budget.clamp(
        crate::config::MIN_TOKEN_BUDGET,
        state.capacity().max(crate::config::MIN_TOKEN_BUDGET),
    );
    let mut s = Session::new(id, opts, state, budget);
    s.history = meta.history;
    s.evaluated = meta.evaluated;
    s.trimmed = meta.trimmed;
    s.pinned = meta.pinned;
    Ok(s)
}

/// Checks that the metadata makes sense for the model and agrees with the State: a file can be
/// CRC-valid and still hostile or mangled.
fn validate(meta: &Meta, state: &State, n_vocab: usize) -> Result<(), EngineError> {
    if let Some(t) = meta.history.iter().find(|&&t| t as usize >= n_vocab) {
        return Err(bad(format!(
            "history token id {t} is outside the vocabulary ({n_vocab} tokens)"
        )));
    }
    if meta.evaluated > meta.history.len() {
        return Err(bad("more tokens evaluated than in the history"));
    }
    if meta.pinned > meta.history.len() || meta.pinned > state.capacity() {
        return Err(bad(
            "more tokens pinned than the history or the State holds",
        ));
    }

    if !meta.trimmed && state.tokens() != &meta.history[..meta.evaluated] {
        return Err(bad("the State does not hold the history it claims"));
    }
    if meta.trimmed && state.len() > meta.evaluated {
        return Err(bad("a trimmed State longer than its history"));
    }
    Ok(())
}

/// Reads the session file at `path` for `model` as session `id`.
pub(crate) fn load(path: &Path, model: &Model, id: SessionId) -> Result<Session, EngineError> {
    let bytes = std::fs::read(path)?;
    decode(&bytes, model, id)
}

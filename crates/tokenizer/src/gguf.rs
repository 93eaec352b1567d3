//! Filling a [`TokenizerSpec`] from GGUF metadata (`tokenizer.ggml.*`).

use statelm_gguf::{GgufError, GgufFile};

use crate::error::TokenizerError;
use crate::vocab::{SpecialIds, TokenizerKind, TokenizerSpec};
use crate::Tokenizer;

fn wrap(key: &str) -> impl FnOnce(GgufError) -> TokenizerError + '_ {
    move |source| TokenizerError::Gguf {
        key: key.to_string(),
        source,
    }
}

fn opt_id(f: &GgufFile, name: &str) -> Result<Option<u32>, TokenizerError> {
    let key = format!("tokenizer.ggml.{name}_token_id");
    f.opt_u32(&key).map_err(wrap(&key))
}

fn opt_bool(f: &GgufFile, key: &str) -> Result<Option<bool>, TokenizerError> {
    f.opt_bool(key).map_err(wrap(key))
}

fn special_ids(f: &GgufFile) -> Result<SpecialIds, TokenizerError> {
    let pick = |new: &str, old: &str| -> Result<Option<u32>, TokenizerError> {
        Ok(opt_id(f, new)?.or(opt_id(f, old)?))
    };
    Ok(SpecialIds {
        bos: opt_id(f, "bos")?,
        eos: opt_id(f, "eos")?,
        eot: opt_id(f, "eot")?,
        eom: opt_id(f, "eom")?,
        unk: opt_id(f, "unknown")?,
        sep: opt_id(f, "seperator")?.or(opt_id(f, "separator")?),
        pad: opt_id(f, "padding")?,
        mask: opt_id(f, "mask")?,
        fim_pre: pick("fim_pre", "prefix")?,
        fim_suf: pick("fim_suf", "suffix")?,
        fim_mid: pick("fim_mid", "middle")?,
        fim_pad: opt_id(f, "fim_pad")?,
        fim_rep: opt_id(f, "fim_rep")?,
        fim_sep: opt_id(f, "fim_sep")?,
    })
}

/// Reads the tokenizer metadata of a GGUF file into a spec.
pub fn spec_from_gguf(f: &GgufFile) -> Result<TokenizerSpec, TokenizerError> {
    const MODEL: &str = "tokenizer.ggml.model";
    let kind = match f.get_str(MODEL).map_err(wrap(MODEL))? {
        "llama" => TokenizerKind::Spm,
        "gpt2" => TokenizerKind::Bpe,
        other => return Err(TokenizerError::UnsupportedModel(other.to_string())),
    };
    const PRE: &str = "tokenizer.ggml.pre";
    let pre = f.opt_str(PRE).map_err(wrap(PRE))?.unwrap_or("").to_string();
    let architecture = f.architecture().unwrap_or("").to_string();
    const TOKENS: &str = "tokenizer.ggml.tokens";
    let tokens = f.get_str_array(TOKENS).map_err(wrap(TOKENS))?.to_vec();
    const SCORES: &str = "tokenizer.ggml.scores";
    let scores = match f.get(SCORES) {
        Some(_) => f.get_f32_array(SCORES).map_err(wrap(SCORES))?,
        None => Vec::new(),
    };
    const TYPES: &str = "tokenizer.ggml.token_type";
    let token_types = match f.get(TYPES) {
        Some(_) => f.get_i32_array(TYPES).map_err(wrap(TYPES))?,
        None => Vec::new(),
    };
    const MERGES: &str = "tokenizer.ggml.merges";
    let merges = match kind {
        TokenizerKind::Bpe => f.get_str_array(MERGES).map_err(wrap(MERGES))?.to_vec(),
        TokenizerKind::Spm => Vec::new(),
    };
    const TEMPLATE: &str = "tokenizer.chat_template";
    let chat_template = f
        .opt_str(TEMPLATE)
        .map_err(wrap(TEMPLATE))?
        .map(str::to_string);
    Ok(TokenizerSpec {
        kind,
        pre,
        architecture,
        tokens,
        scores,
        token_types,
        merges,
        special: special_ids(f)?,
        add_bos: opt_bool(f, "tokenizer.ggml.add_bos_token")?,
        add_eos: opt_bool(f, "tokenizer.ggml.add_eos_token")?,
        add_space_prefix: opt_bool(f, "tokenizer.ggml.add_space_prefix")?,
        chat_template,
    })
}

impl Tokenizer {
    /// Builds the tokenizer described by a GGUF file's metadata.
    pub fn from_gguf(f: &GgufFile) -> Result<Tokenizer, TokenizerError> {
        Tokenizer::new(spec_from_gguf(f)?)
    }
}

//! The plain vocabulary description ([`TokenizerSpec`]) and its indexed form.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::error::TokenizerError;

/// Which tokenization algorithm a vocabulary uses (`tokenizer.ggml.model`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenizerKind {
    /// SentencePiece-style BPE over characters with scores (`"llama"`).
    Spm,
    /// GPT-2 style byte-level BPE with ranked merges (`"gpt2"`).
    Bpe,
}

/// The type of a vocabulary entry (`tokenizer.ggml.token_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenType {
    /// No type given (0 or out of range).
    Undefined,
    /// An ordinary token (1).
    Normal,
    /// The unknown token (2).
    Unknown,
    /// A control token such as BOS/EOS or a chat marker (3).
    Control,
    /// A user-defined token, always matched as a whole piece of raw text (4).
    UserDefined,
    /// A reserved, unused entry (5).
    Unused,
    /// A byte-fallback token `<0xNN>` (6).
    Byte,
}

impl TokenType {
    /// Maps the GGUF integer to a type; unknown values become `Undefined`.
    pub fn from_i32(v: i32) -> TokenType {
        match v {
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => TokenType::Undefined,
        }
    }
}

/// Special token ids as given by metadata (`tokenizer.ggml.*_token_id`).
/// `None` means "not in the metadata": the tokenizer then applies llama.cpp's
/// defaults for the model kind, or detects the token by its text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecialIds {
    /// Beginning of sequence.
    pub bos: Option<u32>,
    /// End of sequence.
    pub eos: Option<u32>,
    /// End of turn.
    pub eot: Option<u32>,
    /// End of message.
    pub eom: Option<u32>,
    /// Unknown.
    pub unk: Option<u32>,
    /// Separator.
    pub sep: Option<u32>,
    /// Padding.
    pub pad: Option<u32>,
    /// Mask.
    pub mask: Option<u32>,
    /// Fill-in-the-middle prefix.
    pub fim_pre: Option<u32>,
    /// Fill-in-the-middle suffix.
    pub fim_suf: Option<u32>,
    /// Fill-in-the-middle middle.
    pub fim_mid: Option<u32>,
    /// Fill-in-the-middle padding.
    pub fim_pad: Option<u32>,
    /// Fill-in-the-middle repository name.
    pub fim_rep: Option<u32>,
    /// Fill-in-the-middle file separator.
    pub fim_sep: Option<u32>,
}

/// Everything needed to build a [`crate::Tokenizer`], independent of GGUF.
#[derive(Debug, Clone)]
pub struct TokenizerSpec {
    /// The algorithm (`tokenizer.ggml.model`).
    pub kind: TokenizerKind,
    /// The pre-tokenizer name (`tokenizer.ggml.pre`); empty if absent.
    pub pre: String,
    /// `general.architecture`, used to pick a built-in chat template.
    pub architecture: String,
    /// Token texts, indexed by id.
    pub tokens: Vec<String>,
    /// Token scores (SPM merge priority); empty means all zero.
    pub scores: Vec<f32>,
    /// Token types as GGUF integers (see [`TokenType`]); empty means all normal.
    pub token_types: Vec<i32>,
    /// BPE merges, `"left right"`, in rank order (BPE only).
    pub merges: Vec<String>,
    /// Special token ids from metadata.
    pub special: SpecialIds,
    /// `tokenizer.ggml.add_bos_token`, if present.
    pub add_bos: Option<bool>,
    /// `tokenizer.ggml.add_eos_token`, if present.
    pub add_eos: Option<bool>,
    /// `tokenizer.ggml.add_space_prefix`, if present.
    pub add_space_prefix: Option<bool>,
    /// `tokenizer.chat_template`, if present.
    pub chat_template: Option<String>,
}

/// Token attribute bits, as llama.cpp keeps them (a token may gain CONTROL).
pub(crate) mod attr {
    pub const UNKNOWN: u8 = 1 << 0;
    pub const UNUSED: u8 = 1 << 1;
    pub const NORMAL: u8 = 1 << 2;
    pub const CONTROL: u8 = 1 << 3;
    pub const USER_DEFINED: u8 = 1 << 4;
    pub const BYTE: u8 = 1 << 5;

    pub fn from_type(t: super::TokenType) -> u8 {
        use super::TokenType as T;
        match t {
            T::Undefined => 0,
            T::Normal => NORMAL,
            T::Unknown => UNKNOWN,
            T::Control => CONTROL,
            T::UserDefined => USER_DEFINED,
            T::Unused => UNUSED,
            T::Byte => BYTE,
        }
    }
}

/// A small, fast, non-cryptographic hasher for vocabulary maps (keys are
/// model data, not attacker-chosen collections worth a DoS-resistant hash).
#[derive(Default, Clone, Copy)]
pub(crate) struct FastHasher {
    hash: u64,
}

const MUL: u64 = 0x9E37_79B9_7F4A_7C15;

impl FastHasher {
    #[inline]
    fn add(&mut self, v: u64) {
        self.hash = (self.hash.rotate_left(23) ^ v).wrapping_mul(MUL);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 59));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        // splitmix64 finalizer: spreads every input bit over the low bits
        // that pick the bucket.
        let mut z = self.hash;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// `HashMap` with [`FastHasher`].
pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// The indexed vocabulary: texts, scores, attributes and text → id.
#[derive(Debug)]
pub(crate) struct Vocab {
    pub texts: Vec<Box<str>>,
    pub scores: Vec<f32>,
    pub attrs: Vec<u8>,
    map: FastMap<Box<str>, u32>,
    pub max_token_len: usize,
}

impl Vocab {
    /// Indexes the spec's tokens; fails on size mismatches and duplicates.
    pub fn new(spec: &TokenizerSpec) -> Result<Vocab, TokenizerError> {
        let n = spec.tokens.len();
        if n == 0 {
            return Err(TokenizerError::InvalidVocab("empty token list".into()));
        }
        if n >= u32::MAX as usize {
            return Err(TokenizerError::InvalidVocab(format!(
                "{n} tokens is too many"
            )));
        }
        if !spec.scores.is_empty() && spec.scores.len() < n {
            return Err(TokenizerError::InvalidVocab(format!(
                "{} scores for {n} tokens",
                spec.scores.len()
            )));
        }
        if !spec.token_types.is_empty() && spec.token_types.len() < n {
            return Err(TokenizerError::InvalidVocab(format!(
                "{} token types for {n} tokens",
                spec.token_types.len()
            )));
        }
        let mut map = FastMap::with_capacity_and_hasher(n, Default::default());
        let mut texts = Vec::with_capacity(n);
        let mut max_token_len = 0;
        for (i, t) in spec.tokens.iter().enumerate() {
            // llama.cpp substitutes a placeholder for empty entries.
            let text: Box<str> = if t.is_empty() {
                format!("[EMPTY_{i}]").into()
            } else {
                t.as_str().into()
            };
            max_token_len = max_token_len.max(text.len());
            if let Some(prev) = map.insert(text.clone(), i as u32) {
                return Err(TokenizerError::InvalidVocab(format!(
                    "duplicate token {text:?} at ids {prev} and {i}"
                )));
            }
            texts.push(text);
        }
        let scores = if spec.scores.is_empty() {
            vec![0.0; n]
        } else {
            spec.scores[..n].to_vec()
        };
        let attrs = if spec.token_types.is_empty() {
            vec![attr::NORMAL; n]
        } else {
            spec.token_types[..n]
                .iter()
                .map(|&t| attr::from_type(TokenType::from_i32(t)))
                .collect()
        };
        Ok(Vocab {
            texts,
            scores,
            attrs,
            map,
            max_token_len,
        })
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.texts.len()
    }

    /// The id of a token text, if it is in the vocabulary.
    #[inline]
    pub fn id(&self, text: &str) -> Option<u32> {
        if text.len() > self.max_token_len {
            return None;
        }
        self.map.get(text).copied()
    }

    /// Whether token `id` has any of the attribute bits in `bits`.
    #[inline]
    pub fn has(&self, id: u32, bits: u8) -> bool {
        self.attrs.get(id as usize).is_some_and(|a| a & bits != 0)
    }

    /// The token's text (panics on a bad id: callers check ranges).
    #[inline]
    pub fn text(&self, id: u32) -> &str {
        &self.texts[id as usize]
    }
}

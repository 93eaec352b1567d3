//! Tokenizers for statelm, built from GGUF metadata with exact parity with
//! llama.cpp: SentencePiece-style BPE (`tokenizer.ggml.model = "llama"`) and
//! GPT-2 byte-level BPE (`"gpt2"`) with the pre-tokenizers named by
//! `tokenizer.ggml.pre`; special and user-defined tokens; a streaming
//! detokenizer; and chat templates.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let f = statelm_gguf::GgufFile::open("model.gguf")?;
//! let tok = statelm_tokenizer::Tokenizer::from_gguf(&f)?;
//! let ids = tok.encode("Hello world", true, false)?;
//! assert_eq!(tok.decode(&ids), "Hello world");
//! # Ok(()) }
//! ```
//!
//! The core does not need GGUF: [`Tokenizer::new`] takes a plain
//! [`TokenizerSpec`].
//!
//! Encoding follows llama.cpp step by step: the text is first split on the
//! texts of special tokens (user-defined ones always, control ones only with
//! `parse_special`), longest first; each remaining piece is then tokenized by
//! the model's algorithm. All algorithms are O(n log n) in the input length.
//!
//! Known differences from llama.cpp (none affects the reference files):
//! * decoding is per token (llama.cpp's `token_to_piece`, what streaming
//!   uses); the `clean_spaces` pass of `llama_detokenize` (some BPE
//!   vocabularies, not Qwen 2) is not applied;
//! * special tokens of equal length are matched in id order (llama.cpp's
//!   unstable sort leaves that open), and an EOT/FIM token detected by its
//!   text is the first of llama.cpp's list found (llama.cpp: hash order);
//! * the LSTRIP/RSTRIP attributes llama.cpp sets by model name (phi-3,
//!   jina) are not applied;
//! * a normal BPE token holding a character outside GPT-2's byte table
//!   decodes to that character (llama.cpp writes an `[UNK_BYTE_..]` marker).

#![forbid(unsafe_code)]

mod bpe;
mod chat;
mod detok;
mod error;
mod gguf;
mod heap;
mod pretokenize;
mod prompt;
mod special;
mod spm;
mod turns;
mod vocab;

pub use chat::{ChatMessage, TemplateSource, TemplateVars, RESERVED_TEMPLATE_VARS};
pub use detok::StreamingDetokenizer;
pub use error::TokenizerError;
pub use gguf::spec_from_gguf;
pub use pretokenize::PreTokenizer;
pub use turns::{find_turn_starts, TurnTexts};
pub use vocab::{SpecialIds, TokenType, TokenizerKind, TokenizerSpec};

use bpe::Bpe;
use chat::ChatTemplate;
use detok::Pieces;
use special::{Fragment, SpecialMatcher, Specials};
use spm::Spm;
use vocab::{attr, Vocab};

/// The largest input `encode` accepts, in bytes: 1 GiB. Offsets are kept in
/// `u32`, and SPM's space escaping can triple the text.
pub const MAX_INPUT_BYTES: usize = 1 << 30;

#[derive(Debug)]
enum Model {
    Spm(Spm),
    Bpe(Bpe),
}

/// A tokenizer: immutable after construction, `Send + Sync`.
pub struct Tokenizer {
    vocab: Vocab,
    kind: TokenizerKind,
    pre: String,
    model: Model,
    matcher: SpecialMatcher,
    specials: Specials,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
    pieces: Pieces,
    chat: ChatTemplate,
}

impl Tokenizer {
    /// Builds a tokenizer from a plain description. Defaults for absent
    /// metadata follow llama.cpp: SPM adds BOS and a space prefix, BPE adds
    /// BOS only for the llama3 pre-tokenizer family; neither adds EOS.
    pub fn new(spec: TokenizerSpec) -> Result<Tokenizer, TokenizerError> {
        let mut vocab = Vocab::new(&spec)?;
        let specials = special::resolve(spec.kind, &spec.special, &mut vocab);
        let (model, bos_default, space_default) = match spec.kind {
            TokenizerKind::Spm => (Model::Spm(Spm::new(&vocab, specials.ids.unk)), true, true),
            TokenizerKind::Bpe => {
                let bpe = Bpe::new(&vocab, &spec.merges, &spec.pre)?;
                let bos = bpe.cfg.add_bos_default;
                (Model::Bpe(bpe), bos, false)
            }
        };
        let add_bos = spec.add_bos.unwrap_or(bos_default);
        let add_eos = spec.add_eos.unwrap_or(false);
        if add_bos && specials.ids.bos.is_none() {
            return Err(TokenizerError::InvalidVocab(
                "add_bos is set but there is no BOS token".into(),
            ));
        }
        if add_eos && specials.ids.eos.is_none() {
            return Err(TokenizerError::InvalidVocab(
                "add_eos is set but there is no EOS token".into(),
            ));
        }
        let matcher = SpecialMatcher::new(&vocab);
        let pieces = Pieces::new(&vocab, spec.kind);
        let text_of = |id: Option<u32>| id.map(|i| vocab.text(i).to_string()).unwrap_or_default();
        let chat = ChatTemplate::new(
            spec.chat_template.as_deref(),
            &spec.architecture,
            text_of(specials.ids.bos),
            text_of(specials.ids.eos),
        );
        Ok(Tokenizer {
            kind: spec.kind,
            pre: spec.pre,
            model,
            matcher,
            specials,
            add_bos,
            add_eos,
            add_space_prefix: spec.add_space_prefix.unwrap_or(space_default),
            pieces,
            chat,
            vocab,
        })
    }

    /// Tokenizes `text`. `add_special`: add BOS/EOS as the metadata says.
    /// `parse_special`: control-token texts (e.g. `<|im_start|>`) become those
    /// tokens; otherwise they are tokenized as plain text. User-defined tokens
    /// are always matched. Empty text gives no tokens (or just BOS).
    pub fn encode(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        self.encode_guarded(text, add_special, parse_special, &[], self.add_space_prefix)
    }

    /// Tokenizes `text` as the continuation of earlier text (how a constrained generation
    /// turns forced text into tokens): no BOS/EOS, control-token texts stay text, and no
    /// SentencePiece space prefix at the start.
    pub fn encode_continuation(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        self.encode_guarded(text, false, false, &[], false)
    }

    /// [`Tokenizer::encode`] where control-token texts inside the sorted, disjoint byte
    /// ranges `plain` stay text even with `parse_special`; `space_prefix`: SentencePiece's
    /// prefix before text that starts the input or follows a special token.
    fn encode_guarded(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
        plain: &[(usize, usize)],
        space_prefix: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        if text.len() > MAX_INPUT_BYTES {
            return Err(TokenizerError::InputTooLarge(text.len()));
        }
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && self.add_bos {
            out.extend(self.specials.ids.bos);
        }
        let frags = self
            .matcher
            .partition(text, parse_special, plain, &self.vocab);
        match &self.model {
            Model::Spm(spm) => {
                let mut prev_special = true;
                let mut buf = String::new();
                for f in frags {
                    match f {
                        Fragment::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                        Fragment::Text(s, e) => {
                            buf.clear();
                            if space_prefix && prev_special {
                                buf.push('\u{2581}');
                            }
                            escape_spaces(&text[s..e], &mut buf);
                            spm.encode(&self.vocab, &buf, &mut out)?;
                            prev_special = false;
                        }
                    }
                }
            }
            Model::Bpe(bpe) => {
                for f in frags {
                    match f {
                        Fragment::Token(id) => out.push(id),
                        Fragment::Text(s, e) => bpe.encode(&self.vocab, &text[s..e], &mut out),
                    }
                }
            }
        }
        if add_special && self.add_eos {
            out.extend(self.specials.ids.eos);
        }
        Ok(out)
    }

    /// Like [`Tokenizer::encode`] for raw bytes: invalid UTF-8 is an error.
    pub fn encode_bytes(
        &self,
        bytes: &[u8],
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        let text = std::str::from_utf8(bytes).map_err(|e| TokenizerError::InvalidUtf8 {
            valid_up_to: e.valid_up_to(),
        })?;
        self.encode(text, add_special, parse_special)
    }

    /// Decodes ids to text through a [`StreamingDetokenizer`] (control
    /// tokens hidden; unknown ids ignored; invalid UTF-8 becomes U+FFFD).
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut d = StreamingDetokenizer::new();
        let mut out = String::new();
        for &id in ids {
            out.push_str(&d.push(self, id));
        }
        out.push_str(&d.finish());
        out
    }

    /// The raw vocabulary string of a token.
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.vocab.texts.get(id as usize).map(|t| &**t)
    }

    /// The bytes a token decodes to (control tokens rendered as their text).
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        ((id as usize) < self.vocab.len()).then(|| self.pieces.get(id))
    }

    /// The id of a vocabulary string, if it is a token.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.vocab.id(text)
    }

    /// Whether the token is a control token (hidden when decoding).
    pub fn is_control(&self, id: u32) -> bool {
        self.vocab.has(id, attr::CONTROL)
    }

    /// Whether decoding hides the token (control and unknown tokens): it adds no text.
    pub fn is_hidden(&self, id: u32) -> bool {
        self.vocab.has(id, attr::UNKNOWN | attr::CONTROL)
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    /// The algorithm.
    pub fn kind(&self) -> TokenizerKind {
        self.kind
    }

    /// The `tokenizer.ggml.pre` value (empty if absent).
    pub fn pre(&self) -> &str {
        &self.pre
    }

    /// The BPE pre-tokenizer in use (`None` for SPM).
    pub fn pre_tokenizer(&self) -> Option<PreTokenizer> {
        match &self.model {
            Model::Bpe(b) => Some(b.pre()),
            Model::Spm(_) => None,
        }
    }

    /// Beginning-of-sequence token.
    pub fn bos_id(&self) -> Option<u32> {
        self.specials.ids.bos
    }

    /// End-of-sequence token.
    pub fn eos_id(&self) -> Option<u32> {
        self.specials.ids.eos
    }

    /// All resolved special ids (metadata, llama.cpp defaults, detection).
    pub fn special_ids(&self) -> &SpecialIds {
        &self.specials.ids
    }

    /// Tokens that end generation (sorted): EOS, EOT, EOM, FIM pad/repo/sep
    /// and tokens with end-of-turn texts, as llama.cpp determines them.
    pub fn eog_ids(&self) -> &[u32] {
        &self.specials.eog
    }

    /// Whether `id` ends generation.
    pub fn is_eog(&self, id: u32) -> bool {
        self.specials.eog.binary_search(&id).is_ok()
    }

    /// Whether `encode(.., add_special = true, ..)` prepends BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether `encode(.., add_special = true, ..)` appends EOS.
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// Whether SPM text is prefixed with a space (and decoding strips it).
    pub fn add_space_prefix(&self) -> bool {
        self.add_space_prefix
    }

    /// Renders the chat template with `messages`, `add_generation_prompt`,
    /// `bos_token`, `eos_token` and a `raise_exception` function.
    pub fn render_chat(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, TokenizerError> {
        self.chat
            .render(messages, add_generation_prompt, &TemplateVars::new())
    }

    /// [`Tokenizer::render_chat`] with extra template variables (`chat_template_kwargs`).
    pub fn render_chat_with(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        vars: &TemplateVars,
    ) -> Result<String, TokenizerError> {
        self.chat.render(messages, add_generation_prompt, vars)
    }

    /// Whether the chat template comes from the file or is built in.
    pub fn chat_template_source(&self) -> TemplateSource {
        self.chat.source()
    }

    /// The chat template's Jinja source (the file's, or the built-in one in use).
    pub fn chat_template_text(&self) -> &str {
        self.chat.text()
    }
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("kind", &self.kind)
            .field("pre", &self.pre)
            .field("vocab_size", &self.vocab.len())
            .field("bos", &self.specials.ids.bos)
            .field("eos", &self.specials.ids.eos)
            .field("eog", &self.specials.eog)
            .field("add_bos", &self.add_bos)
            .field("add_eos", &self.add_eos)
            .field("add_space_prefix", &self.add_space_prefix)
            .field("chat_template", &self.chat.source())
            .finish_non_exhaustive()
    }
}

/// Appends `text` with every space replaced by `▁` (U+2581).
fn escape_spaces(text: &str, out: &mut String) {
    out.reserve(text.len() + text.len() / 4);
    for (i, part) in text.split(' ').enumerate() {
        if i > 0 {
            out.push('\u{2581}');
        }
        out.push_str(part);
    }
}

#[cfg(test)]
mod tests {
    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn tokenizer_is_send_sync() {
        assert_send_sync::<super::Tokenizer>();
        assert_send_sync::<super::StreamingDetokenizer>();
    }
}

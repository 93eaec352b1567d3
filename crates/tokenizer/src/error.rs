//! The error type of this crate.

/// Everything that can go wrong while building a tokenizer, encoding text or
/// rendering a chat template.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenizerError {
    /// `tokenizer.ggml.model` names a tokenizer this crate does not implement.
    #[error(
        "unsupported tokenizer model `{0}` (supported: `llama` (SPM), `gpt2` (byte-level BPE))"
    )]
    UnsupportedModel(String),
    /// `tokenizer.ggml.pre` names a pre-tokenizer this crate does not implement.
    #[error(
        "unsupported pre-tokenizer `{0}` (supported: qwen2, llama3/llama-bpe, gpt2/gpt-2, smollm, gpt-4o, tekken, default)"
    )]
    UnsupportedPreTokenizer(String),
    /// The vocabulary metadata is inconsistent (sizes, ids, duplicates...).
    #[error("invalid vocabulary: {0}")]
    InvalidVocab(String),
    /// A metadata key could not be read from the GGUF file.
    #[error("GGUF metadata `{key}`: {source}")]
    Gguf {
        /// The metadata key that failed.
        key: String,
        /// The reader's error.
        #[source]
        source: statelm_gguf::GgufError,
    },
    /// `encode_bytes` was given bytes that are not valid UTF-8.
    #[error("input is not valid UTF-8 (first invalid byte at offset {valid_up_to})")]
    InvalidUtf8 {
        /// Length of the longest valid UTF-8 prefix of the input.
        valid_up_to: usize,
    },
    /// The input is larger than [`crate::MAX_INPUT_BYTES`].
    #[error("input of {0} bytes is too large to tokenize")]
    InputTooLarge(usize),
    /// Byte fallback needed a byte token (`<0xNN>`) that the vocabulary lacks.
    #[error("the vocabulary has no token for byte 0x{0:02X} and no unknown token")]
    MissingByteToken(u8),
    /// The chat template failed to compile or to render.
    #[error("chat template ({source_name}): {message}")]
    ChatTemplate {
        /// Where the template came from (`gguf` or the built-in's name).
        source_name: String,
        /// The template engine's message, with its location when known.
        message: String,
    },
}

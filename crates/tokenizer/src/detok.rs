//! Token → bytes, and a streaming detokenizer that yields only complete UTF-8.

use crate::bpe::{byte_to_char_table, char_to_byte};
use crate::vocab::{attr, TokenizerKind, Vocab};
use crate::Tokenizer;

/// Decoded bytes of every token, in one buffer (llama.cpp's piece cache with
/// special tokens rendered).
#[derive(Debug)]
pub(crate) struct Pieces {
    bytes: Vec<u8>,
    /// `offsets[id]..offsets[id + 1]` is token `id`'s piece.
    offsets: Vec<usize>,
}

impl Pieces {
    pub fn new(vocab: &Vocab, kind: TokenizerKind) -> Pieces {
        let table = byte_to_char_table();
        let mut bytes = Vec::new();
        let mut offsets = Vec::with_capacity(vocab.len() + 1);
        offsets.push(0);
        for id in 0..vocab.len() as u32 {
            let text = vocab.text(id);
            if vocab.has(id, attr::UNKNOWN | attr::CONTROL | attr::USER_DEFINED) {
                bytes.extend_from_slice(text.as_bytes());
            } else if vocab.has(id, attr::NORMAL) {
                match kind {
                    TokenizerKind::Spm => {
                        bytes.extend_from_slice(text.replace('\u{2581}', " ").as_bytes())
                    }
                    TokenizerKind::Bpe => {
                        for c in text.chars() {
                            match char_to_byte(c, &table) {
                                Some(b) => bytes.push(b),
                                // Not a byte-level char: keep it as text.
                                None => {
                                    bytes.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes())
                                }
                            }
                        }
                    }
                }
            } else if vocab.has(id, attr::BYTE) {
                if let Some(b) = text.get(3..5).and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    bytes.push(b);
                }
            }
            offsets.push(bytes.len());
        }
        Pieces { bytes, offsets }
    }

    /// Token `id`'s decoded bytes (empty for an out-of-range id).
    #[inline]
    pub fn get(&self, id: u32) -> &[u8] {
        let i = id as usize;
        match (self.offsets.get(i), self.offsets.get(i + 1)) {
            (Some(&s), Some(&e)) => &self.bytes[s..e],
            _ => &[],
        }
    }
}

/// Turns a stream of token ids into text, returning only complete UTF-8.
///
/// Owns its state (no borrow of the [`Tokenizer`]), so it can live in a
/// session next to the model state. Byte-fallback tokens and characters split
/// over several tokens are joined; invalid byte sequences become U+FFFD.
/// Control and unknown tokens decode to nothing unless
/// [`StreamingDetokenizer::with_special`] asks to render them; with
/// `add_space_prefix` (SPM) the leading space of the first text is removed.
#[derive(Debug, Clone, Default)]
pub struct StreamingDetokenizer {
    pending: Vec<u8>,
    started: bool,
    render_special: bool,
}

impl StreamingDetokenizer {
    /// A detokenizer that hides control tokens.
    pub fn new() -> StreamingDetokenizer {
        StreamingDetokenizer::default()
    }

    /// A detokenizer that renders control tokens as their text if `render`.
    pub fn with_special(render: bool) -> StreamingDetokenizer {
        StreamingDetokenizer {
            render_special: render,
            ..StreamingDetokenizer::default()
        }
    }

    /// Adds one token; returns the text that became complete (maybe empty).
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> String {
        let hidden = tok.vocab.has(id, attr::UNKNOWN | attr::CONTROL);
        if hidden && !self.render_special {
            return String::new();
        }
        let mut piece = tok.pieces.get(id);
        if !self.started && !piece.is_empty() {
            self.started = true;
            if tok.add_space_prefix && piece.first() == Some(&b' ') {
                piece = &piece[1..];
            }
        }
        self.pending.extend_from_slice(piece);
        self.drain(false)
    }

    /// Flushes what is left: an incomplete UTF-8 sequence becomes U+FFFD.
    /// The detokenizer is then ready for a new stream.
    pub fn finish(&mut self) -> String {
        let out = self.drain(true);
        self.started = false;
        out
    }

    /// Releases an incomplete UTF-8 sequence (as U+FFFD) but stays in the same stream: for
    /// text that changes destination mid-stream, such as a thinking block's end.
    pub fn flush_pending(&mut self) -> String {
        self.drain(true)
    }

    /// Bytes received but not yet returned (an incomplete character).
    pub fn pending_bytes(&self) -> &[u8] {
        &self.pending
    }

    fn drain(&mut self, last: bool) -> String {
        let buf = &self.pending;
        let mut out = String::with_capacity(buf.len());
        let mut i = 0;
        while i < buf.len() {
            match std::str::from_utf8(&buf[i..]) {
                Ok(s) => {
                    out.push_str(s);
                    i = buf.len();
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(std::str::from_utf8(&buf[i..i + valid]).unwrap_or_default());
                    i += valid;
                    match e.error_len() {
                        Some(n) => {
                            out.push('\u{FFFD}');
                            i += n;
                        }
                        None if last => {
                            out.push('\u{FFFD}');
                            i = buf.len();
                        }
                        None => break,
                    }
                }
            }
        }
        self.pending.drain(..i);
        out
    }
}

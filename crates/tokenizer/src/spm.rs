//! SentencePiece-style BPE over characters (llama.cpp's "SPM" tokenizer).
//!
//! The text (spaces already escaped to `▁`) starts as one symbol per UTF-8
//! character. Repeatedly, the adjacent pair whose concatenation is a vocab
//! token with the highest score is merged (ties: leftmost). Symbols left that
//! are not tokens are emitted as byte tokens `<0xNN>`.
//!
//! O(n log n): a binary heap of candidate pairs over a doubly linked list of
//! symbols. Heap entries are invalidated lazily: when popped, the pair at the
//! entry's left symbol is looked up again and the entry is used only if that
//! pair is still a token with the same score (a fresher entry with the same
//! key exists otherwise, so the merge order is unchanged).

use crate::error::TokenizerError;
use crate::heap::{key, score_priority, unkey, MinHeap};
use crate::vocab::Vocab;

const NONE: u32 = u32::MAX;

/// A symbol: the byte range `[start, start + len)` of the text, linked to
/// its neighbours. `len == 0` marks a symbol merged into its left neighbour.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sym {
    pub start: u32,
    pub len: u32,
    pub prev: u32,
    pub next: u32,
}

/// Splits `text` into one linked symbol per char.
pub(crate) fn char_symbols(text: &str) -> Vec<Sym> {
    let mut syms = Vec::with_capacity(text.len());
    let n = text.chars().count();
    for (i, (off, c)) in text.char_indices().enumerate() {
        syms.push(Sym {
            start: off as u32,
            len: c.len_utf8() as u32,
            prev: if i == 0 { NONE } else { i as u32 - 1 },
            next: if i + 1 == n { NONE } else { i as u32 + 1 },
        });
    }
    syms
}

/// Unlinks `right` after merging it into `left`.
#[inline]
pub(crate) fn merge_into_left(syms: &mut [Sym], left: u32, right: u32) {
    let r = syms[right as usize];
    let l = &mut syms[left as usize];
    l.len += r.len;
    l.next = r.next;
    syms[right as usize].len = 0;
    if r.next != NONE {
        syms[r.next as usize].prev = left;
    }
}

/// The SPM model: byte-fallback ids and the unknown token.
#[derive(Debug)]
pub(crate) struct Spm {
    byte_tokens: [Option<u32>; 256],
    unk: Option<u32>,
}

impl Spm {
    pub fn new(vocab: &Vocab, unk: Option<u32>) -> Spm {
        let mut byte_tokens = [None; 256];
        for (b, slot) in byte_tokens.iter_mut().enumerate() {
            let hex = format!("<0x{b:02X}>");
            *slot = vocab.id(&hex).or_else(|| {
                let c = char::from(b as u8);
                (b < 0x80)
                    .then(|| vocab.id(c.encode_utf8(&mut [0; 4])))
                    .flatten()
            });
        }
        Spm { byte_tokens, unk }
    }

    /// The pair `(left, left.next)` as a token: `(right, id)`.
    #[inline]
    fn pair(vocab: &Vocab, text: &str, syms: &[Sym], left: u32) -> Option<(u32, u32)> {
        let l = syms[left as usize];
        if l.len == 0 || l.next == NONE {
            return None;
        }
        let r = syms[l.next as usize];
        let s = l.start as usize;
        let e = (r.start + r.len) as usize;
        vocab.id(&text[s..e]).map(|id| (l.next, id))
    }

    /// Tokenizes already-escaped `text`, appending ids to `out`.
    pub fn encode(
        &self,
        vocab: &Vocab,
        text: &str,
        out: &mut Vec<u32>,
    ) -> Result<(), TokenizerError> {
        if text.is_empty() {
            return Ok(());
        }
        let mut syms = char_symbols(text);
        let prio = |id: u32| score_priority(vocab.scores[id as usize]);
        let mut seed = Vec::with_capacity(syms.len());
        for i in 0..syms.len() as u32 {
            if let Some((_, id)) = Self::pair(vocab, text, &syms, i) {
                seed.push(key(prio(id), i));
            }
        }
        // Highest score first, then leftmost.
        let mut heap = MinHeap::from_vec(seed);
        while let Some(k) = heap.pop() {
            let (p, left) = unkey(k);
            let Some((right, id)) = Self::pair(vocab, text, &syms, left) else {
                continue;
            };
            if prio(id) != p {
                continue; // stale: the pair changed since this entry was pushed
            }
            merge_into_left(&mut syms, left, right);
            let prev = syms[left as usize].prev;
            for l in [prev, left] {
                if l == NONE {
                    continue;
                }
                if let Some((_, id)) = Self::pair(vocab, text, &syms, l) {
                    heap.push(key(prio(id), l));
                }
            }
        }
        let mut i = 0u32;
        while i != NONE {
            let s = syms[i as usize];
            let piece = &text[s.start as usize..(s.start + s.len) as usize];
            match vocab.id(piece) {
                Some(id) => out.push(id),
                None => self.push_bytes(piece, out)?,
            }
            i = s.next;
        }
        Ok(())
    }

    fn push_bytes(&self, piece: &str, out: &mut Vec<u32>) -> Result<(), TokenizerError> {
        for &b in piece.as_bytes() {
            match self.byte_tokens[b as usize].or(self.unk) {
                Some(id) => out.push(id),
                None => return Err(TokenizerError::MissingByteToken(b)),
            }
        }
        Ok(())
    }
}

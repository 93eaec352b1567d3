//! Byte-level BPE (GPT-2 style, llama.cpp's "BPE" tokenizer).
//!
//! Text is split into words by the [`PreTokenizer`]; each word's bytes are
//! mapped to printable characters (GPT-2's `bytes_to_unicode` table), one
//! symbol per byte; then the adjacent pair with the lowest merge rank is
//! merged until no ranked pair is left (ties: leftmost). O(n log n) per word
//! with a heap and lazy invalidation (an entry is used only if the pair at its
//! left symbol still has the entry's rank: a rank names one exact pair).
//!
//! Symbols carry their token id, so merges are looked up by id pairs; merges
//! naming a string that is not a token fall back to a string-keyed map.

use crate::error::TokenizerError;
use crate::heap::{key, unkey, MinHeap};
use crate::pretokenize::{PreConfig, PreTokenizer};
use crate::spm::{merge_into_left, Sym};
use crate::vocab::{FastMap, Vocab};

const NONE: u32 = u32::MAX;

/// GPT-2's byte → char table: printable Latin-1 bytes map to themselves, the
/// others to U+0100.. in byte order.
pub(crate) fn byte_to_char_table() -> [char; 256] {
    let mut t = ['\0'; 256];
    let mut n = 0u32;
    for (b, slot) in t.iter_mut().enumerate() {
        let printable = matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
        let cp = if printable {
            b as u32
        } else {
            n += 1;
            255 + n
        };
        *slot = char::from_u32(cp).unwrap_or('\u{FFFD}');
    }
    t
}

/// The inverse table: char → byte, for the 256 mapped chars.
pub(crate) fn char_to_byte(c: char, table: &[char; 256]) -> Option<u8> {
    let cp = c as u32;
    let guess = if cp < 256 { cp as usize } else { 0 };
    if table[guess] == c {
        return Some(guess as u8);
    }
    table.iter().position(|&t| t == c).map(|b| b as u8)
}

/// The BPE model: merges and byte ids.
#[derive(Debug)]
pub(crate) struct Bpe {
    pub cfg: PreConfig,
    table: [char; 256],
    /// Token id of each byte's mapped char.
    byte_ids: [u32; 256],
    /// (left id, right id) → (rank, id of the merged text or NONE).
    pairs: FastMap<(u32, u32), (u32, u32)>,
    /// Merges with a side that is not a token: (left, right) → rank.
    str_pairs: FastMap<(Box<str>, Box<str>), u32>,
}

impl Bpe {
    pub fn new(vocab: &Vocab, merges: &[String], pre: &str) -> Result<Bpe, TokenizerError> {
        let cfg = PreConfig::from_name(pre)?;
        let table = byte_to_char_table();
        let mut byte_ids = [NONE; 256];
        for (b, id) in byte_ids.iter_mut().enumerate() {
            *id = vocab.id(table[b].encode_utf8(&mut [0; 4])).unwrap_or(NONE);
        }
        let mut pairs = FastMap::with_capacity_and_hasher(merges.len(), Default::default());
        let mut str_pairs = FastMap::default();
        let mut joined = String::new();
        for (rank, m) in merges.iter().enumerate() {
            // llama.cpp splits at the first space after the first byte.
            let Some(pos) = m.bytes().skip(1).position(|b| b == b' ').map(|p| p + 1) else {
                continue;
            };
            let (l, r) = (&m[..pos], &m[pos + 1..]);
            let rank = rank as u32;
            match (vocab.id(l), vocab.id(r)) {
                (Some(li), Some(ri)) => {
                    joined.clear();
                    joined.push_str(l);
                    joined.push_str(r);
                    let res = vocab.id(&joined).unwrap_or(NONE);
                    pairs.entry((li, ri)).or_insert((rank, res));
                }
                _ => {
                    str_pairs.entry((l.into(), r.into())).or_insert(rank);
                }
            }
        }
        Ok(Bpe {
            cfg,
            table,
            byte_ids,
            pairs,
            str_pairs,
        })
    }

    /// The pre-tokenizer in use.
    pub fn pre(&self) -> PreTokenizer {
        self.cfg.pre
    }

    /// Maps a byte range of `word` to GPT-2 chars.
    fn mapped(&self, word: &[u8], s: u32, len: u32) -> String {
        word[s as usize..(s + len) as usize]
            .iter()
            .map(|&b| self.table[b as usize])
            .collect()
    }

    /// The merge of `(left, left.next)`: `(rank, right, merged id or NONE)`.
    fn pair(&self, word: &[u8], syms: &[Sym], ids: &[u32], left: u32) -> Option<(u32, u32, u32)> {
        let l = syms[left as usize];
        if l.len == 0 || l.next == NONE {
            return None;
        }
        let right = l.next;
        let (li, ri) = (ids[left as usize], ids[right as usize]);
        if li != NONE && ri != NONE {
            return self
                .pairs
                .get(&(li, ri))
                .map(|&(rank, res)| (rank, right, res));
        }
        if self.str_pairs.is_empty() {
            return None;
        }
        let r = syms[right as usize];
        let key = (
            self.mapped(word, l.start, l.len).into(),
            self.mapped(word, r.start, r.len).into(),
        );
        self.str_pairs.get(&key).map(|&rank| (rank, right, NONE))
    }

    /// Tokenizes `text` (one raw-text fragment), appending ids to `out`.
    pub fn encode(&self, vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
        let mut words = Vec::new();
        self.cfg.pre.split(text, &mut words);
        for (s, e) in words {
            self.encode_word(vocab, &text.as_bytes()[s..e], out);
        }
    }

    fn encode_word(&self, vocab: &Vocab, word: &[u8], out: &mut Vec<u32>) {
        if word.is_empty() {
            return;
        }
        if word.len() == 1 && self.byte_ids[word[0] as usize] != NONE {
            out.push(self.byte_ids[word[0] as usize]);
            return;
        }
        if self.cfg.ignore_merges {
            let m = self.mapped(word, 0, word.len() as u32);
            if let Some(id) = vocab.id(&m) {
                out.push(id);
                return;
            }
        }
        let n = word.len();
        let mut syms: Vec<Sym> = (0..n as u32)
            .map(|i| Sym {
                start: i,
                len: 1,
                prev: if i == 0 { NONE } else { i - 1 },
                next: if i as usize + 1 == n { NONE } else { i + 1 },
            })
            .collect();
        let mut ids: Vec<u32> = word.iter().map(|&b| self.byte_ids[b as usize]).collect();
        let seed: Vec<_> = (0..n as u32)
            .filter_map(|i| {
                self.pair(word, &syms, &ids, i)
                    .map(|(rank, ..)| key(rank, i))
            })
            .collect();
        // Lowest rank first, then leftmost.
        let mut heap = MinHeap::from_vec(seed);
        while let Some(k) = heap.pop() {
            let (rank, left) = unkey(k);
            let Some((cur, right, res)) = self.pair(word, &syms, &ids, left) else {
                continue;
            };
            if cur != rank {
                continue; // stale entry
            }
            merge_into_left(&mut syms, left, right);
            ids[left as usize] = if res != NONE {
                res
            } else {
                let l = syms[left as usize];
                vocab.id(&self.mapped(word, l.start, l.len)).unwrap_or(NONE)
            };
            let prev = syms[left as usize].prev;
            for l in [prev, left] {
                if l == NONE {
                    continue;
                }
                if let Some((rank, ..)) = self.pair(word, &syms, &ids, l) {
                    heap.push(key(rank, l));
                }
            }
        }
        let mut i = 0u32;
        while i != NONE {
            let s = syms[i as usize];
            match ids[i as usize] {
                NONE => self.push_fallback(vocab, word, s, out),
                id => out.push(id),
            }
            i = s.next;
        }
    }

    /// llama.cpp's fallback for a symbol that is not a token: each byte of
    /// its mapped text that is itself a token (only ASCII ones can be).
    fn push_fallback(&self, vocab: &Vocab, word: &[u8], s: Sym, out: &mut Vec<u32>) {
        for c in self.mapped(word, s.start, s.len).chars() {
            if c.is_ascii() {
                if let Some(id) = vocab.id(c.encode_utf8(&mut [0; 4])) {
                    out.push(id);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_roundtrip() {
        let t = byte_to_char_table();
        assert_eq!(t[b' ' as usize], 'Ġ');
        assert_eq!(t[b'\n' as usize], 'Ċ');
        assert_eq!(t[b'a' as usize], 'a');
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(t[b as usize], &t), Some(b));
        }
    }
}

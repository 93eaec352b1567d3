//! Pre-tokenizers for byte-level BPE: split text into words before merging.
//!
//! Each splitter is hand-written, linear in the input, and reproduces the
//! regex llama.cpp uses for the `tokenizer.ggml.pre` value:
//!
//! * `qwen2`: `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|
//!   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+` (backtracking regex
//!   semantics);
//! * `llama3`: the same with `\p{N}{1,3}`;
//! * `gpt2`: `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`;
//! * `gpt-4o` and `tekken`: case-aware words (see [`cased`]);
//! * `default`: llama.cpp's fallback chain of four splits (punctuation runs,
//!   the gpt2 split, number runs, groups of three ASCII digits).
//!
//! Character classes follow Unicode general categories: letters are `L*`,
//! numbers `N*`, whitespace is the `White_Space` property (checked first); everything
//! else, unassigned code points included, is a symbol, as in llama.cpp 0.3.36 (whose
//! `UNDEFINED` flag makes them symbols in its hand-written splitters too).
//!
//! `tests/pretypes.rs` checks every name against llama.cpp's own splits, recorded on a
//! vocabulary in which each word is one token (`tools/parity/pretok_reference.py`).

use unicode_general_category::{get_general_category, GeneralCategory as G};

use crate::error::TokenizerError;

mod cased;

/// The word splitter of a byte-level BPE vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreTokenizer {
    /// GPT-2's split.
    Gpt2,
    /// Llama 3's split (numbers in groups of up to three digits).
    Llama3,
    /// Qwen 2's split (single digits).
    Qwen2,
    /// SmolLM's: every digit alone, then GPT-2's split between them.
    Smollm,
    /// GPT-4o's case-aware split (numbers in groups of up to three digits).
    Gpt4o,
    /// Mistral's Tekken split: GPT-4o's without contractions, single digits.
    Tekken,
    /// llama.cpp's default chain for BPE vocabularies without a known name.
    Default,
}

/// How a `tokenizer.ggml.pre` value configures a BPE tokenizer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PreConfig {
    pub pre: PreTokenizer,
    /// A word that is itself a token skips merging (llama3 family).
    pub ignore_merges: bool,
    /// Add BOS unless the metadata says otherwise.
    pub add_bos_default: bool,
}

impl PreConfig {
    /// Maps llama.cpp's pre-tokenizer names; unknown names are an error.
    pub fn from_name(name: &str) -> Result<PreConfig, TokenizerError> {
        let cfg = |pre, ignore_merges, add_bos_default| PreConfig {
            pre,
            ignore_merges,
            add_bos_default,
        };
        Ok(match name {
            "" | "default" => cfg(PreTokenizer::Default, false, false),
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral"
            | "midm-2.0" | "lfm2" => cfg(PreTokenizer::Llama3, true, true),
            "dbrx" | "smaug-bpe" => cfg(PreTokenizer::Llama3, false, false),
            "gpt2" | "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es"
            | "jina-v2-de" | "a.x-4.0" | "mellum" | "modern-bert" | "exaone4" | "mpt" | "olmo"
            | "jais" | "trillion" | "granite-docling" => cfg(PreTokenizer::Gpt2, false, false),
            "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "megrez" | "stablelm2"
            | "hunyuan" | "solar-open" | "grok-2" => cfg(PreTokenizer::Qwen2, false, false),
            "smollm" => cfg(PreTokenizer::Smollm, false, false),
            "gpt-4o" | "llama4" => cfg(PreTokenizer::Gpt4o, false, false),
            "tekken" => cfg(PreTokenizer::Tekken, true, true),
            other => return Err(TokenizerError::UnsupportedPreTokenizer(other.to_string())),
        })
    }
}

/// Character class for the splitters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    Letter,
    Number,
    Space,
    /// Everything else, unassigned code points included (llama.cpp gives them the
    /// `UNDEFINED` flag, which its splitters treat as a symbol).
    Other,
}

const fn ascii_classes() -> [Class; 128] {
    let mut t = [Class::Other; 128];
    let mut i = 0;
    while i < 128 {
        let c = i as u8;
        t[i] = if c.is_ascii_alphabetic() {
            Class::Letter
        } else if c.is_ascii_digit() {
            Class::Number
        } else if matches!(c, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r') {
            Class::Space
        } else {
            Class::Other
        };
        i += 1;
    }
    t
}

static ASCII: [Class; 128] = ascii_classes();

/// The class of a character.
#[inline]
pub(crate) fn class(c: char) -> Class {
    if c.is_ascii() {
        return ASCII[c as usize];
    }
    if c.is_whitespace() {
        return Class::Space;
    }
    match get_general_category(c) {
        G::UppercaseLetter
        | G::LowercaseLetter
        | G::TitlecaseLetter
        | G::ModifierLetter
        | G::OtherLetter => Class::Letter,
        G::DecimalNumber | G::LetterNumber | G::OtherNumber => Class::Number,
        _ => Class::Other,
    }
}

/// Whether `c` is Unicode punctuation (`P*`).
fn is_punct(c: char) -> bool {
    matches!(
        get_general_category(c),
        G::ConnectorPunctuation
            | G::DashPunctuation
            | G::OpenPunctuation
            | G::ClosePunctuation
            | G::InitialPunctuation
            | G::FinalPunctuation
            | G::OtherPunctuation
    )
}

/// A read-only view of one segment with char lookups by byte position.
struct Seg<'a> {
    s: &'a str,
}

impl Seg<'_> {
    /// The char starting at byte `i`, or `None` at or past the end.
    #[inline]
    fn at(&self, i: usize) -> Option<char> {
        self.s.get(i..).and_then(|r| r.chars().next())
    }
    #[inline]
    fn class_at(&self, i: usize) -> Option<Class> {
        self.at(i).map(class)
    }
    /// Byte position after the char at `i` (or `i` at the end).
    #[inline]
    fn next(&self, i: usize) -> usize {
        self.at(i).map_or(i, |c| i + c.len_utf8())
    }
    /// Advances from `i` while the class satisfies `f`.
    #[inline]
    fn skip(&self, mut i: usize, f: impl Fn(Class) -> bool) -> usize {
        while let Some(c) = self.at(i) {
            if !f(class(c)) {
                break;
            }
            i += c.len_utf8();
        }
        i
    }
}

impl PreTokenizer {
    /// Appends the word ranges (byte offsets into `text`) to `out`.
    pub fn split(self, text: &str, out: &mut Vec<(usize, usize)>) {
        match self {
            PreTokenizer::Gpt2 => split_gpt2(text, 0, out),
            PreTokenizer::Llama3 => split_llama3_like(text, 3, out),
            PreTokenizer::Qwen2 => split_llama3_like(text, 1, out),
            PreTokenizer::Default => split_default(text, out),
            PreTokenizer::Smollm => split_smollm(text, out),
            PreTokenizer::Gpt4o => cased::Cased {
                max_digits: 3,
                contractions: true,
            }
            .split(text, out),
            PreTokenizer::Tekken => cased::Cased {
                max_digits: 1,
                contractions: false,
            }
            .split(text, out),
        }
    }
}

/// llama.cpp's SmolLM chain: `\p{N}` isolates every digit, then GPT-2's regex splits the text
/// between them.
fn split_smollm(text: &str, out: &mut Vec<(usize, usize)>) {
    let mut runs = Vec::new();
    split_runs(
        text,
        0,
        text.len(),
        |c| class(c) == Class::Number,
        &mut runs,
    );
    for (s, e) in runs {
        if text[s..e]
            .chars()
            .next()
            .is_some_and(|c| class(c) == Class::Number)
        {
            out.extend(
                text[s..e]
                    .char_indices()
                    .map(|(o, c)| (s + o, s + o + c.len_utf8())),
            );
        } else {
            split_gpt2(&text[s..e], s, out);
        }
    }
}

/// Length of an English contraction (`'s`, `'T`, `'re`...) at `i`, if any.
fn contraction(seg: &Seg<'_>, i: usize, case_insensitive: bool) -> Option<usize> {
    if seg.at(i) != Some('\'') {
        return None;
    }
    let lower = |c: Option<char>| {
        c.map(|c| {
            if case_insensitive {
                c.to_ascii_lowercase()
            } else {
                c
            }
        })
    };
    let c1 = lower(seg.at(i + 1))?;
    if matches!(c1, 's' | 't' | 'm' | 'd') {
        return Some(2);
    }
    let c2 = lower(seg.at(i + 2))?;
    matches!((c1, c2), ('r', 'e') | ('v', 'e') | ('l', 'l')).then_some(3)
}

/// The whitespace alternatives shared by the splitters: returns the end of
/// `\s*[\r\n]+` (if `newlines`), else of `\s+(?!\S)`, else of `\s+`.
fn whitespace_end(seg: &Seg<'_>, i: usize, newlines: bool) -> Option<usize> {
    let mut j = i;
    let mut last_nl = None;
    let mut last_start = i;
    while let Some(c) = seg.at(j) {
        if class(c) != Class::Space {
            break;
        }
        if newlines && (c == '\r' || c == '\n') {
            last_nl = Some(j + 1);
        }
        last_start = j;
        j += c.len_utf8();
    }
    if j == i {
        return None;
    }
    if let Some(end) = last_nl {
        return Some(end);
    }
    if j < seg.s.len() && last_start > i {
        return Some(last_start);
    }
    Some(j)
}

/// The qwen2 / llama3 split. `max_digits` is 1 (qwen2) or 3 (llama3).
fn split_llama3_like(text: &str, max_digits: usize, out: &mut Vec<(usize, usize)>) {
    let seg = Seg { s: text };
    let mut i = 0;
    while let Some(c) = seg.at(i) {
        let cl = class(c);
        let end = if let Some(n) = contraction(&seg, i, true) {
            i + n
        } else if cl == Class::Letter
            || (c != '\r'
                && c != '\n'
                && cl != Class::Number
                && cl != Class::Letter
                && seg.class_at(seg.next(i)) == Some(Class::Letter))
        {
            // [^\r\n\p{L}\p{N}]?\p{L}+
            seg.skip(seg.next(i), |k| k == Class::Letter)
        } else if cl == Class::Number {
            let mut j = i;
            for _ in 0..max_digits {
                match seg.at(j) {
                    Some(d) if class(d) == Class::Number => j += d.len_utf8(),
                    _ => break,
                }
            }
            j
        } else if let Some(j) = punct_run(&seg, i, c, cl) {
            // ?[^\s\p{L}\p{N}]+[\r\n]*
            let mut j = j;
            while let Some(n @ ('\r' | '\n')) = seg.at(j) {
                j += n.len_utf8();
            }
            j
        } else if let Some(j) = whitespace_end(&seg, i, true) {
            j
        } else {
            seg.next(i)
        };
        out.push((i, end));
        i = end;
    }
}

/// ` ?[^\s\p{L}\p{N}]+` at `i`: the end of the run, if it matches.
fn punct_run(seg: &Seg<'_>, i: usize, c: char, cl: Class) -> Option<usize> {
    let (start, first) = if c == ' ' {
        let n = seg.next(i);
        (n, seg.class_at(n))
    } else {
        (i, Some(cl))
    };
    match first {
        Some(Class::Other) => Some(seg.skip(start, |k| k == Class::Other)),
        _ => None,
    }
}

/// GPT-2's split over `text`, appending ranges offset by `base`.
fn split_gpt2(text: &str, base: usize, out: &mut Vec<(usize, usize)>) {
    let seg = Seg { s: text };
    let mut i = 0;
    while let Some(c) = seg.at(i) {
        let after_space = if c == ' ' { seg.next(i) } else { i };
        let k = seg.class_at(after_space);
        let end = if let Some(n) = contraction(&seg, i, false) {
            i + n
        } else if let Some(k @ (Class::Letter | Class::Number | Class::Other)) = k {
            seg.skip(after_space, |x| x == k)
        } else if let Some(j) = whitespace_end(&seg, i, false) {
            j
        } else {
            seg.next(i)
        };
        out.push((base + i, base + end));
        i = end;
    }
}

/// Splits `[s, e)` into maximal runs of chars that do / do not satisfy `f`.
fn split_runs(
    text: &str,
    s: usize,
    e: usize,
    f: impl Fn(char) -> bool,
    out: &mut Vec<(usize, usize)>,
) {
    let mut start = s;
    let mut state = None;
    for (off, c) in text[s..e].char_indices() {
        let v = f(c);
        if state.is_some_and(|st| st != v) {
            out.push((start, s + off));
            start = s + off;
        }
        state = Some(v);
    }
    if start < e {
        out.push((start, e));
    }
}

/// Splits `[s, e)` into groups of three ASCII digits and the text between.
fn split_digit_triples(text: &str, s: usize, e: usize, out: &mut Vec<(usize, usize)>) {
    let b = text.as_bytes();
    let mut gap = s;
    let mut i = s;
    while i < e {
        if !b[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < e && b[j].is_ascii_digit() {
            j += 1;
        }
        let triples_end = i + (j - i) / 3 * 3;
        let mut t = i;
        while t < triples_end {
            if t > gap {
                out.push((gap, t));
            }
            out.push((t, t + 3));
            t += 3;
            gap = t;
        }
        i = j;
    }
    if gap < e {
        out.push((gap, e));
    }
}

/// llama.cpp's default BPE chain: `[\p{P}\$\+<=>\^~\|]+`, then the gpt2
/// regex, then `\p{N}+`, then `[0-9][0-9][0-9]`; every split keeps the text
/// between matches as words too.
fn split_default(text: &str, out: &mut Vec<(usize, usize)>) {
    let punct = |c: char| {
        if c.is_ascii() {
            // ASCII part of llama.cpp's collapsed \p{P} plus the listed symbols.
            matches!(c, '!'..='#' | '%'..='*' | ','..='/' | ':' | ';' | '?' | '@' | '['..=']'
                | '_' | '{' | '}' | '$' | '+' | '<' | '=' | '>' | '^' | '~' | '|')
        } else {
            !c.is_whitespace() && is_punct(c)
        }
    };
    let mut a = Vec::new();
    split_runs(text, 0, text.len(), punct, &mut a);
    let mut b = Vec::new();
    for &(s, e) in &a {
        split_gpt2(&text[s..e], s, &mut b);
    }
    a.clear();
    for &(s, e) in &b {
        split_runs(text, s, e, |c| class(c) == Class::Number, &mut a);
    }
    for &(s, e) in &a {
        split_digit_triples(text, s, e, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(p: PreTokenizer, t: &str) -> Vec<&str> {
        let mut v = Vec::new();
        p.split(t, &mut v);
        v.iter().map(|&(s, e)| &t[s..e]).collect()
    }

    #[test]
    fn smollm_isolates_digits_then_splits_like_gpt2() {
        let w = words(PreTokenizer::Smollm, "I'm  fine, 42x\t 2026");
        assert_eq!(
            w,
            ["I", "'m", " ", " fine", ",", " ", "4", "2", "x", "\t ", "2", "0", "2", "6"]
        );
    }

    #[test]
    fn qwen2_basic() {
        let w = words(PreTokenizer::Qwen2, "Hello world's  12 ab!!\n\n  x");
        assert_eq!(
            w,
            ["Hello", " world", "'s", " ", " ", "1", "2", " ab", "!!\n\n", " ", " x"]
        );
    }

    #[test]
    fn llama3_digits_and_spaces() {
        let w = words(PreTokenizer::Llama3, "12345 \t\n  end   ");
        assert_eq!(w, ["123", "45", " \t\n", " ", " end", "   "]);
    }

    #[test]
    fn gpt2_basic() {
        let w = words(PreTokenizer::Gpt2, "I'm  fine, 42x\t");
        assert_eq!(w, ["I", "'m", " ", " fine", ",", " 42", "x", "\t"]);
    }

    #[test]
    fn default_chain() {
        let w = words(PreTokenizer::Default, "abc, 12345!");
        assert_eq!(w, ["abc", ",", " ", "123", "45", "!"]);
    }

    #[test]
    fn covers_input() {
        for p in [
            PreTokenizer::Gpt2,
            PreTokenizer::Llama3,
            PreTokenizer::Qwen2,
            PreTokenizer::Smollm,
            PreTokenizer::Gpt4o,
            PreTokenizer::Tekken,
            PreTokenizer::Default,
        ] {
            let t = "a\u{378}b \u{378} 😀\u{2028}x  \r\n 9½ '";
            assert_eq!(words(p, t).concat(), t, "{p:?}");
        }
    }
}

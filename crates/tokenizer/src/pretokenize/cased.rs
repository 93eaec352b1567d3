//! The case-aware splits of `gpt-4o` and `tekken` (Mistral's Tekken vocabulary).
//!
//! Their tokenizer.json regexes separate a word's capitals from its lower-case tail:
//! `[^\r\n\p{L}\p{N}]?[\p{Lu}…]*[\p{Ll}…]+('s|…)?|[^\r\n\p{L}\p{N}]?[\p{Lu}…]+[\p{Ll}…]*('s|…)?|
//! \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+` (tekken: no contractions,
//! single digits). llama.cpp runs them as `std::regex` over category-collapsed text, where the
//! case classes become `(?=\p{L})[^a-z]` ("upper") and `(?=\p{L})[^A-Z]` ("lower"). Every
//! letter outside ASCII is therefore both upper and lower, and combining marks are not letters.
//! This splitter reproduces that backtracking match, linearly.

use super::{class, contraction, whitespace_end, Class, Seg};

/// Which of the two vocabularies' regexes.
#[derive(Clone, Copy)]
pub(super) struct Cased {
    /// Digits per number word (3 for gpt-4o, 1 for tekken).
    pub max_digits: usize,
    /// Whether an English contraction may end a word (gpt-4o).
    pub contractions: bool,
}

fn is_letter(c: char) -> bool {
    class(c) == Class::Letter
}

/// A letter outside ASCII: both "upper" and "lower" in the collapsed regex.
fn is_both(c: char) -> bool {
    !c.is_ascii() && is_letter(c)
}

/// `[^\r\n\p{L}\p{N}]`: the optional character before a word.
fn is_prefix(c: char) -> bool {
    c != '\r' && c != '\n' && !matches!(class(c), Class::Letter | Class::Number)
}

/// `[^\s\p{L}\p{N}]`: a symbol (unassigned code points included, as in the collapsed text).
fn is_other(c: char) -> bool {
    class(c) == Class::Other
}

impl Cased {
    /// Appends the word ranges of `text` to `out`.
    pub fn split(self, text: &str, out: &mut Vec<(usize, usize)>) {
        let seg = Seg { s: text };
        let mut i = 0;
        while let Some(c) = seg.at(i) {
            let word = if is_letter(c) {
                Some(i)
            } else if is_prefix(c) && seg.at(seg.next(i)).is_some_and(is_letter) {
                Some(seg.next(i))
            } else {
                None
            };
            let end = if let Some(p) = word {
                self.word_end(&seg, p)
            } else if class(c) == Class::Number {
                let mut j = i;
                for _ in 0..self.max_digits {
                    match seg.at(j) {
                        Some(d) if class(d) == Class::Number => j += d.len_utf8(),
                        _ => break,
                    }
                }
                j
            } else if let Some(j) = symbol_run(&seg, i, c) {
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

    /// The end of the cased word whose first letter is at `p`.
    ///
    /// The first alternative, `upper* lower+`, backtracks its greedy `upper*`: it ends after
    /// the lower-case run that follows the capitals, else at the last capital that is also
    /// "lower" (a letter outside ASCII). Failing both, the second, `upper+ lower*`, takes
    /// the capitals alone.
    fn word_end(self, seg: &Seg<'_>, p: usize) -> usize {
        let mut j = p;
        let mut last_both = None;
        while let Some(c) = seg.at(j) {
            if !is_letter(c) || c.is_ascii_lowercase() {
                break;
            }
            if is_both(c) {
                last_both = Some(j);
            }
            j += c.len_utf8();
        }
        let end = if seg.at(j).is_some_and(|c| c.is_ascii_lowercase()) {
            let mut k = j;
            while let Some(c) = seg.at(k) {
                if !(c.is_ascii_lowercase() || is_both(c)) {
                    break;
                }
                k += c.len_utf8();
            }
            k
        } else if let Some(b) = last_both {
            seg.next(b)
        } else {
            j
        };
        match self.contractions {
            true => end + contraction(seg, end, true).unwrap_or(0),
            false => end,
        }
    }
}

/// ` ?[^\s\p{L}\p{N}]+[\r\n/]*` at `i`: the end of the run, if it matches.
fn symbol_run(seg: &Seg<'_>, i: usize, c: char) -> Option<usize> {
    let start = if c == ' ' { seg.next(i) } else { i };
    if !seg.at(start).is_some_and(is_other) {
        return None;
    }
    let mut j = start;
    while let Some(d) = seg.at(j) {
        if !is_other(d) {
            break;
        }
        j += d.len_utf8();
    }
    while let Some(d @ ('\r' | '\n' | '/')) = seg.at(j) {
        j += d.len_utf8();
    }
    Some(j)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(c: Cased, t: &str) -> Vec<&str> {
        let mut v = Vec::new();
        c.split(t, &mut v);
        v.iter().map(|&(s, e)| &t[s..e]).collect()
    }

    const GPT4O: Cased = Cased {
        max_digits: 3,
        contractions: true,
    };
    const TEKKEN: Cased = Cased {
        max_digits: 1,
        contractions: false,
    };

    #[test]
    fn capitals_split_from_lower_case_tails() {
        let w = words(GPT4O, "helloWorld HTTPServer I'M don't 12345");
        assert_eq!(
            w,
            [
                "hello",
                "World",
                " HTTPServer",
                " I'M",
                " don't",
                " ",
                "123",
                "45"
            ]
        );
        let w = words(TEKKEN, "helloWorld don't 123");
        assert_eq!(w, ["hello", "World", " don", "'t", " ", "1", "2", "3"]);
    }

    #[test]
    fn letters_outside_ascii_count_as_both_cases() {
        // `upper*` backtracks to the last non-ASCII capital, which is also "lower".
        assert_eq!(words(GPT4O, "ÉCOLE"), ["É", "COLE"]);
        assert_eq!(words(GPT4O, "Ünïcode"), ["Ünïcode"]);
        assert_eq!(words(GPT4O, "a/b\n/c"), ["a", "/b", "\n", "/c"]);
        assert_eq!(words(GPT4O, "x !!\n/ y"), ["x", " !!\n/", " y"]);
    }
}

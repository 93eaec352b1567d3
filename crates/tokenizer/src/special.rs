//! Special tokens: resolving ids (metadata, defaults, detection by text), the
//! end-of-generation set, and splitting raw text on special/user-defined
//! token texts before the model's algorithm runs (llama.cpp's
//! `tokenizer_st_partition`).

use std::cmp::Reverse;
use std::collections::BTreeMap;

use crate::vocab::{attr, SpecialIds, TokenizerKind, Vocab};

/// Texts that llama.cpp treats as end-of-generation (and forces to CONTROL).
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const EOM_TEXTS: &[&str] = &["<|eom_id|>"];
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];

/// Resolved special token ids and the end-of-generation set.
#[derive(Debug, Clone)]
pub(crate) struct Specials {
    pub ids: SpecialIds,
    /// Sorted, deduplicated.
    pub eog: Vec<u32>,
}

/// llama.cpp's per-kind defaults for ids the metadata does not give.
fn defaults(kind: TokenizerKind) -> SpecialIds {
    match kind {
        TokenizerKind::Spm => SpecialIds {
            bos: Some(1),
            eos: Some(2),
            unk: Some(0),
            ..SpecialIds::default()
        },
        TokenizerKind::Bpe => SpecialIds {
            bos: Some(11),
            eos: Some(11),
            ..SpecialIds::default()
        },
    }
}

/// Metadata id if in range, else the default if in range.
fn pick(meta: Option<u32>, default: Option<u32>, n: usize) -> Option<u32> {
    let ok = |v: Option<u32>| v.filter(|&id| (id as usize) < n);
    ok(meta).or(ok(default))
}

/// Finds the first text of `list` that is in the vocabulary (list order is
/// the priority; llama.cpp's choice among several depends on hash order).
fn detect(vocab: &Vocab, list: &[&str]) -> Option<u32> {
    list.iter().find_map(|t| vocab.id(t))
}

/// Resolves ids, marks detected specials CONTROL and builds the EOG set,
/// following llama.cpp's loader.
pub(crate) fn resolve(kind: TokenizerKind, meta: &SpecialIds, vocab: &mut Vocab) -> Specials {
    let n = vocab.len();
    let d = defaults(kind);
    let mut ids = SpecialIds {
        bos: pick(meta.bos, d.bos, n),
        eos: pick(meta.eos, d.eos, n),
        eot: pick(meta.eot, None, n),
        eom: pick(meta.eom, None, n),
        unk: pick(meta.unk, d.unk, n),
        sep: pick(meta.sep, None, n),
        pad: pick(meta.pad, None, n),
        mask: pick(meta.mask, None, n),
        fim_pre: pick(meta.fim_pre, None, n),
        fim_suf: pick(meta.fim_suf, None, n),
        fim_mid: pick(meta.fim_mid, None, n),
        fim_pad: pick(meta.fim_pad, None, n),
        fim_rep: pick(meta.fim_rep, None, n),
        fim_sep: pick(meta.fim_sep, None, n),
    };
    let detected: [(&mut Option<u32>, &[&str]); 8] = [
        (&mut ids.eot, EOT_TEXTS),
        (&mut ids.eom, EOM_TEXTS),
        (&mut ids.fim_pre, FIM_PRE_TEXTS),
        (&mut ids.fim_suf, FIM_SUF_TEXTS),
        (&mut ids.fim_mid, FIM_MID_TEXTS),
        (&mut ids.fim_pad, FIM_PAD_TEXTS),
        (&mut ids.fim_rep, FIM_REP_TEXTS),
        (&mut ids.fim_sep, FIM_SEP_TEXTS),
    ];
    for (slot, list) in detected {
        if slot.is_none() {
            *slot = detect(vocab, list);
            if let Some(id) = *slot {
                vocab.attrs[id as usize] |= attr::CONTROL;
            }
        }
    }
    let mut eog: Vec<u32> = [ids.fim_pad, ids.fim_rep, ids.fim_sep]
        .into_iter()
        .flatten()
        .collect();
    for text in EOG_TEXTS {
        if let Some(id) = vocab.id(text) {
            eog.push(id);
            vocab.attrs[id as usize] |= attr::CONTROL;
        }
    }
    // gpt-oss: these markers are always rendered.
    for text in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
        if let Some(id) = vocab.id(text) {
            vocab.attrs[id as usize] = attr::USER_DEFINED;
        }
    }
    eog.extend([ids.eos, ids.eot, ids.eom].into_iter().flatten());
    eog.sort_unstable();
    eog.dedup();
    apply_eog_workarounds(vocab, &mut eog);
    Specials { ids, eog }
}

/// llama.cpp's two exceptions: `<|end|>` is not EOG next to `<|return|>` and
/// `<|call|>` (or `<|calls|>` and `<|flush|>`); `</s>` is not EOG next to
/// `<|tool_response>`.
fn apply_eog_workarounds(vocab: &mut Vocab, eog: &mut Vec<u32>) {
    let has = |eog: &[u32], vocab: &Vocab, t: &str| {
        vocab.id(t).is_some_and(|id| eog.binary_search(&id).is_ok())
    };
    let (ret, call, calls, flush) = (
        has(eog, vocab, "<|return|>"),
        has(eog, vocab, "<|call|>"),
        has(eog, vocab, "<|calls|>"),
        has(eog, vocab, "<|flush|>"),
    );
    if ((ret && call) || (calls && flush)) && has(eog, vocab, "<|end|>") {
        if let Some(id) = vocab.id("<|end|>") {
            eog.retain(|&e| e != id);
            vocab.attrs[id as usize] = attr::USER_DEFINED;
        }
    }
    if has(eog, vocab, "<|tool_response>") && has(eog, vocab, "</s>") {
        if let Some(id) = vocab.id("</s>") {
            eog.retain(|&e| e != id);
            vocab.attrs[id as usize] = attr::NORMAL;
        }
    }
}

/// A piece of input after special-token partitioning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fragment {
    /// Raw text, a byte range of the input (always on char boundaries).
    Text(usize, usize),
    /// A matched special or user-defined token.
    Token(u32),
}

const NONE: u32 = u32::MAX;

/// A byte trie over special token texts, used to find which of them occur in
/// a text in one pass (with pruning of already-found subtrees).
#[derive(Debug, Default)]
struct Trie {
    root: Vec<u32>,
    children: Vec<Vec<(u8, u32)>>,
    token: Vec<u32>,
    count: Vec<u32>,
}

impl Trie {
    fn new(ids: impl Iterator<Item = u32>, vocab: &Vocab) -> Trie {
        let mut t = Trie {
            root: vec![NONE; 256],
            ..Trie::default()
        };
        t.push_node(); // node 0: root
        for id in ids {
            let bytes = vocab.text(id).as_bytes();
            let mut node = 0u32;
            t.count[0] += 1;
            for &b in bytes {
                node = match t.child(node, b) {
                    Some(c) => c,
                    None => {
                        let c = t.push_node();
                        t.add_child(node, b, c);
                        c
                    }
                };
                t.count[node as usize] += 1;
            }
            t.token[node as usize] = id;
        }
        t
    }

    fn push_node(&mut self) -> u32 {
        self.children.push(Vec::new());
        self.token.push(NONE);
        self.count.push(0);
        (self.token.len() - 1) as u32
    }

    fn add_child(&mut self, node: u32, b: u8, c: u32) {
        if node == 0 {
            self.root[b as usize] = c;
        }
        let v = &mut self.children[node as usize];
        let pos = v.partition_point(|&(k, _)| k < b);
        v.insert(pos, (b, c));
    }

    #[inline]
    fn child(&self, node: u32, b: u8) -> Option<u32> {
        if node == 0 {
            let c = self.root[b as usize];
            return (c != NONE).then_some(c);
        }
        let v = &self.children[node as usize];
        v.binary_search_by_key(&b, |&(k, _)| k).ok().map(|i| v[i].1)
    }

    /// Every occurrence of every trie token in `text`: `(id, start)`, found by walking the
    /// trie from each byte (at most the longest token's length steps each).
    fn occurrences(&self, text: &[u8]) -> Vec<(u32, u32)> {
        let mut found = Vec::new();
        if self.count[0] == 0 {
            return found;
        }
        for i in 0..text.len() {
            let mut node = 0u32;
            for &b in &text[i..] {
                match self.child(node, b) {
                    Some(c) => node = c,
                    None => break,
                }
                let tok = self.token[node as usize];
                if tok != NONE {
                    found.push((tok, i as u32));
                }
            }
        }
        found
    }

    /// The ids of all trie tokens that occur somewhere in `text`.
    fn occurring(&self, text: &[u8]) -> Vec<u32> {
        let mut found = Vec::new();
        if self.count[0] == 0 {
            return found;
        }
        let mut remaining = self.count.clone();
        let mut done = vec![false; self.token.len()];
        let mut path: Vec<u32> = Vec::new();
        for i in 0..text.len() {
            let mut node = 0u32;
            path.clear();
            for &b in &text[i..] {
                match self.child(node, b) {
                    Some(c) if remaining[c as usize] > 0 => node = c,
                    _ => break,
                }
                path.push(node);
                let tok = self.token[node as usize];
                if tok != NONE && !done[node as usize] {
                    done[node as usize] = true;
                    found.push(tok);
                    for &p in &path {
                        remaining[p as usize] -= 1;
                    }
                    remaining[0] -= 1;
                    if remaining[0] == 0 {
                        return found;
                    }
                }
            }
        }
        found
    }
}

/// Splits raw text on special token texts, longest token first (ties: lower
/// id first), each token taking its leftmost non-overlapping occurrences in
/// the text not yet claimed — the result of llama.cpp's partition loop.
#[derive(Debug)]
pub(crate) struct SpecialMatcher {
    /// Control, user-defined and unknown tokens (`parse_special = true`).
    all: Trie,
    /// Only tokens matched even without `parse_special` (user-defined ones
    /// that are neither control nor unknown).
    plain: Trie,
}

impl SpecialMatcher {
    pub fn new(vocab: &Vocab) -> SpecialMatcher {
        let special = attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN;
        let ids = || (0..vocab.len() as u32).filter(move |&id| vocab.has(id, special));
        let all = Trie::new(ids(), vocab);
        let plain = Trie::new(
            ids().filter(|&id| !vocab.has(id, attr::CONTROL | attr::UNKNOWN)),
            vocab,
        );
        SpecialMatcher { all, plain }
    }

    /// Whether a control (or unknown) token's text occurs in `text`: what `parse_special`
    /// would turn into a token there.
    pub fn has_control(&self, text: &str, vocab: &Vocab) -> bool {
        (self.all.occurring(text.as_bytes()).iter())
            .any(|&id| vocab.has(id, attr::CONTROL | attr::UNKNOWN))
    }

    /// Splits `text` into fragments. `plain`: sorted, disjoint byte ranges where control texts
    /// stay text even with `parse_special` (message contents inside a rendered chat).
    ///
    /// The result is llama.cpp's partition loop's (tokens longest first, ties by id, each
    /// taking its leftmost occurrences that do not overlap what longer tokens took), computed
    /// in one pass over the text: every occurrence of every special text is found by walking
    /// the trie from each byte, then claimed in that order. The cost is the text's length
    /// times the longest special text, however many distinct specials a hostile text spells.
    pub fn partition(
        &self,
        text: &str,
        parse_special: bool,
        plain: &[(usize, usize)],
        vocab: &Vocab,
    ) -> Vec<Fragment> {
        let bytes = text.as_bytes();
        if bytes.is_empty() {
            return Vec::new();
        }
        let trie = if parse_special {
            &self.all
        } else {
            &self.plain
        };
        let mut found = trie.occurrences(bytes);
        let len = |id: u32| vocab.text(id).len();
        found.sort_unstable_by_key(|&(id, at)| (Reverse(len(id)), id, at));
        let mut claimed: BTreeMap<usize, (usize, u32)> = BTreeMap::new();
        for (id, at) in found {
            let (s, e) = (at as usize, at as usize + len(id));
            let guarded = !plain.is_empty() && vocab.has(id, attr::CONTROL | attr::UNKNOWN);
            if (guarded && overlaps(plain, s, e)) || overlaps_claimed(&claimed, s, e) {
                continue;
            }
            claimed.insert(s, (e, id));
        }
        let mut frags = Vec::with_capacity(2 * claimed.len() + 1);
        let mut cur = 0;
        for (s, (e, id)) in claimed {
            if s > cur {
                frags.push(Fragment::Text(cur, s));
            }
            frags.push(Fragment::Token(id));
            cur = e;
        }
        if cur < bytes.len() {
            frags.push(Fragment::Text(cur, bytes.len()));
        }
        frags
    }
}

/// Whether `[s, e)` overlaps a claimed range (keyed by start, disjoint).
fn overlaps_claimed(claimed: &BTreeMap<usize, (usize, u32)>, s: usize, e: usize) -> bool {
    let before = claimed
        .range(..=s)
        .next_back()
        .is_some_and(|(_, &(end, _))| end > s);
    before || claimed.range(s..e).next().is_some()
}

/// Whether `[s, e)` overlaps one of the sorted, disjoint `ranges`.
fn overlaps(ranges: &[(usize, usize)], s: usize, e: usize) -> bool {
    let i = ranges.partition_point(|&(_, re)| re <= s);
    ranges.get(i).is_some_and(|&(rs, _)| rs < e)
}

/// llama.cpp's partition loop written as it is (token by token over the fragments): the
/// reference the one-pass [`SpecialMatcher::partition`] is checked against.
#[cfg(test)]
pub(crate) fn partition_reference(
    m: &SpecialMatcher,
    text: &str,
    parse_special: bool,
    vocab: &Vocab,
) -> Vec<Fragment> {
    let bytes = text.as_bytes();
    if bytes.is_empty() {
        return Vec::new();
    }
    let trie = if parse_special { &m.all } else { &m.plain };
    let mut cands = trie.occurring(bytes);
    let mut frags = vec![Fragment::Text(0, bytes.len())];
    cands.sort_unstable_by_key(|&id| (Reverse(vocab.text(id).len()), id));
    for id in cands {
        let pat = vocab.text(id).as_bytes();
        let finder = memchr::memmem::Finder::new(pat);
        let mut out = Vec::with_capacity(frags.len() + 2);
        for f in frags {
            let Fragment::Text(s, e) = f else {
                out.push(f);
                continue;
            };
            let mut cur = s;
            for m in finder.find_iter(&bytes[s..e]) {
                let ms = s + m;
                if ms > cur {
                    out.push(Fragment::Text(cur, ms));
                }
                out.push(Fragment::Token(id));
                cur = ms + pat.len();
            }
            if cur < e {
                out.push(Fragment::Text(cur, e));
            }
        }
        frags = out;
    }
    frags
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::TokenizerSpec;
    use proptest::prelude::*;

    /// Specials that overlap and prefix each other, control and user-defined.
    const SPECIALS: &[(&str, i32)] = &[
        ("<a>", 3),
        ("<a><a>", 3),
        ("a><", 3),
        ("<ab>", 4),
        ("b>", 4),
        ("<|x|>", 3),
        ("|x", 3),
        ("x|><a", 3),
        ("aaa", 3),
        ("aa", 4),
    ];

    fn vocab() -> Vocab {
        let mut tokens: Vec<String> = vec!["<unk>".into()];
        let mut types = vec![2];
        for (t, ty) in SPECIALS {
            tokens.push((*t).into());
            types.push(*ty);
        }
        for c in ["a", "b", "x", "|", "<", ">", " "] {
            tokens.push(c.into());
            types.push(1);
        }
        let spec = TokenizerSpec {
            kind: TokenizerKind::Spm,
            pre: String::new(),
            architecture: String::new(),
            scores: vec![0.0; tokens.len()],
            tokens,
            token_types: types,
            merges: Vec::new(),
            special: SpecialIds::default(),
            add_bos: Some(false),
            add_eos: None,
            add_space_prefix: None,
            chat_template: None,
        };
        Vocab::new(&spec).unwrap()
    }

    fn text() -> impl Strategy<Value = String> {
        let pieces: Vec<&str> = (SPECIALS.iter().map(|s| s.0))
            .chain(["a", "b", "x", "|", "<", ">", " ", "é"])
            .collect();
        prop::collection::vec(prop::sample::select(pieces), 0..40).prop_map(|v| v.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// The one-pass partition equals llama.cpp's loop on texts dense with overlapping
        /// specials, with and without `parse_special`.
        #[test]
        fn one_pass_equals_the_reference_loop(t in text(), parse in any::<bool>()) {
            let v = vocab();
            let m = SpecialMatcher::new(&v);
            prop_assert_eq!(m.partition(&t, parse, &[], &v), partition_reference(&m, &t, parse, &v));
        }
    }

    #[test]
    fn plain_ranges_keep_control_texts_as_text() {
        let v = vocab();
        let m = SpecialMatcher::new(&v);
        let t = "<a>xx<a>";
        let frags = m.partition(t, true, &[(3, 8)], &v);
        let a = v.id("<a>").unwrap();
        assert_eq!(frags, vec![Fragment::Token(a), Fragment::Text(3, 8)]);
        // User-defined tokens are matched inside plain ranges too (as without parse_special).
        let ab = v.id("<ab>").unwrap();
        assert_eq!(
            m.partition("<ab>", true, &[(0, 4)], &v),
            vec![Fragment::Token(ab)]
        );
    }
}

//! Stop strings over streamed text.
//!
//! Text arrives in pieces (one per token). The matcher releases text only once it can no longer
//! be part of a stop string: a suffix that could still grow into a stop string is held back, so
//! a stop string split across tokens never leaks, and nothing after the first stop string is
//! ever released.

/// What [`StopMatcher::push`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopOutcome {
    /// No stop string yet: `emit` is safe to show (maybe empty).
    Continue {
        /// Text released by this piece.
        emit: String,
    },
    /// A stop string was found: `emit` is the text before it; generation must end.
    Stopped {
        /// Text released before the stop string.
        emit: String,
        /// The stop string that matched (the earliest one in the text; the longest on a tie).
        stop: String,
    },
}

/// Finds stop strings in streamed text, holding back what could be the start of one.
#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
    stopped: bool,
}

impl StopMatcher {
    /// A matcher for `stops` (empty strings are ignored).
    pub fn new(stops: &[String]) -> StopMatcher {
        StopMatcher {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            held: String::new(),
            stopped: false,
        }
    }

    /// Whether there is nothing to match (every piece is released at once).
    pub fn is_empty(&self) -> bool {
        self.stops.is_empty()
    }

    /// Text currently held back.
    pub fn held(&self) -> &str {
        &self.held
    }

    /// Adds the next piece of text. After a stop, everything is swallowed.
    pub fn push(&mut self, piece: &str) -> StopOutcome {
        if self.stopped {
            return StopOutcome::Continue {
                emit: String::new(),
            };
        }
        if self.stops.is_empty() {
            return StopOutcome::Continue {
                emit: piece.to_string(),
            };
        }
        let mut buf = std::mem::take(&mut self.held);
        buf.push_str(piece);
        if let Some((at, stop)) = self.earliest_match(&buf) {
            self.stopped = true;
            buf.truncate(at);
            return StopOutcome::Stopped { emit: buf, stop };
        }
        let keep = self.partial_suffix_len(&buf);
        self.held = buf.split_off(buf.len() - keep);
        StopOutcome::Continue { emit: buf }
    }

    /// Releases the held text (the stream ended without a stop string).
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// The earliest occurrence of any stop string (longest stop string on a tie).
    fn earliest_match(&self, buf: &str) -> Option<(usize, String)> {
        let mut best: Option<(usize, &String)> = None;
        for s in &self.stops {
            if let Some(at) = buf.find(s.as_str()) {
                let better = match best {
                    None => true,
                    Some((b, bs)) => at < b || (at == b && s.len() > bs.len()),
                };
                if better {
                    best = Some((at, s));
                }
            }
        }
        best.map(|(at, s)| (at, s.clone()))
    }

    /// Length of the longest suffix of `buf` that is a proper prefix of some stop string
    /// (always starting on a character boundary).
    fn partial_suffix_len(&self, buf: &str) -> usize {
        let longest = self.stops.iter().map(String::len).max().unwrap_or(0);
        let mut start = buf.len().saturating_sub(longest.saturating_sub(1));
        while !buf.is_char_boundary(start) {
            start += 1;
        }
        for (i, _) in buf[start..].char_indices() {
            let suffix = &buf[start + i..];
            if self
                .stops
                .iter()
                .any(|s| s.len() > suffix.len() && s.starts_with(suffix))
            {
                return suffix.len();
            }
        }
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn stops(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    /// Feeds `pieces`; returns the released text and the stop string, if any.
    fn run(stop_list: &[String], pieces: &[String]) -> (String, Option<String>) {
        let mut m = StopMatcher::new(stop_list);
        let mut out = String::new();
        for p in pieces {
            match m.push(p) {
                StopOutcome::Continue { emit } => out.push_str(&emit),
                StopOutcome::Stopped { emit, stop } => {
                    out.push_str(&emit);
                    return (out, Some(stop));
                }
            }
        }
        out.push_str(&m.finish());
        (out, None)
    }

    #[test]
    fn split_stop_string_never_leaks() {
        let s = stops(&["</end>"]);
        let mut m = StopMatcher::new(&s);
        assert_eq!(
            m.push("hello </"),
            StopOutcome::Continue {
                emit: "hello ".into()
            }
        );
        assert_eq!(m.held(), "</");
        assert_eq!(
            m.push("en"),
            StopOutcome::Continue {
                emit: String::new()
            }
        );
        assert_eq!(
            m.push("d> tail"),
            StopOutcome::Stopped {
                emit: String::new(),
                stop: "</end>".into()
            }
        );
        assert_eq!(
            m.push("more"),
            StopOutcome::Continue {
                emit: String::new()
            }
        );
    }

    #[test]
    fn false_start_is_released() {
        let s = stops(&["STOP"]);
        let mut m = StopMatcher::new(&s);
        assert_eq!(
            m.push("ST"),
            StopOutcome::Continue {
                emit: String::new()
            }
        );
        assert_eq!(
            m.push("ART"),
            StopOutcome::Continue {
                emit: "START".into()
            }
        );
        assert_eq!(
            m.push("S"),
            StopOutcome::Continue {
                emit: String::new()
            }
        );
        assert_eq!(m.finish(), "S");
    }

    #[test]
    fn earliest_then_longest_wins() {
        assert_eq!(
            run(&stops(&["b", "ab"]), &stops(&["xab"])),
            ("x".into(), Some("ab".into()))
        );
        assert_eq!(
            run(&stops(&["a", "ab"]), &stops(&["xab"])),
            ("x".into(), Some("ab".into()))
        );
        assert_eq!(
            run(&stops(&["."]), &stops(&["Paris. It"])),
            ("Paris".into(), Some(".".into()))
        );
    }

    #[test]
    fn multibyte_text_is_split_on_char_boundaries() {
        let (out, stop) = run(&stops(&["é!"]), &stops(&["caf", "é", "é", "!x"]));
        assert_eq!((out.as_str(), stop.as_deref()), ("café", Some("é!")));
        let (out, stop) = run(&stops(&["日本"]), &stops(&["今日", "は"]));
        assert_eq!((out.as_str(), stop), ("今日は", None));
    }

    #[test]
    fn no_stops_passes_everything_through() {
        let mut m = StopMatcher::new(&stops(&[""]));
        assert!(m.is_empty());
        assert_eq!(m.push("abc"), StopOutcome::Continue { emit: "abc".into() });
    }

    fn piece_strategy() -> impl Strategy<Value = Vec<String>> {
        prop::collection::vec(
            prop::sample::select(vec!["a", "b", "c", "ab", "é", "", "ca", "bé"]),
            0..12,
        )
        .prop_map(|v| v.into_iter().map(String::from).collect())
    }

    proptest! {
        #[test]
        fn streaming_matches_the_text_seen_so_far(
            pieces in piece_strategy(),
            stop_list in prop::collection::vec("[abcé]{1,3}", 1..3),
        ) {
            let whole: String = pieces.concat();
            let (out, stop) = run(&stop_list, &pieces);
            // Reference: after the first piece with which some stop string is complete in the
            // text so far, the text before the earliest complete occurrence.
            let mut seen = String::new();
            let mut reference = None;
            for p in &pieces {
                seen.push_str(p);
                if let Some(at) = stop_list.iter().filter_map(|s| seen.find(s.as_str())).min() {
                    reference = Some((at, seen.clone()));
                    break;
                }
            }
            match reference {
                Some((at, seen)) => {
                    prop_assert_eq!(&out, &seen[..at]);
                    let stop = stop.expect("a stop string must be reported");
                    prop_assert!(seen[at..].starts_with(stop.as_str()));
                }
                None => {
                    prop_assert_eq!(&out, &whole);
                    prop_assert!(stop.is_none());
                }
            }
        }

        #[test]
        fn released_text_never_contains_a_stop_string(
            pieces in piece_strategy(),
            stop_list in prop::collection::vec("[abcé]{1,3}", 1..3),
        ) {
            let mut m = StopMatcher::new(&stop_list);
            let mut released = String::new();
            for p in &pieces {
                let emit = match m.push(p) {
                    StopOutcome::Continue { emit } | StopOutcome::Stopped { emit, .. } => emit,
                };
                released.push_str(&emit);
                for s in &stop_list {
                    prop_assert!(!released.contains(s.as_str()));
                }
            }
        }
    }
}

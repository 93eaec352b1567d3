//! Bad and extreme input: invalid UTF-8, empty text, 10 MB inputs.

mod common;

use statelm_tokenizer::{Tokenizer, TokenizerError};

fn both() -> Vec<&'static Tokenizer> {
    [common::gemma(), common::qwen()]
        .into_iter()
        .flatten()
        .collect()
}

#[test]
fn invalid_utf8_is_a_typed_error() {
    for tok in both() {
        let err = tok
            .encode_bytes(b"ok \xF0\x28\x8C\xBC", true, false)
            .unwrap_err();
        assert!(
            matches!(err, TokenizerError::InvalidUtf8 { valid_up_to: 3 }),
            "{err}"
        );
        let err = tok.encode_bytes(b"\xFF", false, false).unwrap_err();
        assert!(
            matches!(err, TokenizerError::InvalidUtf8 { valid_up_to: 0 }),
            "{err}"
        );
        // A truncated sequence at the end is invalid too.
        assert!(tok
            .encode_bytes("é".as_bytes()[..1].as_ref(), false, false)
            .is_err());
        // Valid bytes work like encode.
        assert_eq!(
            tok.encode_bytes("héllo".as_bytes(), true, false).unwrap(),
            tok.encode("héllo", true, false).unwrap()
        );
    }
}

#[test]
fn empty_input() {
    for tok in both() {
        assert!(tok.encode("", false, false).unwrap().is_empty());
        assert!(tok.encode("", false, true).unwrap().is_empty());
        let with_special = tok.encode("", true, true).unwrap();
        let want: Vec<u32> = if tok.add_bos() {
            tok.bos_id().into_iter().collect()
        } else {
            vec![]
        };
        assert_eq!(with_special, want);
        assert_eq!(tok.decode(&[]), "");
    }
}

#[test]
fn out_of_range_ids_decode_to_nothing() {
    for tok in both() {
        let n = tok.vocab_size() as u32;
        assert_eq!(tok.decode(&[n, n + 7, u32::MAX]), "");
        assert!(tok.token_text(n).is_none());
        assert!(tok.token_bytes(n).is_none());
        assert!(!tok.is_eog(u32::MAX));
    }
}

const PROSE: &str = "The quick brown fox jumps over the lazy dog. It's 12:30 and we'd \
    better go!\n\tfn main() { println!(\"héllo, 世界 🌍\"); }  \r\n";

/// 10 MB inputs complete (the algorithms are O(n log n)); performance
/// itself is measured by `benches/encode.rs`, not asserted here.
#[test]
fn ten_megabyte_inputs() {
    const N: usize = 10 * 1024 * 1024;
    let prose = PROSE.repeat(N / PROSE.len() + 1);
    // One 10 MB word (BPE) / fragment (SPM): the worst case for the heaps.
    let same = "a".repeat(N);
    for tok in both() {
        for text in [&prose, &same] {
            let ids = tok.encode(text, false, false).unwrap();
            assert!(!ids.is_empty());
            assert!(ids.len() <= text.len());
        }
        // The prose round-trips.
        let ids = tok.encode(&prose, false, false).unwrap();
        assert!(tok.decode(&ids) == prose, "10 MB prose round trip");
    }
}

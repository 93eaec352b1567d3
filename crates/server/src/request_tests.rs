use super::*;

const LIMITS: Limits = Limits {
    max_tokens_limit: 100,
    default_max_tokens: 16,
    n_vocab: 1000,
};

fn common(json: &str) -> Common {
    serde_json::from_str(json).expect("valid test JSON")
}

#[test]
fn defaults_follow_the_engine() {
    let p = common("{}")
        .validate(&LIMITS, &SamplingParams::default())
        .unwrap();
    assert_eq!(p.max_tokens, 16);
    assert_eq!(p.sampling, SamplingParams::default());
    assert!(!p.stream && !p.include_usage && p.stop.is_empty());
}

#[test]
fn fields_are_mapped() {
    let p = common(
        r#"{"temperature": 0, "top_p": 0.5, "top_k": 3, "seed": 7, "stop": "x",
            "max_completion_tokens": 5, "max_tokens": 50, "logit_bias": {"12": -100, "13": 2},
            "stream": true, "stream_options": {"include_usage": true}, "n": 1}"#,
    )
    .validate(&LIMITS, &SamplingParams::default())
    .unwrap();
    assert_eq!(p.sampling.temperature, 0.0);
    assert_eq!(p.sampling.top_p, 0.5);
    assert_eq!(p.sampling.top_k, 3);
    assert_eq!(p.sampling.seed, Some(7));
    assert_eq!(p.stop, vec!["x".to_string()]);
    assert_eq!(p.max_tokens, 5);
    assert_eq!(p.sampling.logit_bias[&12], f32::NEG_INFINITY);
    assert_eq!(p.sampling.logit_bias[&13], 2.0);
    assert!(p.stream && p.include_usage);
}

#[test]
fn bad_parameters_are_400s_naming_the_field() {
    for (json, param) in [
        (r#"{"temperature": -0.1}"#, "temperature"),
        (r#"{"temperature": 3}"#, "temperature"),
        (r#"{"max_tokens": 0}"#, "max_tokens"),
        (r#"{"max_tokens": 1000000}"#, "max_tokens"),
        (r#"{"max_completion_tokens": -1}"#, "max_completion_tokens"),
        (r#"{"n": 2}"#, "n"),
        (r#"{"top_p": 0}"#, "top_p"),
        (r#"{"top_k": -1}"#, "top_k"),
        (r#"{"logit_bias": {"abc": 1}}"#, "logit_bias"),
        (r#"{"logit_bias": {"5000": 1}}"#, "logit_bias"),
        (r#"{"logit_bias": {"5": 101}}"#, "logit_bias"),
        (r#"{"stop": ["a", "b", "c", "d", "e"]}"#, "stop"),
        (r#"{"presence_penalty": 2.5}"#, "presence_penalty"),
        (r#"{"repeat_penalty": 0}"#, "repeat_penalty"),
        (r#"{"dry_multiplier": -1}"#, "dry_multiplier"),
        (r#"{"logprobs": true}"#, "logprobs"),
        (r#"{"top_logprobs": 3}"#, "top_logprobs"),
        (r#"{"echo": true}"#, "echo"),
        (r#"{"suffix": "}"}"#, "suffix"),
        (r#"{"best_of": 3}"#, "best_of"),
        (r#"{"response_format": {"type": "xml"}}"#, "response_format"),
        (
            r#"{"response_format": {"type": "json_schema"}}"#,
            "response_format",
        ),
        (r#"{"regex": "a", "grammar": "x"}"#, "grammar"),
        (r#"{"tools": [{"type": "function"}]}"#, "tools"),
        (r#"{"tool_choice": "auto"}"#, "tool_choice"),
        (r#"{"functions": [{}]}"#, "functions"),
        (r#"{"function_call": "auto"}"#, "function_call"),
    ] {
        let e = common(json)
            .validate(&LIMITS, &SamplingParams::default())
            .unwrap_err();
        assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST, "{json}");
        assert_eq!(e.param.as_deref(), Some(param), "{json}");
    }
}

#[test]
fn unsupported_fields_that_ask_for_nothing_pass() {
    let p = common(
        r#"{"logprobs": false, "top_logprobs": 0, "echo": false, "suffix": "", "best_of": 1,
            "response_format": {"type": "text"}, "tools": [], "tool_choice": "none",
            "functions": [], "function_call": null, "dry_multiplier": 0.8, "loop_guard": true}"#,
    )
    .validate(&LIMITS, &SamplingParams::default())
    .unwrap();
    assert_eq!(p.sampling.dry_multiplier, 0.8);
    assert!(p.sampling.loop_guard);
}

#[test]
fn bodies_are_parsed_with_clear_errors() {
    let e = parse_body::<ChatRequest>(b"{not json").unwrap_err();
    assert!(e.message.contains("not valid JSON"), "{}", e.message);
    let e = parse_body::<ChatRequest>(br#"{"model": "x"}"#).unwrap_err();
    assert!(e.message.contains("messages"), "{}", e.message);
    let e = parse_body::<ChatRequest>(b"  ").unwrap_err();
    assert!(e.message.contains("empty"), "{}", e.message);
    let r = parse_body::<ChatRequest>(
        br#"{"messages": [{"role": "user", "content": "hi"}], "foo": 1}"#,
    );
    assert!(r.is_ok());
    let r = parse_body::<CompletionRequest>(br#"{"prompt": [1, 2, 3]}"#).unwrap();
    assert!(matches!(r.prompt, Prompt::Tokens(ref t) if t == &[1, 2, 3]));
}

#[test]
fn chat_messages_join_parts_and_check_roles() {
    let r: ChatRequest = parse_body(
        br#"{"messages": [{"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}"#,
    )
    .unwrap();
    let m = chat_messages(&r.messages).unwrap();
    assert_eq!(m[0], ChatMessage::new("system", "be brief"));
    assert_eq!(m[1], ChatMessage::new("user", "ab"));
    let r: ChatRequest =
        parse_body(br#"{"messages": [{"role": "wizard", "content": "x"}]}"#).unwrap();
    assert!(chat_messages(&r.messages).is_err());
    let r: ChatRequest = parse_body(
        br#"{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}"#,
    )
    .unwrap();
    assert!(chat_messages(&r.messages).is_err());
    assert!(chat_messages(&[]).is_err());
}

#[test]
fn lookup_fields_are_checked() {
    let base = SamplingParams::default();
    let p = common(r#"{"lookup": 8, "ngram_max": 2}"#)
        .validate(&LIMITS, &base)
        .unwrap();
    assert_eq!((p.sampling.lookup, p.sampling.ngram_max), (8, 2));
    for (json, field) in [
        (r#"{"lookup": 16}"#, "lookup"),
        (r#"{"lookup": -1}"#, "lookup"),
        (r#"{"ngram_max": 0}"#, "ngram_max"),
    ] {
        let e = common(json).validate(&LIMITS, &base).unwrap_err();
        assert!(format!("{e:?}").contains(field), "{json}: {e:?}");
    }
}

/// Out-of-range sampling values get the engine's own messages (`SamplingParams::check`): the
/// C ABI's params tests check the same values against the same messages.
#[test]
fn sampling_values_get_the_engines_check() {
    for (json, param) in [
        (r#"{"temperature": 5}"#, "temperature"),
        (r#"{"top_p": 0}"#, "top_p"),
        (r#"{"repeat_penalty": 0}"#, "repeat_penalty"),
        (r#"{"dry_base": 0.5}"#, "dry_base"),
        (r#"{"lookup": 1000}"#, "lookup"),
    ] {
        let e = common(json)
            .validate(&LIMITS, &SamplingParams::default())
            .unwrap_err();
        let mut p = SamplingParams::default();
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        match param {
            "temperature" => p.temperature = 5.0,
            "top_p" => p.top_p = 0.0,
            "repeat_penalty" => p.repeat_penalty = 0.0,
            "dry_base" => p.dry_base = 0.5,
            _ => p.lookup = v[param].as_u64().unwrap() as usize,
        }
        let expected = p.check_ranges().unwrap_err();
        assert_eq!(
            (e.param.as_deref(), e.message.as_str()),
            (Some(param), expected.message.as_str())
        );
    }
}

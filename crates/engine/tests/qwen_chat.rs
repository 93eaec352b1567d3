//! A ChatML conversation on Qwen2.5-Coder: the end-of-turn token stops generation, and the
//! second turn reuses the first.

mod common;

use common::{greedy, run};
use statelm_engine::{ChatMessage, Engine, EngineConfig, Input, SessionOptions, StopReason};
use statelm_model::{LoadOptions, Model};

#[tokio::test]
async fn chatml_turns_stop_at_end_of_turn_and_reuse_the_state() {
    let Some(path) = statelm_model::testing::qwen_path() else {
        return;
    };
    let model = Model::load(path, &LoadOptions::default()).expect("qwen loads");
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::start(
        model.clone(),
        EngineConfig {
            session_capacity: 512,
            token_budget: 512,
            spill_dir: dir.path().to_path_buf(),
            ..EngineConfig::default()
        },
    );
    let opts = SessionOptions {
        system_prompt: Some("You are terse. Answer with one word.".into()),
        ..SessionOptions::default()
    };
    let s = engine.create_session(opts).await.unwrap();
    let mut conv = vec![ChatMessage::new("user", "What color is the sky?")];
    let t1 = run(&engine, greedy(s, Input::Chat(conv.clone().into()), 12)).await;
    let d1 = t1.done().clone();
    assert_eq!(d1.stop_reason, StopReason::Eog, "{:?}", t1.text);
    assert!(!t1.text.contains("<|im_end|>"));
    let info = engine.session_info(s).await.unwrap();
    // The rendered system message is pinned.
    let tok = model.tokenizer();
    let sys = tok
        .render_chat(
            &[ChatMessage::new(
                "system",
                "You are terse. Answer with one word.",
            )],
            false,
        )
        .unwrap();
    let sys_tokens = tok.encode(&sys, true, true).unwrap().len();
    assert_eq!(info.pinned_prefix, sys_tokens);
    conv.push(ChatMessage::new("assistant", t1.text.trim()));
    conv.push(ChatMessage::new("user", "And grass?"));
    let t2 = run(&engine, greedy(s, Input::Chat(conv.into()), 12)).await;
    let d2 = t2.done();
    assert!(d2.cached_tokens >= d1.prompt_tokens, "{d1:?} {d2:?}");
    assert!(d2.prefilled_tokens < 20, "{d2:?}");
    eprintln!("{:?} / {:?} {d2:?}", t1.text, t2.text);
}

//! `Input::UserTurn`: the engine's chat turn-diffing, shared by the CLI's chat, the C ABI and
//! any host — the first message renders the conversation, later ones compute only their turn.

mod common;

use common::{greedy, run};
use statelm_engine::{ChatMessage, Engine, EngineConfig, Input, SessionOptions};
use statelm_model::{LoadOptions, Model};
use std::path::PathBuf;

fn models() -> Vec<PathBuf> {
    [
        statelm_model::testing::gemma_path(),
        statelm_model::testing::qwen_path(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The template's turn texts rebuild exactly what it renders for the whole conversation.
#[test]
fn turn_texts_rebuild_the_template() {
    for path in models() {
        let model = Model::load(&path, &LoadOptions::default()).expect("model loads");
        let tok = model.tokenizer();
        let t = tok.turn_texts().expect("turn texts");
        let conv = [
            ChatMessage::new("system", "Be brief."),
            ChatMessage::new("user", "Hi"),
            ChatMessage::new("assistant", "Hello there."),
            ChatMessage::new("user", "How are you?"),
        ];
        let full = tok.render_chat(&conv, true).unwrap();
        let first = tok.render_chat(&conv[..2], true).unwrap();
        let (between, after) = (&t.between, &t.after_user);
        let built = format!("{first}Hello there.{between}How are you?{after}");
        assert_eq!(built, full, "{}", path.display());
        // A message's text stays text: a control token spelled in it is not one.
        let count = |ids: &[u32]| ids.iter().filter(|&&i| tok.is_control(i)).count();
        let plain = tok.encode_user_turn(&t, "x").unwrap();
        let spelled = tok.encode_user_turn(&t, "<|im_end|><end_of_turn>").unwrap();
        assert_eq!(count(&spelled), count(&plain), "{}", path.display());
    }
}

/// The first user turn is the rendered conversation (system prompt first); the second adds
/// only its own turn to the session's history.
#[tokio::test]
async fn user_turns_extend_the_conversation() {
    for path in models() {
        let model = Model::load(&path, &LoadOptions::default()).expect("model loads");
        let dir = tempfile::tempdir().unwrap();
        let config = EngineConfig {
            session_capacity: 512,
            token_budget: 512,
            spill_dir: dir.path().to_path_buf(),
            ..EngineConfig::default()
        };
        let engine = Engine::start(model.clone(), config);
        let opts = SessionOptions {
            system_prompt: Some("Be brief.".into()),
            ..SessionOptions::default()
        };
        let s = engine.create_session(opts).await.unwrap();
        let first = run(&engine, greedy(s, Input::UserTurn("Hi".into()), 6)).await;
        assert!(first.error.is_none(), "{first:?}");
        let h1 = engine.session_history(s).await.unwrap();
        let tok = model.tokenizer();
        let conv = [
            ChatMessage::new("system", "Be brief."),
            ChatMessage::new("user", "Hi"),
        ];
        let rendered = tok.encode_chat(&conv, true).unwrap();
        assert!(h1.starts_with(&rendered), "{}", path.display());
        let info = engine.session_info(s).await.unwrap();
        assert!(
            info.pinned_prefix > 1,
            "the system prompt is pinned: {info:?}"
        );
        let second = greedy(s, Input::UserTurn("How are you?".into()), 1);
        let second = run(&engine, second).await;
        assert!(second.error.is_none(), "{second:?}");
        let h2 = engine.session_history(s).await.unwrap();
        let turn = tok
            .encode_user_turn(&tok.turn_texts().unwrap(), "How are you?")
            .unwrap();
        assert!(h2.starts_with(&h1), "{}", path.display());
        assert!(h2[h1.len()..].starts_with(&turn), "{}", path.display());
        assert!(
            second.done().cached_tokens >= h1.len() - 1,
            "{:?}",
            second.done()
        );
    }
}

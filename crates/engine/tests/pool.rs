//! The engine's session pool ([`Target::Pool`]): requests that name no session run in the one
//! the engine picks — their tenant's conversation continued, a fresh one for a new
//! conversation or another tenant, never a busy one — on real Gemma weights.

mod common;

use common::{collect, config, engine, greedy, run};
use futures::StreamExt;
use statelm_engine::{EngineConfig, EngineError, Input, PoolRequest, Target, Tenant};

fn pooled(user: Option<&str>) -> Target {
    PoolRequest {
        tenant: Tenant {
            key: None,
            user: user.map(str::to_string),
        },
        ..PoolRequest::default()
    }
    .into()
}

fn setup(max_sessions: usize) -> Option<(tempfile::TempDir, statelm_engine::EngineHandle)> {
    let dir = tempfile::tempdir().unwrap();
    let cfg = EngineConfig {
        max_sessions,
        ..config(dir.path())
    };
    let (_, engine) = engine(cfg)?;
    Some((dir, engine))
}

const FIRST: &str = "The capital of France is Paris. The capital of Spain is";

#[tokio::test]
async fn a_continued_prompt_reuses_its_tenants_session() {
    let Some((_dir, engine)) = setup(4) else {
        return;
    };
    let first = engine
        .generate(greedy(pooled(Some("alice")), Input::Text(FIRST.into()), 4))
        .await
        .unwrap();
    let (session, first) = (first.session(), collect(first).await);
    assert_eq!(first.done().cached_tokens, 0);
    // Alice continues: her session, only the new part computed.
    let more = format!("{FIRST}{} And the capital of Italy is", first.text);
    let second = engine
        .generate(greedy(pooled(Some("alice")), Input::Text(more.clone()), 4))
        .await
        .unwrap();
    assert_eq!(second.session(), session);
    let second = collect(second).await;
    assert!(
        second.done().cached_tokens >= second.done().prompt_tokens - 12,
        "{second:?}"
    );
    // Bob sends the same prompt: never Alice's session, nothing cached.
    let bob = engine
        .generate(greedy(pooled(Some("bob")), Input::Text(more), 4))
        .await
        .unwrap();
    assert_ne!(bob.session(), session);
    assert_eq!(collect(bob).await.done().cached_tokens, 0);
    assert_eq!(engine.session_ids().await.unwrap().len(), 2);
}

#[tokio::test]
async fn busy_sessions_are_never_shared_and_a_full_pool_says_so() {
    let Some((_dir, engine)) = setup(2) else {
        return;
    };
    let req = || greedy(pooled(Some("alice")), Input::Text(FIRST.into()), 64);
    let mut a = engine.generate(req()).await.unwrap();
    a.next().await.unwrap().unwrap();
    // The same conversation while its session generates: a second session.
    let mut b = engine.generate(req()).await.unwrap();
    assert_ne!(a.session(), b.session());
    b.next().await.unwrap().unwrap();
    // Both busy and no room: refused at submission, at once.
    let refused = engine.generate(req()).await.unwrap_err();
    assert!(
        matches!(refused, EngineError::TooManySessions { max: 2 }),
        "{refused}"
    );
    // A dropped stream frees its session for the next request.
    let freed = a.session();
    drop(a);
    let c = engine.generate(req()).await.unwrap();
    assert_eq!(c.session(), freed);
    drop((b, c));
}

#[tokio::test]
async fn anonymous_requests_reuse_only_whole_prompt_continuations() {
    let Some((_dir, engine)) = setup(4) else {
        return;
    };
    let r = run(&engine, greedy(pooled(None), Input::Text(FIRST.into()), 2)).await;
    assert_eq!(r.done().cached_tokens, 0);
    // A probe sharing most of that prompt, but not all of it, learns nothing.
    let probe = &FIRST[..FIRST.len() - 3];
    let p = run(&engine, greedy(pooled(None), Input::Text(probe.into()), 2)).await;
    assert_eq!(p.done().cached_tokens, 0);
    assert_eq!(engine.session_ids().await.unwrap().len(), 2);
    // The whole prompt continued: reused.
    let more = format!("{FIRST}{} More.", r.text);
    let c = run(&engine, greedy(pooled(None), Input::Text(more), 2)).await;
    assert!(c.done().cached_tokens > 0, "{c:?}");
}

#[tokio::test]
async fn pooled_requests_carry_their_whole_prompt() {
    let Some((_dir, engine)) = setup(2) else {
        return;
    };
    for input in [Input::Append("more".into()), Input::UserTurn("hi".into())] {
        let e = engine
            .generate(greedy(pooled(Some("u")), input, 2))
            .await
            .unwrap_err();
        assert!(e.is_invalid_input(), "{e}");
    }
    assert!(engine.session_ids().await.unwrap().is_empty());
}

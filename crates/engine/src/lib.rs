//! statelm-engine: the streaming inference engine.
//!
//! An [`Engine`] owns sessions — each a model [`statelm_model::State`] plus its conversation
//! history — and runs generations on them, streaming [`Event`]s: tokens, and everything that
//! happens to the context (trims under the token budget, spills, restores and evictions under
//! memory pressure). Nothing is dropped silently.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use futures::StreamExt;
//! use statelm_engine::{Engine, EngineConfig, Event, GenerateRequest, Input, SessionOptions};
//! let model = statelm_model::Model::load("gemma-3-270m-q4_k_m.gguf", &Default::default())?;
//! let engine = Engine::start(model, EngineConfig::default());
//! let session = engine.create_session(SessionOptions::default()).await?;
//! let req = GenerateRequest::new(session, Input::Text("The capital of France is".into()), 16);
//! let mut stream = engine.generate(req).await?;
//! while let Some(event) = stream.next().await {
//!     match event? {
//!         Event::Token { text, .. } | Event::Text { text } => print!("{text}"),
//!         Event::Done(stats) => println!("\n{stats:?}"),
//!         other => eprintln!("{other:?}"),
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! Design:
//! - **One engine thread** owns the session table and runs all compute (`model.forward`), so
//!   the async runtime never blocks; handles talk to it over a bounded command channel.
//! - **Token-interleaved**: the thread runs one step (a prefill chunk or one decoded token) of
//!   one active generation, then turns to the next (round-robin). Requests on one session run
//!   one at a time; a second one gets [`EngineError::SessionBusy`].
//! - **Reuse**: a session keeps its State; a new full prompt ([`Input::Text`], [`Input::Chat`],
//!   [`Input::Tokens`]) computes only what differs from what the session holds.
//! - **Budget**: before the context passes the session's token budget, its middle is dropped
//!   (pinned prefix kept) and [`Event::ContextTrimmed`] says so.
//! - **Memory pressure**: [`EngineHandle::memory_warning`] (or an attached governor monitor)
//!   spills idle sessions, lowers budgets, hard-trims and evicts, following the governor's
//!   policy; a memory ceiling adds admission control ([`EngineError::OverMemory`]).
#![forbid(unsafe_code)]

mod actor;
mod compute;
mod config;
mod config_patch;
mod core;
mod defaults;
mod error;
mod event_json;
mod events;
pub mod faults;
mod handle;
mod host;
mod info;
mod job;
mod memory;
mod plan;
mod reasoning;
mod request;
pub mod sampling;
mod sessions;
pub mod speculate;
mod text;
pub mod tools;

use memory::{budget, fit, footprint, pressure, tier};
pub use sampling::{dry, rng, stop};
use sessions::{durable, history_log, pool, restore, session, snapshot};
use speculate::draft_policy;
pub use speculate::lookup;

pub use config::{EngineConfig, RealMemory, DEFAULT_PRESSURE_HOLD, MAX_QUEUE, MIN_TOKEN_BUDGET};
pub use config_patch::ConfigPatch;
pub use defaults::{ChatDefaults, CHAT_DRY_MULTIPLIER, CHAT_MAX_TOKENS, CHAT_TEMPERATURE};
pub use durable::{validate_session_name, MAX_SESSION_NAME};
pub use error::EngineError;
pub use events::{DoneStats, Event, RequestId, SessionId, StopReason, TrimMethod};
pub use handle::{Engine, EngineHandle, GenerationStream, WeakEngineHandle};
pub use host::{Lifecycle, Thermal};
pub use info::{EngineStats, RequestSample, SessionInfo};
pub use pool::{PoolRequest, Target, Tenant};
pub use request::{Conversation, Encoded, GenerateRequest, Input, SessionOptions};
pub use sampling::check::{InvalidParam, MAX_BREAKERS, MAX_WINDOW};
pub use sampling::{Grammar, SamplingParams};
pub use speculate::MAX_LOOKUP;
pub use statelm_governor::{Policy, PressureLevel};
pub use statelm_model::{LoadOptions, Model};
pub use statelm_tokenizer::{ChatMessage, TemplateVars};
pub use tier::{apply_device_tier, device_tier, kv_type_of};

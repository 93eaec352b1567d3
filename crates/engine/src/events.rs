//! What a generation streams back: tokens, memory events and the final statistics.

use std::time::Duration;

/// Identifies a session of one engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct SessionId(pub u64);

impl std::fmt::Display for SessionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Identifies one generation request (see [`crate::EngineHandle::cancel`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct RequestId(pub u64);

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// How tokens were dropped from a session's context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum TrimMethod {
    /// The kept keys were re-rotated in place (or only not-yet-computed prompt tokens were
    /// dropped): nothing was recomputed.
    Shift,
    /// The kept tokens were recomputed (KV cache type or sliding-window layers made an in-place
    /// shift invalid).
    Reprefill,
}

/// Why a generation ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub enum StopReason {
    /// The model produced an end-of-generation token.
    Eog,
    /// A stop string appeared (the text before it was streamed, the string itself was not).
    StopString(String),
    /// `max_tokens` tokens were generated.
    MaxTokens,
    /// The request was cancelled ([`crate::EngineHandle::cancel`] or the stream was dropped).
    Cancelled,
    /// Memory pressure evicted the session's cache and the generation could not go on. A
    /// running generation is paused by an eviction instead, and goes on when the pressure
    /// eases, so the engine no longer ends one this way; the reason stays for front ends
    /// and the C ABI.
    Evicted,
    /// The answer started to repeat itself back to back and the loop guard ended it
    /// ([`crate::SamplingParams::loop_guard`]).
    Repetition,
    /// The answer completed its constraint ([`crate::SamplingParams::grammar`]): the grammar
    /// allows no further token.
    Complete,
}

impl StopReason {
    /// The reason's name in every front end's output (`eog`, `stop_string`, `max_tokens`,
    /// `cancelled`, `evicted`, `repetition`, `complete`).
    pub fn name(&self) -> &'static str {
        match self {
            StopReason::Eog => "eog",
            StopReason::StopString(_) => "stop_string",
            StopReason::MaxTokens => "max_tokens",
            StopReason::Cancelled => "cancelled",
            StopReason::Evicted => "evicted",
            StopReason::Repetition => "repetition",
            StopReason::Complete => "complete",
        }
    }
}

/// Statistics of a finished generation (the last event of every successful stream).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DoneStats {
    /// Why it ended.
    pub stop_reason: StopReason,
    /// Tokens of the full prompt context of this request (history plus new input).
    pub prompt_tokens: usize,
    /// Prompt tokens that were not recomputed: reused from the session's State.
    pub cached_tokens: usize,
    /// Tokens computed before the first new token: the new part of the prompt, plus any kept
    /// tokens a trim had to recompute. Without trimming, `prompt_tokens - cached_tokens`.
    pub prefilled_tokens: usize,
    /// Tokens generated (end-of-generation tokens are not counted).
    pub generated_tokens: usize,
    /// From the request reaching the engine to the first token (or to the end, if none).
    pub time_to_first_token: Duration,
    /// Decode speed after the first token (0 when fewer than two tokens were generated).
    pub decode_tokens_per_s: f64,
    /// Tokens drafted by prompt lookup and checked in a batch (0 when lookup is off).
    pub drafted_tokens: usize,
    /// Drafted tokens that were what the model would generate (generated without a forward
    /// pass of their own).
    pub accepted_tokens: usize,
}

/// One item of a [`crate::GenerationStream`].
///
/// Concatenating the `text` of every [`Event::Token`] and [`Event::Text`] gives the generated
/// text. Memory events say what happened to the session's context; nothing is dropped silently.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub enum Event {
    /// A generated token and the text it released. The text may be empty (an incomplete UTF-8
    /// character, or text held back while it could still become a stop string) or contain text
    /// held back from earlier tokens.
    Token {
        /// Token id.
        id: u32,
        /// Text released with this token.
        text: String,
    },
    /// Text released without a token: what was held back when the generation ended (a partial
    /// stop string that never completed, or an incomplete character). Rare; never skip it.
    Text {
        /// The released text.
        text: String,
    },
    /// Reasoning text: what a thinking model released inside a `<think>…</think>` block, apart
    /// from the answer (the [`Event::Token`] of the same token follows, with no text).
    Reasoning {
        /// The released reasoning text.
        text: String,
    },
    /// Tokens were dropped from the middle of the context (token budget or memory pressure).
    ContextTrimmed {
        /// Tokens dropped.
        dropped: usize,
        /// Tokens kept (the pinned prefix and the most recent ones).
        kept: usize,
        /// Why, in words.
        reason: String,
        /// How.
        method: TrimMethod,
    },
    /// The session's cache was dropped under memory pressure; its conversation history was
    /// kept and is recomputed (within the token budget) when needed. A generation under way
    /// is paused while the pressure stays critical (at most
    /// [`crate::EngineConfig::pressure_hold`]), then recomputes its prompt and the answer so
    /// far and goes on with the same sampler: the rest of the answer follows this event.
    CacheEvicted {
        /// Why, in words.
        reason: String,
    },
    /// The session's State was written to disk and freed while the session was idle.
    Spilled {
        /// Why, in words.
        reason: String,
    },
    /// The session's State was read back from disk for this request.
    Restored,
    /// A durable session was resumed from its files after the process stopped (or was
    /// killed): the history from its log, the KV from its snapshot as far as it matches that
    /// history, and the rest re-prefilled with this request. Delivered at the start of the
    /// session's first stream after [`crate::EngineHandle::open_session`].
    Resumed {
        /// The session's name.
        name: String,
        /// Tokens of history recovered from the log (every completed turn).
        history_tokens: usize,
        /// Tokens whose KV was restored from the snapshot.
        restored_tokens: usize,
        /// Tokens recomputed (re-prefilled) because the snapshot did not hold them.
        reprefilled_tokens: usize,
        /// What was done, in words (including a damaged log tail or an ignored snapshot).
        reason: String,
    },
    /// The generation finished; always the last event of a successful stream.
    Done(DoneStats),
    /// A tool call began ([`crate::tools`]): its index in this answer, its id (`call_…`) and
    /// the function's name.
    ToolCallStart {
        /// Index of the call in this answer (0, 1, ...).
        index: usize,
        /// The call's id, for the `tool` message that answers it.
        id: String,
        /// The function.
        name: String,
    },
    /// More of a tool call's arguments, as they are generated (JSON text; the pieces of one
    /// call concatenate to its arguments).
    ToolCallArguments {
        /// Index of the call.
        index: usize,
        /// The next piece.
        text: String,
    },
    /// A tool call ended; its arguments are a complete JSON value.
    ToolCallEnd {
        /// Index of the call.
        index: usize,
        /// The whole arguments.
        arguments: String,
    },
    /// The answer ended inside a tool call (max tokens, a stop string, a cancellation): the
    /// call is incomplete and must not be run.
    ToolCallUnfinished {
        /// Index of the call.
        index: usize,
        /// What was written of it.
        text: String,
    },
}

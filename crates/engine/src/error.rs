//! The engine's error type.

use crate::events::SessionId;

/// Everything that can go wrong in the engine. Errors of a generation arrive through its
/// stream (as its last item).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// No session with this id (never created, closed, or from another engine).
    #[error("unknown session {0}")]
    UnknownSession(SessionId),
    /// The session is generating; requests on one session run one at a time.
    #[error("session {0} is busy with another request")]
    SessionBusy(SessionId),
    /// The engine has stopped (or could not start).
    #[error("the engine is shutting down")]
    ShuttingDown,
    /// `max_sessions` sessions exist already.
    #[error("too many sessions (the limit is {max})")]
    TooManySessions {
        /// The configured limit.
        max: usize,
    },
    /// The model failed.
    #[error(transparent)]
    Model(#[from] statelm_model::ModelError),
    /// Tokenizing the input or rendering the chat template failed.
    #[error(transparent)]
    Tokenizer(#[from] statelm_tokenizer::TokenizerError),
    /// The prompt cannot be made to fit the session's token budget, even by trimming.
    #[error("prompt of {prompt_tokens} tokens cannot fit a token budget of {budget} (pinned prefix {pinned})")]
    PromptTooLong {
        /// Tokens in the prompt.
        prompt_tokens: usize,
        /// The session's token budget.
        budget: usize,
        /// Its pinned prefix.
        pinned: usize,
    },
    /// The request has no tokens to run (empty prompt on an empty session).
    #[error("empty prompt: there is nothing to generate from")]
    EmptyPrompt,
    /// Admission control: the memory ceiling cannot hold this even after spilling idle sessions.
    #[error(
        "over the memory ceiling: {what} needs {needed} bytes, {used} of {ceiling} bytes are in use \
         after spilling every idle session"
    )]
    OverMemory {
        /// What was refused (`"new session"`, `"prefill of 512 tokens"`).
        what: String,
        /// Bytes it needs.
        needed: u64,
        /// Bytes accounted as used (weights and resident states).
        used: u64,
        /// The ceiling.
        ceiling: u64,
    },
    /// Invalid options or request fields.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// A session name that is not a plain identifier (see
    /// [`crate::validate_session_name`]).
    #[error("invalid session name {name:?}: {reason}")]
    InvalidSessionName {
        /// The name given (at most 80 characters of it).
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A session file is not valid.
    #[error("invalid session file: {0}")]
    BadSessionFile(String),
    /// The constraint's grammar engine failed during the generation (a grammar too complex
    /// for its limits at this point of the text, or a token it did not allow).
    #[error("constraint failed: {0}")]
    Constraint(String),
    /// A broken engine invariant (a bug); the request was abandoned, the session kept.
    #[error("internal engine error: {0}")]
    Internal(String),
    /// Reading or writing a file failed.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

impl EngineError {
    /// Whether the caller's input is at fault (a bad request, prompt, token or name) rather
    /// than the engine's state or resources: what front ends report as an invalid argument.
    pub fn is_invalid_input(&self) -> bool {
        matches!(
            self,
            EngineError::EmptyPrompt
                | EngineError::InvalidRequest(_)
                | EngineError::InvalidSessionName { .. }
                | EngineError::Tokenizer(_)
                | EngineError::Model(statelm_model::ModelError::InvalidToken { .. })
        )
    }
}

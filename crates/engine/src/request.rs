//! What callers send: session options and generation requests.

use crate::pool::Target;
use crate::sampling::SamplingParams;
use statelm_tokenizer::{ChatMessage, TemplateVars};

/// Options of a new session.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionOptions {
    /// Token budget of this session (`None`: [`crate::EngineConfig::token_budget`]); capped at
    /// the state capacity. When the context would pass it, the middle is trimmed.
    pub token_budget: Option<usize>,
    /// Tokens at the start of the context that trimming never drops. `None`: for chat input the
    /// rendered system message, for text input the `system_prompt`, else 0.
    pub pinned_prefix: Option<usize>,
    /// A system prompt. For [`Input::Chat`] it is inserted as the first `system` message when
    /// the conversation has none (and so for an [`Input::UserTurn`] starting the session); for
    /// [`Input::Text`] it is prepended to the text, and for [`Input::Append`] to the first text
    /// of the session. [`Input::Tokens`] ignore it.
    pub system_prompt: Option<String>,
    /// Variables for the chat template in this session (`chat_template_kwargs`, such as
    /// `enable_thinking`): every [`Input::Chat`] and [`Input::UserTurn`] is rendered with them,
    /// under a [`Conversation`]'s own variables.
    pub template_vars: TemplateVars,
}

/// A conversation to render with the model's chat template.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conversation {
    /// The messages, oldest first.
    pub messages: Vec<ChatMessage>,
    /// Template variables of this request (`chat_template_kwargs`); they take precedence over
    /// the session's ([`SessionOptions::template_vars`]).
    pub vars: TemplateVars,
    /// Functions the answer may call ([`crate::tools`]): shown to the model, enforced by a
    /// constraint, and parsed out of the answer as tool-call events.
    pub tools: Option<crate::tools::Tools>,
}

impl From<Vec<ChatMessage>> for Conversation {
    fn from(messages: Vec<ChatMessage>) -> Conversation {
        Conversation {
            messages,
            vars: TemplateVars::new(),
            tools: None,
        }
    }
}

impl Input {
    /// The tools of a chat input (also one encoded ahead).
    pub fn tools(&self) -> Option<&crate::tools::Tools> {
        match self {
            Input::Chat(c) => c.tools.as_ref(),
            Input::Encoded(e) => e.input.tools(),
            _ => None,
        }
    }
}

/// The input of a generation request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// The full prompt of the session. What the session already holds is reused as far as it
    /// matches; the rest is computed.
    Text(String),
    /// The full conversation, rendered with the model's chat template (with the generation
    /// prompt). As with `Text`, the matching start is reused: a new turn computes only itself.
    Chat(Conversation),
    /// Text appended to what the session holds (its history and the last generation).
    Append(String),
    /// The next user message of the conversation the session holds — the chat turn-diffing
    /// every front end shares. On an empty session it is the conversation's first message,
    /// rendered with the chat template (the session's system prompt first, pinned); after
    /// that only its own turn is computed (the template's turn texts around the message), so a
    /// conversation continues — trimmed or not — without resending it. Refused
    /// ([`crate::EngineError::InvalidRequest`]) for a template that gives no turn texts.
    UserTurn(String),
    /// The full context as token ids (reused as far as it matches).
    Tokens(Vec<u32>),
    /// A `Text` or `Chat` input tokenized ahead of submission by [`Encoded::new`] — off the
    /// engine thread, by a front end that needs the tokens itself (the server picks sessions
    /// and checks sizes with them), so the prompt is tokenized once.
    Encoded(Box<Encoded>),
}

/// A prompt tokenized ahead of submission (see [`Input::Encoded`]). The engine uses its tokens
/// when the session's system prompt is the one it was encoded with, else encodes the original
/// input again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    pub(crate) input: Input,
    pub(crate) system_prompt: Option<String>,
    pub(crate) template_vars: TemplateVars,
    pub(crate) tokens: Vec<u32>,
    pub(crate) pinned: Option<usize>,
}

impl Encoded {
    /// Tokenizes `input` (`Text` or `Chat`) exactly as the engine would for a session whose
    /// system prompt is `system_prompt`. Other inputs are refused (`Append` depends on the
    /// session's history; `Tokens` need no encoding).
    pub fn new(
        tok: &statelm_tokenizer::Tokenizer,
        input: Input,
        system_prompt: Option<String>,
    ) -> Result<Encoded, crate::EngineError> {
        let opts = SessionOptions {
            system_prompt,
            ..SessionOptions::default()
        };
        Encoded::for_session(tok, input, &opts)
    }

    /// Tokenizes `input` exactly as the engine would for a new session with options `opts`
    /// (its system prompt and template variables).
    pub fn for_session(
        tok: &statelm_tokenizer::Tokenizer,
        input: Input,
        opts: &SessionOptions,
    ) -> Result<Encoded, crate::EngineError> {
        if !matches!(input, Input::Text(_) | Input::Chat(_)) {
            return Err(crate::EngineError::InvalidRequest(
                "only text and chat inputs can be encoded ahead".into(),
            ));
        }
        let t = crate::text::tokenize(tok, &input, opts, true, tok.vocab_size())?;
        Ok(Encoded {
            input,
            system_prompt: opts.system_prompt.clone(),
            template_vars: opts.template_vars.clone(),
            tokens: t.prompt.into_tokens(),
            pinned: t.pinned,
        })
    }

    /// The prompt's tokens.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }
}

/// A generation request.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateRequest {
    /// The session to run in: a session id, or [`crate::PoolRequest`] for the one the engine
    /// picks from its pool.
    pub session: Target,
    /// The prompt.
    pub input: Input,
    /// How to pick tokens.
    pub sampling: SamplingParams,
    /// Generation stops before any of these strings; they are never streamed.
    pub stop: Vec<String>,
    /// Generation stops after this many tokens (0: only prefill the prompt).
    pub max_tokens: usize,
}

impl GenerateRequest {
    /// A request with default sampling, no stop strings and at most `max_tokens` tokens.
    pub fn new(session: impl Into<Target>, input: Input, max_tokens: usize) -> GenerateRequest {
        GenerateRequest {
            session: session.into(),
            input,
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            max_tokens,
        }
    }
}

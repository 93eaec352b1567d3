//! One running generation: its phase, its sampler and stop rules, and the events on their way
//! to its stream.

use crate::error::EngineError;
use crate::events::{Event, RequestId, SessionId};
use crate::plan::Feed;
use crate::request::{GenerateRequest, Input};
use crate::sampling::Sampler;
use crate::stop::StopMatcher;
use statelm_model::Logits;
use statelm_tokenizer::StreamingDetokenizer;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;

/// The sending half of a stream.
pub(crate) type EventTx = mpsc::Sender<Result<Event, EngineError>>;

/// Where a generation is.
#[derive(Debug)]
pub(crate) enum Phase {
    /// Not started: pending events, restore, tokenize, plan.
    Start,
    /// Feeding tokens to the State (the prompt, a re-prefill, or the last sampled token).
    Prefill(Feed),
    /// Logits of the last token are ready: sample the next one.
    Decode(Logits),
    /// Finished; only its queued events remain to be delivered.
    Finished,
}

/// A generation in the engine.
pub(crate) struct Job {
    /// Its id.
    pub id: RequestId,
    /// Its session.
    pub session: SessionId,
    /// Set by `cancel()` or by dropping the stream.
    pub cancel: Arc<AtomicBool>,
    tx: EventTx,
    outbox: VecDeque<Result<Event, EngineError>>,
    /// Where it is.
    pub phase: Phase,
    /// The logits buffer, reused by every forward call of this job (it is n_vocab floats:
    /// 1 MiB for Gemma 3).
    pub logits: Logits,
    /// The request's input (taken at the start).
    pub input: Option<Input>,
    /// Picks tokens.
    pub sampler: Sampler,
    /// Holds back text that could become a stop string.
    pub stop: StopMatcher,
    /// Turns tokens into text.
    /// Where thinking blocks start and end (set with the prompt).
    pub reasoning: crate::reasoning::ReasoningSplit,
    pub detok: Option<StreamingDetokenizer>,
    /// Token limit.
    pub max_tokens: usize,
    /// Tokens generated so far.
    pub generated: usize,
    /// Tokens of the prompt context.
    pub prompt_tokens: usize,
    /// Prompt tokens reused from the State.
    pub cached_tokens: usize,
    /// Prompt tokens computed (including recomputed kept tokens).
    pub prefilled_tokens: usize,
    /// The session's history after the request was planned, and the length below which it
    /// must not be cut if the prompt is abandoned half-way.
    pub history_floor: Option<usize>,
    /// The prompt has been fully computed.
    pub prompt_done: bool,
    /// Context index in the State where the answer begins (kept current across trims).
    pub answer_start: usize,
    /// Reads tool calls out of the answer (the request offers tools).
    pub tools: Option<crate::tools::ToolCallParser>,
    /// Prompt-lookup speculation (`None`: off).
    pub spec: Option<crate::speculate::Speculation>,
    /// When the engine received the request.
    pub received: Instant,
    /// When the first token was sampled.
    pub first_token: Option<Instant>,
    /// When the latest token was sampled.
    pub last_token: Option<Instant>,
    /// Paused by an eviction: it waits while the pressure is critical, until this moment at
    /// the latest, then recomputes what it had and goes on.
    pub paused_until: Option<Instant>,
}

impl Job {
    /// A job for `req`, in `session`, streaming into `tx`.
    pub fn new(
        id: RequestId,
        session: SessionId,
        req: GenerateRequest,
        tx: EventTx,
        cancel: Arc<AtomicBool>,
        breakers: Arc<crate::dry::Breakers>,
        constraint: Option<crate::sampling::Constraint>,
    ) -> Job {
        let mut sampler = Sampler::with_breakers(req.sampling, breakers);
        if let Some(c) = constraint {
            sampler.constrain(c);
        }
        Job {
            id,
            session,
            cancel,
            tx,
            outbox: VecDeque::new(),
            phase: Phase::Start,
            logits: Logits::default(),
            input: Some(req.input),
            spec: (sampler.params().lookup > 0).then(|| {
                let p = sampler.params();
                crate::speculate::Speculation::new(p.lookup, p.ngram_max)
            }),
            sampler,
            tools: None,
            stop: StopMatcher::new(&req.stop),
            detok: None,
            reasoning: crate::reasoning::ReasoningSplit::default(),
            max_tokens: req.max_tokens,
            generated: 0,
            prompt_tokens: 0,
            cached_tokens: 0,
            prefilled_tokens: 0,
            history_floor: None,
            prompt_done: false,
            answer_start: 0,
            received: Instant::now(),
            first_token: None,
            last_token: None,
            paused_until: None,
        }
    }

    /// Queues an event for the stream.
    pub fn emit(&mut self, ev: Event) {
        self.outbox.push_back(Ok(ev));
    }

    /// Queues an error for the stream.
    pub fn emit_err(&mut self, e: EngineError) {
        self.outbox.push_back(Err(e));
    }

    /// Sends what the stream has room for; true when everything queued was delivered (or the
    /// stream is gone, so there is nobody to deliver to).
    pub fn flush(&mut self) -> bool {
        while let Some(item) = self.outbox.pop_front() {
            match self.tx.try_send(item) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(item)) => {
                    self.outbox.push_front(item);
                    return false;
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    self.outbox.clear();
                    return true;
                }
            }
        }
        true
    }

    /// Whether the request was cancelled or its stream dropped.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed) || self.tx.is_closed()
    }

    /// Whether it has finished.
    pub fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Finished)
    }

    /// Whether it can run a step now: not finished, and its stream has taken every event.
    pub fn is_runnable(&self) -> bool {
        !self.is_finished() && self.outbox.is_empty()
    }

    /// Whether an eviction of its cache can pause it instead of ending it: any generation
    /// not finished. What the cache held (prompt, and the answer so far) is recomputed when
    /// the pressure eases and generation goes on with the same sampler, so the user sees one
    /// `CacheEvicted` and then the rest of the answer.
    pub fn is_resumable(&self) -> bool {
        !self.is_finished()
    }

    /// Whether it is paused by an eviction and must still wait at `now`, with the pressure at
    /// `level` (it waits only while the pressure is critical, and at most until its deadline).
    pub fn is_waiting(&self, level: statelm_governor::PressureLevel, now: Instant) -> bool {
        level == statelm_governor::PressureLevel::Critical
            && self.paused_until.is_some_and(|t| now < t)
    }

    /// Whether it is finished and everything was delivered.
    pub fn is_drained(&self) -> bool {
        self.is_finished() && (self.outbox.is_empty() || self.tx.is_closed())
    }
}

//! The steps of a generation, run on the engine thread: start (restore, tokenize, plan reuse
//! and trimming), prefill one chunk, decode one token, finish.
//!
//! Each call to [`step`] does a bounded amount of work — at most one prefill chunk or one
//! decoded token — so the engine can rotate between sessions.

use crate::budget;
use crate::core::Core;
use crate::error::EngineError;
use crate::events::{DoneStats, Event, StopReason, TrimMethod};
use crate::info::RequestSample;
use crate::job::{Job, Phase};
use crate::plan::{plan_reuse, Feed, ReusePlan};
use crate::reasoning::Route;
use crate::restore::{prepare_session, Prepared};
use crate::session::Session;
use crate::speculate::Speculation;
use crate::stop::StopOutcome;
use crate::text;
use statelm_model::{ForwardOptions, Logits, LogitsMode, ModelError, State};
use std::time::{Duration, Instant};

/// What a step leads to.
enum Next {
    Continue(Phase),
    Stop(StopReason),
}

/// Runs one step of `job` on its session `s`.
pub(crate) fn step(job: &mut Job, s: &mut Session, core: &mut Core) {
    if job.is_finished() {
        return;
    }
    if job.is_cancelled() {
        return finish(job, s, core, StopReason::Cancelled);
    }
    let result = match std::mem::replace(&mut job.phase, Phase::Finished) {
        Phase::Start => start(job, s, core),
        Phase::Prefill(feed) => prefill(job, s, core, feed),
        Phase::Decode(logits) => decode(job, s, core, logits),
        Phase::Finished => return,
    };
    match result {
        Ok(Next::Continue(phase)) => job.phase = phase,
        Ok(Next::Stop(reason)) => finish(job, s, core, reason),
        Err(e) => fail(job, s, core, e),
    }
}

/// Moves re-prefill tokens left pending by a trim into the feed, so they are computed in
/// chunks (cancellable, interleaved). True if there were any.
fn absorb_pending(state: &mut State, feed: &mut Feed) -> bool {
    if state.pending_reprefill() == 0 {
        return false;
    }
    let kept = state.tokens().to_vec();
    state.clear();
    feed.insert_refeed(&kept);
    true
}

fn missing_state() -> EngineError {
    EngineError::Internal("the session's State is not resident".into())
}

/// First step: events, restore, tokenize, plan reuse and budget, admission.
fn start(job: &mut Job, s: &mut Session, core: &mut Core) -> Result<Next, EngineError> {
    s.fit = None;
    // A State recomputed instead of restored is planned from the history like any other.
    prepare_session(job, s, core)?;
    let input = job.input.take().ok_or(EngineError::EmptyPrompt)?;
    let model = core.model.clone();
    let tok = model.tokenizer();
    let n_vocab = core.model.config().n_vocab;
    let tk = text::tokenize(tok, &input, &s.opts, s.history.is_empty(), n_vocab)?;
    let appending = matches!(
        input,
        crate::request::Input::Append(_) | crate::request::Input::UserTurn(_)
    );
    s.pinned = match (s.opts.pinned_prefix, tk.pinned) {
        (Some(p), _) | (None, Some(p)) => p,
        (None, None) if appending && !s.history.is_empty() => s.pinned,
        // No system prompt of its own: pin what comes before the first user turn (a
        // template's default system message), if the prompt has turns.
        (None, None) => preamble_len(core.turn_header.as_deref(), &tk.prompt),
    };
    if plan_starts_with_bos(tok, &tk.prompt, &s.history) {
        // Models need their BOS token: trimming never drops it.
        s.pinned = s.pinned.max(1);
    }
    let old_len = s.history.len();
    let state_len = s.state_len();
    let tail = if s.trimmed { state_tail(s) } else { 0 };
    let plan = plan_reuse(
        &s.history,
        s.evaluated,
        s.trimmed,
        (state_len, tail),
        tk.prompt,
    )?;
    let (trim, budget) = plan_and_admit(job, s, core, &plan)?;
    let floor = plan.history.starts_with(&s.history).then_some(old_len);
    job.history_floor = Some(floor.unwrap_or(0));
    let feed = apply_plan(job, s, core, plan, trim, budget)?;
    job.detok = Some(text::continuation_detokenizer(tok));
    job.reasoning = crate::reasoning::ReasoningSplit::new(tok, &s.history);
    Ok(Next::Continue(Phase::Prefill(feed)))
}

/// Plans the trim that fits `plan` in the session's budget, and admits it. When admission
/// finds no room even after spilling the others, the budget is lowered to what fits in memory
/// and the plan made again ([`crate::fit`]); only a context that cannot fit even then is
/// refused. Returns the trim and the budget in force.
fn plan_and_admit(
    job: &Job,
    s: &mut Session,
    core: &mut Core,
    plan: &ReusePlan,
) -> Result<(Option<budget::PrefillTrim>, usize), EngineError> {
    let feed_len = plan.history.len() - plan.feed_from;
    let reserve = job.max_tokens.max(1);
    let mut refused = None;
    loop {
        let budget = s.effective_budget(core.factor);
        let turns = if plan.state_keep + feed_len > budget {
            let state = s.state.as_ref().map_or(&[][..], |st| st.tokens());
            let kept = &state[..plan.state_keep.min(state.len())];
            let feed = &plan.history[plan.feed_from..];
            text::context_turns(core.turn_header.as_deref(), kept, feed)
        } else {
            Vec::new()
        };
        let planned =
            budget::plan_prefill(plan.state_keep, feed_len, s.pinned, budget, reserve, &turns);
        let trim = match (planned, refused.take()) {
            (Ok(t), _) => t,
            (Err(_), Some(e)) => {
                // Not even the fit holds it: the refusal stands.
                return Err(e);
            }
            (Err(_), None) => {
                return Err(EngineError::PromptTooLong {
                    prompt_tokens: plan.history.len(),
                    budget,
                    pinned: s.pinned,
                })
            }
        };
        match admit(job, s, core, plan, trim.map(|t| t.kept)) {
            Ok(()) => return Ok((trim, budget)),
            Err(e) if s.fit.is_none() => match core.fit_after(s, &e, draft_rows(job, core)) {
                Some(fit) => {
                    s.fit = Some(fit);
                    refused = Some(e);
                }
                None => return Err(e),
            },
            Err(e) => return Err(e),
        }
    }
}

/// Bytes of logits rows prompt lookup's verification needs beyond the last one.
fn draft_rows(job: &Job, core: &Core) -> u64 {
    let drafts = job.spec.as_ref().map_or(0, |sp| sp.policy.max());
    (drafts * core.model.config().n_vocab * 4) as u64
}

/// How many of the State's last tokens are the history's last evaluated tokens (after its
/// pinned prefix).
fn state_tail(s: &Session) -> usize {
    let Some(state) = s.state.as_ref() else {
        return 0;
    };
    let t = state.tokens();
    let evaluated = &s.history[..s.evaluated.min(s.history.len())];
    let most = t.len().saturating_sub(s.pinned.min(t.len()));
    t.iter()
        .rev()
        .zip(evaluated.iter().rev())
        .take(most)
        .take_while(|(a, b)| a == b)
        .count()
}

/// Tokens before the first user turn of `prompt` (0 without one).
fn preamble_len(header: Option<&[u32]>, prompt: &crate::plan::Prompt) -> usize {
    let (crate::plan::Prompt::Full(t) | crate::plan::Prompt::Append(t)) = prompt;
    header
        .filter(|h| !h.is_empty())
        .and_then(|h| t.windows(h.len()).position(|w| w == h))
        .unwrap_or(0)
}

/// Whether the context after `prompt` starts with the tokenizer's BOS token.
fn plan_starts_with_bos(
    tok: &statelm_tokenizer::Tokenizer,
    prompt: &crate::plan::Prompt,
    history: &[u32],
) -> bool {
    let first = match prompt {
        crate::plan::Prompt::Full(t) => t.first(),
        crate::plan::Prompt::Append(t) => history.first().or(t.first()),
    };
    first.is_some() && first.copied() == tok.bos_id()
}

/// Admission control for the prefill and the generation that follows.
fn admit(
    job: &Job,
    s: &Session,
    core: &mut Core,
    plan: &ReusePlan,
    trimmed_to: Option<usize>,
) -> Result<(), EngineError> {
    let budget = s.effective_budget(core.factor);
    let after = trimmed_to.unwrap_or(plan.state_keep + plan.history.len() - plan.feed_from);
    let peak = (after + job.max_tokens).min(budget);
    // Prompt lookup's verification returns a logits row per drafted token as well.
    let drafts = job.spec.as_ref().map_or(0, |sp| sp.policy.max());
    let needed = core.growth(s, peak) + draft_rows(job, core);
    let mut what = format!(
        "a prefill of {} tokens",
        plan.history.len() - plan.feed_from
    );
    if drafts > 0 {
        what.push_str(&format!(" with logits for {drafts} drafted tokens"));
    }
    core.make_room(needed, s.resident_bytes(), &what)
}

/// Truncates and trims the State as planned; returns the feed. Emits `ContextTrimmed`.
fn apply_plan(
    job: &mut Job,
    s: &mut Session,
    core: &mut Core,
    plan: ReusePlan,
    trim: Option<budget::PrefillTrim>,
    budget: usize,
) -> Result<Feed, EngineError> {
    let state = s.state.as_mut().ok_or_else(missing_state)?;
    if plan.state_keep < state.len() {
        state.truncate(plan.state_keep);
    }
    let f0 = plan.feed_from;
    let mut feed = Feed::new(f0);
    let mut trimmed = s.trimmed && plan.state_keep > 0;
    match trim {
        None => feed.push_history(f0, &plan.history[f0..]),
        Some(t) => {
            if t.keep_prefix + t.keep_suffix < state.len() {
                state.retain(t.keep_prefix, t.keep_suffix);
            }
            feed.push_history(f0, &plan.history[f0..f0 + t.feed_head]);
            let tail = f0 + t.feed_head + t.feed_skip;
            feed.push_history(tail, &plan.history[tail..]);
            trimmed = true;
        }
    }
    let reprefill = absorb_pending(state, &mut feed);
    if let Some(t) = trim {
        core.counters.trims += 1;
        let why = match &s.fit {
            Some(fit) => fit.why.clone(),
            None => format!(
                "the context of {} tokens would pass the token budget of {budget}",
                t.dropped + t.kept
            ),
        };
        job.emit(crate::fit::trimmed_event(&t, &why, reprefill));
    }
    job.cached_tokens = state.len();
    job.prompt_tokens = plan.history.len();
    job.prefilled_tokens = feed.len();
    s.set_history(plan.history);
    s.evaluated = f0;
    s.trimmed = trimmed;
    Ok(feed)
}

/// Feeds the next chunk of `feed`.
fn prefill(
    job: &mut Job,
    s: &mut Session,
    core: &mut Core,
    mut feed: Feed,
) -> Result<Next, EngineError> {
    if s.is_spilled() {
        if let Prepared::Recompute(context, trimmed) = prepare_session(job, s, core)? {
            // Under way: what the State held goes back in front of the rest of the feed.
            feed.insert_refeed(&context);
            s.trimmed = trimmed;
        }
    }
    if let Some(state) = s.state.as_mut() {
        absorb_pending(state, &mut feed);
    }
    if let Err(e) = check_growth(s, core, feed.remaining().min(core.chunk)) {
        fit_under_way(job, s, core, &mut feed, e)?;
    }
    let state = s.state.as_mut().ok_or_else(missing_state)?;
    let chunk = feed.next_chunk(core.chunk);
    let last = chunk.len() == feed.remaining();
    let want_logits = last && (job.prompt_done || job.max_tokens > 0);
    // Drafts end the last chunk: their rows are wanted too.
    let drafts = match &job.spec {
        Some(sp) if last => sp.pending.len(),
        _ => 0,
    };
    let (before, batch, started) = (state.len(), chunk.len(), Instant::now());
    let mut logits = std::mem::take(&mut job.logits);
    let result = core.model.forward_into(
        &mut core.scratch,
        state,
        chunk,
        ForwardOptions {
            logits: Some(match (want_logits, drafts) {
                (false, _) => LogitsMode::None,
                (true, 0) => LogitsMode::Last,
                (true, d) => LogitsMode::LastN(d + 1),
            }),
            trace: None,
            cancel: Some(&job.cancel),
        },
        &mut logits,
    );
    if result.is_err() && drafts > 0 {
        // No draft cell may outlive a failed or cancelled check.
        let keep = (before + chunk.len() - drafts).min(state.len());
        state.truncate(keep);
        if let Some(sp) = job.spec.as_mut() {
            sp.pending.clear();
        }
    }
    feed.advance(state.len().saturating_sub(before));
    s.evaluated = feed.evaluated();
    core.observe_scratch();
    match result {
        Ok(()) => {
            if let Some(sp) = job.spec.as_mut().filter(|_| job.prompt_done) {
                let secs = started.elapsed().as_secs_f64();
                sp.policy.observe_pass(batch, secs);
            }
        }
        Err(ModelError::Cancelled) => return Ok(Next::Stop(StopReason::Cancelled)),
        Err(e) => return Err(e.into()),
    };
    if feed.remaining() > 0 {
        job.logits = logits;
        return Ok(Next::Continue(Phase::Prefill(feed)));
    }
    if !job.prompt_done {
        job.answer_start = s.state_len();
    }
    job.prompt_done = true;
    if !want_logits {
        job.logits = logits;
        return Ok(Next::Stop(StopReason::MaxTokens));
    }
    if let (Some(sp), true) = (job.spec.as_mut(), drafts > 0) {
        sp.start(logits);
        return Ok(Next::Continue(Phase::Decode(Logits::default())));
    }
    Ok(Next::Continue(Phase::Decode(logits)))
}

/// Admission before the State grows by `tokens` tokens — under the accounted ceiling (other
/// conversations grow between this one's chunks) and the real footprint (one reading of a few
/// kernel files): a prefill chunk, or every [`crate::footprint::DECODE_CHECK_EVERY`] decoded
/// tokens.
fn check_growth(s: &Session, core: &mut Core, tokens: usize) -> Result<(), EngineError> {
    let len = s.state_len();
    if tokens <= 1 && !len.is_multiple_of(crate::footprint::DECODE_CHECK_EVERY) {
        return Ok(());
    }
    let ahead = tokens.max(crate::footprint::DECODE_CHECK_EVERY);
    let needed = core.growth(s, len + ahead);
    let what = if tokens > 1 {
        format!("a prefill chunk of {tokens} tokens for session {}", s.id)
    } else {
        format!("generating in session {}", s.id)
    };
    core.make_room(needed, s.resident_bytes(), &what)
}

/// Admission refused the next chunk of a conversation under way (`e`) even after spilling the
/// others: trims it to what fits in memory and checks again, or returns `e` when the smallest
/// budget cannot fit.
fn fit_under_way(
    job: &mut Job,
    s: &mut Session,
    core: &mut Core,
    feed: &mut Feed,
    e: EngineError,
) -> Result<(), EngineError> {
    let Some(fit) = core.fit_after(s, &e, draft_rows(job, core)) else {
        return Err(e);
    };
    if !crate::fit::trim_under_way(job, s, core, feed, &fit) {
        return Err(e);
    }
    s.fit = Some(fit);
    if let Some(state) = s.state.as_mut() {
        absorb_pending(state, feed);
    }
    check_growth(s, core, feed.remaining().min(core.chunk))
}

/// Samples one token, streams it, checks the stop rules, and feeds it (with drafts, when
/// prompt lookup is on). A token that is the next draft in flight is already in the State:
/// the next row of logits is sampled without a forward pass.
fn decode(
    job: &mut Job,
    s: &mut Session,
    core: &mut Core,
    mut logits: Logits,
) -> Result<Next, EngineError> {
    let n = job.sampler.context_needed();
    // The constraint holds for the answer, not inside a thinking block.
    let constrained = !job.reasoning.inside();
    let id = match job.spec.as_mut().and_then(Speculation::row_mut) {
        Some(row) => job
            .sampler
            .sample_constrained(row, s.recent(n), constrained)?,
        None => job
            .sampler
            .sample_constrained(logits.last_mut(), s.recent(n), constrained)?,
    };
    let model = core.model.clone();
    let tok = model.tokenizer();
    if tok.is_eog(id) {
        // Drafts in flight (even one equal to it) are cut when the request closes.
        job.logits = logits;
        return Ok(Next::Stop(StopReason::Eog));
    }
    let in_state = job.spec.as_mut().is_some_and(|sp| sp.check(s, id));
    // After drafts, the next forward pass reuses their logits buffer.
    job.logits = match job.spec.as_mut().and_then(Speculation::take_spare) {
        Some(spare) => spare,
        None => logits,
    };
    let now = Instant::now();
    job.first_token.get_or_insert(now);
    job.last_token = Some(now);
    job.generated += 1;
    s.history.push(id);
    if in_state {
        s.evaluated = s.history.len();
    }
    if let Some(reason) = stream_token(job, s, tok, id) {
        return Ok(Next::Stop(reason));
    }
    if job.sampler.constraint_complete() {
        return Ok(Next::Stop(StopReason::Complete));
    }
    if in_state {
        return Ok(Next::Continue(Phase::Decode(Logits::default())));
    }
    decode_trim(job, s, core);
    let mut feed = Feed::new(s.evaluated);
    feed.push_history(s.history.len() - 1, &[id]);
    let drafts = drafts_for(job, s, core);
    if let Some(sp) = job.spec.as_mut().filter(|_| !drafts.is_empty()) {
        feed.push_drafts(&drafts);
        sp.pending = drafts;
    }
    prefill(job, s, core, feed)
}

/// Streams the token `id` and applies the stop rules: `Some` when the answer ends here.
fn stream_token(
    job: &mut Job,
    s: &Session,
    tok: &statelm_tokenizer::Tokenizer,
    id: u32,
) -> Option<StopReason> {
    let was_inside = job.reasoning.inside();
    let route = job.reasoning.route(id);
    let piece = match (route, job.detok.as_mut()) {
        (_, None) => String::new(),
        // A marker releases what the side it ends still holds (a partial character).
        (Route::Marker, Some(d)) => d.flush_pending(),
        (_, Some(d)) => d.push(tok, id),
    };
    let to_reasoning = match route {
        Route::Marker => was_inside,
        r => r == Route::Reasoning,
    };
    if to_reasoning {
        // Reasoning bypasses the stop strings (they end answers); the limits still hold.
        if !piece.is_empty() {
            job.emit(Event::Reasoning { text: piece });
        }
        job.emit(Event::Token {
            id,
            text: String::new(),
        });
        return limit_reached(job, s);
    }
    match job.stop.push(&piece) {
        StopOutcome::Stopped { emit, stop } => {
            emit_answer(job, id, emit);
            Some(StopReason::StopString(stop))
        }
        StopOutcome::Continue { mut emit } => {
            let limit = limit_reached(job, s);
            if limit.is_some() {
                emit.push_str(&flush_text(job));
            }
            emit_answer(job, id, emit);
            limit
        }
    }
}

/// Streams answer text with its token: through the tool-call parser when the request offers
/// tools (the text outside calls, then the calls' events).
fn emit_answer(job: &mut Job, id: u32, text: String) {
    let Some(p) = job.tools.as_mut() else {
        job.emit(Event::Token { id, text });
        return;
    };
    let out = p.push(&text);
    job.emit(Event::Token { id, text: out.text });
    for e in out.events {
        job.emit(e);
    }
}

/// The loop guard's and `max_tokens`' verdict after a token.
fn limit_reached(job: &Job, s: &Session) -> Option<StopReason> {
    let looping =
        job.sampler.params().loop_guard && crate::dry::is_looping(s.recent(job.generated));
    if looping {
        Some(StopReason::Repetition)
    } else if job.generated >= job.max_tokens {
        Some(StopReason::MaxTokens)
    } else {
        None
    }
}

/// Drafts to feed after the token just sampled: as many of what prompt lookup proposes (within
/// the budget's room, the tokens still to generate and one prefill chunk) as the draft policy
/// finds worth checking; none while the State has tokens to re-prefill. The first proposed
/// token left unchecked becomes the policy's shadow trial.
fn drafts_for(job: &mut Job, s: &mut Session, core: &Core) -> Vec<u32> {
    let Some(sp) = job.spec.as_mut() else {
        return Vec::new();
    };
    let pending = s.state.as_ref().map_or(1, State::pending_reprefill);
    let budget = s.effective_budget(core.factor);
    let room = budget.saturating_sub(s.state_len() + 1);
    let max = sp
        .policy
        .max()
        .min(room)
        .min(job.max_tokens.saturating_sub(job.generated + 1))
        .min(core.chunk.saturating_sub(1));
    if pending > 0 || max == 0 {
        return Vec::new();
    }
    let ngram_max = job.sampler.params().ngram_max.max(1);
    if s.lookup.ngram_max() != ngram_max {
        s.lookup = crate::lookup::NgramIndex::new(ngram_max);
    }
    s.lookup.extend(&s.history);
    let Some((ngram, mut proposal)) = s.lookup.draft_match(&s.history, max) else {
        return Vec::new();
    };
    // Drafts the constraint refuses could never be sampled: they are not checked.
    proposal.truncate((job.sampler).allowed_drafts(&proposal, !job.reasoning.inside()));
    if proposal.is_empty() {
        return Vec::new();
    }
    let k = sp.policy.choose(proposal.len(), ngram);
    sp.shadow = proposal.get(k).map(|&t| (t, ngram, k == 0));
    proposal.truncate(k);
    sp.pending_ngram = ngram;
    proposal
}

/// Trims the State before it passes the budget during decoding.
fn decode_trim(job: &mut Job, s: &mut Session, core: &mut Core) {
    let budget = s.effective_budget(core.factor);
    let remaining = job.max_tokens.saturating_sub(job.generated) + 1;
    let len = s.state_len();
    if len < budget {
        return;
    }
    let state = s.state.as_ref().map_or(&[][..], |st| st.tokens());
    let turns = text::context_turns(core.turn_header.as_deref(), state, &[]);
    let plan = budget::plan_decode(len, s.pinned, budget, remaining, &turns, job.answer_start);
    let Some(plan) = plan else {
        return;
    };
    if let Some((dropped, kept, reprefill)) = s.trim_keeping(&plan.keep) {
        debug_assert_eq!(kept, plan.kept());
        job.answer_start = plan.map(job.answer_start);
        core.counters.trims += 1;
        job.emit(Event::ContextTrimmed {
            dropped,
            kept,
            reason: format!(
                "the context reached the token budget of {budget} while generating: {}",
                kept_words(plan.cut, plan.pinned, kept - plan.pinned)
            ),
            method: if reprefill {
                TrimMethod::Reprefill
            } else {
                TrimMethod::Shift
            },
        });
    }
}

/// What a trim kept, in words, for its event.
pub(crate) fn kept_words(cut: budget::Cut, pinned: usize, rest: usize) -> String {
    match cut {
        budget::Cut::Turns => format!(
            "dropped the oldest whole turns; kept the {pinned} pinned tokens and the most \
             recent turns ({rest} tokens)"
        ),
        budget::Cut::Answer => format!(
            "dropped the older turns and the middle of this answer; kept the {pinned} pinned \
             tokens, the current message and the answer's most recent part ({rest} tokens)"
        ),
        budget::Cut::Tokens => {
            format!("kept the {pinned} pinned and the {rest} most recent tokens")
        }
        budget::Cut::MessageTail => format!(
            "the current message alone is longer than the budget leaves room for: kept the \
             {pinned} pinned tokens and only the last {rest} tokens, which start inside it"
        ),
    }
}

/// Releases text still held by the detokenizer and the stop matcher.
fn flush_text(job: &mut Job) -> String {
    let tail = job.detok.as_mut().map_or_else(String::new, |d| d.finish());
    let mut out = match job.stop.push(&tail) {
        StopOutcome::Continue { emit } | StopOutcome::Stopped { emit, .. } => emit,
    };
    out.push_str(&job.stop.finish());
    out
}

/// Ends the request: trailing text, `Done`, bookkeeping.
pub(crate) fn finish(job: &mut Job, s: &mut Session, core: &mut Core, reason: StopReason) {
    if job.reasoning.inside() {
        // What the detokenizer still holds belongs to the open block.
        let tail = job
            .detok
            .as_mut()
            .map_or_else(String::new, |d| d.flush_pending());
        if !tail.is_empty() {
            job.emit(Event::Reasoning { text: tail });
        }
    }
    let mut text = String::new();
    if !matches!(reason, StopReason::StopString(_)) {
        text = flush_text(job);
    }
    let mut calls = Vec::new();
    if let Some(p) = job.tools.as_mut() {
        let (mut out, end) = (p.push(&text), p.finish());
        out.text.push_str(&end.text);
        text = out.text;
        calls = out.events;
        calls.extend(end.events);
    }
    if !text.is_empty() {
        job.emit(Event::Text { text });
    }
    for e in calls {
        job.emit(e);
    }
    tracing::debug!(
        request = job.id.0,
        session = s.id.0,
        ?reason,
        "generation finished"
    );
    let stats = close(job, s, core);
    job.emit(Event::Done(DoneStats {
        stop_reason: reason,
        ..stats
    }));
}

/// Ends the request with an error.
pub(crate) fn fail(job: &mut Job, s: &mut Session, core: &mut Core, e: EngineError) {
    tracing::debug!(request = job.id.0, session = s.id.0, error = %e, "generation failed");
    core.count_refusal(&e);
    close(job, s, core);
    job.emit_err(e);
}

/// Bookkeeping common to every end: history consistency, counters, session release.
fn close(job: &mut Job, s: &mut Session, core: &mut Core) -> DoneStats {
    // A budget lowered to what fits held for this request only.
    s.fit = None;
    if let (false, Some(floor)) = (job.prompt_done, job.history_floor) {
        // The prompt was abandoned half-way: keep only what the State has seen.
        let keep = s.evaluated.max(floor).min(s.history.len());
        s.truncate_history(keep);
    }
    if let Some(sp) = job.spec.as_mut() {
        // Drafts still unchecked leave the State with the request.
        sp.settle(s);
    }
    job.phase = Phase::Finished;
    let end = Instant::now();
    let ttft = job.first_token.unwrap_or(end).duration_since(job.received);
    let tps = match (job.first_token, job.last_token) {
        (Some(a), Some(b)) if job.generated > 1 && b > a => {
            (job.generated - 1) as f64 / b.duration_since(a).as_secs_f64()
        }
        _ => 0.0,
    };
    s.busy = None;
    s.last_used = end;
    core.observe_scratch();
    if job.generated > 1 {
        s.last_tps = tps;
    }
    let c = &mut core.counters;
    c.requests += 1;
    c.prompt_tokens += job.prompt_tokens as u64;
    c.cached_tokens += job.cached_tokens as u64;
    c.generated_tokens += job.generated as u64;
    if let Some(sp) = job.spec.as_ref() {
        c.drafted_tokens += sp.drafted as u64;
        c.accepted_tokens += sp.accepted as u64;
    }
    core.record(RequestSample {
        time_to_first_token: ttft,
        decode_tokens_per_s: tps,
        prefilled_tokens: job.prefilled_tokens,
        generated_tokens: job.generated,
    });
    DoneStats {
        stop_reason: StopReason::Cancelled,
        prompt_tokens: job.prompt_tokens,
        cached_tokens: job.cached_tokens,
        prefilled_tokens: job.prefilled_tokens,
        generated_tokens: job.generated,
        time_to_first_token: ttft.max(Duration::ZERO),
        decode_tokens_per_s: tps,
        drafted_tokens: job.spec.as_ref().map_or(0, |sp| sp.drafted),
        accepted_tokens: job.spec.as_ref().map_or(0, |sp| sp.accepted),
    }
}

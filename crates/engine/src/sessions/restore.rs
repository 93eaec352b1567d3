//! Bringing a spilled session back when its next step needs it: its State read back from the
//! spill file, or — when reading it whole does not fit even after spilling every other
//! session, or the file cannot be read — recomputed from the conversation's history, within
//! what fits ([`crate::fit`]).

use crate::core::Core;
use crate::error::EngineError;
use crate::events::Event;
use crate::job::Job;
use crate::session::Session;

/// What bringing a session back left to compute.
pub(crate) enum Prepared {
    /// Its State is resident, as it was.
    Resident,
    /// Its saved State could not come back (no room to read it whole, or an unreadable
    /// file): a fresh one stands in, and these tokens — the context it held, rebuilt from the
    /// history — are to be computed again (trimmed to what fits if need be), and whether
    /// they were a trimmed view of it.
    Recompute(Vec<u32>, bool),
}

/// Delivers the session's pending events and brings a spilled State back. When restoring it
/// whole does not fit even after spilling every other session, its file is dropped and the
/// conversation is recomputed from its history instead, within what fits ([`crate::fit`]).
pub(crate) fn prepare_session(
    job: &mut Job,
    s: &mut Session,
    core: &mut Core,
) -> Result<Prepared, EngineError> {
    for ev in s.pending.drain(..) {
        job.emit(ev);
    }
    if !s.is_spilled() {
        return Ok(Prepared::Resident);
    }
    let context = spilled_context(s);
    let trimmed = s.trimmed;
    let why = match s.spill_path.as_ref().map(std::fs::metadata) {
        // Reading the file back holds its bytes and the new State at once.
        Some(Ok(m)) => match core.make_room(2 * m.len(), 0, &format!("restoring session {}", s.id))
        {
            Ok(()) => None,
            Err(e @ EngineError::OverMemory { .. }) => Some(format!(
                "{e}; the saved cache is dropped instead and the conversation recomputed \
                     from its history, within what fits"
            )),
            Err(e) => return Err(e),
        },
        _ => None,
    };
    let why = match why {
        Some(why) => why,
        None => match s.restore(&core.model) {
            Ok(_) => {
                core.counters.restores += 1;
                job.emit(Event::Restored);
                return Ok(Prepared::Resident);
            }
            Err(e) => {
                format!("restoring the spilled State failed ({e}); the conversation is recomputed")
            }
        },
    };
    s.evict(&core.model, core.state_options())?;
    core.counters.evictions += 1;
    job.emit(Event::CacheEvicted { reason: why });
    Ok(Prepared::Recompute(context, trimmed))
}

/// The tokens a spilled State holds, rebuilt from the history: `history[..evaluated]`, or for
/// a trimmed one its pinned prefix and as many of the most recent evaluated tokens as it held.
fn spilled_context(s: &Session) -> Vec<u32> {
    let evaluated = &s.history[..s.evaluated.min(s.history.len())];
    if !s.trimmed || s.spilled_tokens >= evaluated.len() {
        return evaluated.to_vec();
    }
    let p = s.pinned.min(s.spilled_tokens);
    let recent = s.spilled_tokens - p;
    let mut t = evaluated[..p].to_vec();
    t.extend_from_slice(&evaluated[evaluated.len() - recent.min(evaluated.len() - p)..]);
    t
}

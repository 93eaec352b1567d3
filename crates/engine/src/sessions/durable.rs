//! Durable sessions: conversations that survive a kill (iOS jetsam, the OOM killer).
//!
//! With [`crate::EngineConfig::session_dir`] set, a session opened by name
//! ([`crate::EngineHandle::open_session`]) keeps two files in that directory (mode 0700,
//! files 0600):
//! - `NAME.stlmlog`, its history log ([`crate::history_log`]): the token history, appended and
//!   fsynced after every turn (a few bytes per token), per-record checksums;
//! - `NAME.stlmsess`, its KV snapshot (the engine's session file: State snapshot, history,
//!   budget; checksummed, written atomically), written when a memory warning spills or trims
//!   it, when it closes, and when the engine stops.
//!
//! Opening a name that has files resumes the conversation: the history comes from the log
//! (the authority on completed turns), the KV from the snapshot as far as it matches that
//! history, and the rest is re-prefilled with the next request. An [`Event::Resumed`] at the
//! start of the session's next stream says which. A damaged log tail is dropped, a snapshot
//! that is corrupt or does not match is ignored; both are named in that event.

use crate::actor::Actor;
use crate::error::EngineError;
use crate::events::{Event, SessionId};
use crate::history_log::{HistoryLog, LogContents, LogMeta};
use crate::plan::common_prefix;
use crate::request::SessionOptions;
use crate::session::Session;
use crate::snapshot;
use statelm_model::State;
use std::path::{Path, PathBuf};

/// Longest session name.
pub const MAX_SESSION_NAME: usize = 64;

/// The persistence of one durable session.
#[derive(Debug)]
pub(crate) struct Durable {
    /// Its name (also its files' stem).
    pub name: String,
    /// Its history log, open for appending.
    pub log: HistoryLog,
    /// Where its KV snapshot is written.
    pub snapshot: PathBuf,
}

/// Checks that `name` is a plain identifier: 1 to 64 ASCII letters, digits, `_` or `-`, not
/// starting with `-`. Anything else (paths, dots, spaces) is refused, so a name never leaves
/// the session directory.
pub fn validate_session_name(name: &str) -> Result<(), EngineError> {
    let reason = if name.is_empty() {
        Some("it is empty")
    } else if name.len() > MAX_SESSION_NAME {
        Some("it is longer than 64 characters")
    } else if name.starts_with('-') {
        Some("it starts with '-'")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        Some("only ASCII letters, digits, '_' and '-' are allowed")
    } else {
        None
    };
    match reason {
        None => Ok(()),
        Some(reason) => Err(EngineError::InvalidSessionName {
            name: name.chars().take(80).collect(),
            reason: reason.to_string(),
        }),
    }
}

/// Creates the session directory (mode 0700) if it is missing, or checks that an existing one
/// is this user's own and closed to others ([`statelm_model::files::ensure_private_dir`]).
fn ensure_dir(dir: &Path) -> Result<(), EngineError> {
    let existed = dir.is_dir();
    statelm_model::files::ensure_private_dir(dir)?;
    if let Some(parent) = dir
        .parent()
        .filter(|p| !existed && !p.as_os_str().is_empty())
    {
        let _ = statelm_model::sync_dir(parent);
    }
    Ok(())
}

/// The log and snapshot paths of `name` in `dir`.
fn paths(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("{name}.stlmlog")),
        dir.join(format!("{name}.stlmsess")),
    )
}

/// What a session's log records besides its tokens.
fn meta_of(s: &Session) -> LogMeta {
    LogMeta {
        pinned: s.pinned,
        token_budget: s.opts.token_budget,
        pinned_prefix: s.opts.pinned_prefix,
        system_prompt: s.opts.system_prompt.clone(),
        template_vars: s.opts.template_vars.clone(),
    }
}

/// Appends session `s`'s history to its log and fsyncs it (a no-op for other sessions).
pub(crate) fn log_turn(s: &mut Session) {
    let meta = meta_of(s);
    let Some(d) = s.durable.as_mut() else {
        return;
    };
    if let Err(e) = d.log.sync(&s.history, &meta) {
        tracing::error!(session = %d.name, error = %e, "appending to the history log failed");
    }
}

/// Writes session `s`'s KV snapshot (a no-op for other sessions).
pub(crate) fn write_snapshot(s: &Session) {
    let Some(d) = &s.durable else {
        return;
    };
    if let Err(e) = snapshot::save(s, &d.snapshot) {
        tracing::warn!(session = %d.name, error = %e, "writing the KV snapshot failed");
    }
}

/// What of a snapshot's State matches `history`: the State (cut to the match) with the
/// history length it reflects and whether it is a trimmed view; `None` if nothing matches.
pub(crate) fn match_snapshot(snap: Session, history: &[u32]) -> Option<(State, usize, bool)> {
    let mut state = snap.state?;
    if !snap.trimmed {
        let common = common_prefix(state.tokens(), history);
        if common == 0 {
            return None;
        }
        state.truncate(common);
        return Some((state, common, false));
    }
    // A trimmed view of `snap.history[..evaluated]`: usable only if that is all in `history`.
    let e = snap.evaluated;
    let fits = e <= history.len() && snap.history.get(..e) == Some(&history[..e]);
    fits.then_some((state, e, true))
}

impl Actor {
    /// Opens the durable session `name`: the one already open, a resumed one, or a new one.
    pub(crate) fn open_named(
        &mut self,
        name: &str,
        opts: SessionOptions,
    ) -> Result<SessionId, EngineError> {
        validate_session_name(name)?;
        let dir = self.core.config.session_dir.clone().ok_or_else(|| {
            EngineError::InvalidRequest(
                "named sessions need a session directory (session_dir)".into(),
            )
        })?;
        let open = self
            .core
            .sessions
            .values()
            .find(|s| s.durable.as_ref().is_some_and(|d| d.name == name));
        if let Some(s) = open {
            return Ok(s.id);
        }
        ensure_dir(&dir)?;
        let (log_path, snap_path) = paths(&dir, name);
        let fp = self.core.model.fingerprint();
        let (log, contents) = if log_path.exists() {
            HistoryLog::open(&log_path, &fp)?
        } else {
            (HistoryLog::create(&log_path, &fp)?, LogContents::default())
        };
        let mut s = if contents.history.is_empty() {
            let _ = std::fs::remove_file(&snap_path);
            self.new_session(opts)?
        } else {
            self.resume(name, opts, contents, &snap_path)?
        };
        s.durable = Some(Durable {
            name: name.to_string(),
            log,
            snapshot: snap_path,
        });
        log_turn(&mut s);
        let id = s.id;
        self.core.sessions.insert(id, s);
        Ok(id)
    }

    /// A session rebuilt from a log's `contents` and the snapshot at `snap_path`.
    fn resume(
        &mut self,
        name: &str,
        opts: SessionOptions,
        contents: LogContents,
        snap_path: &Path,
    ) -> Result<Session, EngineError> {
        let meta = contents.meta.unwrap_or_default();
        let opts = SessionOptions {
            token_budget: opts.token_budget.or(meta.token_budget),
            pinned_prefix: meta.pinned_prefix.or(opts.pinned_prefix),
            system_prompt: meta.system_prompt.or(opts.system_prompt),
            template_vars: match meta.template_vars.is_empty() {
                true => opts.template_vars,
                false => meta.template_vars,
            },
        };
        let mut s = self.new_session(opts)?;
        let mut history = contents.history;
        let mut notes = Vec::new();
        if let Some(d) = &contents.damage {
            notes.push(format!("history log: {d}"));
        }
        let n_vocab = self.core.model.config().n_vocab;
        if let Some(i) = history.iter().position(|&t| t as usize >= n_vocab) {
            notes.push(format!(
                "history log: token id {} is outside the vocabulary; the history ends before it",
                history[i]
            ));
            history.truncate(i);
        }
        match self.load_snapshot(snap_path, s.id) {
            Ok(None) => notes.push("no KV snapshot".to_string()),
            Ok(Some(snap)) => match match_snapshot(snap, &history) {
                Some((state, evaluated, trimmed)) => {
                    s.state = Some(state);
                    s.evaluated = evaluated;
                    s.trimmed = trimmed;
                }
                None => notes.push("the KV snapshot does not match the history".to_string()),
            },
            Err(e) => notes.push(format!("KV snapshot ignored: {e}")),
        }
        s.pinned = meta.pinned.min(history.len());
        s.set_history(history);
        let (restored, pending) = s
            .state
            .as_ref()
            .map_or((0, 0), |st| (st.len(), st.pending_reprefill()));
        let reprefill = s.history.len() - s.evaluated + pending;
        let mut reason = format!(
            "conversation '{name}' resumed: {} tokens of history, the KV of {} from the \
             snapshot, {reprefill} re-prefilled with the next request",
            s.history.len(),
            restored - pending
        );
        for n in notes {
            reason.push_str("; ");
            reason.push_str(&n);
        }
        tracing::info!(session = name, "{reason}");
        s.pending.push(Event::Resumed {
            name: name.to_string(),
            history_tokens: s.history.len(),
            restored_tokens: restored - pending,
            reprefilled_tokens: reprefill,
            reason,
        });
        Ok(s)
    }

    /// The snapshot at `path` (as session `id`), if there is one and it fits the ceiling.
    fn load_snapshot(
        &mut self,
        path: &Path,
        id: SessionId,
    ) -> Result<Option<Session>, EngineError> {
        let size = match std::fs::metadata(path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        self.core
            .make_room(size, 0, "a resumed session's KV snapshot")?;
        snapshot::load(path, &self.core.model, id).map(Some)
    }

    /// Writes the KV snapshot of session `id` if it is durable (after a spill or a trim).
    pub(crate) fn snapshot_session(&self, id: SessionId) {
        if let Some(s) = self.core.sessions.get(&id) {
            write_snapshot(s);
        }
    }

    /// Empties a durable session's files along with it (on reset).
    pub(crate) fn forget_durable(s: &mut Session) {
        log_turn(s);
        if let Some(d) = &s.durable {
            let _ = std::fs::remove_file(&d.snapshot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_names_are_plain_identifiers() {
        for ok in ["a", "user-42", "conv_7", "A-b_C", &"x".repeat(64)] {
            assert!(validate_session_name(ok).is_ok(), "{ok}");
        }
        let long = "x".repeat(65);
        for bad in [
            "", "../etc", "a/b", "a\\b", ".", "..", ".hidden", "-rf", "a b", "é", "a\0b", &long,
        ] {
            let e = validate_session_name(bad).unwrap_err();
            assert!(
                matches!(e, EngineError::InvalidSessionName { .. }),
                "{bad:?}: {e}"
            );
        }
    }
}

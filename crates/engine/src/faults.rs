//! Fault injection for tests of panic containment. With the `fault-injection` feature (test
//! builds only; no front end enables it), a request whose text input contains
//! [`PANIC_MARKER`] panics in its first step, as a bug in a kernel or a sampler would. Without
//! the feature the hook is empty. [`KILL_MARKER`] instead panics outside the containment and
//! ends the engine thread (what a health check must notice).

use crate::job::Job;

/// The text that makes a request's step panic under the `fault-injection` feature.
pub const PANIC_MARKER: &str = "\u{0}statelm-fault:panic\u{0}";

/// The text that makes the engine thread itself die under the `fault-injection` feature.
pub const KILL_MARKER: &str = "\u{0}statelm-fault:kill\u{0}";

/// Whether `job`'s text input contains `marker`.
#[cfg(feature = "fault-injection")]
fn asks(job: &Job, marker: &str) -> bool {
    fn text(input: &crate::Input) -> Option<&str> {
        match input {
            crate::Input::Text(t) | crate::Input::Append(t) | crate::Input::UserTurn(t) => Some(t),
            crate::Input::Encoded(e) => text(&e.input),
            _ => None,
        }
    }
    job.input
        .as_ref()
        .and_then(text)
        .is_some_and(|t| t.contains(marker))
}

/// Panics (uncontained) when one of `jobs` asks for it (feature `fault-injection` only).
pub(crate) fn thread(jobs: &[Job]) {
    #[cfg(feature = "fault-injection")]
    if jobs.iter().any(|j| asks(j, KILL_MARKER)) {
        panic!("injected fault: the engine thread panicked");
    }
    let _ = jobs;
}

/// Panics when `job` asks for it (feature `fault-injection` only).
pub(crate) fn step(job: &Job) {
    #[cfg(feature = "fault-injection")]
    if asks(job, PANIC_MARKER) {
        panic!("injected fault: a generation step panicked");
    }
    let _ = job;
}

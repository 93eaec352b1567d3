//! What the host OS says about the app beside memory: whether it is in the foreground, and how
//! hot the device is. The mobile packages wire the OS's signals to these (iOS: the scene's
//! background/foreground notifications and `ProcessInfo.thermalState`; Android: the process
//! lifecycle's `ON_STOP`/`ON_START` and `PowerManager`'s thermal status); the C ABI, the
//! server's admin endpoint and the CLI's signals reach the same entry points.
//!
//! - **Background**: iOS kills suspended apps biggest first, so the engine gives back what it
//!   can at once: every session in memory is written to disk and freed (a `Spilled` event on
//!   its stream, or its next one), running generations are paused where they are, the prefill
//!   scratch shrinks to its smallest chunk and the grammar engine's caches go. Nothing is
//!   computed until the app is back in the foreground; then generations go on where they
//!   were and sessions are restored when they are next used.
//! - **Thermal**: at `serious` the forward pass uses half of its threads, at `critical` one,
//!   and the engine rests after each step as long as the step took (half the duty cycle);
//!   `nominal` and `fair` give everything back. The thread count is in the statistics.

use crate::actor::Actor;
use std::time::Duration;

/// Whether the app is in the foreground.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Lifecycle {
    /// In use: the engine computes.
    #[default]
    Foreground,
    /// Not visible: sessions go to disk and nothing is computed until the foreground.
    Background,
}

/// The device's thermal state, in the four steps iOS reports (Android's seven map onto them).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Thermal {
    /// Normal.
    #[default]
    Nominal,
    /// Warm: no change.
    Fair,
    /// Hot: half of the compute threads.
    Serious,
    /// Throttled by the OS: one thread, and a rest after each step as long as the step.
    Critical,
}

impl Thermal {
    /// Threads the forward pass may use at this state, out of `all`.
    pub fn threads(self, all: usize) -> usize {
        match self {
            Thermal::Nominal | Thermal::Fair => all,
            Thermal::Serious => (all / 2).max(1),
            Thermal::Critical => 1,
        }
    }
}

impl std::fmt::Display for Lifecycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Lifecycle::Foreground => "foreground",
            Lifecycle::Background => "background",
        })
    }
}

impl std::fmt::Display for Thermal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Thermal::Nominal => "nominal",
            Thermal::Fair => "fair",
            Thermal::Serious => "serious",
            Thermal::Critical => "critical",
        })
    }
}

/// What the host last said, waiting for the engine thread.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct HostInbox {
    /// The lifecycle state asked for.
    pub lifecycle: Lifecycle,
    /// The thermal state asked for.
    pub thermal: Thermal,
}

/// The longest rest after a step at a critical thermal state.
const MAX_REST: Duration = Duration::from_millis(200);

impl Actor {
    /// Acts on a lifecycle or thermal state the host reported since the last look.
    pub(crate) fn check_host(&mut self) {
        let asked = *self.shared().host();
        if asked.thermal != self.core.thermal {
            self.core.thermal = asked.thermal;
            let all = self.core.model.threads();
            let n = self.core.model.set_threads(asked.thermal.threads(all));
            tracing::info!(thermal = %asked.thermal, threads = n, "thermal state");
            self.mark_dirty();
        }
        if asked.lifecycle != self.core.lifecycle {
            self.core.lifecycle = asked.lifecycle;
            tracing::info!(lifecycle = %asked.lifecycle, "app lifecycle");
            if asked.lifecycle == Lifecycle::Background {
                self.enter_background();
            } else {
                self.core.restore_chunk();
            }
            self.mark_dirty();
        }
    }

    /// Writes every resident session to disk and frees what the engine holds besides.
    fn enter_background(&mut self) {
        let resident: Vec<_> = (self.core.sessions.values())
            .filter(|s| !s.is_spilled() && s.state_len() > 0)
            .map(|s| s.id)
            .collect();
        for id in resident {
            let reason = format!(
                "the app went to the background: session {id} was saved to disk and freed; it \
                 is restored when it is next used"
            );
            if self.core.spill(id, reason) {
                self.snapshot_session(id);
            }
        }
        self.core.minimize_chunk();
        self.core.grammars.release(true);
        statelm_governor::release_free_memory();
    }

    /// Rests after a step that took `took`, when the device is critically hot.
    pub(crate) fn thermal_rest(&self, took: Duration) {
        if self.core.thermal == Thermal::Critical {
            std::thread::sleep(took.min(MAX_REST));
        }
    }
}

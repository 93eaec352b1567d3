//! The host's lifecycle and thermal states (`statelm_lifecycle`, `statelm_thermal`): the
//! engine's [`statelm_engine::Lifecycle`] and [`statelm_engine::Thermal`] for C hosts and the
//! mobile packages.

use crate::handles::{self, StatelmEngine};
use crate::status::{guard, FfiError};
use statelm_engine::{Lifecycle, Thermal};
use std::ffi::c_int;

/// The app is in the foreground: the engine computes.
pub const STATELM_LIFECYCLE_FOREGROUND: c_int = 0;

/// The app went to the background (iOS `didEnterBackground`, Android `ON_STOP`): every
/// session in memory is written to disk and freed (SPILLED), running generations pause,
/// scratch and caches shrink; nothing is computed until FOREGROUND.
pub const STATELM_LIFECYCLE_BACKGROUND: c_int = 1;

/// Thermal state nominal (iOS `.nominal`; Android `THERMAL_STATUS_NONE`).
pub const STATELM_THERMAL_NOMINAL: c_int = 0;

/// Thermal state fair (iOS `.fair`; Android `LIGHT`): no change.
pub const STATELM_THERMAL_FAIR: c_int = 1;

/// Thermal state serious (iOS `.serious`; Android `MODERATE`, `SEVERE`): half of the compute
/// threads.
pub const STATELM_THERMAL_SERIOUS: c_int = 2;

/// Thermal state critical (iOS `.critical`; Android `CRITICAL`, `EMERGENCY`, `SHUTDOWN`): one
/// thread, and a rest after each step as long as the step took.
pub const STATELM_THERMAL_CRITICAL: c_int = 3;

/// Tells the engine whether the app is in the foreground: `state` is
/// `STATELM_LIFECYCLE_FOREGROUND` (0) or `STATELM_LIFECYCLE_BACKGROUND` (1). Never blocks;
/// safe from any thread, including a callback. In the background every session in memory is
/// written to disk (SPILLED on its stream), running generations pause where they are, and
/// nothing is computed; back in the foreground they go on (RESTORED) and idle sessions are
/// restored when next used. The state is in `statelm_engine_stats_json` (`lifecycle`).
#[no_mangle]
pub extern "C" fn statelm_lifecycle(engine: *const StatelmEngine, state: c_int) -> c_int {
    guard(|| {
        let state = match state {
            STATELM_LIFECYCLE_FOREGROUND => Lifecycle::Foreground,
            STATELM_LIFECYCLE_BACKGROUND => Lifecycle::Background,
            other => {
                return Err(FfiError::invalid(format!(
                    "lifecycle state must be 0 (foreground) or 1 (background), got {other}"
                )))
            }
        };
        handles::engine(engine)?.handle.lifecycle(state);
        Ok(())
    })
}

/// Tells the engine how hot the device is: `state` is `STATELM_THERMAL_NOMINAL` (0), `FAIR`
/// (1), `SERIOUS` (2) or `CRITICAL` (3). Never blocks; safe from any thread. SERIOUS halves the
/// forward pass's threads, CRITICAL leaves one and rests after each step; NOMINAL and FAIR give
/// them back. `statelm_engine_stats_json` reports `thermal` and `threads`.
#[no_mangle]
pub extern "C" fn statelm_thermal(engine: *const StatelmEngine, state: c_int) -> c_int {
    guard(|| {
        let state = match state {
            STATELM_THERMAL_NOMINAL => Thermal::Nominal,
            STATELM_THERMAL_FAIR => Thermal::Fair,
            STATELM_THERMAL_SERIOUS => Thermal::Serious,
            STATELM_THERMAL_CRITICAL => Thermal::Critical,
            other => {
                return Err(FfiError::invalid(format!(
                    "thermal state must be 0 to 3 (nominal, fair, serious, critical), got {other}"
                )))
            }
        };
        handles::engine(engine)?.handle.thermal(state);
        Ok(())
    })
}

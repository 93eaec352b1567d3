//! Sessions and their persistence: one session's State and history, snapshots (spills and
//! saved sessions), bringing a spilled one back, durable sessions with their history log, and
//! the session pool.

pub(crate) mod durable;
pub(crate) mod history_log;
pub(crate) mod pool;
pub(crate) mod restore;
pub(crate) mod session;
pub(crate) mod snapshot;

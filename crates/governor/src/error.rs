//! Typed errors of the governor.

use std::path::PathBuf;

/// An error reading a memory source or registering for its events.
#[derive(Debug, thiserror::Error)]
pub enum GovernorError {
    /// A file the source needs does not exist (e.g. no memory controller).
    #[error("{path}: not found")]
    Missing {
        /// The file that was looked for.
        path: PathBuf,
    },
    /// An I/O error on a file of the source.
    #[error("{path}: {source}")]
    Io {
        /// The file being read or written.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A file's content could not be parsed.
    #[error("{path}: cannot parse: {detail}")]
    Parse {
        /// The file being parsed.
        path: PathBuf,
        /// What was wrong.
        detail: String,
    },
    /// Registering for or waiting on kernel events failed.
    #[error("{what}: {source}")]
    Event {
        /// What was being done (e.g. "eventfd", "poll", "write cgroup.event_control").
        what: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// An environment variable holds an invalid value.
    #[error("{var}={value:?}: {reason}")]
    InvalidEnv {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The feature is not available on this platform or machine.
    #[error("unsupported: {0}")]
    Unsupported(String),
}

impl GovernorError {
    /// Wraps an I/O error on `path`, mapping `NotFound` to [`GovernorError::Missing`].
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        let path = path.into();
        if source.kind() == std::io::ErrorKind::NotFound {
            GovernorError::Missing { path }
        } else {
            GovernorError::Io { path, source }
        }
    }

    /// Builds a parse error.
    pub(crate) fn parse(path: impl Into<PathBuf>, detail: impl Into<String>) -> Self {
        GovernorError::Parse {
            path: path.into(),
            detail: detail.into(),
        }
    }

    /// Builds an event error.
    pub(crate) fn event(what: impl Into<String>, source: impl Into<std::io::Error>) -> Self {
        GovernorError::Event {
            what: what.into(),
            source: source.into(),
        }
    }

    /// True when the error means "this file or feature is simply not there".
    pub fn is_missing(&self) -> bool {
        matches!(
            self,
            GovernorError::Missing { .. } | GovernorError::Unsupported(_)
        )
    }
}

/// A byte size string (e.g. `"1.5GiB"`) that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseBytesError {
    /// The string is empty.
    #[error("empty byte size")]
    Empty,
    /// The number part is not a valid non-negative number.
    #[error("invalid number in byte size {0:?}")]
    InvalidNumber(String),
    /// The unit is not one of B, K/KB/KiB, M/MB/MiB, G/GB/GiB, T/TB/TiB.
    #[error("unknown unit {unit:?} in byte size {input:?}")]
    UnknownUnit {
        /// The whole input.
        input: String,
        /// The unit that was not recognised.
        unit: String,
    },
    /// The value does not fit in 64 bits.
    #[error("byte size {0:?} is too large")]
    Overflow(String),
}

//! One module per subcommand.

pub mod device;
pub mod inspect;
pub mod pull;

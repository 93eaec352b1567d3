//! Memory: the token budget and its trims, admission against the process's real footprint, the
//! governor's pressure levels and what the engine does at each, and the device tier.

pub(crate) mod budget;
pub(crate) mod fit;
pub(crate) mod footprint;
pub(crate) mod pressure;
pub(crate) mod tier;

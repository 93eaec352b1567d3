//! The names of the model's configuration values — KV cache type and numerics — parsed in one
//! place (`FromStr`), for the command line, the C ABI and the tools alike, with one error that
//! lists what is accepted ([`UnknownName::check`], which the plan crate's weight tier and tier
//! policy use as well).

use crate::kv::KvType;
use crate::Numerics;
use std::str::FromStr;

/// A configuration value's name that is not one of its kind's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {got:?} ({accepted})")]
pub struct UnknownName {
    /// The kind of value (`"KV type"`, `"numerics"`, ...).
    pub what: &'static str,
    /// The name given.
    pub got: String,
    /// The names accepted, for the message.
    pub accepted: &'static str,
}

impl UnknownName {
    /// `parsed` (the value named `s`), or the error naming `what` and the `accepted` names.
    pub fn check<T>(
        parsed: Option<T>,
        s: &str,
        what: &'static str,
        accepted: &'static str,
    ) -> Result<T, UnknownName> {
        parsed.ok_or_else(|| UnknownName {
            what,
            got: s.to_string(),
            accepted,
        })
    }
}

impl FromStr for KvType {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        UnknownName::check(KvType::parse(s), s, "KV type", "f32, f16, q8_0")
    }
}

impl FromStr for Numerics {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let n = match s.trim().to_ascii_lowercase().as_str() {
            "fast" => Some(Numerics::Fast),
            "llama-cpp" | "llama.cpp" | "llamacpp" => Some(Numerics::LlamaCpp),
            _ => None,
        };
        UnknownName::check(n, s, "numerics", "fast, llama-cpp")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_errors_list_the_accepted_ones() {
        assert_eq!("q8_0".parse::<KvType>(), Ok(KvType::Q8_0));
        assert_eq!("F16".parse::<KvType>(), Ok(KvType::F16));
        assert_eq!("llama-cpp".parse::<Numerics>(), Ok(Numerics::LlamaCpp));
        assert_eq!("fast".parse::<Numerics>(), Ok(Numerics::Fast));
        let e = "f8".parse::<KvType>().unwrap_err();
        assert_eq!(e.to_string(), "unknown KV type \"f8\" (f32, f16, q8_0)");
        let e = "exact".parse::<Numerics>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown numerics \"exact\" (fast, llama-cpp)"
        );
    }
}

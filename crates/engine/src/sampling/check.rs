//! The one check of sampling parameters: the HTTP server, the C ABI and the CLI reject the same
//! out-of-range values with the same message, and the engine refuses them whatever sent them.

use crate::sampling::SamplingParams;

/// Largest `penalty_last_n`, `dry_allowed_length` and `dry_last_n`.
pub const MAX_WINDOW: usize = 1 << 20;

/// Most DRY sequence breakers, and their longest length in bytes.
pub const MAX_BREAKERS: usize = 64;

/// A sampling parameter outside its range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct InvalidParam {
    /// The parameter's name (as in [`SamplingParams`] and the C ABI's params JSON).
    pub param: &'static str,
    /// What is wrong, naming the range and the value.
    pub message: String,
}

fn within<T: PartialOrd + std::fmt::Display>(
    param: &'static str,
    v: T,
    lo: T,
    hi: T,
) -> Result<(), InvalidParam> {
    match v >= lo && v <= hi {
        true => Ok(()),
        false => Err(InvalidParam {
            param,
            message: format!("{param} must be between {lo} and {hi} (got {v})"),
        }),
    }
}

fn invalid(param: &'static str, message: impl Into<String>) -> Result<(), InvalidParam> {
    Err(InvalidParam {
        param,
        message: message.into(),
    })
}

impl SamplingParams {
    /// Checks every range but the token ids of `logit_bias` (see [`SamplingParams::check`]).
    pub fn check_ranges(&self) -> Result<(), InvalidParam> {
        within("temperature", self.temperature, 0.0, 2.0)?;
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return invalid(
                "top_p",
                format!("top_p must be in (0, 1] (got {})", self.top_p),
            );
        }
        within("min_p", self.min_p, 0.0, 1.0)?;
        if !(self.repeat_penalty > 0.0 && self.repeat_penalty <= 10.0) {
            // Dividing by 0 would turn every recent token's logit into +inf.
            let msg = format!(
                "repeat_penalty must be in (0, 10] (1 turns it off; got {})",
                self.repeat_penalty
            );
            return invalid("repeat_penalty", msg);
        }
        within("frequency_penalty", self.frequency_penalty, -2.0, 2.0)?;
        within("presence_penalty", self.presence_penalty, -2.0, 2.0)?;
        within("penalty_last_n", self.penalty_last_n, 0, MAX_WINDOW)?;
        // Any negative value is allowed: a very negative one (or -inf) bans the token, which is
        // how C hosts ban one (JSON has no -inf).
        for &v in self.logit_bias.values() {
            if v.is_nan() || v > 100.0 {
                let msg = format!("logit_bias values must be at most 100 (got {v})");
                return invalid("logit_bias", msg);
            }
        }
        within("dry_multiplier", self.dry_multiplier, 0.0, 10.0)?;
        within("dry_base", self.dry_base, 1.0, 10.0)?;
        within("dry_allowed_length", self.dry_allowed_length, 0, MAX_WINDOW)?;
        within("dry_last_n", self.dry_last_n, 0, MAX_WINDOW)?;
        let b = &self.dry_sequence_breakers;
        if b.len() > MAX_BREAKERS || b.iter().any(|s| s.is_empty() || s.len() > MAX_BREAKERS) {
            let msg = format!(
                "dry_sequence_breakers takes at most {MAX_BREAKERS} non-empty strings of at most \
                 {MAX_BREAKERS} bytes"
            );
            return invalid("dry_sequence_breakers", msg);
        }
        within("lookup", self.lookup, 0, crate::speculate::MAX_LOOKUP)?;
        within("ngram_max", self.ngram_max, 1, crate::lookup::MAX_NGRAM)
    }

    /// Checks every parameter for a model of `n_vocab` tokens: the ranges, and `logit_bias`
    /// ids inside the vocabulary.
    pub fn check(&self, n_vocab: usize) -> Result<(), InvalidParam> {
        self.check_ranges()?;
        if let Some(id) = self.logit_bias.keys().find(|&&id| id as usize >= n_vocab) {
            let msg = format!("logit_bias key \"{id}\" is not a token id below {n_vocab}");
            return invalid("logit_bias", msg);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_pass_and_each_range_is_held() {
        let ok = SamplingParams::default();
        ok.check(10).unwrap();
        crate::ChatDefaults::default().sampling.check(10).unwrap();
        type Spoil = fn(&mut SamplingParams);
        let bad: [(&str, Spoil); 9] = [
            ("temperature", |p| p.temperature = 5.0),
            ("top_p", |p| p.top_p = 0.0),
            ("min_p", |p| p.min_p = f32::NAN),
            ("repeat_penalty", |p| p.repeat_penalty = 0.0),
            ("presence_penalty", |p| p.presence_penalty = -3.0),
            ("logit_bias", |p| {
                p.logit_bias.insert(99, 1.0);
            }),
            ("dry_base", |p| p.dry_base = 0.5),
            ("lookup", |p| p.lookup = 1000),
            ("ngram_max", |p| p.ngram_max = 0),
        ];
        for (name, spoil) in bad {
            let mut p = ok.clone();
            spoil(&mut p);
            assert_eq!(p.check(10).unwrap_err().param, name);
        }
    }
}

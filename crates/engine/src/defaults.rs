//! Generation defaults for conversations — what `statelm chat`, the server and the C ABI use
//! when a request leaves a setting out: built-in values suited to small chat models, under the
//! sampling settings the model file itself recommends (`general.sampling.*`, the keys
//! llama.cpp reads), which win where present.

use crate::sampling::SamplingParams;
use statelm_model::Model;

/// Temperature of a conversation unless the file or the request says otherwise.
pub const CHAT_TEMPERATURE: f32 = 0.7;
/// DRY multiplier of a conversation (llama.cpp's suggested value).
pub const CHAT_DRY_MULTIPLIER: f32 = 0.8;
/// Most tokens per answer unless asked otherwise.
pub const CHAT_MAX_TOKENS: usize = 512;

/// The metadata keys read, each with the setting it sets.
const KEYS: [(&str, Setting); 6] = [
    ("general.sampling.temp", Setting::Temperature),
    ("general.sampling.top_k", Setting::TopK),
    ("general.sampling.top_p", Setting::TopP),
    ("general.sampling.min_p", Setting::MinP),
    ("general.sampling.penalty_repeat", Setting::RepeatPenalty),
    ("general.sampling.penalty_last_n", Setting::PenaltyLastN),
];

#[derive(Debug, Clone, Copy)]
enum Setting {
    Temperature,
    TopK,
    TopP,
    MinP,
    RepeatPenalty,
    PenaltyLastN,
}

impl Setting {
    /// Whether `v` is a value this setting takes (the ranges the server accepts).
    fn accepts(self, v: f64) -> bool {
        match self {
            Setting::Temperature => (0.0..=2.0).contains(&v),
            Setting::TopK | Setting::PenaltyLastN => (0.0..=1e6).contains(&v),
            Setting::TopP => v > 0.0 && v <= 1.0,
            Setting::MinP => (0.0..=1.0).contains(&v),
            Setting::RepeatPenalty => v > 0.0 && v <= 10.0,
        }
    }

    /// Sets it in `p`.
    fn set(self, p: &mut SamplingParams, v: f64) {
        match self {
            Setting::Temperature => p.temperature = v as f32,
            Setting::TopK => p.top_k = v as usize,
            Setting::TopP => p.top_p = v as f32,
            Setting::MinP => p.min_p = v as f32,
            Setting::RepeatPenalty => p.repeat_penalty = v as f32,
            Setting::PenaltyLastN => p.penalty_last_n = v as usize,
        }
    }
}

/// Defaults for a conversation's answers.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatDefaults {
    /// Sampling settings (DRY and the loop guard on).
    pub sampling: SamplingParams,
    /// Most tokens per answer.
    pub max_tokens: usize,
    /// The `general.sampling.*` keys the model file set, with their values.
    pub from_file: Vec<(String, f64)>,
}

impl Default for ChatDefaults {
    /// The built-in values: temperature 0.7, top-k 40, top-p 0.95, min-p 0.05, DRY 0.8 with the
    /// loop guard, 512 tokens per answer.
    fn default() -> Self {
        ChatDefaults {
            sampling: SamplingParams {
                temperature: CHAT_TEMPERATURE,
                dry_multiplier: CHAT_DRY_MULTIPLIER,
                loop_guard: true,
                ..SamplingParams::default()
            },
            max_tokens: CHAT_MAX_TOKENS,
            from_file: Vec::new(),
        }
    }
}

impl ChatDefaults {
    /// The built-in values under the sampling settings `model`'s file carries.
    pub fn for_model(model: &Model) -> ChatDefaults {
        let file = model.gguf();
        ChatDefaults::from_metadata(|key| file.get(key).and_then(|v| v.as_f64()))
    }

    /// The built-in values under the settings `get` finds (a metadata key to its number).
    /// Values out of their valid range are ignored.
    pub fn from_metadata(get: impl Fn(&str) -> Option<f64>) -> ChatDefaults {
        let mut d = ChatDefaults::default();
        for (key, setting) in KEYS {
            let Some(v) = get(key).filter(|v| v.is_finite()) else {
                continue;
            };
            if setting.accepts(v) {
                setting.set(&mut d.sampling, v);
                d.from_file.push((key.to_string(), v));
            }
        }
        d
    }

    /// One line for `--help`-style reports: where each default comes from.
    pub fn describe(&self) -> String {
        let p = &self.sampling;
        let mut s = format!(
            "temperature {}, top-k {}, top-p {}, min-p {}, DRY {}, loop guard {}, max tokens {}",
            p.temperature,
            p.top_k,
            p.top_p,
            p.min_p,
            p.dry_multiplier,
            if p.loop_guard { "on" } else { "off" },
            self.max_tokens
        );
        if !self.from_file.is_empty() {
            let keys: Vec<String> = self
                .from_file
                .iter()
                .map(|(k, v)| format!("{k} = {v}"))
                .collect();
            s.push_str(&format!(" (from the model file: {})", keys.join(", ")));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_settings_win_and_bad_ones_are_ignored() {
        let d = ChatDefaults::from_metadata(|k| match k {
            "general.sampling.temp" => Some(0.3),
            "general.sampling.top_k" => Some(20.0),
            "general.sampling.top_p" => Some(7.0),
            "general.sampling.min_p" => Some(f64::NAN),
            _ => None,
        });
        assert_eq!(d.sampling.temperature, 0.3);
        assert_eq!(d.sampling.top_k, 20);
        assert_eq!(d.sampling.top_p, SamplingParams::default().top_p);
        assert_eq!(d.sampling.min_p, SamplingParams::default().min_p);
        assert_eq!(d.from_file.len(), 2);
        assert!(d.sampling.loop_guard && d.sampling.dry_multiplier > 0.0);
        assert!(d.describe().contains("general.sampling.temp = 0.3"));
    }

    #[test]
    fn no_metadata_gives_the_built_in_values() {
        let d = ChatDefaults::from_metadata(|_| None);
        assert_eq!(d, ChatDefaults::default());
        assert_eq!(d.sampling.temperature, CHAT_TEMPERATURE);
    }
}

//! `State`: what one conversation holds while a model runs — the KV cache, the position and
//! the token history. The [`crate::Model`] is never mutated, and the forward pass's working
//! buffers belong to the computation ([`crate::Scratch`]), not to the State.

use crate::config::ModelConfig;
use crate::conv::ConvCache;
use crate::kv::{KvType, LayerCache};
use crate::rope;
use crate::ModelError;
use std::sync::Arc;

/// Options for a new [`State`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateOptions {
    /// Maximum number of tokens the state can hold.
    pub capacity: usize,
    /// Element type of the KV cache.
    pub kv_type: KvType,
}

impl StateOptions {
    /// `capacity` tokens with the default (f16) cache.
    pub fn new(capacity: usize) -> StateOptions {
        StateOptions {
            capacity,
            kv_type: KvType::default(),
        }
    }
}

/// How [`State::retain_with`] keeps the retained tokens' cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RetainMethod {
    /// Re-rotate the kept keys in place when the cache allows it (fast; deeper layers keep a
    /// trace of the dropped context, as any context shift does), else re-prefill.
    #[default]
    Shift,
    /// Always recompute the kept tokens (exactly a fresh prefill of them; costs a prefill).
    Reprefill,
}

/// What [`State::retain`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetainOutcome {
    /// Nothing to drop.
    Unchanged,
    /// The middle was dropped and the kept keys re-rotated in place (no recompute).
    Shifted {
        /// Tokens dropped.
        dropped: usize,
        /// Tokens kept.
        kept: usize,
    },
    /// The cache type or a sliding window made an in-place shift invalid: the cache was cleared
    /// and the kept tokens will be re-prefilled by the next forward call.
    Reprefill {
        /// Tokens dropped.
        dropped: usize,
        /// Tokens kept (to be recomputed).
        kept: usize,
    },
}

/// The mutable inference state of one conversation with one model.
///
/// Created by [`crate::Model::new_state`]; passed as `&mut State` to every forward call, so
/// two calls can never corrupt it concurrently.
#[derive(Debug)]
pub struct State {
    pub(crate) config: Arc<ModelConfig>,
    pub(crate) fingerprint: [u8; 32],
    pub(crate) kv_type: KvType,
    pub(crate) capacity: usize,
    pub(crate) layers: Vec<LayerCache>,
    /// The state of each short-convolution layer (LFM2; `None` for attention layers).
    pub(crate) conv: Vec<Option<ConvCache>>,
    /// Every token in context, in order; position `i` is `tokens[i]`.
    pub(crate) tokens: Vec<u32>,
    /// How many of `tokens` have their keys and values in the cache (the rest are re-prefilled
    /// by the next forward call).
    pub(crate) n_cached: usize,
}

impl State {
    pub(crate) fn new(
        config: Arc<ModelConfig>,
        fingerprint: [u8; 32],
        opts: StateOptions,
        ubatch: usize,
        full_swa: bool,
    ) -> Result<State, ModelError> {
        if opts.kv_type == KvType::Q8_0
            && (!config.head_dim.is_multiple_of(32) || !config.v_head_dim.is_multiple_of(32))
        {
            return Err(ModelError::BadConfig(format!(
                "a q8_0 KV cache needs head dimensions divisible by 32 (have {})",
                config.head_dim
            )));
        }
        let ring_extra = (!full_swa).then_some(ubatch);
        let layers = (0..config.n_layer)
            .map(|il| {
                let cells = crate::kv::layer_cells(&config, il, opts.capacity, ring_extra);
                LayerCache::new(opts.kv_type, config.k_dim(), config.v_dim(), cells)
            })
            .collect();
        let conv = (0..config.n_layer)
            .map(|il| {
                let sc = config.shortconv.filter(|_| config.is_conv_layer(il))?;
                Some(ConvCache::new(config.n_embd, sc.d_conv()))
            })
            .collect();
        Ok(State {
            config,
            fingerprint,
            kv_type: opts.kv_type,
            capacity: opts.capacity,
            layers,
            conv,
            tokens: Vec::new(),
            n_cached: 0,
        })
    }

    /// Tokens in context.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether no token is in context.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Maximum number of tokens.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The KV cache element type.
    pub fn kv_type(&self) -> KvType {
        self.kv_type
    }

    /// The tokens in context, in order.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Tokens waiting to be re-prefilled after a [`RetainOutcome::Reprefill`].
    pub fn pending_reprefill(&self) -> usize {
        self.tokens.len() - self.n_cached
    }

    /// Exact bytes held by the cache: the KV cells, and the short-convolution layers' state.
    pub fn kv_bytes(&self) -> usize {
        let conv: usize = self.conv.iter().flatten().map(ConvCache::bytes).sum();
        conv + self.layers.iter().map(LayerCache::bytes).sum::<usize>()
    }

    /// Exact bytes this state holds: KV cache and token history (the forward pass's buffers
    /// are the [`crate::Scratch`]'s, not the State's).
    pub fn bytes(&self) -> usize {
        self.kv_bytes() + self.tokens.capacity() * 4
    }

    /// Drops every token (the cache keeps its allocation until the state is dropped or
    /// [`State::shrink`] is called).
    pub fn clear(&mut self) {
        self.tokens.clear();
        self.n_cached = 0;
        self.clear_cache_for_reprefill();
    }

    /// Frees every allocation not needed for the tokens in context: the cache cells past the
    /// last growth chunk in use and the history's spare room. Call it after a trim to hand the
    /// memory back, not only stop using it.
    pub fn shrink(&mut self) {
        self.tokens.shrink_to_fit();
        for l in &mut self.layers {
            l.shrink_to_fit();
        }
        self.conv.iter_mut().flatten().for_each(ConvCache::shrink);
    }

    /// Keeps the first `n` tokens.
    pub fn truncate(&mut self, n: usize) -> RetainOutcome {
        if n >= self.tokens.len() {
            return RetainOutcome::Unchanged;
        }
        self.retain(n, 0)
    }

    /// Context shift: keeps the first `keep_prefix` and the last `keep_suffix` tokens, drops the
    /// middle, and renumbers the kept suffix so positions stay contiguous. Keys are re-rotated in
    /// place; when the cache type or a sliding window makes that invalid, the cache is cleared
    /// and the kept tokens are re-prefilled by the next forward call. Either way the outcome says
    /// which was done.
    pub fn retain(&mut self, keep_prefix: usize, keep_suffix: usize) -> RetainOutcome {
        self.retain_with(keep_prefix, keep_suffix, RetainMethod::Shift)
    }

    /// [`State::retain`] with an explicit method.
    pub fn retain_with(
        &mut self,
        keep_prefix: usize,
        keep_suffix: usize,
        method: RetainMethod,
    ) -> RetainOutcome {
        let len = self.tokens.len();
        if keep_prefix + keep_suffix >= len {
            return RetainOutcome::Unchanged;
        }
        let p = keep_prefix as u32;
        let suffix_start = (len - keep_suffix) as u32;
        let delta = suffix_start - p;
        let kept = keep_prefix + keep_suffix;
        let dropped = len - kept;
        self.tokens.drain(keep_prefix..len - keep_suffix);
        let pending = self.n_cached < len;
        if pending
            || method == RetainMethod::Reprefill
            || !self.kv_type.supports_shift()
            || !self.window_survives(p, suffix_start, kept)
            || !self.conv_survives(
                keep_prefix,
                keep_suffix,
                suffix_start as usize,
                delta as usize,
            )
        {
            self.clear_cache_for_reprefill();
            return RetainOutcome::Reprefill { dropped, kept };
        }
        let keep = |pos: u32| pos < p || pos >= suffix_start;
        let renumber = |pos: u32| if pos < p { pos } else { pos - delta };
        for il in 0..self.layers.len() {
            let moved = self.layers[il].retain_positions(keep, renumber);
            self.rerotate_keys(il, &moved);
        }
        self.n_cached = kept;
        RetainOutcome::Shifted { dropped, kept }
    }

    /// Whether every sliding-window layer still holds all kept keys that the next query (at
    /// position `kept`) can see.
    fn window_survives(&self, p: u32, suffix_start: u32, kept: usize) -> bool {
        let Some(window) = self.config.sliding_window else {
            return true;
        };
        let Some(il) = (0..self.layers.len()).find(|&il| self.config.is_swa_layer(il)) else {
            return true;
        };
        let delta = suffix_start - p;
        let first_visible = (kept + 1).saturating_sub(window) as u32;
        let present: std::collections::HashSet<u32> = self.layers[il]
            .pos
            .iter()
            .filter(|&&pos| pos < p || pos >= suffix_start)
            .map(|&pos| if pos < p { pos } else { pos - delta })
            .collect();
        (first_visible..kept as u32).all(|pos| present.contains(&pos))
    }

    /// Cuts every convolution layer's state to the kept tokens: exact when it keeps only a
    /// prefix the rings still cover; for a shift, the kept suffix's last inputs renumbered (the
    /// trace of the dropped context that deeper layers keep, as the KV cache's does). Returns
    /// `false`, having changed nothing, when a ring cannot give the state (a re-prefill then).
    fn conv_survives(
        &mut self,
        keep_prefix: usize,
        keep_suffix: usize,
        suffix_start: usize,
        delta: usize,
    ) -> bool {
        let Some(sc) = self.config.shortconv else {
            return true;
        };
        let d = sc.d_conv();
        let rings = || self.conv.iter().flatten();
        let possible = if keep_suffix == 0 {
            rings().all(|c| c.can_truncate(keep_prefix, d))
        } else {
            rings().all(|c| c.can_shift(suffix_start, d))
        };
        if !possible {
            return false;
        }
        for c in self.conv.iter_mut().flatten() {
            if keep_suffix == 0 {
                c.truncate(keep_prefix, d);
            } else {
                c.shift(suffix_start, delta, d);
            }
        }
        true
    }

    fn clear_cache_for_reprefill(&mut self) {
        for l in &mut self.layers {
            l.clear();
        }
        self.conv.iter_mut().flatten().for_each(ConvCache::clear);
        self.n_cached = 0;
    }

    /// Rotates the keys of the moved cells of layer `il` from their old to their new positions.
    fn rerotate_keys(&mut self, il: usize, moved: &[(u32, u32)]) {
        let c = &self.config;
        if !c.uses_rope(il) {
            return;
        }
        let params = c.rope_params(il, self.capacity);
        let mut row = vec![0.0f32; c.k_dim()];
        let layer = &mut self.layers[il];
        for (cell, &(old, new)) in moved.iter().enumerate() {
            if old == new {
                continue;
            }
            layer.read_k(cell, 0, &mut row);
            let delta = new as f32 - old as f32;
            for head in row.chunks_exact_mut(c.head_dim) {
                rope::rotate(head, delta, &params, c.rope.style);
            }
            layer.rewrite_k(cell, &row);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::{write_synthetic_model, SyntheticSpec};
    use crate::{Arch, KvType, LoadOptions, Model, StateOptions};

    #[test]
    fn shifted_first_layer_keys_equal_fresh_keys() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        write_synthetic_model(&path, &SyntheticSpec::tiny(Arch::Qwen2)).unwrap();
        let model = Model::load(
            &path,
            &LoadOptions {
                threads: 1,
                ubatch: 4,
                ..LoadOptions::default()
            },
        )
        .unwrap();
        let toks: Vec<u32> = (0..12).map(|i| 3 + i * 7).collect();
        let opts = StateOptions {
            capacity: 32,
            kv_type: KvType::F32,
        };
        let mut s = model.new_state_with(opts).unwrap();
        model.forward(&mut s, &toks).unwrap();
        s.retain(2, 3);
        let kept: Vec<u32> = toks[..2].iter().chain(&toks[9..]).copied().collect();
        let mut f = model.new_state_with(opts).unwrap();
        model.forward(&mut f, &kept).unwrap();
        // Layer 0's keys depend only on the token and its position, so re-rotation must give
        // exactly a fresh prefill's keys. (Deeper layers saw the dropped tokens: a shift is an
        // approximation there, by nature.)
        let kd = model.config().k_dim();
        for il in 0..1 {
            for cell in 0..5 {
                let (mut a, mut b) = (vec![0.0; kd], vec![0.0; kd]);
                s.layers[il].read_k(cell, 0, &mut a);
                f.layers[il].read_k(cell, 0, &mut b);
                let d = a
                    .iter()
                    .zip(&b)
                    .map(|(x, y)| (x - y).abs())
                    .fold(0.0f32, f32::max);
                assert!(
                    d < 1e-3,
                    "layer {il} cell {cell} pos {} vs {}: {d}",
                    s.layers[il].pos[cell],
                    f.layers[il].pos[cell]
                );
            }
        }
    }
}

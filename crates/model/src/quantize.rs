//! GGUF requantization: `statelm quantize` and the in-memory requantization behind device tiers.
//!
//! Every tensor is dequantized to f32 and quantized to the type the recipe chose (see
//! [`choose_types`] for the recipe, which follows llama.cpp's so the outputs match files made by
//! `llama-quantize --allow-requantize`); tensors already of the chosen type and 1-D tensors are
//! copied unchanged. Metadata is copied, with `general.file_type` set to the target's
//! `llama_ftype`. Work is split into chunks of rows over `threads` threads.
//!
//! ```no_run
//! # use statelm_model::quantize::{quantize_file, QuantTarget, QuantizeOptions};
//! let report = quantize_file("in.gguf", "out-q8_0.gguf", &QuantizeOptions::new(QuantTarget::Q8_0))?;
//! println!("{} → {} bytes", report.bytes_in, report.bytes_out);
//! # Ok::<(), statelm_model::ModelError>(())
//! ```

mod exec;
mod perplexity;
mod recipe;

pub use exec::Progress;
pub use perplexity::{
    perplexity, perplexity_of_tokens, Perplexity, PerplexityOptions, SAMPLE_TEXT,
};
pub use recipe::{choose_types, use_more_bits, QuantTarget, Reason, TensorChoice};

use crate::ModelError;
use statelm_gguf::{GgufFile, GgufWriter, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

/// How to quantize.
#[derive(Clone, Copy)]
pub struct QuantizeOptions<'a> {
    /// The target type / mix.
    pub target: QuantTarget,
    /// Worker threads (0: one per available core).
    pub threads: usize,
    /// Called with `(elements done, elements total)` as chunks finish (from worker threads).
    pub progress: Option<Progress<'a>>,
}

impl std::fmt::Debug for QuantizeOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuantizeOptions")
            .field("target", &self.target)
            .field("threads", &self.threads)
            .finish_non_exhaustive()
    }
}

impl QuantizeOptions<'_> {
    /// `target` on every core, without progress reports.
    pub fn new(target: QuantTarget) -> QuantizeOptions<'static> {
        QuantizeOptions {
            target,
            threads: 0,
            progress: None,
        }
    }
}

/// Count and bytes of the tensors of one type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TypeTotals {
    /// Tensors.
    pub tensors: usize,
    /// Bytes of their data.
    pub bytes: u64,
}

/// What a quantization did.
#[derive(Debug, Clone)]
pub struct QuantizeReport {
    /// The target.
    pub target: QuantTarget,
    /// The recipe's decision for every tensor, in file order.
    pub tensors: Vec<TensorChoice>,
    /// Tensor data bytes of the input.
    pub bytes_in: u64,
    /// Tensor data bytes of the output.
    pub bytes_out: u64,
    /// Output tensors by type name (`"Q8_0"` …).
    pub by_type: BTreeMap<String, TypeTotals>,
    /// Tensors requantized (the rest were copied).
    pub converted: usize,
    /// Wall-clock seconds spent converting tensors.
    pub seconds: f64,
}

impl QuantizeReport {
    /// Output types of the tensors whose name contains `pattern`, in file order.
    pub fn types_of(&self, pattern: &str) -> Vec<statelm_gguf::GgmlType> {
        self.tensors
            .iter()
            .filter(|t| t.name.contains(pattern))
            .map(|t| t.to)
            .collect()
    }

    /// Output bits per weight over the tensors with two or more dimensions.
    pub fn bits_per_weight(&self) -> f64 {
        let (bytes, n) = self
            .tensors
            .iter()
            .filter(|t| t.dims.len() >= 2)
            .fold((0u64, 0u64), |(b, n), t| {
                (b + t.out_bytes(), n + t.n_elements())
            });
        8.0 * bytes as f64 / n.max(1) as f64
    }
}

/// Quantizes `file` into a writer holding the output's metadata and tensors.
pub fn quantize_gguf(
    file: &GgufFile,
    opts: &QuantizeOptions<'_>,
) -> Result<(GgufWriter, QuantizeReport), ModelError> {
    let choices = choose_types(file, opts.target);
    let threads = if opts.threads == 0 {
        crate::default_threads()
    } else {
        opts.threads
    };
    let start = Instant::now();
    let outputs = exec::convert_all(file, &choices, threads, opts.progress)?;
    let seconds = start.elapsed().as_secs_f64();
    let mut w = GgufWriter::new();
    w.copy_metadata_from(file);
    w.set("general.file_type", Value::U32(opts.target.file_type()));
    w.set("general.quantization_version", Value::U32(2));
    let mut by_type: BTreeMap<String, TypeTotals> = BTreeMap::new();
    for (c, data) in choices.iter().zip(outputs) {
        let e = by_type.entry(c.to.name().to_string()).or_default();
        e.tensors += 1;
        e.bytes += data.len() as u64;
        w.add_tensor(c.name.clone(), &c.dims, c.to, data)?;
    }
    let report = QuantizeReport {
        target: opts.target,
        bytes_in: file.tensors().iter().map(|t| t.n_bytes).sum(),
        bytes_out: choices.iter().map(TensorChoice::out_bytes).sum(),
        converted: choices.iter().filter(|c| !c.is_copy()).count(),
        by_type,
        tensors: choices,
        seconds,
    };
    Ok((w, report))
}

/// Quantizes `file` into a complete GGUF file in memory (for [`GgufFile::from_bytes`]).
pub fn quantize_to_bytes(
    file: &GgufFile,
    opts: &QuantizeOptions<'_>,
) -> Result<(Vec<u8>, QuantizeReport), ModelError> {
    let (w, report) = quantize_gguf(file, opts)?;
    let mut bytes = Vec::with_capacity(report.bytes_out as usize + (16 << 20));
    w.write_to(&mut bytes)?;
    Ok((bytes, report))
}

/// Quantizes the GGUF file at `input` into `output` (written atomically).
pub fn quantize_file(
    input: impl AsRef<Path>,
    output: impl AsRef<Path>,
    opts: &QuantizeOptions<'_>,
) -> Result<QuantizeReport, ModelError> {
    let file = GgufFile::open(input.as_ref())?;
    let (w, report) = quantize_gguf(&file, opts)?;
    w.write_file_atomic(output.as_ref())?;
    Ok(report)
}

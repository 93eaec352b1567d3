//! Running a recipe: every tensor to be converted is cut into chunks of rows, and worker threads
//! (`std::thread::scope`) take chunks from a shared counter, dequantize each row to f32 and
//! quantize it to the target type into the chunk's own slice of the output buffer.

use super::recipe::TensorChoice;
use crate::ModelError;
use statelm_gguf::GgufFile;
use statelm_quant::QuantError;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Elements per chunk of work (about 1 MiB of f32).
const CHUNK_ELEMENTS: u64 = 256 * 1024;

/// Progress callback: `(elements done, elements total)`; called from worker threads.
pub type Progress<'a> = &'a (dyn Fn(u64, u64) + Sync);

/// One chunk: rows `row0..` of tensor `tensor`, written into `out`.
struct Job<'a> {
    tensor: usize,
    row0: usize,
    out: Mutex<&'a mut [u8]>,
}

/// Converts every tensor of `choices` (which describe `file`'s tensors in order) and returns the
/// output data of each, in order. Copied tensors are copied; the others are requantized on
/// `threads` threads.
pub(crate) fn convert_all(
    file: &GgufFile,
    choices: &[TensorChoice],
    threads: usize,
    progress: Option<Progress<'_>>,
) -> Result<Vec<Vec<u8>>, ModelError> {
    let mut outputs: Vec<Vec<u8>> = Vec::with_capacity(choices.len());
    for (t, c) in file.tensors().iter().zip(choices) {
        if c.is_copy() {
            outputs.push(file.tensor_data(t).to_vec());
        } else {
            check_convertible(c)?;
            outputs.push(vec![0u8; c.out_bytes() as usize]);
        }
    }
    let total: u64 = choices
        .iter()
        .filter(|c| !c.is_copy())
        .map(TensorChoice::n_elements)
        .sum();
    let jobs = make_jobs(choices, &mut outputs);
    let next = AtomicUsize::new(0);
    let done = AtomicU64::new(0);
    let failure: Mutex<Option<(String, QuantError)>> = Mutex::new(None);
    let work = || {
        let mut row = Vec::new();
        while let Some(job) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
            if failure.lock().map(|f| f.is_some()).unwrap_or(true) {
                return;
            }
            let c = &choices[job.tensor];
            let src = file.tensor_data(&file.tensors()[job.tensor]);
            let mut out = job.out.lock().unwrap_or_else(|e| e.into_inner());
            match convert_rows(c, src, job.row0, &mut out, &mut row) {
                Ok(n) => {
                    let d = done.fetch_add(n, Ordering::Relaxed) + n;
                    if let Some(p) = progress {
                        p(d, total);
                    }
                }
                Err(e) => {
                    let mut f = failure.lock().unwrap_or_else(|e| e.into_inner());
                    f.get_or_insert((c.name.clone(), e));
                }
            }
        }
    };
    std::thread::scope(|s| {
        for _ in 1..threads.max(1) {
            s.spawn(work);
        }
        work();
    });
    drop(jobs);
    if let Some((name, e)) = failure.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(ModelError::BadTensor {
            name,
            reason: format!("cannot requantize: {e}"),
        });
    }
    Ok(outputs)
}

/// Fails early, with the tensor's name, when a conversion cannot work.
fn check_convertible(c: &TensorChoice) -> Result<(), ModelError> {
    let bad = |reason: String| ModelError::BadTensor {
        name: c.name.clone(),
        reason,
    };
    if !statelm_quant::can_quantize(c.to) {
        return Err(bad(format!("statelm cannot quantize to {}", c.to)));
    }
    let nx = c.dims.first().copied().unwrap_or(1);
    if nx % c.from.block_size() as u64 != 0 || nx % c.to.block_size() as u64 != 0 {
        return Err(bad(format!(
            "row length {nx} is not whole blocks of {} and {}",
            c.from, c.to
        )));
    }
    Ok(())
}

/// Cuts every converted tensor's output buffer into per-chunk slices.
fn make_jobs<'a>(choices: &[TensorChoice], outputs: &'a mut [Vec<u8>]) -> Vec<Job<'a>> {
    let mut jobs = Vec::new();
    for (i, (c, out)) in choices.iter().zip(outputs.iter_mut()).enumerate() {
        if c.is_copy() || out.is_empty() {
            continue;
        }
        let nx = c.dims.first().copied().unwrap_or(1).max(1);
        let rows = c.n_elements() / nx;
        let rows_per_chunk = (CHUNK_ELEMENTS / nx).max(1) as usize;
        let row_bytes = out.len() / rows.max(1) as usize;
        for (k, slice) in out.chunks_mut(rows_per_chunk * row_bytes).enumerate() {
            jobs.push(Job {
                tensor: i,
                row0: k * rows_per_chunk,
                out: Mutex::new(slice),
            });
        }
    }
    // Biggest tensors first would balance better, but chunks are small enough that order does
    // not matter; file order keeps the progress bar honest.
    jobs
}

/// Converts the rows starting at `row0` into `out` (whole rows); returns the elements done.
fn convert_rows(
    c: &TensorChoice,
    src: &[u8],
    row0: usize,
    out: &mut [u8],
    row: &mut Vec<f32>,
) -> Result<u64, QuantError> {
    let nx = c.dims.first().copied().unwrap_or(1) as usize;
    let in_row = c.from.bytes_for(nx as u64).unwrap_or(0) as usize;
    let out_row = c.to.bytes_for(nx as u64).unwrap_or(0) as usize;
    row.resize(nx, 0.0);
    let n_rows = out.len() / out_row.max(1);
    for (r, dst) in out.chunks_exact_mut(out_row.max(1)).enumerate() {
        let start = (row0 + r) * in_row;
        let src_row = src
            .get(start..start + in_row)
            .ok_or(QuantError::BadLength {
                what: "source tensor bytes",
                expected: start + in_row,
                got: src.len(),
            })?;
        statelm_quant::dequantize_row(c.from, src_row, row)?;
        statelm_quant::quantize_row(c.to, row, dst)?;
    }
    Ok((n_rows * nx) as u64)
}

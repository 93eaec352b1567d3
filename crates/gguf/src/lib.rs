//! GGUF read/write for statelm: a bounds-checked parser over a memory map (or
//! an owned buffer), typed metadata, and a writer for GGUF v3 files.
//!
//! ```no_run
//! # fn main() -> Result<(), statelm_gguf::GgufError> {
//! let f = statelm_gguf::GgufFile::open("model.gguf")?;
//! println!("{} with {} tensors", f.architecture()?, f.tensors().len());
//! let n_embd = f.get_u32(&format!("{}.embedding_length", f.architecture()?))?;
//! if let Some(t) = f.tensor("token_embd.weight") {
//!     let bytes: &[u8] = f.tensor_data(t); // bounds checked at open
//!     println!("{} {:?} {}: {} bytes, {n_embd}", t.name, t.dims, t.ty, bytes.len());
//! }
//! # Ok(()) }
//! ```
//!
//! Parsing never panics and never trusts a size: every read is checked
//! against the end of the file, counts are checked against [`limits`] and
//! against the bytes left before anything is allocated, dimension products
//! use checked arithmetic, and every tensor's data is checked to lie inside
//! the file before [`GgufFile::open`] returns. Errors from parsing carry the
//! byte offset where the problem was found.
//!
//! The only `unsafe` code is the memory map (module `mmap`, one block): a
//! mapped file must not be modified by another process while it is open.

#![deny(unsafe_code)]

mod accessors;
mod cursor;
mod decode;
mod error;
mod file;
pub mod ggml_type;
pub mod limits;
#[allow(unsafe_code)]
mod mmap;
mod parse;
mod tensor;
mod value;
mod writer;

pub use error::GgufError;
pub use file::GgufFile;
pub use ggml_type::GgmlType;
pub use tensor::TensorInfo;
pub use value::{Array, Value};
pub use writer::GgufWriter;

//! [`GgufFile`]: a parsed GGUF file over a memory map or an owned buffer.

use std::fmt;
use std::fs::File;
use std::path::Path;

use memmap2::Mmap;

use crate::error::GgufError;
use crate::parse::{parse, Header};
use crate::tensor::TensorInfo;
use crate::value::Value;

/// The bytes of a file: memory-mapped or owned.
enum Storage {
    Mmap(Mmap),
    Owned(Vec<u8>),
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mmap(m) => m,
            Storage::Owned(v) => v,
        }
    }
}

/// A parsed, validated GGUF file (version 2 or 3).
///
/// Opening parses the whole header (metadata and tensor infos) and checks
/// that every tensor's data lies inside the file, so [`GgufFile::tensor_data`]
/// never fails. The tensor data itself is not copied: with
/// [`GgufFile::open`] it stays in the memory map.
///
/// `GgufFile` is `Send + Sync` and immutable; share it with `Arc`.
pub struct GgufFile {
    storage: Storage,
    header: Header,
}

impl GgufFile {
    /// Memory-maps and parses the file at `path`.
    ///
    /// # Caveat
    ///
    /// As with every mmap-based loader, the file must not be truncated or
    /// modified by anyone while it is open: the OS, not Rust, backs the
    /// returned bytes, and changing them underneath is undefined behavior (or
    /// a `SIGBUS`). Replace model files atomically (write a new file and
    /// rename it over the old one, as [`crate::GgufWriter::write_file_atomic`]
    /// does) and an open mapping keeps seeing the old, intact file.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, GgufError> {
        let path = path.as_ref();
        let ctx = |what: &str| format!("{what} {}", path.display());
        let file = File::open(path).map_err(|e| GgufError::io(ctx("opening"), e))?;
        let len = file
            .metadata()
            .map_err(|e| GgufError::io(ctx("reading the size of"), e))?
            .len();
        if len == 0 {
            // Mapping an empty file is not portable; it is not GGUF anyway.
            return GgufFile::from_bytes(Vec::new());
        }
        let map = crate::mmap::map_read_only(&file)
            .map_err(|e| GgufError::io(ctx("memory-mapping"), e))?;
        let header = parse(&map)?;
        Ok(GgufFile {
            storage: Storage::Mmap(map),
            header,
        })
    }

    /// Parses a GGUF file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
        let header = parse(&bytes)?;
        Ok(GgufFile {
            storage: Storage::Owned(bytes),
            header,
        })
    }

    /// The format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.header.version
    }

    /// The data alignment: `general.alignment`, or 32 when absent.
    pub fn alignment(&self) -> u64 {
        self.header.alignment
    }

    /// Absolute offset of the tensor data section (the header end rounded up
    /// to the alignment). May equal or exceed [`GgufFile::file_size`] in a file
    /// without tensors.
    pub fn data_offset(&self) -> u64 {
        self.header.data_offset
    }

    /// Size of the whole file in bytes.
    pub fn file_size(&self) -> u64 {
        self.bytes().len() as u64
    }

    /// All metadata key/value pairs, in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.header.metadata
    }

    /// Frees the memory of the values of `keys` (absent keys are ignored): each becomes an empty
    /// value of its type — an empty array or string — under the same key. For large arrays a
    /// consumer has already indexed (a tokenizer's vocabulary is ~16 MiB of strings for a 262 K
    /// vocabulary), so a long-lived holder of the file does not keep a second copy.
    pub fn release_values(&mut self, keys: &[&str]) {
        for key in keys {
            let Some(&i) = self.header.key_index.get(*key) else {
                continue;
            };
            if let Some((_, v)) = self.header.metadata.get_mut(i) {
                *v = v.emptied();
            }
        }
    }

    /// The value of a metadata key.
    pub fn get(&self, key: &str) -> Option<&Value> {
        let i = *self.header.key_index.get(key)?;
        self.header.metadata.get(i).map(|(_, v)| v)
    }

    /// All tensor infos, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.header.tensors
    }

    /// The tensor with this name (a hash lookup).
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        let i = *self.header.tensor_index.get(name)?;
        self.header.tensors.get(i)
    }

    /// The data bytes of a tensor of this file.
    ///
    /// Bounds were validated when the file was opened. A `TensorInfo` that
    /// does not describe a range of this file (one built by hand, or taken
    /// from another file) yields an empty slice rather than a panic.
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        let range = usize::try_from(t.offset).ok().and_then(|start| {
            let end = start.checked_add(usize::try_from(t.n_bytes).ok()?)?;
            self.bytes().get(start..end)
        });
        range.unwrap_or(&[])
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        self.storage.bytes()
    }

    /// Whether the bytes are memory-mapped (opened with [`GgufFile::open`]).
    pub fn is_mmapped(&self) -> bool {
        matches!(self.storage, Storage::Mmap(_))
    }
}

impl fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version())
            .field("file_size", &self.file_size())
            .field("alignment", &self.alignment())
            .field("metadata_len", &self.metadata().len())
            .field("tensors_len", &self.tensors().len())
            .field("mmapped", &self.is_mmapped())
            .finish()
    }
}

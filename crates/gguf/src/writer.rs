//! [`GgufWriter`]: builds GGUF v3 files.

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::GgufError;
use crate::limits::{DEFAULT_ALIGNMENT, MAX_DIMS};
use crate::parse::{align_up, check_alignment, ALIGNMENT_KEY, MAGIC};
use crate::value::{Array, Value};
use crate::{GgmlType, GgufFile};

/// The version this writer produces.
const WRITE_VERSION: u32 = 3;

/// A tensor waiting to be written.
struct PendingTensor {
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    data: Vec<u8>,
}

/// Builds a GGUF v3 file in memory: metadata in insertion order, tensors in
/// insertion order, each tensor's data aligned to the file alignment.
///
/// The alignment is the `general.alignment` metadata value (a `u32` power of
/// two) when set, else 32. The writer does not check the parser's sanity
/// limits on string and array sizes ([`crate::limits`]); it checks the
/// alignment and every tensor's shape and size.
pub struct GgufWriter {
    metadata: Vec<(String, Value)>,
    tensors: Vec<PendingTensor>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        GgufWriter::new()
    }
}

impl GgufWriter {
    /// An empty writer (alignment 32, no `general.alignment` key).
    pub fn new() -> Self {
        GgufWriter {
            metadata: Vec::new(),
            tensors: Vec::new(),
        }
    }

    /// Sets the data alignment and writes it as the `general.alignment` key
    /// (a `u32`). It must be a nonzero power of two that fits in `u32`;
    /// otherwise [`GgufWriter::write_to`] fails with `BadAlignment`.
    pub fn set_alignment(&mut self, a: u64) {
        let v = u32::try_from(a).map_or(Value::U64(a), Value::U32);
        self.set(ALIGNMENT_KEY, v);
    }

    /// Sets a metadata key; an existing key keeps its position and gets the
    /// new value. Setting `general.alignment` sets the data alignment.
    pub fn set(&mut self, key: impl Into<String>, v: Value) {
        let key = key.into();
        match self.metadata.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = v,
            None => self.metadata.push((key, v)),
        }
    }

    /// Removes a metadata key, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        let i = self.metadata.iter().position(|(k, _)| k == key)?;
        Some(self.metadata.remove(i).1)
    }

    /// The metadata set so far, in order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    /// Copies every metadata key of `f`, in file order, through
    /// [`GgufWriter::set`]. That includes `general.alignment` when `f` has
    /// it, so the new file gets `f`'s alignment; when `f` has no such key
    /// the writer's alignment is left as it is.
    pub fn copy_metadata_from(&mut self, f: &GgufFile) {
        for (k, v) in f.metadata() {
            self.set(k.clone(), v.clone());
        }
    }

    /// Adds a tensor. `dims` are in ggml order (`dims[0]` = row length) and
    /// `data` must hold exactly `ty.bytes_for(product of dims)` bytes.
    ///
    /// Fails with [`GgufError::InvalidTensor`] on a duplicate name, more than
    /// [`MAX_DIMS`] dims, an overflowing element count, rows that are not
    /// whole blocks of `ty`, or a data length that does not match.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        dims: &[u64],
        ty: GgmlType,
        data: Vec<u8>,
    ) -> Result<(), GgufError> {
        let name = name.into();
        let invalid = |reason: String| GgufError::InvalidTensor {
            name: name.clone(),
            reason,
        };
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(invalid("a tensor with this name was already added".into()));
        }
        if dims.len() > MAX_DIMS as usize {
            return Err(invalid(format!(
                "{} dims, over the limit of {MAX_DIMS}",
                dims.len()
            )));
        }
        let n = dims
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .ok_or_else(|| invalid(format!("dims {dims:?} overflow")))?;
        let row_len = dims.first().copied().unwrap_or(1);
        if row_len % ty.block_size() as u64 != 0 {
            return Err(invalid(format!(
                "row length {row_len} is not a multiple of the {ty} block size {}",
                ty.block_size()
            )));
        }
        let expected = ty
            .bytes_for(n)
            .ok_or_else(|| invalid(format!("byte size of dims {dims:?} overflows")))?;
        if data.len() as u64 != expected {
            return Err(invalid(format!(
                "data has {} bytes, but {n} {ty} elements need {expected}",
                data.len()
            )));
        }
        self.tensors.push(PendingTensor {
            name,
            dims: dims.to_vec(),
            ty,
            data,
        });
        Ok(())
    }

    /// The data alignment in effect.
    fn alignment(&self) -> Result<u64, GgufError> {
        match self.metadata.iter().find(|(k, _)| k == ALIGNMENT_KEY) {
            None => Ok(DEFAULT_ALIGNMENT),
            Some((_, v)) => check_alignment(v).map_err(|()| GgufError::BadAlignment {
                found: format!("{} {}", v.type_name(), v),
                offset: 0,
            }),
        }
    }

    /// Encodes the header (everything before the data section, without the
    /// padding) and returns it with each tensor's offset in the data section
    /// and the size of the (padded) data section.
    fn encode_header(&self, alignment: u64) -> Result<(Vec<u8>, Vec<u64>, u64), GgufError> {
        let mut h = Vec::new();
        h.extend_from_slice(&MAGIC);
        h.extend_from_slice(&WRITE_VERSION.to_le_bytes());
        h.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        h.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (k, v) in &self.metadata {
            put_str(&mut h, k);
            h.extend_from_slice(&v.type_id().to_le_bytes());
            put_value(&mut h, v);
        }
        let mut offsets = Vec::with_capacity(self.tensors.len());
        let mut next = 0u64;
        for t in &self.tensors {
            put_str(&mut h, &t.name);
            h.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                h.extend_from_slice(&d.to_le_bytes());
            }
            h.extend_from_slice(&t.ty.id().to_le_bytes());
            h.extend_from_slice(&next.to_le_bytes());
            offsets.push(next);
            next = next
                .checked_add(t.data.len() as u64)
                .and_then(|end| align_up(end, alignment))
                .ok_or_else(|| GgufError::InvalidTensor {
                    name: t.name.clone(),
                    reason: "data section size overflows".into(),
                })?;
        }
        Ok((h, offsets, next))
    }

    /// Writes the complete file to `w` (buffer it: this issues many writes).
    pub fn write_to(&self, w: &mut impl Write) -> Result<(), GgufError> {
        let alignment = self.alignment()?;
        let (header, offsets, data_size) = self.encode_header(alignment)?;
        let io = |e| GgufError::io("writing GGUF data", e);
        w.write_all(&header).map_err(io)?;
        let header_len = header.len() as u64;
        // The padding up to the data section is written only when there is a data section: a
        // metadata-only file ends with its header (readers, ours and ggml's, accept that), so a
        // huge `general.alignment` cannot make the writer emit gigabytes of zeros.
        if !self.tensors.is_empty() {
            let data_start = align_up(header_len, alignment).unwrap_or(header_len);
            write_zeros(w, data_start - header_len).map_err(io)?;
        }
        let mut pos = 0u64;
        for (t, &off) in self.tensors.iter().zip(&offsets) {
            write_zeros(w, off - pos).map_err(io)?;
            w.write_all(&t.data).map_err(io)?;
            pos = off + t.data.len() as u64;
        }
        write_zeros(w, data_size - pos).map_err(io)?;
        w.flush().map_err(io)
    }

    /// Writes the file to `path` atomically: to a temporary file in the same
    /// directory, which is flushed, fsynced and renamed over `path` (and the
    /// directory fsynced, on Unix). On error `path` is untouched and the
    /// temporary file removed.
    pub fn write_file_atomic(&self, path: impl AsRef<Path>) -> Result<(), GgufError> {
        let path = path.as_ref();
        let tmp = TempFile::create_beside(path)?;
        let ctx = |what: &str| format!("{what} {}", tmp.path.display());
        {
            let mut w = BufWriter::new(&tmp.file);
            self.write_to(&mut w)?;
            w.flush().map_err(|e| GgufError::io(ctx("writing"), e))?;
        }
        tmp.file
            .sync_all()
            .map_err(|e| GgufError::io(ctx("syncing"), e))?;
        tmp.persist(path)
    }
}

/// Writes `n` zero bytes (alignment padding).
fn write_zeros(w: &mut impl Write, mut n: u64) -> std::io::Result<()> {
    const ZEROS: [u8; 4096] = [0; 4096];
    while n > 0 {
        let chunk = n.min(ZEROS.len() as u64) as usize;
        w.write_all(&ZEROS[..chunk])?;
        n -= chunk as u64;
    }
    Ok(())
}

/// Appends a GGUF string.
fn put_str(h: &mut Vec<u8>, s: &str) {
    h.extend_from_slice(&(s.len() as u64).to_le_bytes());
    h.extend_from_slice(s.as_bytes());
}

/// Appends a value (without its type id).
fn put_value(h: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => h.push(*x),
        Value::I8(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::U64(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => h.push(u8::from(*x)),
        Value::String(s) => put_str(h, s),
        Value::Array(a) => put_array(h, a),
    }
}

/// Appends an array: element type, count, elements.
fn put_array(h: &mut Vec<u8>, a: &Array) {
    h.extend_from_slice(&a.elem_type_id().to_le_bytes());
    h.extend_from_slice(&(a.len() as u64).to_le_bytes());
    macro_rules! nums {
        ($v:expr) => {
            for x in $v {
                h.extend_from_slice(&x.to_le_bytes());
            }
        };
    }
    match a {
        Array::U8(v) => h.extend_from_slice(v),
        Array::I8(v) => nums!(v),
        Array::U16(v) => nums!(v),
        Array::I16(v) => nums!(v),
        Array::U32(v) => nums!(v),
        Array::I32(v) => nums!(v),
        Array::U64(v) => nums!(v),
        Array::I64(v) => nums!(v),
        Array::F32(v) => nums!(v),
        Array::F64(v) => nums!(v),
        Array::Bool(v) => h.extend(v.iter().map(|&b| u8::from(b))),
        Array::String(v) => v.iter().for_each(|s| put_str(h, s)),
        Array::Array(v) => v.iter().for_each(|inner| put_array(h, inner)),
    }
}

/// A temporary file that is removed on drop unless persisted.
struct TempFile {
    file: File,
    path: PathBuf,
    persisted: bool,
}

impl TempFile {
    /// Creates a new, uniquely named file in the directory of `target`.
    fn create_beside(target: &Path) -> Result<TempFile, GgufError> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let dir = parent_dir(target);
        let base = target
            .file_name()
            .map_or_else(|| "gguf".into(), |n| n.to_string_lossy().into_owned());
        let mut attempt = 0;
        loop {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let path = dir.join(format!(".{base}.{}.{n}.tmp", std::process::id()));
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(file) => {
                    return Ok(TempFile {
                        file,
                        path,
                        persisted: false,
                    })
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 100 => {
                    attempt += 1;
                }
                Err(e) => {
                    let ctx = format!("creating temporary file {}", path.display());
                    return Err(GgufError::io(ctx, e));
                }
            }
        }
    }

    /// Renames the file to `target` and syncs the directory.
    fn persist(mut self, target: &Path) -> Result<(), GgufError> {
        fs::rename(&self.path, target).map_err(|e| {
            let ctx = format!("renaming {} to {}", self.path.display(), target.display());
            GgufError::io(ctx, e)
        })?;
        self.persisted = true;
        sync_dir(parent_dir(target))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.persisted {
            // Best effort: the error that got us here matters more.
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// The directory containing `path` (`.` for a bare file name).
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Fsyncs a directory so a rename in it is durable (Unix only).
fn sync_dir(dir: &Path) -> Result<(), GgufError> {
    #[cfg(unix)]
    {
        let ctx = || format!("syncing directory {}", dir.display());
        let d = File::open(dir).map_err(|e| GgufError::io(ctx(), e))?;
        d.sync_all().map_err(|e| GgufError::io(ctx(), e))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

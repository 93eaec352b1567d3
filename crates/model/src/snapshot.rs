//! State snapshots: a versioned, checksummed binary image of a [`State`].
//!
//! Layout (little-endian): magic `STLMSNAP`, u32 version, the model fingerprint (32 bytes),
//! u8 KV type, u64 capacity, u64 token count, the tokens (u32 each), u64 cached-token count,
//! u32 layer count, then per layer u32 cells, u32 ring head, the cells' positions (u32 each),
//! u64 key bytes + keys, u64 value bytes + values; since version 2, u32 convolution-layer count
//! and per short-convolution layer (LFM2) u64 end position, u32 rows, u64 bytes + the rows
//! (f32, oldest first); finally a CRC-32 of everything before it. Version 1 files (no
//! convolution section) are still read.
//! Files are written to a temporary sibling, synced, and renamed into place.

use crate::files::{write_file_atomic_with, FileKey, FileTag};
use crate::kv::KvType;
use crate::state::State;
use crate::{Model, ModelError};
use std::io::{Read, Write};
use std::path::Path;

const MAGIC: &[u8; 8] = b"STLMSNAP";
const VERSION: u32 = 2;

/// The largest capacity a snapshot may claim (16 Mi tokens): anything larger is corrupt or
/// hostile, not a conversation.
const MAX_CAPACITY: usize = 1 << 24;

/// Why a snapshot could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// Not a statelm snapshot.
    #[error("not a statelm snapshot (bad magic)")]
    BadMagic,
    /// A snapshot of another format version.
    #[error("snapshot format version {0} is not supported (this build reads 1 to {VERSION})")]
    UnsupportedVersion(u32),
    /// The checksum does not match: the file is corrupt.
    #[error("snapshot checksum mismatch: the file is corrupt")]
    Checksum,
    /// The file ends early.
    #[error("snapshot truncated at byte {0}")]
    Truncated(usize),
    /// Taken with another model.
    #[error("snapshot was taken with a different model")]
    WrongModel,
    /// Fields that contradict each other or the model.
    #[error("invalid snapshot: {0}")]
    Invalid(String),
    /// Not the file this process wrote (its authentication tag differs).
    #[error("the file is not the one this process wrote (authentication failed)")]
    NotAuthentic,
}

impl State {
    /// Serializes the state into `w`, streamed (no copy of the cache is built in memory: a
    /// spill under memory pressure must not double what it frees).
    pub fn save(&self, w: &mut impl Write) -> Result<(), ModelError> {
        self.write_snapshot(w)?;
        Ok(())
    }

    /// Writes a snapshot to `path` atomically (temporary file, fsync, rename), streamed.
    pub fn save_to_file(&self, path: impl AsRef<Path>) -> Result<(), ModelError> {
        write_file_atomic_with(path.as_ref(), |f| {
            let mut w = std::io::BufWriter::new(f);
            self.write_snapshot(&mut w)?;
            w.flush()
        })
        .map_err(ModelError::from)
    }

    /// [`State::save_to_file`], returning the file's HMAC-SHA256 under this process's key
    /// ([`FileKey::process`]): kept in memory by the caller, it lets
    /// [`State::load_from_file_authenticated`] refuse any other file found at `path` later (a
    /// spill file swapped or planted by another local user).
    pub fn save_to_file_authenticated(
        &self,
        path: impl AsRef<Path>,
    ) -> Result<FileTag, ModelError> {
        let key = FileKey::process();
        let tag = write_file_atomic_with(path.as_ref(), |f| {
            let mut w = key.writer(std::io::BufWriter::new(f));
            self.write_snapshot(&mut w)?;
            let (mut inner, tag) = w.finish();
            inner.flush()?;
            Ok(tag)
        })?;
        Ok(tag)
    }

    /// Reads a snapshot file written by [`State::save_to_file_authenticated`] that returned
    /// `tag`; any other file is refused ([`SnapshotError::NotAuthentic`]).
    pub fn load_from_file_authenticated(
        path: impl AsRef<Path>,
        model: &Model,
        tag: &FileTag,
    ) -> Result<State, ModelError> {
        let bytes = std::fs::read(path)?;
        if !FileKey::process().verify(&bytes, tag) {
            return Err(SnapshotError::NotAuthentic.into());
        }
        State::from_snapshot_bytes(&bytes, model)
    }

    /// Size in bytes of the snapshot this state would write.
    pub fn snapshot_bytes(&self) -> usize {
        let mut n = Counter(0);
        let _ = self.write_snapshot(&mut n);
        n.0
    }

    fn write_snapshot(&self, w: &mut impl Write) -> std::io::Result<()> {
        let mut w = CrcWriter {
            inner: w,
            crc: crc32fast::Hasher::new(),
        };
        w.write_all(MAGIC)?;
        w.write_all(&VERSION.to_le_bytes())?;
        w.write_all(&self.fingerprint)?;
        w.write_all(&[self.kv_type.id()])?;
        w.write_all(&(self.capacity as u64).to_le_bytes())?;
        w.write_all(&(self.tokens.len() as u64).to_le_bytes())?;
        for t in &self.tokens {
            w.write_all(&t.to_le_bytes())?;
        }
        w.write_all(&(self.n_cached as u64).to_le_bytes())?;
        w.write_all(&(self.layers.len() as u32).to_le_bytes())?;
        for l in &self.layers {
            w.write_all(&(l.used() as u32).to_le_bytes())?;
            w.write_all(&(l.head() as u32).to_le_bytes())?;
            for p in &l.pos {
                w.write_all(&p.to_le_bytes())?;
            }
            let (k, v) = l.to_le_bytes();
            w.write_all(&(k.len() as u64).to_le_bytes())?;
            w.write_all(&k)?;
            w.write_all(&(v.len() as u64).to_le_bytes())?;
            w.write_all(&v)?;
        }
        let rings: Vec<_> = self.conv.iter().flatten().collect();
        w.write_all(&(rings.len() as u32).to_le_bytes())?;
        for ring in rings {
            w.write_all(&(ring.end() as u64).to_le_bytes())?;
            w.write_all(&(ring.rows() as u32).to_le_bytes())?;
            let rows = ring.to_le_bytes();
            w.write_all(&(rows.len() as u64).to_le_bytes())?;
            w.write_all(&rows)?;
        }
        let crc = w.crc.clone().finalize();
        w.inner.write_all(&crc.to_le_bytes())
    }

    /// Reads a snapshot written by [`State::save`] for `model`.
    pub fn load(r: &mut impl Read, model: &Model) -> Result<State, ModelError> {
        let mut bytes = Vec::new();
        r.read_to_end(&mut bytes)?;
        State::from_snapshot_bytes(&bytes, model)
    }

    /// Reads a snapshot file written by [`State::save_to_file`].
    pub fn load_from_file(path: impl AsRef<Path>, model: &Model) -> Result<State, ModelError> {
        let bytes = std::fs::read(path)?;
        State::from_snapshot_bytes(&bytes, model)
    }

    fn from_snapshot_bytes(bytes: &[u8], model: &Model) -> Result<State, ModelError> {
        if bytes.len() < MAGIC.len() + 4 || &bytes[..8] != MAGIC {
            return Err(SnapshotError::BadMagic.into());
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        if !(1..=VERSION).contains(&version) {
            return Err(SnapshotError::UnsupportedVersion(version).into());
        }
        if crc32fast::hash(body) != u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) {
            return Err(SnapshotError::Checksum.into());
        }
        let mut c = Reader { b: body, at: 12 };
        if c.take(32)? != model.fingerprint() {
            return Err(SnapshotError::WrongModel.into());
        }
        let kv_type = KvType::from_id(c.take(1)?[0])
            .ok_or_else(|| SnapshotError::Invalid("unknown KV type".into()))?;
        let capacity = c.u64()? as usize;
        let n_tokens = c.count(4)?;
        let tokens: Vec<u32> = (0..n_tokens).map(|_| c.u32()).collect::<Result<_, _>>()?;
        let n_cached = c.u64()? as usize;
        if n_tokens > capacity || n_cached > n_tokens {
            return Err(SnapshotError::Invalid("token counts exceed the capacity".into()).into());
        }
        if capacity > MAX_CAPACITY {
            let msg = format!("a capacity of {capacity} tokens (at most {MAX_CAPACITY})");
            return Err(SnapshotError::Invalid(msg).into());
        }
        let n_vocab = model.config().n_vocab;
        if let Some(t) = tokens.iter().find(|&&t| t as usize >= n_vocab) {
            let msg = format!("token id {t} is outside the vocabulary ({n_vocab} tokens)");
            return Err(SnapshotError::Invalid(msg).into());
        }
        let mut state = model.new_state_with(crate::StateOptions { capacity, kv_type })?;
        if c.u32()? as usize != state.layers.len() {
            return Err(SnapshotError::Invalid("layer count differs from the model".into()).into());
        }
        for layer in &mut state.layers {
            let cells = c.u32()? as usize;
            let head = c.u32()? as usize;
            let (kr, vr) = layer.row_bytes();
            if cells > layer.max_cells() || head >= layer.max_cells().max(1) {
                return Err(
                    SnapshotError::Invalid("layer holds more cells than it can".into()).into(),
                );
            }
            let pos: Vec<u32> = (0..cells).map(|_| c.u32()).collect::<Result<_, _>>()?;
            let k_len = c.u64()? as usize;
            let k = c.take(k_len)?;
            let v_len = c.u64()? as usize;
            let v = c.take(v_len)?;
            if k_len != cells * kr || v_len != cells * vr {
                return Err(
                    SnapshotError::Invalid("cache row sizes differ from the model".into()).into(),
                );
            }
            layer.restore(pos, head, k, v);
        }
        if version >= 2 {
            read_conv(&mut c, &mut state, n_cached)?;
        }
        if state.conv.iter().flatten().any(|r| r.end() != n_cached) {
            let msg = "the convolution state does not match the cached tokens";
            return Err(SnapshotError::Invalid(msg.into()).into());
        }
        if c.at != body.len() {
            return Err(SnapshotError::Invalid("trailing bytes".into()).into());
        }
        state.tokens = tokens;
        state.n_cached = n_cached;
        Ok(state)
    }
}

/// Reads the convolution layers' state (version 2).
fn read_conv(c: &mut Reader<'_>, state: &mut State, n_cached: usize) -> Result<(), ModelError> {
    let invalid = |m: &str| ModelError::from(SnapshotError::Invalid(m.into()));
    let count = c.u32()? as usize;
    if count != state.conv.iter().flatten().count() {
        return Err(invalid("convolution layer count differs from the model"));
    }
    for ring in state.conv.iter_mut().flatten() {
        let end = c.u64()? as usize;
        let rows = c.u32()? as usize;
        let len = c.u64()? as usize;
        let bytes = c.take(len)?;
        if end != n_cached || !ring.restore(end, rows, bytes) {
            return Err(invalid("convolution state does not fit the model"));
        }
    }
    Ok(())
}

/// Passes bytes on and keeps the CRC-32 of what passed.
struct CrcWriter<'w, W: Write> {
    inner: &'w mut W,
    crc: crc32fast::Hasher,
}

impl<W: Write> Write for CrcWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Counts the bytes written to it.
struct Counter(usize);

impl Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], SnapshotError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let end = end.ok_or(SnapshotError::Truncated(self.at))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn u32(&mut self) -> Result<u32, SnapshotError> {
        let s = self.take(4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }

    fn u64(&mut self) -> Result<u64, SnapshotError> {
        let s = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_le_bytes(a))
    }

    /// A count of items of `item_bytes` each, checked against the bytes left.
    fn count(&mut self, item_bytes: usize) -> Result<usize, SnapshotError> {
        let n = self.u64()?;
        let left = (self.b.len() - self.at) as u64;
        if n.saturating_mul(item_bytes as u64) > left {
            return Err(SnapshotError::Truncated(self.at));
        }
        Ok(n as usize)
    }
}

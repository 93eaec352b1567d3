//! The history log of a durable session: its token history, appended and fsynced after every
//! turn, a few bytes per token.
//!
//! Layout (little-endian): a header — magic `STLMHLOG`, u32 version, the model fingerprint
//! (32 bytes), a CRC-32 of those 44 bytes — then records, each u32 payload length, u8 kind,
//! the payload, and a CRC-32 of the length, kind and payload. Kinds: `APPEND` (u32 tokens
//! added to the history), `TRUNCATE` (u64: the history is cut to this length), `META` (JSON:
//! the session's options and pinned prefix). A record that ends early (a write torn by a
//! kill) or whose checksum fails is dropped with everything after it, never trusted, and the
//! file is cut back to its last good record before anything is appended.

use crate::error::EngineError;
use std::fs::File;
use std::io::Write;
use std::path::Path;

const MAGIC: &[u8; 8] = b"STLMHLOG";
const VERSION: u32 = 1;
const HEADER_LEN: usize = 8 + 4 + 32 + 4;
/// Bytes of a record besides its payload (length, kind, checksum).
const RECORD_OVERHEAD: usize = 4 + 1 + 4;
/// The largest payload a record may claim (a larger length is corruption).
const MAX_PAYLOAD: usize = 1 << 26;

const APPEND: u8 = 1;
const TRUNCATE: u8 = 2;
const META: u8 = 3;

/// The options of a durable session that a resume needs besides its tokens.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct LogMeta {
    /// Tokens at the start of the context that trimming keeps.
    pub pinned: usize,
    /// The session's token budget.
    pub token_budget: Option<usize>,
    /// The pinned prefix it was created with.
    pub pinned_prefix: Option<usize>,
    /// Its system prompt.
    pub system_prompt: Option<String>,
    /// Its chat template variables (absent in logs written before they existed).
    #[serde(default)]
    pub template_vars: statelm_tokenizer::TemplateVars,
}

/// What was wrong with the end of a log (the good records before it are kept).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LogDamage {
    /// The last record ends early: a write torn by a kill.
    TornTail {
        /// Bytes dropped.
        bytes: u64,
    },
    /// A record's checksum or fields are wrong.
    Corrupt {
        /// Where the bad record starts.
        offset: u64,
        /// Bytes dropped (the record and everything after it).
        bytes: u64,
    },
}

impl std::fmt::Display for LogDamage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LogDamage::TornTail { bytes } => {
                write!(f, "a torn last record ({bytes} bytes) was dropped")
            }
            LogDamage::Corrupt { offset, bytes } => write!(
                f,
                "a corrupt record at byte {offset} was dropped with everything after it \
                 ({bytes} bytes)"
            ),
        }
    }
}

/// What a log holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LogContents {
    /// The token history its good records build.
    pub history: Vec<u32>,
    /// The latest options record.
    pub meta: Option<LogMeta>,
    /// Bytes of header and good records.
    pub valid_len: u64,
    /// What was dropped, if anything.
    pub damage: Option<LogDamage>,
}

fn bad(path: &Path, msg: &str) -> EngineError {
    EngineError::BadSessionFile(format!("{}: {msg}", path.display()))
}

fn header(fingerprint: &[u8; 32]) -> Vec<u8> {
    let mut b = Vec::with_capacity(HEADER_LEN);
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(fingerprint);
    let crc = crc32fast::hash(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

fn le_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_le_bytes(a)
}

/// Encodes one record.
fn record(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(payload.len() + RECORD_OVERHEAD);
    b.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    b.push(kind);
    b.extend_from_slice(payload);
    let crc = crc32fast::hash(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// Applies one good record to `c`; false if its fields make no sense.
fn apply(c: &mut LogContents, kind: u8, payload: &[u8]) -> bool {
    match kind {
        APPEND if payload.len().is_multiple_of(4) => {
            c.history.extend(payload.chunks_exact(4).map(le_u32));
            true
        }
        TRUNCATE if payload.len() == 8 => {
            let mut a = [0u8; 8];
            a.copy_from_slice(payload);
            match usize::try_from(u64::from_le_bytes(a)) {
                Ok(n) if n <= c.history.len() => {
                    c.history.truncate(n);
                    true
                }
                _ => false,
            }
        }
        META => match serde_json::from_slice(payload) {
            Ok(m) => {
                c.meta = Some(m);
                true
            }
            Err(_) => false,
        },
        _ => false,
    }
}

/// Decodes a log image written for the model with `fingerprint`. A bad header is an error;
/// a bad record ends the log (see [`LogContents::damage`]).
pub(crate) fn decode(
    bytes: &[u8],
    fingerprint: &[u8; 32],
    path: &Path,
) -> Result<LogContents, EngineError> {
    if bytes.len() < HEADER_LEN || &bytes[..8] != MAGIC {
        return Err(bad(
            path,
            "not a statelm history log (bad magic or too short)",
        ));
    }
    let (head, crc) = bytes[..HEADER_LEN].split_at(HEADER_LEN - 4);
    if crc32fast::hash(head) != le_u32(crc) {
        return Err(bad(path, "history log header checksum mismatch"));
    }
    let version = le_u32(&head[8..12]);
    if version != VERSION {
        return Err(bad(
            path,
            &format!("history log version {version} is not supported (this build reads {VERSION})"),
        ));
    }
    if &head[12..44] != fingerprint {
        return Err(bad(path, "history log was written with a different model"));
    }
    let mut c = LogContents::default();
    let mut at = HEADER_LEN;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let total = bytes.len() as u64;
        let torn = LogDamage::TornTail {
            bytes: total - at as u64,
        };
        if rest.len() < RECORD_OVERHEAD {
            c.damage = Some(torn);
            break;
        }
        let len = le_u32(rest) as usize;
        let corrupt = LogDamage::Corrupt {
            offset: at as u64,
            bytes: total - at as u64,
        };
        if len > MAX_PAYLOAD {
            c.damage = Some(corrupt);
            break;
        }
        if rest.len() < len + RECORD_OVERHEAD {
            c.damage = Some(torn);
            break;
        }
        let body = &rest[..5 + len];
        let ok = crc32fast::hash(body) == le_u32(&rest[5 + len..]);
        if !ok || !apply(&mut c, rest[4], &body[5..]) {
            c.damage = Some(corrupt);
            break;
        }
        at += len + RECORD_OVERHEAD;
    }
    c.valid_len = at as u64;
    Ok(c)
}

/// An open history log, appended to after every turn.
#[derive(Debug)]
pub(crate) struct HistoryLog {
    file: File,
    /// Bytes of the file that hold good records (a failed append is cut back to it).
    len: u64,
    /// The history the log holds.
    logged: Vec<u32>,
    /// The options record it holds.
    meta: Option<LogMeta>,
}

impl HistoryLog {
    /// Creates an empty log at `path` (atomically, mode 0600), replacing any file there.
    pub fn create(path: &Path, fingerprint: &[u8; 32]) -> Result<HistoryLog, EngineError> {
        statelm_model::write_file_atomic(path, &header(fingerprint))?;
        Ok(HistoryLog {
            file: open_append(path)?,
            len: HEADER_LEN as u64,
            logged: Vec::new(),
            meta: None,
        })
    }

    /// Opens the log at `path` and reads it; a damaged tail is cut off the file (synced) so
    /// new records follow the last good one.
    pub fn open(
        path: &Path,
        fingerprint: &[u8; 32],
    ) -> Result<(HistoryLog, LogContents), EngineError> {
        let bytes = std::fs::read(path)?;
        let contents = decode(&bytes, fingerprint, path)?;
        let file = open_append(path)?;
        if contents.damage.is_some() {
            file.set_len(contents.valid_len)?;
            file.sync_all()?;
        }
        let log = HistoryLog {
            file,
            len: contents.valid_len,
            logged: contents.history.clone(),
            meta: contents.meta.clone(),
        };
        Ok((log, contents))
    }

    /// Brings the log up to `history` and `meta` (a truncation record where the history
    /// diverged, then the new tokens) and fsyncs it. Returns the bytes appended.
    pub fn sync(&mut self, history: &[u32], meta: &LogMeta) -> Result<usize, EngineError> {
        let common = crate::plan::common_prefix(&self.logged, history);
        let mut buf = Vec::new();
        if self.meta.as_ref() != Some(meta) {
            let json =
                serde_json::to_vec(meta).map_err(|e| EngineError::Internal(e.to_string()))?;
            buf.extend(record(META, &json));
        }
        if common < self.logged.len() {
            buf.extend(record(TRUNCATE, &(common as u64).to_le_bytes()));
        }
        for chunk in history[common..].chunks(MAX_PAYLOAD / 4) {
            let payload: Vec<u8> = chunk.iter().flat_map(|t| t.to_le_bytes()).collect();
            buf.extend(record(APPEND, &payload));
        }
        if buf.is_empty() {
            return Ok(0);
        }
        let written = self
            .file
            .write_all(&buf)
            .and_then(|()| self.file.sync_data());
        if let Err(e) = written {
            // Never leave half a record for the next one to follow (disk full, I/O error).
            let _ = self.file.set_len(self.len);
            return Err(e.into());
        }
        self.len += buf.len() as u64;
        self.logged.truncate(common);
        self.logged.extend_from_slice(&history[common..]);
        self.meta = Some(meta.clone());
        Ok(buf.len())
    }
}

fn open_append(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new().append(true).open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FP: [u8; 32] = [7; 32];

    fn meta() -> LogMeta {
        LogMeta {
            pinned: 3,
            ..LogMeta::default()
        }
    }

    fn read(path: &Path) -> LogContents {
        decode(&std::fs::read(path).unwrap(), &FP, path).unwrap()
    }

    #[test]
    fn appends_truncations_and_meta_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.stlmlog");
        let mut log = HistoryLog::create(&path, &FP).unwrap();
        assert!(log.sync(&[1, 2, 3], &meta()).unwrap() > 0);
        // A few bytes per token: 4 bytes each plus one record header.
        let before = std::fs::metadata(&path).unwrap().len();
        log.sync(&[1, 2, 3, 4, 5], &meta()).unwrap();
        let after = std::fs::metadata(&path).unwrap().len();
        assert_eq!(after - before, (2 * 4 + RECORD_OVERHEAD) as u64);
        assert_eq!(log.sync(&[1, 2, 3, 4, 5], &meta()).unwrap(), 0);
        log.sync(&[1, 2, 9], &meta()).unwrap();
        let c = read(&path);
        assert_eq!(c.history, vec![1, 2, 9]);
        assert_eq!(c.meta, Some(meta()));
        assert_eq!(c.damage, None);
        // Reopening continues where it left off.
        let (mut log, c) = HistoryLog::open(&path, &FP).unwrap();
        assert_eq!(c.history, vec![1, 2, 9]);
        log.sync(&[1, 2, 9, 10], &meta()).unwrap();
        assert_eq!(read(&path).history, vec![1, 2, 9, 10]);
    }

    #[test]
    fn a_torn_last_record_is_dropped_and_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.stlmlog");
        let mut log = HistoryLog::create(&path, &FP).unwrap();
        log.sync(&[1, 2, 3], &meta()).unwrap();
        let good = std::fs::metadata(&path).unwrap().len();
        log.sync(&[1, 2, 3, 4, 5, 6], &meta()).unwrap();
        drop(log);
        // A kill in the middle of the second append: only part of it reached the disk.
        for keep in [1u64, 6, 12] {
            let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            f.set_len(good + keep).unwrap();
            let c = read(&path);
            assert_eq!(c.history, vec![1, 2, 3], "cut {keep}");
            assert_eq!(c.damage, Some(LogDamage::TornTail { bytes: keep }));
            assert_eq!(c.valid_len, good);
        }
        let (mut log, c) = HistoryLog::open(&path, &FP).unwrap();
        assert!(c.damage.is_some());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), good);
        log.sync(&[1, 2, 3, 7], &meta()).unwrap();
        let c = read(&path);
        assert_eq!((c.history, c.damage), (vec![1, 2, 3, 7], None));
    }

    #[test]
    fn a_corrupt_record_is_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.stlmlog");
        let mut log = HistoryLog::create(&path, &FP).unwrap();
        log.sync(&[1, 2], &meta()).unwrap();
        let first = std::fs::metadata(&path).unwrap().len();
        log.sync(&[1, 2, 3, 4], &meta()).unwrap();
        log.sync(&[1, 2, 3, 4, 5], &meta()).unwrap();
        drop(log);
        let mut bytes = std::fs::read(&path).unwrap();
        // Flip a token bit in the second append record.
        bytes[first as usize + 5] ^= 0x10;
        std::fs::write(&path, &bytes).unwrap();
        let c = read(&path);
        assert_eq!(c.history, vec![1, 2]);
        assert!(
            matches!(c.damage, Some(LogDamage::Corrupt { offset, .. }) if offset == first),
            "{:?}",
            c.damage
        );
        // A length that claims gigabytes is corruption, not an allocation.
        bytes[first as usize..first as usize + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(
            read(&path).damage,
            Some(LogDamage::Corrupt { .. })
        ));
    }

    #[test]
    fn a_bad_header_or_another_model_is_a_typed_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.stlmlog");
        HistoryLog::create(&path, &FP).unwrap();
        let other = [8u8; 32];
        let bytes = std::fs::read(&path).unwrap();
        let e = decode(&bytes, &other, &path).unwrap_err();
        assert!(matches!(e, EngineError::BadSessionFile(m) if m.contains("different model")));
        for cut in [0, 7, 20] {
            let e = decode(&bytes[..cut], &FP, &path).unwrap_err();
            assert!(matches!(e, EngineError::BadSessionFile(_)));
        }
        let mut flipped = bytes.clone();
        flipped[10] ^= 1;
        assert!(decode(&flipped, &FP, &path).is_err());
    }
}

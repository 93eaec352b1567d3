//! Files statelm writes for its own use (State snapshots, spill files, session logs): private to
//! their user, written atomically, and — for files read back by the process that wrote them —
//! authenticated.
//!
//! * [`write_file_atomic`]: a temporary sibling with an unpredictable name, created with
//!   `O_EXCL` and mode 0600, written and fsynced, renamed into place, the directory fsynced.
//! * [`ensure_private_dir`]: a directory created 0700, or an existing one checked: a real
//!   directory (not a symlink), owned by this user, closed to others.
//! * [`FileKey::process`]: this process's random key; a file's HMAC-SHA256 under it, kept in
//!   memory, proves that what is read back is what was written (CRC-32 only catches
//!   accidents, and a snapshot's model fingerprint is public).

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::io::Write;
use std::path::Path;

/// An HMAC-SHA256 authentication tag.
pub type FileTag = [u8; 32];

/// A random key authenticating the files one process writes and reads back.
#[derive(Clone)]
pub struct FileKey([u8; 32]);

impl std::fmt::Debug for FileKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FileKey(<secret>)")
    }
}

impl FileKey {
    /// A fresh key from the operating system's random source (where that fails, from the
    /// standard library's randomly seeded hasher keys).
    pub fn random() -> FileKey {
        let mut k = [0u8; 32];
        if getrandom::fill(&mut k).is_err() {
            use std::hash::{BuildHasher, Hasher};
            for chunk in k.chunks_mut(8) {
                let mut h = std::collections::hash_map::RandomState::new().build_hasher();
                h.write_u64(0x5354_4c4d);
                chunk.copy_from_slice(&h.finish().to_le_bytes());
            }
        }
        FileKey(k)
    }

    /// This process's key (made on first use; never leaves the process).
    pub fn process() -> &'static FileKey {
        static KEY: std::sync::OnceLock<FileKey> = std::sync::OnceLock::new();
        KEY.get_or_init(FileKey::random)
    }

    fn mac(&self) -> Hmac<Sha256> {
        // HMAC takes keys of any length: this cannot fail.
        <Hmac<Sha256> as Mac>::new_from_slice(&self.0).unwrap_or_else(|_| unreachable!())
    }

    /// A writer passing bytes on to `inner` and authenticating them.
    pub fn writer<W: Write>(&self, inner: W) -> MacWriter<W> {
        MacWriter {
            inner,
            mac: self.mac(),
        }
    }

    /// Whether `bytes` are what was written when `tag` was made (constant-time comparison).
    pub fn verify(&self, bytes: &[u8], tag: &FileTag) -> bool {
        let mut m = self.mac();
        m.update(bytes);
        m.verify_slice(tag).is_ok()
    }
}

/// See [`FileKey::writer`].
pub struct MacWriter<W: Write> {
    inner: W,
    mac: Hmac<Sha256>,
}

impl<W: Write> MacWriter<W> {
    /// The inner writer and the tag of everything written.
    pub fn finish(self) -> (W, FileTag) {
        (self.inner, self.mac.finalize().into_bytes().into())
    }
}

impl<W: Write> Write for MacWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.mac.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Makes sure `dir` is a directory only this user can enter: created with mode 0700 (parents
/// too) when missing; when it exists it must be a real directory owned by this user, and
/// permissions open to others are closed. Another user's directory, or a symlink, is refused
/// (`PermissionDenied`): whoever created it could read or replace what is written there.
pub fn ensure_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(dir)?;
    let meta = std::fs::symlink_metadata(dir)?;
    let refuse = |why: &str| {
        let msg = format!(
            "{}: {why}; refusing to write private files there",
            dir.display()
        );
        Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            msg,
        ))
    };
    if !meta.is_dir() {
        return refuse("not a directory (a symlink?)");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        if meta.uid() != rustix::process::geteuid().as_raw() {
            return refuse("owned by another user");
        }
        if meta.mode() & 0o077 != 0 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
    }
    Ok(())
}

/// A directory name made per user (`base-UID` on Unix), for shared places such as `/tmp`.
pub fn per_user(base: &str) -> String {
    #[cfg(unix)]
    return format!("{base}-{}", rustix::process::geteuid().as_raw());
    #[cfg(not(unix))]
    base.to_string()
}

/// Writes `bytes` to `path` atomically: a temporary sibling with a unique name, created with
/// `O_EXCL` and mode 0600, is written and fsynced, renamed into place, and the directory is
/// fsynced, so a reader (or a restart after a kill) never sees a half-written file (also used
/// for the engine's session files).
pub fn write_file_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_file_atomic_with(path, |f| f.write_all(bytes))
}

/// [`write_file_atomic`] with the contents written by `write` into the temporary file.
pub(crate) fn write_file_atomic_with<T>(
    path: &Path,
    write: impl FnOnce(&mut std::fs::File) -> std::io::Result<T>,
) -> std::io::Result<T> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut random = [0u8; 8];
    // Unpredictable where the OS has a random source; unique in this process regardless.
    let _ = getrandom::fill(&mut random);
    let unique = format!(
        "{}-{}-{:016x}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        u64::from_le_bytes(random)
    );
    let tmp = dir.join(format!(".{name}.tmp-{unique}"));
    let result = (|| {
        let mut f = private_create_new(&tmp)?;
        let out = write(&mut f)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        sync_dir(dir)?;
        Ok(out)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Creates a new file (failing if it exists, `O_EXCL`), readable and writable by its owner
/// only (0600 on Unix).
pub fn private_create_new(path: &Path) -> std::io::Result<std::fs::File> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    o.open(path)
}

/// Fsyncs a directory, so a rename or a new file in it survives a crash (a no-op where
/// directories cannot be opened).
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    std::fs::File::open(dir)?.sync_all()?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

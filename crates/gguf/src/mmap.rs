//! Memory-mapping model files: the only `unsafe` code in this crate.
//!
//! # Safety
//!
//! A memory map hands out a `&[u8]` whose contents the operating system,
//! not Rust, keeps alive. If another process truncates or rewrites the file
//! while it is mapped, reads through that slice see changing bytes (which
//! breaks the immutability Rust assumes: undefined behavior) or fault with
//! `SIGBUS` past a truncated end. No Rust code can prevent that. We accept
//! the risk for read-only model files, exactly as every mmap-based loader
//! (llama.cpp, safetensors, ...) does: model files are written once,
//! atomically (see [`crate::GgufWriter::write_file_atomic`], which renames a
//! complete temporary file into place, so an existing mapping keeps the old
//! inode), and never modified in place. Do not point [`crate::GgufFile::open`]
//! at a file that something else is writing.

use std::fs::File;
use std::io;

use memmap2::Mmap;

/// Maps the whole of `file` read-only.
pub(crate) fn map_read_only(file: &File) -> io::Result<Mmap> {
    // SAFETY: `Mmap::map` is unsafe because the mapped bytes can change (or
    // the pages vanish, raising SIGBUS) if another process modifies or
    // truncates the file while it is mapped, which would be undefined behavior
    // for the `&[u8]` we hand out. We map read-only (so this process never
    // writes through it) and accept the external risk for model files, which
    // are immutable once written, as documented on this module.
    unsafe { Mmap::map(file) }
}

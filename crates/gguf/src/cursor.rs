//! A bounds-checked little-endian reader over a byte slice.
//!
//! Every read checks the remaining length first and reports
//! [`GgufError::Truncated`] with the offset of the item; nothing here indexes
//! without a check.

use crate::error::GgufError;

/// A read position in a byte slice.
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `buf`.
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    /// The current offset from the start of the slice.
    pub(crate) fn pos(&self) -> u64 {
        self.pos as u64
    }

    /// Bytes left after the current position.
    pub(crate) fn remaining(&self) -> u64 {
        self.buf.len().saturating_sub(self.pos) as u64
    }

    /// Fails with `Truncated` unless `needed` bytes remain.
    pub(crate) fn ensure(&self, needed: u64, what: &'static str) -> Result<(), GgufError> {
        if needed > self.remaining() {
            return Err(GgufError::Truncated {
                offset: self.pos(),
                needed,
                what,
            });
        }
        Ok(())
    }

    /// Takes the next `n` bytes.
    pub(crate) fn take(&mut self, n: u64, what: &'static str) -> Result<&'a [u8], GgufError> {
        self.ensure(n, what)?;
        // `ensure` guarantees `n <= remaining <= usize::MAX`.
        let n = n as usize;
        let end = self.pos + n;
        let Some(out) = self.buf.get(self.pos..end) else {
            return Err(GgufError::Truncated {
                offset: self.pos as u64,
                needed: n as u64,
                what,
            });
        };
        self.pos = end;
        Ok(out)
    }

    /// Takes the next `N` bytes as an array.
    pub(crate) fn array<const N: usize>(
        &mut self,
        what: &'static str,
    ) -> Result<[u8; N], GgufError> {
        let start = self.pos();
        let bytes = self.take(N as u64, what)?;
        <[u8; N]>::try_from(bytes).map_err(|_| GgufError::Truncated {
            offset: start,
            needed: N as u64,
            what,
        })
    }

    /// Reads one byte.
    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8, GgufError> {
        Ok(self.array::<1>(what)?[0])
    }

    /// Reads a little-endian `u32`.
    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    /// Reads a little-endian `u64`.
    pub(crate) fn u64(&mut self, what: &'static str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// Reads a GGUF string (`u64` length + UTF-8 bytes) of at most `max_len`
    /// bytes. `len_what` names the length in errors, `what` the bytes.
    pub(crate) fn string(
        &mut self,
        (what, len_what): (&'static str, &'static str),
        max_len: u64,
    ) -> Result<String, GgufError> {
        let start = self.pos();
        let len = self.u64(len_what)?;
        if len > max_len {
            return Err(GgufError::LimitExceeded {
                what: len_what,
                value: len,
                limit: max_len,
                offset: start,
            });
        }
        let bytes = self.take(len, what)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(GgufError::InvalidUtf8 { offset: start }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_truncates() {
        let data = [1u8, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 9];
        let mut c = Cursor::new(&data);
        assert_eq!(c.u32("a").unwrap(), 1);
        assert_eq!(c.u64("b").unwrap(), 2);
        assert_eq!(c.remaining(), 1);
        let err = c.u32("c").unwrap_err();
        assert!(matches!(
            err,
            GgufError::Truncated {
                offset: 12,
                needed: 4,
                what: "c"
            }
        ));
        assert_eq!(c.u8("d").unwrap(), 9);
        assert!(c.take(u64::MAX, "e").is_err());
    }

    #[test]
    fn string_limits() {
        let mut data = 5u64.to_le_bytes().to_vec();
        data.extend_from_slice(b"hello");
        assert_eq!(
            Cursor::new(&data).string(("s", "s len"), 5).unwrap(),
            "hello"
        );
        assert!(matches!(
            Cursor::new(&data).string(("s", "s len"), 4),
            Err(GgufError::LimitExceeded { value: 5, .. })
        ));
        let mut bad = 1u64.to_le_bytes().to_vec();
        bad.push(0xff);
        assert!(matches!(
            Cursor::new(&bad).string(("s", "s len"), 5),
            Err(GgufError::InvalidUtf8 { offset: 0 })
        ));
    }
}

//! C strings in and out, and writes through out-pointers.
//!
//! Strings statelm returns (`char**` out-parameters) are registered until
//! `statelm_string_free`, so freeing one twice, or freeing a pointer statelm never returned,
//! is detected instead of corrupting the heap.

use crate::status::FfiError;
use std::collections::BTreeSet;
use std::ffi::{c_char, CStr, CString};
use std::sync::{Mutex, PoisonError};

/// Reads a required UTF-8 C string argument named `what`.
///
/// # Safety
/// `p` must be NULL or point to a NUL-terminated string that stays valid and unchanged for
/// the returned lifetime.
pub(crate) unsafe fn read_str<'a>(p: *const c_char, what: &str) -> Result<&'a str, FfiError> {
    if p.is_null() {
        return Err(FfiError::null(what));
    }
    // SAFETY: `p` is not NULL and, by this function's contract, NUL-terminated and valid.
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str()
        .map_err(|e| FfiError::invalid(format!("`{what}` is not valid UTF-8: {e}")))
}

/// Reads an optional UTF-8 C string argument (NULL or empty gives `None`).
///
/// # Safety
/// As [`read_str`].
pub(crate) unsafe fn read_opt_str<'a>(
    p: *const c_char,
    what: &str,
) -> Result<Option<&'a str>, FfiError> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: forwarded contract.
    let s = unsafe { read_str(p, what) }?;
    Ok((!s.trim().is_empty()).then_some(s))
}

/// Fails with `STATELM_ERR_NULL_POINTER` when the out-pointer `out` is NULL, and otherwise
/// resets what it points to to `empty`, so a failed call leaves a defined value behind.
///
/// # Safety
/// `out` must be NULL or valid for writing one `T`.
pub(crate) unsafe fn reset_out<T>(out: *mut T, empty: T, what: &str) -> Result<(), FfiError> {
    if out.is_null() {
        return Err(FfiError::null(what));
    }
    // SAFETY: `out` is not NULL and, by this function's contract, valid for writes.
    unsafe { out.write(empty) };
    Ok(())
}

/// Writes `value` through an out-pointer that [`reset_out`] accepted.
///
/// # Safety
/// `out` must be valid for writing one `T` (not NULL).
pub(crate) unsafe fn write_out<T>(out: *mut T, value: T) {
    debug_assert!(!out.is_null());
    // SAFETY: by this function's contract.
    unsafe { out.write(value) };
}

/// Addresses of the strings handed out and not yet freed.
static LIVE_STRINGS: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());

fn live_strings() -> std::sync::MutexGuard<'static, BTreeSet<usize>> {
    LIVE_STRINGS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Hands `s` to C as a string the caller frees with `statelm_string_free` (interior NULs,
/// which JSON never contains, are escaped).
pub(crate) fn export_string(s: String) -> *mut c_char {
    let c = CString::new(s.replace('\0', "\\u0000")).unwrap_or_default();
    let p = c.into_raw();
    live_strings().insert(p.addr());
    p
}

/// Frees a string from [`export_string`]; NULL is a no-op.
pub(crate) fn free_string(p: *mut c_char) -> Result<(), FfiError> {
    if p.is_null() {
        return Ok(());
    }
    if !live_strings().remove(&p.addr()) {
        return Err(FfiError::invalid(format!(
            "string {p:p} was not returned by statelm, or was already freed"
        )));
    }
    // SAFETY: `p` was produced by `CString::into_raw` in `export_string` and was still
    // registered, so it has not been freed; it is now unregistered, so it is freed only once.
    drop(unsafe { CString::from_raw(p) });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_freed_once() {
        let p = export_string("{\"a\":1}".into());
        // SAFETY: `p` is a live string from `export_string`.
        assert_eq!(unsafe { CStr::from_ptr(p) }, c"{\"a\":1}");
        assert!(free_string(p).is_ok());
        assert!(free_string(p).is_err(), "double free must be detected");
        assert!(free_string(std::ptr::null_mut()).is_ok());
        let mut local = *b"x\0";
        assert!(free_string(local.as_mut_ptr().cast()).is_err());
    }

    #[test]
    fn input_strings_are_checked() {
        // SAFETY: NULL and a valid literal.
        unsafe {
            assert!(read_str(std::ptr::null(), "path").is_err());
            assert_eq!(read_str(c"abc".as_ptr(), "path"), Ok("abc"));
            assert_eq!(read_opt_str(c"  ".as_ptr(), "json"), Ok(None));
            assert_eq!(read_opt_str(std::ptr::null(), "json"), Ok(None));
        }
        let bad = [0xffu8, 0xfe, 0];
        // SAFETY: a NUL-terminated local buffer.
        let r = unsafe { read_str(bad.as_ptr().cast(), "prompt") };
        assert!(r.unwrap_err().message.contains("UTF-8"));
    }
}

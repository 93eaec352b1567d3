//! `prctl(PR_SET_THP_DISABLE)`: the one process setting the governor changes on Linux and
//! Android (see [`crate::keep_huge_pages_out`]).

/// Turns transparent huge pages off for this process; `Err` carries the OS error.
pub(crate) fn disable() -> std::io::Result<()> {
    // SAFETY: PR_SET_THP_DISABLE takes plain integers (1, then three unused zeros), reads no
    // memory of ours and only sets a flag on this process's address space.
    let rc = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Whether transparent huge pages are off for this process (`PR_GET_THP_DISABLE`).
pub(crate) fn disabled() -> std::io::Result<bool> {
    // SAFETY: PR_GET_THP_DISABLE takes four unused zeros and returns the flag; it touches no
    // memory of ours.
    let rc = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(rc == 1)
    }
}

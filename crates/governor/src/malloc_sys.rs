//! glibc's `malloc_trim`: the one allocator call the governor makes on Linux.

/// Returns the free memory of every malloc arena to the kernel (top of heap and whole free
/// pages inside it).
pub(crate) fn trim() {
    // SAFETY: malloc_trim takes a byte count to keep, touches only the allocator's own free
    // lists under its own locks, and is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

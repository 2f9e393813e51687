//! Giving the process heap's free pages back to the system when the engine
//! idles. On the CPU backend MLX's buffers come from `malloc`; glibc keeps
//! freed ones in its arenas (and, after a large free, raises its threshold for
//! serving big blocks from `mmap`, so later ones land in the arenas too). How
//! much stays resident then depends on the order in which batches of
//! different shapes happened to run: the same requests left 709, 717 or
//! 768 MB resident. `malloc_trim` hands back every whole free page.
//! macOS's allocator returns large blocks itself; elsewhere this does nothing.

/// Returns the heap's free pages to the system (glibc); a no-op elsewhere.
pub fn release_free_pages() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it is
    // thread-safe and has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

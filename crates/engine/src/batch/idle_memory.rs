//! What the engine gives back when it idles, and takes again when work
//! resumes.
//!
//! - MLX's buffer cache. While requests run, MLX keeps freed buffers to
//!   reuse them without a new allocation; kept after the last request they
//!   are memory a desktop app holds for nothing (hundreds of MB after a
//!   large batch). Clearing it once is not enough: the CPU backend's stream
//!   thread drops a finished graph's temporaries a moment after the results
//!   are ready, and those landed in the cache after the clear (0.7 to 190 KB
//!   in `batching.rs`'s memory test, depending on timing). So while idle the
//!   cache limit is 0 (every freed buffer goes straight back), and the
//!   process's own limit is restored at the next step.
//! - The process heap's free pages (glibc). On the CPU backend MLX's buffers
//!   come from `malloc`; glibc keeps freed ones in its arenas (and, after a
//!   large free, raises its threshold for serving big blocks from `mmap`, so
//!   later ones land in the arenas too). How much stays resident then depends
//!   on the order in which batches of different shapes ran: the same
//!   requests left 709, 717 or 768 MB resident. `malloc_trim` hands back every
//!   whole free page. macOS's allocator returns large blocks itself.
//! - glibc's per-thread arenas ([`use_one_heap_arena`]). A thread that meets
//!   contention gets an arena of its own (up to 8 per core), and buffers
//!   that land in a fresh one stay spread over it: identical runs of the
//!   server's fault suite ended at 583 to 640 MB, and a run could jump 52 MB
//!   between two identical rounds. With one arena every run ended at
//!   583.0 MB ±0.1 MB, at the same speed (MLX's buffer cache, not malloc,
//!   serves the steps).
use std::sync::OnceLock;

/// MLX's cache limit before the engine first idled (MLX's default): the
/// limit to restore. One per process, as the limit is.
static WORKING_CACHE_LIMIT: OnceLock<usize> = OnceLock::new();

/// Gives MLX's cached buffers and the heap's free pages back, and keeps
/// MLX from caching until [`resume`].
pub fn release() {
    match mlx_rs::memory::set_cache_limit(0) {
        Ok(previous) => {
            WORKING_CACHE_LIMIT.get_or_init(|| previous);
        }
        Err(error) => tracing::warn!(%error, "could not lower MLX's cache limit"),
    }
    if let Err(error) = mlx_rs::memory::clear_cache() {
        tracing::warn!(%error, "could not clear MLX's buffer cache");
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it is
    // thread-safe and has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Lets MLX cache freed buffers again (work resumed).
pub fn resume() {
    if let Some(&limit) = WORKING_CACHE_LIMIT.get() {
        if let Err(error) = mlx_rs::memory::set_cache_limit(limit) {
            tracing::warn!(%error, "could not restore MLX's cache limit");
        }
    }
}

/// One malloc arena for the whole process (glibc; elsewhere nothing). Call
/// it first thing in `main`, before other threads exist: an arena a thread
/// already has stays in use.
pub fn use_one_heap_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; M_ARENA_MAX takes
    // any positive count.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

//! Least-recently-used eviction by bytes, shared by the caches that keep
//! entries within a byte bound (the prefix cache, the vision-feature cache).

/// An entry that knows its size and when it was last used.
pub trait LruEntry {
    fn bytes(&self) -> usize;
    fn last_used(&self) -> u64;
}

/// Removes least-recently-used entries until the total is within `limit` bytes.
pub fn evict_to<E: LruEntry>(entries: &mut Vec<E>, limit: usize) {
    while entries.iter().map(LruEntry::bytes).sum::<usize>() > limit {
        let oldest = entries
            .iter()
            .enumerate()
            .min_by_key(|(_, e)| e.last_used())
            .map(|(i, _)| i)
            .expect("over the limit means not empty");
        entries.swap_remove(oldest);
    }
}

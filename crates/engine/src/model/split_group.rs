//! What the engine thread asks of a model split across processes besides
//! its forward passes: keep the followers listening between steps, report
//! every rank's memory, and stop for good once a step failed (the other
//! ranks' state is then unknown). A whole model has no such part
//! ([`super::LanguageModel::split`] is `None`); rank 0's
//! [`crate::distributed::LeaderModel`] is one.
use crate::distributed::RankMemory;
use crate::error::{Error, Result};

pub trait SplitGroup {
    /// Called between steps and while idle: tells the followers rank 0 is
    /// alive, if it has not lately.
    fn heartbeat(&self) -> Result<()>;

    /// Every rank's memory, rank 0's caches counted as `own_cache_bytes`
    /// (gathered at most once a second; the last figures once the group
    /// failed).
    fn ranks(&self, own_cache_bytes: u64) -> Vec<RankMemory>;

    /// Why the group failed (it serves no more requests); `None` while it works.
    fn failure(&self) -> Option<String>;

    /// Told when a step failed and the batch was dropped: the group stops
    /// there.
    fn batch_failed(&self, error: &Error);
}

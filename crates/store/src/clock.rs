//! Where the store's timestamps come from. Chats are listed by their last
//! activity in milliseconds; a test that checks that order moves a manual
//! clock forward instead of sleeping and hoping the next millisecond came.
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

#[derive(Debug, Clone, Default)]
pub enum Clock {
    /// The system's wall clock, in milliseconds since the Unix epoch.
    #[default]
    System,
    /// A time that moves only when told ([`Clock::advance`]).
    Manual(Arc<AtomicI64>),
}

impl Clock {
    /// A manual clock at `start_ms`.
    pub fn manual(start_ms: i64) -> Self {
        Clock::Manual(Arc::new(AtomicI64::new(start_ms)))
    }

    /// Moves a manual clock forward; the system clock moves by itself.
    pub fn advance(&self, ms: i64) {
        if let Clock::Manual(now) = self {
            now.fetch_add(ms, Ordering::SeqCst);
        }
    }

    pub fn now_ms(&self) -> i64 {
        match self {
            Clock::System => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0),
            Clock::Manual(now) => now.load(Ordering::SeqCst),
        }
    }
}

//! Stopping a job: no new image is submitted, and the answers in flight are
//! dropped (dropping an engine stream cancels its request).
use std::sync::Arc;

use tokio::sync::watch;

/// Cheap to clone; every clone sees the same cancel.
#[derive(Debug, Clone)]
pub struct CancelToken {
    state: Arc<watch::Sender<bool>>,
}

impl Default for CancelToken {
    fn default() -> Self {
        Self { state: Arc::new(watch::Sender::new(false)) }
    }
}

impl CancelToken {
    pub fn cancel(&self) {
        self.state.send_replace(true);
    }

    pub fn is_cancelled(&self) -> bool {
        *self.state.borrow()
    }

    /// Returns once [`Self::cancel`] has been called (at once if it was).
    pub async fn cancelled(&self) {
        let mut seen = self.state.subscribe();
        // the sender lives in `self`, so wait_for cannot fail
        let _ = seen.wait_for(|cancelled| *cancelled).await;
    }
}

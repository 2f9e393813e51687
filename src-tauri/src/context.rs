//! What a chat does when its conversation outgrows the model's context.
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextPolicy {
    /// The reply fails with CONTEXT_LENGTH_EXCEEDED and says so (nothing is left out silently).
    #[default]
    Stop,
    /// Keeps the system prompt and the first exchange, leaves out the oldest messages after it.
    TruncateMiddle,
    /// Leaves out the oldest messages.
    RollingWindow,
}

//! What a chat does when its conversation outgrows the model's context:
//! stop with a clear error (the default: nothing is left out silently),
//! leave out the middle (the first exchange stays), or a rolling window
//! (the oldest messages go). The question being answered always stays.
//!
//! How many messages to leave out is measured by the engine itself
//! (`EngineHandle::count_prompt_tokens`: its template, tokenizer and each
//! image's slots from the image's header); the engine still has the last
//! word: a prompt it refuses as too long loses one more exchange and is sent
//! again.
use serde::{Deserialize, Serialize};
use store::{Message, Role};
use ts_rs::TS;

use crate::error::AppError;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, TS)]
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

/// The engine's code for a prompt longer than the context.
pub const CONTEXT_LENGTH_EXCEEDED: &str = "CONTEXT_LENGTH_EXCEEDED";

/// The messages sent when about `drop` of them are left out under `policy`,
/// and how many were: whole exchanges go (what is kept starts with a
/// message of the user, as chat templates expect), never the first
/// exchange under `TruncateMiddle`, never the last question or what follows it.
pub fn leave_out(
    messages: &[Message],
    policy: ContextPolicy,
    drop: usize,
) -> (Vec<Message>, usize) {
    let question = messages.iter().rposition(|m| m.role == Role::User).unwrap_or(0);
    let start = match policy {
        ContextPolicy::Stop => return (messages.to_vec(), 0),
        ContextPolicy::RollingWindow => 0,
        // after the first user message and its answers
        ContextPolicy::TruncateMiddle => match messages.iter().position(|m| m.role == Role::User) {
            Some(first) => messages[first + 1..]
                .iter()
                .position(|m| m.role == Role::User)
                .map_or(messages.len(), |n| first + 1 + n),
            None => 0,
        },
    };
    if drop == 0 || start >= question {
        return (messages.to_vec(), 0);
    }
    let mut end = (start + drop).min(question);
    // finish the exchange: the first message kept after the gap is the user's
    while end < question && messages[end].role != Role::User {
        end += 1;
    }
    let kept: Vec<Message> = messages[..start].iter().chain(&messages[end..]).cloned().collect();
    (kept, end - start)
}

/// The most messages `leave_out` can leave out of `messages` under `policy`.
pub fn most_left_out(messages: &[Message], policy: ContextPolicy) -> usize {
    leave_out(messages, policy, messages.len()).1
}

/// The fewest messages to leave out (0..=`most`) for which `too_long` is
/// false, by bisection (`too_long` is monotone: fewer messages, fewer
/// tokens); `most` when even that is too long (the engine then says so).
pub fn fewest_to_leave_out(most: usize, mut too_long: impl FnMut(usize) -> bool) -> usize {
    if !too_long(0) {
        return 0;
    }
    let (mut fits, mut long) = (most, 0);
    if too_long(most) {
        return most;
    }
    while fits - long > 1 {
        let mid = long + (fits - long) / 2;
        if too_long(mid) {
            long = mid;
        } else {
            fits = mid;
        }
    }
    fits
}

/// The room a trimmed prompt leaves for the answer: the answer length, but
/// at most half the context (a long answer must not push the whole
/// conversation out).
pub fn answer_room(max_tokens: usize, context: usize) -> usize {
    max_tokens.min(context / 2)
}

/// The context the running engine allows: the engine setting it was started
/// with, within the model's own limit (0: the model's).
pub fn context_limit(engine_setting: usize, model_limit: usize) -> usize {
    if engine_setting == 0 {
        model_limit
    } else {
        engine_setting.min(model_limit)
    }
}

impl From<&engine::batch::RequestError> for AppError {
    fn from(e: &engine::batch::RequestError) -> Self {
        AppError::new(&e.code, e.message.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use store::{ChatId, MessageId, MessageStatus};

    fn chat(roles: &str) -> Vec<Message> {
        roles
            .chars()
            .enumerate()
            .map(|(i, r)| Message {
                id: MessageId(i as i64),
                chat_id: ChatId(1),
                parent_id: None,
                siblings: Vec::new(),
                role: if r == 'u' { Role::User } else { Role::Assistant },
                content: format!("{r}{i}"),
                reasoning: None,
                attachments: Vec::new(),
                stats: None,
                model: None,
                status: MessageStatus::Complete,
                error: None,
                error_code: None,
                created_at: 0,
                updated_at: 0,
                tool_calls: Vec::new(),
                tool_result: None,
            })
            .collect()
    }

    fn texts(m: &[Message]) -> Vec<&str> {
        m.iter().map(|m| m.content.as_str()).collect()
    }

    #[test]
    fn a_rolling_window_leaves_out_whole_exchanges_from_the_start() {
        let m = chat("uauaua u".replace(' ', "").as_str());
        let (kept, n) = leave_out(&m, ContextPolicy::RollingWindow, 1);
        // one message asked, a whole exchange goes: the kept part starts with the user
        assert_eq!((texts(&kept), n), (vec!["u2", "a3", "u4", "a5", "u6"], 2));
        let (kept, n) = leave_out(&m, ContextPolicy::RollingWindow, 100);
        assert_eq!((texts(&kept), n), (vec!["u6"], 6), "the question always stays");
        assert_eq!(most_left_out(&m, ContextPolicy::RollingWindow), 6);
    }

    #[test]
    fn truncating_the_middle_keeps_the_first_exchange() {
        let m = chat("uaauauau");
        let (kept, n) = leave_out(&m, ContextPolicy::TruncateMiddle, 1);
        assert_eq!((texts(&kept), n), (vec!["u0", "a1", "a2", "u5", "a6", "u7"], 2));
        let (kept, n) = leave_out(&m, ContextPolicy::TruncateMiddle, 50);
        assert_eq!((texts(&kept), n), (vec!["u0", "a1", "a2", "u7"], 4));
        // nothing between the first exchange and the question: nothing to leave out
        assert_eq!(leave_out(&chat("uau"), ContextPolicy::TruncateMiddle, 5).1, 0);
        assert_eq!(leave_out(&m, ContextPolicy::Stop, 5).1, 0);
    }

    #[test]
    fn the_fewest_messages_that_fit_are_left_out() {
        // 10 messages of 10 tokens; 35 fit
        let tokens = |dropped: usize| (10 - dropped) * 10;
        assert_eq!(fewest_to_leave_out(10, |d| tokens(d) > 35), 7);
        assert_eq!(fewest_to_leave_out(10, |d| tokens(d) > 1000), 0);
        assert_eq!(fewest_to_leave_out(10, |_| true), 10);
        assert_eq!(answer_room(1024, 512), 256);
        assert_eq!(context_limit(0, 4096), 4096);
        assert_eq!(context_limit(512, 4096), 512);
    }
}

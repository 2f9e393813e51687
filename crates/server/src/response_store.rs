//! Responses kept for `GET /v1/responses/{id}` and for continuing a
//! conversation with `previous_response_id`: in memory, bounded in bytes,
//! the oldest dropped first. A response keeps only its own turn (its input
//! messages and its answer) and the id of the one it continued, so a long
//! conversation takes memory in proportion to its length, not its square.
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use serde_json::Value;

use crate::openai::RequestMessage;

/// What the store holds at most by default: room for thousands of text
/// turns, or a few dozen with large images.
pub const DEFAULT_STORE_BYTES: usize = 64 << 20;

/// The longest chain of `previous_response_id`s followed (the store's bound
/// keeps real chains far shorter; this only stops a loop).
const MAX_CHAIN: usize = 100_000;

/// One stored response.
pub struct Stored {
    /// The response object, as `GET` returns it.
    pub response: Value,
    /// The response this one continued.
    pub previous: Option<String>,
    /// This turn as chat messages: its input (without `instructions`, which
    /// a continuation does not inherit) and its answer.
    pub turn: Vec<RequestMessage>,
}

impl Stored {
    /// Roughly what it takes in memory: its JSON and its messages' texts.
    fn bytes(&self) -> usize {
        let json = |v: &Value| serde_json::to_string(v).map_or(0, |s| s.len());
        let messages: usize = self
            .turn
            .iter()
            .map(|m| {
                64 + m.content.as_ref().map_or(0, json)
                    + m.reasoning_content.as_ref().map_or(0, String::len)
                    + m.tool_calls.iter().flatten().map(json).sum::<usize>()
            })
            .sum();
        json(&self.response) + messages
    }
}

/// Why a conversation could not be put back together.
#[derive(Debug, PartialEq, Eq)]
pub struct Missing(pub String);

pub struct ResponseStore {
    max_bytes: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    by_id: HashMap<String, (Stored, usize)>,
    /// Ids, oldest first (deleted ones are skipped when evicting).
    order: VecDeque<String>,
    bytes: usize,
}

impl Default for ResponseStore {
    fn default() -> Self {
        Self::new(DEFAULT_STORE_BYTES)
    }
}

impl ResponseStore {
    pub fn new(max_bytes: usize) -> Self {
        Self { max_bytes, inner: Mutex::new(Inner::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Keeps `stored` under `id`, dropping the oldest responses to make room.
    /// One larger than the whole store is not kept.
    pub fn insert(&self, id: String, stored: Stored) {
        let size = stored.bytes();
        if size > self.max_bytes {
            tracing::warn!(id, bytes = size, "a response too large for the store was not kept");
            return;
        }
        let mut inner = self.lock();
        while inner.bytes + size > self.max_bytes {
            let Some(oldest) = inner.order.pop_front() else { break };
            if let Some((_, bytes)) = inner.by_id.remove(&oldest) {
                inner.bytes -= bytes;
            }
        }
        inner.bytes += size;
        inner.order.push_back(id.clone());
        if let Some((_, replaced)) = inner.by_id.insert(id, (stored, size)) {
            inner.bytes -= replaced;
        }
    }

    /// The response object stored under `id`.
    pub fn get(&self, id: &str) -> Option<Value> {
        self.lock().by_id.get(id).map(|(s, _)| s.response.clone())
    }

    /// Forgets `id`; false when it was not stored.
    pub fn delete(&self, id: &str) -> bool {
        let mut inner = self.lock();
        match inner.by_id.remove(id) {
            Some((_, bytes)) => {
                inner.bytes -= bytes;
                inner.order.retain(|kept| kept != id);
                true
            }
            None => false,
        }
    }

    /// The whole conversation up to and including `id`'s answer, oldest turn
    /// first; the id of the first response missing from the chain otherwise.
    pub fn conversation(&self, id: &str) -> Result<Vec<RequestMessage>, Missing> {
        let inner = self.lock();
        let mut turns: Vec<&[RequestMessage]> = Vec::new();
        let mut next = Some(id.to_owned());
        while let Some(current) = next {
            if turns.len() >= MAX_CHAIN {
                return Err(Missing(current));
            }
            let (stored, _) = inner.by_id.get(&current).ok_or(Missing(current))?;
            turns.push(&stored.turn);
            next = stored.previous.clone();
        }
        Ok(turns.into_iter().rev().flatten().cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn turn(text: &str) -> Vec<RequestMessage> {
        vec![RequestMessage {
            role: "user".into(),
            content: Some(json!(text)),
            ..Default::default()
        }]
    }

    fn stored(text: &str, previous: Option<&str>) -> Stored {
        Stored {
            response: json!({"id": text}),
            previous: previous.map(str::to_owned),
            turn: turn(text),
        }
    }

    fn texts(messages: &[RequestMessage]) -> Vec<String> {
        messages.iter().map(|m| m.content.as_ref().unwrap().as_str().unwrap().to_owned()).collect()
    }

    #[test]
    fn a_chain_of_responses_is_one_conversation_oldest_first() {
        let store = ResponseStore::default();
        store.insert("a".into(), stored("a", None));
        store.insert("b".into(), stored("b", Some("a")));
        store.insert("c".into(), stored("c", Some("b")));
        assert_eq!(texts(&store.conversation("c").unwrap()), ["a", "b", "c"]);
        assert_eq!(store.get("b"), Some(json!({"id": "b"})));
        assert!(store.delete("b"));
        assert!(!store.delete("b"));
        assert_eq!(store.get("b"), None);
        assert_eq!(store.conversation("c").unwrap_err(), Missing("b".into()));
        assert_eq!(store.conversation("zz").unwrap_err(), Missing("zz".into()));
    }

    #[test]
    fn the_oldest_responses_make_room_for_new_ones() {
        let one = stored("x", None).bytes();
        let store = ResponseStore::new(one * 2 + one / 2);
        for id in ["1", "2", "3"] {
            store.insert(id.into(), stored("x", None));
        }
        assert_eq!(store.get("1"), None, "the oldest went");
        assert!(store.get("2").is_some() && store.get("3").is_some());
        let huge =
            Stored { response: json!("y".repeat(one * 3)), previous: None, turn: Vec::new() };
        store.insert("4".into(), huge);
        assert_eq!(store.get("4"), None, "larger than the store: not kept");
        assert!(store.get("3").is_some(), "and nothing dropped for it");
    }
}

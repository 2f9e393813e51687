//! One reply being generated: the engine's events go to the UI (through a
//! swappable sink, so a reloaded page can re-attach) and into the store
//! (at least once a second, and at the end), until `Finished`.
use std::sync::{Arc, Mutex};
use std::time::Duration;

use engine::batch::{Event, FinishReason, RequestId, RequestStats};
use engine::handle::{EngineHandle, RequestStream};
use serde::Serialize;
use store::{
    ChatId, Message, MessageId, MessageStats, ReplyId, ReplyOutcome, Store, ToolCallRecord,
};
use ts_rs::TS;

use crate::error::AppError;
use crate::mcp::manager::OfferedTool;

/// What the UI receives for one reply, in order: `chat_created` when Send
/// made the chat, `started`, then text pieces, maybe `error`, then
/// `finished` with the stored message.
#[derive(Debug, Clone, Serialize, TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StreamEvent {
    /// Before `started`, when Send made the chat (a first message): the
    /// page opens it and lists it at once, before its prompt is read.
    ChatCreated {
        /// Boxed: a chat is far larger than the other events (serialized the same).
        chat: Box<store::Chat>,
    },
    Started {
        chat_id: ChatId,
        reply_id: ReplyId,
        model: String,
    },
    /// The text so far, sent to a sink that attaches mid-reply.
    Snapshot {
        content: String,
        reasoning: String,
    },
    Content {
        text: String,
    },
    Reasoning {
        text: String,
    },
    Error {
        error: AppError,
    },
    Finished {
        /// Boxed: a message is far larger than the other events (serialized the same).
        message: Box<Message>,
    },
    /// The finished answer called a tool: shown as a block with Approve /
    /// Deny unless the user always allows this tool (then it just runs).
    /// Sent again to a sink that attaches while the call waits.
    ToolCall {
        /// The answer that made the call.
        message_id: MessageId,
        call: ToolCallRecord,
        needs_approval: bool,
    },
    /// The call's result (or why there is none), stored as a tool message;
    /// the model's next answer follows as a new `started`.
    ToolResult {
        message: Box<Message>,
    },
}

pub type Sink = Arc<dyn Fn(StreamEvent) + Send + Sync>;

/// A reply under way, as the commands see it.
pub struct Generation {
    pub chat_id: ChatId,
    pub request_id: RequestId,
    pub reply_id: ReplyId,
    pub model: String,
    pub engine: EngineHandle,
    pub sink: Arc<Mutex<Sink>>,
    /// Answer and reasoning so far.
    pub text: Arc<Mutex<(String, String)>>,
    /// Stops the turn between engine requests too: a tool call waiting for
    /// approval or running (Stop cancels this and the engine request).
    pub cancel: tokio_util::sync::CancellationToken,
    /// The tool call waiting for the user's answer, if any.
    pub waiting_call: Arc<Mutex<Option<(MessageId, ToolCallRecord)>>>,
}

impl Generation {
    /// Points the events at a new sink, after sending it the text so far.
    pub fn attach(&self, sink: Sink) {
        let (content, reasoning) = self.text.lock().unwrap().clone();
        sink(StreamEvent::Started {
            chat_id: self.chat_id,
            reply_id: self.reply_id,
            model: self.model.clone(),
        });
        sink(StreamEvent::Snapshot { content, reasoning });
        if let Some((message_id, call)) = self.waiting_call.lock().unwrap().clone() {
            sink(StreamEvent::ToolCall { message_id, call, needs_approval: true });
        }
        *self.sink.lock().unwrap() = sink;
    }
}

const SAVE_EVERY: Duration = Duration::from_secs(1);

/// The reply's row is gone: its chat was deleted while it was answering.
/// Nothing went wrong; there is just nothing left to save into.
fn reply_gone(e: &store::Error) -> bool {
    matches!(e, store::Error::MessageNotFound(_) | store::Error::ChatNotFound(_))
}

/// A submitted request as the pump reads it: its first event may have been
/// read already (to see whether the prompt fit), and how many earlier
/// messages were left out to make it fit.
pub struct Submitted {
    pub stream: RequestStream,
    pub first: Option<Event>,
    pub left_out: usize,
    /// The tools the request offered: a call of one is kept with the
    /// answer (and run after it); without tools a call is shown as text.
    pub offered: Vec<OfferedTool>,
    /// The pages of each PDF the prompt carried (kept in the reply's stats).
    pub documents: Vec<store::DocumentPages>,
}

async fn next_event(first: &mut Option<Event>, stream: &mut RequestStream) -> Option<Event> {
    match first.take() {
        Some(e) => Some(e),
        None => stream.recv().await,
    }
}

/// Reads the stream to its end, forwarding to the sink and saving to the store;
/// returns the finished message, or `None` when the chat was deleted meanwhile.
pub async fn pump(
    store: Store,
    reply: ReplyId,
    submitted: Submitted,
    sink: Arc<Mutex<Sink>>,
    text: Arc<Mutex<(String, String)>>,
) -> Result<Option<Message>, AppError> {
    let Submitted { mut stream, mut first, left_out, offered, documents } = submitted;
    let mut calls: Vec<ToolCallRecord> = Vec::new();
    let send = |e: StreamEvent| (sink.lock().unwrap().clone())(e);
    let mut tick = tokio::time::interval(SAVE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut dirty = false;
    let mut error: Option<AppError> = None;
    // when the first piece left for the page (scripts/bench-app-vs-api.sh
    // sets it against the page's clock by this line's timestamp)
    let mut first_piece = true;
    let mut sent_piece = || {
        if std::mem::take(&mut first_piece) {
            tracing::debug!(reply = reply.0 .0, "reply first piece sent");
        }
    };
    let (reason, stats) = loop {
        tokio::select! {
            event = next_event(&mut first, &mut stream) => match event {
                Some(Event::Content(t)) => {
                    text.lock().unwrap().0.push_str(&t);
                    dirty = true;
                    send(StreamEvent::Content { text: t });
                    sent_piece();
                }
                Some(Event::Reasoning(t)) => {
                    text.lock().unwrap().1.push_str(&t);
                    dirty = true;
                    send(StreamEvent::Reasoning { text: t });
                    sent_piece();
                }
                // the app asks for none
                Some(Event::Logprob(_) | Event::PromptLogprobs(_)) => {}
                Some(Event::Accepted | Event::Queued { .. }) => {}
                Some(Event::ToolCall(call)) if !offered.is_empty() => {
                    let server = offered.iter().find(|t| t.offered_name == call.name).map(|t| t.server.clone());
                    calls.push(ToolCallRecord { id: call.id, name: call.name, arguments: call.arguments, server });
                }
                // no tools were offered, so a tool call is shown as text
                Some(Event::ToolCall(call)) => {
                    let t = format!("\n```json\n{}\n```\n", serde_json::to_string_pretty(&call).unwrap_or_default());
                    text.lock().unwrap().0.push_str(&t);
                    dirty = true;
                    send(StreamEvent::Content { text: t });
                }
                Some(Event::Error(e)) => {
                    let e = AppError::new(&e.code, e.message);
                    send(StreamEvent::Error { error: e.clone() });
                    error = Some(e);
                }
                Some(Event::Finished { reason, stats }) => break (reason, stats),
                // the engine went away without finishing the request
                None => break (FinishReason::Error, RequestStats::default()),
            },
            _ = tick.tick() => {
                if dirty {
                    let (content, reasoning) = text.lock().unwrap().clone();
                    match store.update_reply(reply, &content, &reasoning).await {
                        Err(e) if reply_gone(&e) => tracing::debug!("the reply's chat was deleted while it streamed"),
                        Err(e) => tracing::warn!(%e, "saving a streaming reply failed"),
                        Ok(()) => {}
                    }
                    dirty = false;
                }
            }
        }
    };
    // the code is stored with the message: the UI explains a failure by its
    // code (INVALID_IMAGE, CONTEXT_LENGTH_EXCEEDED…), never by its wording
    let outcome = match (reason, error) {
        (FinishReason::Cancelled, _) => ReplyOutcome::Interrupted,
        (_, Some(e)) => ReplyOutcome::Failed { code: e.code, message: e.message },
        (FinishReason::Error, None) => ReplyOutcome::Failed {
            code: "ENGINE_STOPPED".into(),
            message: "the engine stopped before the reply was finished".into(),
        },
        _ => ReplyOutcome::Complete,
    };
    let (content, reasoning) = text.lock().unwrap().clone();
    let mut stats = message_stats(reason, &stats);
    stats.left_out_messages = (left_out > 0).then_some(left_out as u64);
    stats.documents = (!documents.is_empty()).then_some(documents);
    if !calls.is_empty() {
        match store.set_reply_tool_calls(reply, &calls).await {
            Err(e) if reply_gone(&e) => return Ok(None),
            Err(e) => return Err(e.into()),
            Ok(()) => {}
        }
    }
    let message = match store.finish_reply(reply, &content, &reasoning, Some(&stats), outcome).await
    {
        Ok(m) => m,
        Err(e) if reply_gone(&e) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    send(StreamEvent::Finished { message: Box::new(message.clone()) });
    Ok(Some(message))
}

fn message_stats(reason: FinishReason, s: &RequestStats) -> MessageStats {
    let reason = serde_json::to_value(reason).ok().and_then(|v| v.as_str().map(str::to_string));
    let ran = s.generated_tokens > 0;
    MessageStats {
        prompt_tokens: ran.then_some(s.prompt_tokens as u64),
        cached_prompt_tokens: ran.then_some(s.cached_prompt_tokens as u64),
        cached_from_disk_tokens: (ran && s.cached_from_disk_tokens > 0)
            .then_some(s.cached_from_disk_tokens as u64),
        completion_tokens: ran.then_some(s.generated_tokens as u64),
        tokens_per_second: (s.generation_tps > 0.0).then_some(s.generation_tps),
        ttft_ms: ran.then_some(s.time_to_first_token.as_secs_f64() * 1000.0),
        finish_reason: reason,
        kv_cache_bytes: (s.kv_cache_bytes > 0).then_some(s.kv_cache_bytes as u64),
        left_out_messages: None,
        documents: None,
    }
}

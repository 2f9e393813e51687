//! The tool calls of a chat's answer, one after another: each is shown to
//! the user (Approve / Deny / always allow this tool, unless that tool is
//! always allowed), run on its MCP server with a timeout, and its result —
//! or the refusal, or why it failed — stored as a tool message under the
//! answer, so the model reads it in its next answer (replies.rs asks for
//! that one). Nothing of a result is run or rendered as HTML: it is text for
//! the model, and the UI shows it as text.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use store::{ChatId, Message, MessageId, NewMessage, ToolCallRecord, ToolOutcome, ToolResultInfo};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use ts_rs::TS;

use crate::error::AppResult;
use crate::generation::{Sink, StreamEvent};
use crate::mcp::manager::OfferedTool;
use crate::mcp::result::ToolAnswer;
use crate::state::AppState;

/// Most tool calls in one turn (one user message): past it the model is
/// asked again without tools, so it answers in words.
pub const MAX_CALLS_PER_TURN: usize = 8;
/// How long one call may run.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The user's answer to a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum ToolDecision {
    Approve,
    Deny,
    /// Approve, and run this tool's later calls without asking.
    AlwaysAllow,
}

/// Calls waiting for the user, by call id.
#[derive(Default)]
pub struct PendingApprovals(Mutex<HashMap<String, (ChatId, oneshot::Sender<ToolDecision>)>>);

impl PendingApprovals {
    /// Hands the user's answer to the waiting call; `false` when no call of
    /// `chat` waits under that id.
    pub fn answer(&self, chat: ChatId, call_id: &str, decision: ToolDecision) -> bool {
        let mut pending = self.0.lock().unwrap();
        match pending.get(call_id) {
            Some((c, _)) if *c == chat => {
                let (_, tx) = pending.remove(call_id).expect("just found");
                tx.send(decision).is_ok()
            }
            _ => false,
        }
    }
}

/// What the calls of one answer left: the last tool message stored, and
/// whether the user stopped the turn meanwhile.
pub struct ToolPhase {
    pub last: Option<Message>,
    pub stopped: bool,
}

/// Runs every call of `answer` in order and stores each result under the
/// previous message (the results so far stay stored when the user stops).
pub async fn run_calls(
    state: &Arc<AppState>,
    chat: ChatId,
    answer: &Message,
    offered: &[OfferedTool],
    sink: &Arc<Mutex<Sink>>,
    waiting: &Arc<Mutex<Option<(MessageId, ToolCallRecord)>>>,
    cancel: &CancellationToken,
) -> AppResult<ToolPhase> {
    let send = |e: StreamEvent| (sink.lock().unwrap().clone())(e);
    let mut parent = answer.id;
    let mut last = None;
    for call in &answer.tool_calls {
        let tool = offered.iter().find(|t| t.offered_name == call.name);
        let result = match tool {
            _ if cancel.is_cancelled() => {
                ToolAnswer::failed(ToolOutcome::Cancelled, "The user stopped the reply.")
            }
            None => ToolAnswer::failed(
                ToolOutcome::Error,
                format!("There is no tool named {:?}.", call.name),
            ),
            Some(tool) => {
                let allowed = state.mcp.always_allowed(&tool.server, &tool.tool);
                send(StreamEvent::ToolCall {
                    message_id: answer.id,
                    call: call.clone(),
                    needs_approval: !allowed,
                });
                let decision = if allowed {
                    Some(ToolDecision::Approve)
                } else {
                    *waiting.lock().unwrap() = Some((answer.id, call.clone()));
                    let d = ask(state, chat, &call.id, cancel).await;
                    *waiting.lock().unwrap() = None;
                    d
                };
                match decision {
                    Some(ToolDecision::Deny) => ToolAnswer::failed(
                        ToolOutcome::Denied,
                        format!("The user denied this call of {}; it did not run.", call.name),
                    ),
                    None => {
                        ToolAnswer::failed(ToolOutcome::Cancelled, "The user stopped the reply.")
                    }
                    Some(d) => {
                        if d == ToolDecision::AlwaysAllow {
                            crate::mcp_servers::always_allow(state, &tool.server, &tool.tool)
                                .await?;
                        }
                        state
                            .mcp
                            .call(&tool.server, &tool.tool, &call.arguments, CALL_TIMEOUT, cancel)
                            .await
                    }
                }
            }
        };
        let mut images = Vec::new();
        for image in &result.images {
            // an image that does not decode, or the store does not take (not a picture it
            // knows), stays a note in the text: a model that sees is given the others
            let bytes = image.bytes.clone();
            let decodes = tokio::task::spawn_blocking(move || {
                crate::image_check::check_decodes(&bytes).is_ok()
                    && store::detect_image(&bytes).is_some()
            })
            .await
            .unwrap_or(false);
            if !decodes {
                tracing::debug!("a tool's image does not decode; it was not kept");
                continue;
            }
            match state.store.add_attachment(&image.bytes).await {
                Ok(a) => images.push(a.sha256),
                Err(e) => tracing::debug!(%e, "a tool's image was not kept"),
            }
        }
        let info = ToolResultInfo {
            call_id: call.id.clone(),
            name: call.name.clone(),
            server: tool.map(|t| t.server.clone()),
            outcome: result.outcome,
        };
        let message = state
            .store
            .add_message_under(
                chat,
                Some(parent),
                &NewMessage::tool(result.text, info).with_attachments(images),
            )
            .await?;
        parent = message.id;
        send(StreamEvent::ToolResult { message: Box::new(message.clone()) });
        last = Some(message);
    }
    Ok(ToolPhase { last, stopped: cancel.is_cancelled() })
}

/// Waits for the user's answer to the call; `None` when the reply is stopped.
async fn ask(
    state: &AppState,
    chat: ChatId,
    call_id: &str,
    cancel: &CancellationToken,
) -> Option<ToolDecision> {
    let (tx, rx) = oneshot::channel();
    state.approvals.0.lock().unwrap().insert(call_id.to_owned(), (chat, tx));
    let decision = tokio::select! {
        d = rx => d.ok(),
        _ = cancel.cancelled() => None,
    };
    state.approvals.0.lock().unwrap().remove(call_id);
    decision
}

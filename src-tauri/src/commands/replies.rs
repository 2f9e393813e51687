//! Sending, stopping, regenerating and editing. Replies stream over a
//! `Channel` the UI passes in (events are not meant for token streams).
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use store::{ChatId, Message, MessageId, NewMessage, Role};
use tauri::ipc::Channel;
use tauri::{AppHandle, Runtime, State};

use crate::error::{AppError, AppResult};
use crate::generation::{Sink, StreamEvent};
use crate::replies::{ensure_idle, start_reply, StartedReply};
use crate::state::AppState;

fn sink(channel: Channel<StreamEvent>) -> Sink {
    Arc::new(move |event| {
        let _ = channel.send(event);
    })
}

#[derive(Debug, Clone, Deserialize)]
pub struct Outgoing {
    pub text: String,
    /// SHA-256 names from `add_attachment_*`.
    #[serde(default)]
    pub attachments: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Sent {
    pub user: Message,
    pub reply: StartedReply,
}

fn check(outgoing: &Outgoing) -> AppResult<()> {
    if outgoing.text.trim().is_empty() && outgoing.attachments.is_empty() {
        return Err(AppError::new("EMPTY_MESSAGE", "Type a message or add an image."));
    }
    Ok(())
}

/// A new message with images for a model that cannot see them is refused
/// before it is stored (the composer says so first; this keeps the rule for
/// any caller). Images already in the chat become placeholders instead.
fn check_images(outgoing: &Outgoing, state: &AppState) -> AppResult<()> {
    let engine = state.engine()?;
    if outgoing.attachments.is_empty() || engine.model_info().capabilities.vision {
        return Ok(());
    }
    // the name the user knows (the scan's), not the engine's folder name
    let name = state.status().model.map(|m| m.name).unwrap_or_else(|| engine.model_info().name.clone());
    Err(AppError::new(
        "MODEL_CANNOT_SEE_IMAGES",
        format!("{name} cannot see images. Load a model that sees images, or send text only."),
    ))
}

#[tauri::command]
pub async fn send_message<R: Runtime>(
    app: AppHandle<R>,
    state: State<'_, Arc<AppState>>,
    chat_id: ChatId,
    message: Outgoing,
    on_event: Channel<StreamEvent>,
) -> AppResult<Sent> {
    check(&message)?;
    ensure_idle(&state, chat_id)?;
    check_images(&message, &state)?;
    post_and_answer(&app, &state, chat_id, message, on_event).await
}

/// Stores the user's message and starts the reply to it.
async fn post_and_answer<R: Runtime>(
    app: &AppHandle<R>,
    state: &State<'_, Arc<AppState>>,
    chat_id: ChatId,
    message: Outgoing,
    on_event: Channel<StreamEvent>,
) -> AppResult<Sent> {
    let new = NewMessage::user(message.text).with_attachments(message.attachments);
    let user = state.store.add_message(chat_id, &new).await?;
    let reply = start_reply(app, state.inner().clone(), chat_id, sink(on_event)).await?;
    Ok(Sent { user, reply })
}

/// Cancels the chat's reply; the engine frees its slot at once and the
/// reply is kept as interrupted.
#[tauri::command]
pub async fn stop_reply(state: State<'_, Arc<AppState>>, chat_id: ChatId) -> AppResult<bool> {
    let running = state.generations.lock().unwrap().get(&chat_id).map(|g| (g.engine.clone(), g.request_id));
    Ok(match running {
        Some((engine, id)) => {
            engine.cancel(id);
            true
        }
        None => false,
    })
}

/// Replaces the last reply with a new one.
#[tauri::command]
pub async fn regenerate<R: Runtime>(
    app: AppHandle<R>,
    state: State<'_, Arc<AppState>>,
    chat_id: ChatId,
    on_event: Channel<StreamEvent>,
) -> AppResult<StartedReply> {
    ensure_idle(&state, chat_id)?;
    state.engine()?;
    let messages = state.store.list_messages(chat_id).await?;
    let last_user = messages.iter().rposition(|m| m.role == Role::User);
    let Some(last_user) = last_user else {
        return Err(AppError::new("NOTHING_TO_REGENERATE", "This chat has no message to answer."));
    };
    if let Some(after) = messages.get(last_user + 1) {
        state.store.delete_messages_from(chat_id, after.id).await?;
    }
    start_reply(&app, state.inner().clone(), chat_id, sink(on_event)).await
}

/// Replaces the last user message (and the replies after it) with an edited
/// one and answers it.
#[tauri::command]
pub async fn edit_and_resend<R: Runtime>(
    app: AppHandle<R>,
    state: State<'_, Arc<AppState>>,
    chat_id: ChatId,
    message_id: MessageId,
    message: Outgoing,
    on_event: Channel<StreamEvent>,
) -> AppResult<Sent> {
    check(&message)?;
    ensure_idle(&state, chat_id)?;
    check_images(&message, &state)?;
    let messages = state.store.list_messages(chat_id).await?;
    let last_user = messages.iter().rev().find(|m| m.role == Role::User);
    if last_user.map(|m| m.id) != Some(message_id) {
        return Err(AppError::new("NOT_LAST_MESSAGE", "Only the last message you sent can be edited."));
    }
    state.store.delete_messages_from(chat_id, message_id).await?;
    post_and_answer(&app, &state, chat_id, message, on_event).await
}

/// Chats with a reply under way (after a page reload, to re-attach).
#[tauri::command]
pub async fn active_replies(state: State<'_, Arc<AppState>>) -> AppResult<Vec<ChatId>> {
    Ok(state.generations.lock().unwrap().keys().copied().collect())
}

/// Sends a running reply's events to a new channel, starting with the text so far.
#[tauri::command]
pub async fn attach_reply(
    state: State<'_, Arc<AppState>>,
    chat_id: ChatId,
    on_event: Channel<StreamEvent>,
) -> AppResult<bool> {
    let generations = state.generations.lock().unwrap();
    Ok(match generations.get(&chat_id) {
        Some(g) => {
            g.attach(sink(on_event));
            true
        }
        None => false,
    })
}

//! Sending, stopping, regenerating, editing and moving between branches.
//! A chat is a tree (see the store's `tree.rs`): regenerating keeps the
//! earlier answers as siblings, editing a message forks a branch beside it.
//! Replies stream over a `Channel` the UI passes in (events are not meant
//! for token streams).
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use store::{Chat, ChatId, Message, MessageId, NewMessage, Role};
use tauri::ipc::Channel;
use tauri::{AppHandle, Runtime, State};
use ts_rs::TS;

use crate::chat_settings::ChatSettings;
use crate::error::{AppError, AppResult};
use crate::generation::{Sink, StreamEvent};
use crate::replies::{
    continue_reply as continue_reply_in, ensure_chat_model, ensure_chat_model_of, ensure_idle,
    post_and_reply, reserve, start_reply, Reservation, StartedReply,
};
use crate::state::AppState;

fn sink(channel: Channel<StreamEvent>) -> Sink {
    Arc::new(move |event| {
        let _ = channel.send(event);
    })
}

#[derive(Debug, Clone, Deserialize, TS)]
pub struct Outgoing {
    pub text: String,
    /// SHA-256 names from `add_attachment_*`.
    #[serde(default)]
    pub attachments: Vec<String>,
}

#[derive(Debug, Clone, Serialize, TS)]
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
/// any caller). Images already in the chat become placeholders instead. A PDF
/// goes to every model as its text (documents.rs): only pictures need eyes.
async fn check_images(outgoing: &Outgoing, state: &AppState) -> AppResult<()> {
    let engine = state.engine()?;
    let pictures = crate::documents::pictures_among(&state.store, &outgoing.attachments).await?;
    if pictures == 0 || engine.model_info().capabilities.vision {
        return Ok(());
    }
    // the name the user knows (the scan's), not the engine's folder name
    let name =
        state.status().model.map(|m| m.name).unwrap_or_else(|| engine.model_info().name.clone());
    Err(AppError::new(
        "MODEL_CANNOT_SEE_IMAGES",
        format!("{name} cannot see images. Load a model that sees images, or send text only."),
    ))
}

/// Sends `message` in chat `chat_id`, or, without one, in a new chat that
/// this command makes with `new_chat`'s settings (those chosen before it
/// existed): Send is one round trip for a first message too, and a message
/// refused by the checks leaves no empty chat behind. The new chat is told
/// to the channel first (`chat_created`), before its message is stored.
#[tauri::command]
pub async fn send_message<R: Runtime>(
    app: AppHandle<R>,
    state: State<'_, Arc<AppState>>,
    chat_id: Option<ChatId>,
    new_chat: Option<ChatSettings>,
    message: Outgoing,
    on_event: Channel<StreamEvent>,
) -> AppResult<Sent> {
    let began = std::time::Instant::now();
    check(&message)?;
    let sink = sink(on_event);
    let (chat_id, turn, above) = match chat_id {
        Some(chat_id) => {
            let turn = reserve(&state, chat_id)?;
            crate::idle::wake(&app, &state).await?;
            check_images(&message, &state).await?;
            ensure_chat_model_of(&state, chat_id).await?;
            // the message goes at the end of the shown branch
            (chat_id, turn, state.store.list_messages(chat_id).await?)
        }
        None => {
            let settings = new_chat.unwrap_or_default();
            settings.validate()?;
            crate::idle::wake(&app, &state).await?;
            check_images(&message, &state).await?;
            ensure_chat_model(&state, &settings)?;
            let chat = create_chat_with(&state, &settings).await?;
            // nothing else knows the new chat's id yet: it cannot be busy
            let (id, turn) = (chat.id, reserve(&state, chat.id)?);
            sink(StreamEvent::ChatCreated { chat: Box::new(chat) });
            (id, turn, Vec::new())
        }
    };
    let checked = began.elapsed();
    let sent = post_and_answer(&app, &state, &turn, chat_id, message, above, sink).await;
    // where Send's time goes before the first token (scripts/bench-app-vs-api.sh prints it)
    tracing::debug!(
        checked_ms = checked.as_secs_f64() * 1e3,
        total_ms = began.elapsed().as_secs_f64() * 1e3,
        "send_message"
    );
    sent
}

/// A new chat with `settings` (none set: the app's).
async fn create_chat_with(state: &AppState, settings: &ChatSettings) -> AppResult<Chat> {
    let chat = state.store.create_chat().await?;
    match settings.to_stored() {
        Some(stored) => Ok(state.store.set_chat_settings(chat.id, Some(&stored)).await?),
        None => Ok(chat),
    }
}

/// Stores the user's message at the end of `above` (the line from the top of
/// the chat down to where it goes: the shown branch, or the edited message's
/// parent's line) and starts the reply to it; the engine gets the prompt
/// before the message is written (see replies::post_and_reply).
async fn post_and_answer<R: Runtime>(
    app: &AppHandle<R>,
    state: &State<'_, Arc<AppState>>,
    turn: &Reservation<'_>,
    chat_id: ChatId,
    message: Outgoing,
    above: Vec<Message>,
    sink: Sink,
) -> AppResult<Sent> {
    let new = NewMessage::user(message.text).with_attachments(message.attachments);
    let (user, reply) =
        post_and_reply(app, state.inner().clone(), turn, chat_id, above, new, sink).await?;
    Ok(Sent { user, reply })
}

/// Cancels the chat's reply; the engine frees its slot at once and the
/// reply is kept as interrupted.
#[tauri::command]
pub async fn stop_reply(state: State<'_, Arc<AppState>>, chat_id: ChatId) -> AppResult<bool> {
    let running = state.generations.lock().unwrap().get(&chat_id).map(|g| {
        // a tool call waiting or running stops too
        g.cancel.cancel();
        (g.engine.clone(), g.request_id)
    });
    Ok(match running {
        Some((engine, id)) => {
            engine.cancel(id);
            true
        }
        None => false,
    })
}

/// A new answer to the question of `message_id` (a reply), or, without
/// one, to the last question of the shown branch. The earlier answers stay
/// as siblings of the new one.
#[tauri::command]
pub async fn regenerate<R: Runtime>(
    app: AppHandle<R>,
    state: State<'_, Arc<AppState>>,
    chat_id: ChatId,
    message_id: Option<MessageId>,
    on_event: Channel<StreamEvent>,
) -> AppResult<StartedReply> {
    let turn = reserve(&state, chat_id)?;
    crate::idle::wake(&app, &state).await?;
    state.engine()?;
    let question = match message_id {
        Some(id) => {
            let reply = state.store.get_message(id).await?;
            match (reply.chat_id == chat_id, reply.role, reply.parent_id) {
                (false, ..) => return Err(store::Error::MessageNotFound(id).into()),
                (true, Role::Assistant, Some(parent)) => parent,
                _ => {
                    return Err(AppError::new("NOT_A_REPLY", "Only an answer can be regenerated."))
                }
            }
        }
        None => {
            let messages = state.store.list_messages(chat_id).await?;
            match messages.iter().rev().find(|m| m.role == Role::User) {
                Some(m) => m.id,
                None => {
                    return Err(AppError::new(
                        "NOTHING_TO_REGENERATE",
                        "This chat has no message to answer.",
                    ))
                }
            }
        }
    };
    start_reply(&app, state.inner().clone(), &turn, chat_id, question, sink(on_event)).await
}

/// Continue on an answer cut at its token limit: the model goes on from
/// where it stopped, and the text is appended to the same stored message
/// (no "Continue." is sent, no new answer is started).
#[tauri::command]
pub async fn continue_reply<R: Runtime>(
    app: AppHandle<R>,
    state: State<'_, Arc<AppState>>,
    chat_id: ChatId,
    message_id: MessageId,
    on_event: Channel<StreamEvent>,
) -> AppResult<StartedReply> {
    let turn = reserve(&state, chat_id)?;
    crate::idle::wake(&app, &state).await?;
    ensure_chat_model_of(&state, chat_id).await?;
    let answer = state.store.get_message(message_id).await?;
    if answer.chat_id != chat_id {
        return Err(store::Error::MessageNotFound(message_id).into());
    }
    continue_reply_in(&app, state.inner().clone(), &turn, chat_id, message_id, sink(on_event)).await
}

/// Sends an edited copy of any user message of the chat: it becomes a
/// sibling of the original (a new branch, shown), and is answered. The
/// original and everything after it stay reachable.
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
    let turn = reserve(&state, chat_id)?;
    crate::idle::wake(&app, &state).await?;
    check_images(&message, &state).await?;
    ensure_chat_model_of(&state, chat_id).await?;
    let original = state.store.get_message(message_id).await?;
    if original.chat_id != chat_id {
        return Err(store::Error::MessageNotFound(message_id).into());
    }
    if original.role != Role::User {
        return Err(AppError::new("NOT_A_USER_MESSAGE", "Only a message you sent can be edited."));
    }
    // the edit becomes a sibling of the original: under its parent
    let above = match original.parent_id {
        Some(parent) => state.store.path_to(chat_id, parent).await?,
        None => Vec::new(),
    };
    post_and_answer(&app, &state, &turn, chat_id, message, above, sink(on_event)).await
}

/// Shows the branch through `message_id` (‹ 2/3 › in the UI); returns the
/// chat's new shown path. Allowed while the chat answers: the reply goes on
/// in its own branch.
#[tauri::command]
pub async fn choose_branch(
    state: State<'_, Arc<AppState>>,
    chat_id: ChatId,
    message_id: MessageId,
) -> AppResult<Vec<Message>> {
    Ok(state.store.choose_message(chat_id, message_id).await?)
}

/// Deletes `message_id` and everything under it; returns the chat's new
/// shown path. Refused while the chat answers (the reply may be in it).
#[tauri::command]
pub async fn delete_branch(
    state: State<'_, Arc<AppState>>,
    chat_id: ChatId,
    message_id: MessageId,
) -> AppResult<Vec<Message>> {
    ensure_idle(&state, chat_id)?;
    state.store.delete_branch(chat_id, message_id).await?;
    Ok(state.store.list_messages(chat_id).await?)
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

/// The user's answer to a tool call shown in the chat (Approve, Deny,
/// Always allow); `false` when no call of the chat waits under that id
/// (it was answered already, or the reply was stopped).
#[tauri::command]
pub async fn answer_tool_call(
    state: State<'_, Arc<AppState>>,
    chat_id: ChatId,
    call_id: String,
    decision: crate::tool_turns::ToolDecision,
) -> AppResult<bool> {
    Ok(state.approvals.answer(chat_id, &call_id, decision))
}

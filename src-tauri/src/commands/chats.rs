//! Chats and their messages.
use std::sync::Arc;

use store::{Chat, ChatId, Message, PresetId};
use tauri::State;

use crate::answer_format::AnswerFormat;
use crate::chat_file::ExportedChat;
use crate::chat_settings::ChatSettings;
use crate::error::{AppError, AppResult};
use crate::state::AppState;

#[tauri::command]
pub async fn list_chats(
    state: State<'_, Arc<AppState>>,
    query: Option<String>,
) -> AppResult<Vec<Chat>> {
    Ok(match query.as_deref().map(str::trim).filter(|q| !q.is_empty()) {
        Some(q) => state.store.search_chats(q).await?,
        None => state.store.list_chats().await?,
    })
}

/// A new chat; from a preset, with its settings and answer format.
#[tauri::command]
pub async fn create_chat(
    state: State<'_, Arc<AppState>>,
    preset_id: Option<PresetId>,
) -> AppResult<Chat> {
    // read first: an unknown preset makes no chat
    let preset = match preset_id {
        Some(id) => Some(state.store.get_preset(id).await?),
        None => None,
    };
    let chat = state.store.create_chat().await?;
    let Some(preset) = preset else { return Ok(chat) };
    state.store.set_answer_format(chat.id, preset.answer_format.as_ref()).await?;
    Ok(state.store.set_chat_settings(chat.id, Some(&preset.settings)).await?)
}

/// Sets what the chat sets for itself (every field left unset follows the
/// app's settings); applies from its next reply.
#[tauri::command]
pub async fn set_chat_settings(
    state: State<'_, Arc<AppState>>,
    chat_id: ChatId,
    settings: ChatSettings,
) -> AppResult<Chat> {
    settings.validate()?;
    Ok(state.store.set_chat_settings(chat_id, settings.to_stored().as_ref()).await?)
}

#[tauri::command]
pub async fn rename_chat(
    state: State<'_, Arc<AppState>>,
    chat_id: ChatId,
    title: String,
) -> AppResult<Chat> {
    Ok(state.store.rename_chat(chat_id, &title).await?)
}

/// Sets how the chat's next replies are shaped (`None`: free text).
#[tauri::command]
pub async fn set_answer_format(
    state: State<'_, Arc<AppState>>,
    chat_id: ChatId,
    format: Option<AnswerFormat>,
) -> AppResult<Chat> {
    if let Some(f) = &format {
        f.validate()?;
    }
    let stored = format.map(|f| serde_json::to_value(f).expect("an answer format serializes"));
    Ok(state.store.set_answer_format(chat_id, stored.as_ref()).await?)
}

/// Stops the chat's reply if one is running, then deletes the chat (its
/// images go too when no other message uses them).
#[tauri::command]
pub async fn delete_chat(state: State<'_, Arc<AppState>>, chat_id: ChatId) -> AppResult<()> {
    let running = state.generations.lock().unwrap().remove(&chat_id);
    if let Some(g) = running {
        g.engine.cancel(g.request_id);
    }
    state.store.delete_chat(chat_id).await?;
    Ok(())
}

#[tauri::command]
pub async fn list_messages(
    state: State<'_, Arc<AppState>>,
    chat_id: ChatId,
) -> AppResult<Vec<Message>> {
    Ok(state.store.list_messages(chat_id).await?)
}

/// Writes the chat (every branch as JSON, the shown one as Markdown, its
/// images beside them) to a new folder: where the save dialog said, named
/// as the user typed (never over anything there).
#[tauri::command]
pub async fn export_chat(
    state: State<'_, Arc<AppState>>,
    chat_id: ChatId,
    destination: Option<std::path::PathBuf>,
) -> AppResult<ExportedChat> {
    // the save dialog's path names the new folder; without one (older
    // callers) it goes under exports/ in the data folder
    let Some(destination) = destination else {
        return crate::chat_file::export_chat(
            &state.store,
            chat_id,
            &state.paths.data_dir.join("exports"),
        )
        .await;
    };
    let parent = destination.parent().filter(|p| !p.as_os_str().is_empty());
    let (Some(parent), Some(name)) = (parent, destination.file_name().and_then(|n| n.to_str()))
    else {
        return Err(AppError::new("INVALID_INPUT", "Choose where to save the exported chat."));
    };
    crate::chat_file::export_chat_as(&state.store, chat_id, parent, name).await
}

/// Adds the chat in an exported `chat.json` (and its images) as a new chat.
/// A file that is not one, or whose images are missing or changed, adds nothing.
#[tauri::command]
pub async fn import_chat(
    state: State<'_, Arc<AppState>>,
    path: std::path::PathBuf,
) -> AppResult<Chat> {
    crate::chat_file::import_chat(&state.store, &path).await
}

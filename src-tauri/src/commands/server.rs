//! The local OpenAI-compatible server's state for the settings panel, and
//! its optional API key (server_key.rs): saving or removing the key restarts
//! the server with it at once.
use std::sync::Arc;

use tauri::{AppHandle, Runtime, State};

use crate::error::AppResult;
use crate::openai_server::ServerStatus;
use crate::server_key::{self, ServerKeyView};
use crate::state::AppState;

#[tauri::command]
pub async fn server_status(state: State<'_, Arc<AppState>>) -> AppResult<ServerStatus> {
    Ok(crate::openai_server::status(&state).await)
}

#[tauri::command]
pub async fn server_api_key_status(state: State<'_, Arc<AppState>>) -> AppResult<ServerKeyView> {
    server_key::view(&state.store, &hub::Keychain::app().server_api_key()).await
}

#[tauri::command]
pub async fn save_server_api_key<R: Runtime>(
    app: AppHandle<R>,
    state: State<'_, Arc<AppState>>,
    key: String,
) -> AppResult<ServerKeyView> {
    let view = server_key::save(&state.store, &hub::Keychain::app().server_api_key(), &key).await?;
    crate::openai_server::apply(&app, &state).await;
    Ok(view)
}

#[tauri::command]
pub async fn remove_server_api_key<R: Runtime>(
    app: AppHandle<R>,
    state: State<'_, Arc<AppState>>,
) -> AppResult<ServerKeyView> {
    let view = server_key::remove(&state.store, &hub::Keychain::app().server_api_key()).await?;
    crate::openai_server::apply(&app, &state).await;
    Ok(view)
}

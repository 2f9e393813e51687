//! The local OpenAI-compatible server's state for the settings panel.
use std::sync::Arc;

use tauri::State;

use crate::error::AppResult;
use crate::openai_server::ServerStatus;
use crate::state::AppState;

#[tauri::command]
pub async fn server_status(state: State<'_, Arc<AppState>>) -> AppResult<ServerStatus> {
    Ok(crate::openai_server::status(&state).await)
}

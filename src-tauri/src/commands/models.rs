//! The gallery, downloads, deletion, load and unload.
use std::sync::Arc;

use tauri::{AppHandle, Runtime, State};

use crate::error::AppResult;
use crate::models::{self, Gallery};
use crate::state::{AppState, EngineStatus};

#[tauri::command]
pub async fn list_models(state: State<'_, Arc<AppState>>) -> AppResult<Gallery> {
    Ok(models::gallery(&state).await)
}

#[tauri::command]
pub async fn load_model<R: Runtime>(
    app: AppHandle<R>,
    state: State<'_, Arc<AppState>>,
    id: String,
) -> AppResult<EngineStatus> {
    models::load(&app, &state, &id).await
}

#[tauri::command]
pub async fn unload_model<R: Runtime>(app: AppHandle<R>, state: State<'_, Arc<AppState>>) -> AppResult<EngineStatus> {
    models::unload(&app, &state).await
}

#[tauri::command]
pub async fn download_model<R: Runtime>(
    app: AppHandle<R>,
    state: State<'_, Arc<AppState>>,
    id: String,
    files: Option<Vec<String>>,
) -> AppResult<()> {
    models::start_download(&app, &state, &id, files).await
}

#[tauri::command]
pub async fn cancel_download(state: State<'_, Arc<AppState>>, id: String) -> AppResult<bool> {
    Ok(models::cancel_download(&state, &id))
}

/// Returns the bytes freed.
#[tauri::command]
pub async fn delete_model(state: State<'_, Arc<AppState>>, id: String) -> AppResult<u64> {
    models::delete(&state, &id).await
}

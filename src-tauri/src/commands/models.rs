//! The gallery, downloads, deletion, load and unload, and models added
//! from elsewhere on disk.
use std::path::PathBuf;
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
pub async fn unload_model<R: Runtime>(
    app: AppHandle<R>,
    state: State<'_, Arc<AppState>>,
) -> AppResult<EngineStatus> {
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

/// Adds a model folder or `.gguf` file from anywhere on disk to the gallery
/// (checked first: see added_models.rs); returns its gallery id.
#[tauri::command]
pub async fn add_model(state: State<'_, Arc<AppState>>, path: PathBuf) -> AppResult<String> {
    crate::added_models::add(&state, &path).await
}

/// Takes an added model off the gallery; its files stay on disk.
#[tauri::command]
pub async fn remove_added_model(state: State<'_, Arc<AppState>>, id: String) -> AppResult<()> {
    crate::added_models::remove(&state, &id).await
}

/// Of paths dropped on the window, those that are models to add (folders
/// and `.gguf` files) rather than images for the chat.
#[tauri::command]
pub async fn model_candidates(paths: Vec<PathBuf>) -> AppResult<Vec<PathBuf>> {
    Ok(paths.into_iter().filter(|p| crate::added_models::is_model_candidate(p)).collect())
}

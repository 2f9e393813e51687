//! Images for the composer: from a path (drop, file picker) or from bytes
//! (paste). Stored at once, named by content hash; the UI shows them through
//! the `att://` protocol (see attachment_protocol.rs).
use std::path::PathBuf;
use std::sync::Arc;

use store::Attachment;
use tauri::ipc::{InvokeBody, Request};
use tauri::State;

use crate::error::{AppError, AppResult};
use crate::state::AppState;

#[tauri::command]
pub async fn add_attachment_path(state: State<'_, Arc<AppState>>, path: PathBuf) -> AppResult<Attachment> {
    Ok(state.store.import_attachment(&path).await?)
}

/// The raw bytes of a pasted image as the request body (no JSON array).
#[tauri::command]
pub async fn add_attachment_bytes(state: State<'_, Arc<AppState>>, request: Request<'_>) -> AppResult<Attachment> {
    let InvokeBody::Raw(bytes) = request.body() else {
        return Err(AppError::new("INVALID_INPUT", "send the image bytes as the raw request body"));
    };
    Ok(state.store.add_attachment(bytes).await?)
}

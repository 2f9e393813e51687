//! Images for the composer: from a path (drop, file picker), from bytes
//! (paste, where the web view hands the page the file) or from the system
//! clipboard (paste where it does not: WebKitGTK). Stored at once, named by
//! content hash (a HEIC photo converted first where the system can: see
//! heic.rs); the UI shows them through the `att://` protocol (see
//! attachment_protocol.rs).
use std::io::Cursor;
use std::path::PathBuf;
use std::sync::Arc;

use store::Attachment;
use tauri::ipc::{InvokeBody, Request};
use tauri::{AppHandle, Manager, Runtime, State};
use tauri_plugin_clipboard_manager::Clipboard;

use crate::error::{AppError, AppResult};
use crate::state::AppState;

/// An image, or a PDF (by its extension): read and stored as a document (documents.rs).
#[tauri::command]
pub async fn add_attachment_path(
    state: State<'_, Arc<AppState>>,
    path: PathBuf,
) -> AppResult<Attachment> {
    if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("pdf")) {
        return crate::documents::import_document(&state.store, &path).await;
    }
    crate::heic::import_image(&state.store, &path).await
}

/// A stored document's name, page count and how much text it has (the composer's chip).
#[tauri::command]
pub async fn document_info(
    state: State<'_, Arc<AppState>>,
    sha256: String,
) -> AppResult<crate::documents::DocumentInfo> {
    crate::documents::document_info(&state.store, &sha256).await
}

/// Pages of a stored document as image attachments (from `first`, counted from 1), for a
/// model that sees; at most [`crate::documents::MOST_PAGE_PICTURES`] at a time.
#[tauri::command]
pub async fn document_page_images(
    state: State<'_, Arc<AppState>>,
    sha256: String,
    first: u32,
    count: u32,
) -> AppResult<Vec<Attachment>> {
    let count = (count as usize).min(crate::documents::MOST_PAGE_PICTURES);
    crate::documents::page_images(&state.store, &sha256, first as usize, count).await
}

/// What the loaded model gets of a stored document: its whole text or the passages that match
/// each question, and (a model that sees) how many of its first pages as pictures fit beside
/// it with room for the answer (the composer attaches those).
#[tauri::command]
pub async fn document_page_plan(
    state: State<'_, Arc<AppState>>,
    sha256: String,
) -> AppResult<crate::documents::PagePlan> {
    let engine = state.engine()?;
    let settings = crate::replies::app_settings_for_loaded(&state);
    let room = crate::replies::room_before_answer(&state, &engine, &settings);
    crate::documents::plan_pages(&state.store, &engine, room, &sha256).await
}

/// The raw bytes of a pasted image as the request body (no JSON array).
#[tauri::command]
pub async fn add_attachment_bytes(
    state: State<'_, Arc<AppState>>,
    request: Request<'_>,
) -> AppResult<Attachment> {
    let InvokeBody::Raw(bytes) = request.body() else {
        return Err(AppError::new("INVALID_INPUT", "send the image bytes as the raw request body"));
    };
    if crate::documents::is_pdf(bytes) {
        return crate::documents::add_document(&state.store, bytes.clone(), "pasted.pdf").await;
    }
    crate::heic::add_image(&state.store, bytes).await
}

/// The picture on the system clipboard, stored like a pasted file; `None`
/// when the clipboard holds no picture. Fails with CLIPBOARD_UNAVAILABLE
/// where the clipboard cannot be read at all (no clipboard plugin, no
/// display server it can talk to), so the UI can say pasting is not available.
#[tauri::command]
pub async fn paste_clipboard_image<R: Runtime>(
    app: AppHandle<R>,
    state: State<'_, Arc<AppState>>,
) -> AppResult<Option<Attachment>> {
    let Some(clipboard) = app.try_state::<Clipboard<R>>() else {
        return Err(AppError::new(
            "CLIPBOARD_UNAVAILABLE",
            "the clipboard cannot be read in this window",
        ));
    };
    let image = match clipboard.read_image() {
        Ok(image) => image,
        // the plugin reports arboard's errors as text only: "not available"
        // is arboard's ContentNotAvailable, a clipboard without a picture
        Err(e) if e.to_string().contains("not available") => return Ok(None),
        Err(e) => return Err(AppError::new("CLIPBOARD_UNAVAILABLE", e.to_string())),
    };
    let (width, height, rgba) = (image.width(), image.height(), image.rgba().to_vec());
    let png = tokio::task::spawn_blocking(move || encode_png(width, height, rgba))
        .await
        .map_err(|e| AppError::new("CLIPBOARD_UNAVAILABLE", e.to_string()))??;
    Ok(Some(state.store.add_attachment(&png).await?))
}

fn encode_png(width: u32, height: u32, rgba: Vec<u8>) -> AppResult<Vec<u8>> {
    let image = image::RgbaImage::from_raw(width, height, rgba).ok_or_else(|| {
        AppError::new("NOT_AN_IMAGE", "the clipboard's picture has the wrong size")
    })?;
    let mut png = Cursor::new(Vec::new());
    image.write_to(&mut png, image::ImageFormat::Png).map_err(|e| {
        AppError::new("NOT_AN_IMAGE", format!("the clipboard's picture cannot be stored: {e}"))
    })?;
    Ok(png.into_inner())
}

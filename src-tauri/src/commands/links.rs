//! A link clicked in a reply opens in the user's browser (or mail app),
//! after the scheme check in links.rs. The web UI gets no opener
//! permission of its own: this command is the only way out.
use tauri::{AppHandle, Manager, Runtime};
use tauri_plugin_opener::Opener;

use crate::error::{AppError, AppResult};
use crate::links::{could_not_open, openable_link};

#[tauri::command]
pub async fn open_link<R: Runtime>(app: AppHandle<R>, href: String) -> AppResult<()> {
    let url = openable_link(&href)?;
    let Some(opener) = app.try_state::<Opener<R>>() else {
        return Err(AppError::new("OPENER_UNAVAILABLE", "links cannot be opened from this window"));
    };
    opener.open_url(url.as_str(), None::<&str>).map_err(|e| could_not_open(&url, &e.to_string()))
}

//! The Hugging Face token in Settings: whether one is saved (masked), save
//! and remove. The keychain is blocking (D-Bus, or a Keychain prompt on
//! macOS): each call runs off the async runtime.
use crate::error::{AppError, AppResult};
use crate::hub_token::{self, HubTokenView};

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> AppResult<T> + Send + 'static,
) -> AppResult<T> {
    tauri::async_runtime::spawn_blocking(f)
        .await
        .map_err(|e| AppError::new("KEYCHAIN_UNAVAILABLE", e.to_string()))?
}

#[tauri::command]
pub async fn hub_token_status() -> AppResult<HubTokenView> {
    blocking(|| Ok(hub_token::view(&hub::Keychain::app()))).await
}

#[tauri::command]
pub async fn save_hub_token(token: String) -> AppResult<HubTokenView> {
    blocking(move || hub_token::save(&hub::Keychain::app(), &token)).await
}

#[tauri::command]
pub async fn remove_hub_token() -> AppResult<HubTokenView> {
    blocking(|| hub_token::remove(&hub::Keychain::app())).await
}

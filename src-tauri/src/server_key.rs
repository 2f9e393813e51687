//! The API key of the app's OpenAI server (Settings → Local OpenAI server):
//! optional, kept in the OS keychain beside the Hub token (`hub::keychain`),
//! never in the database, and shown to the page only masked. Whether a key
//! is required is a record of its own in the store, so a keychain that cannot
//! be read later stops the server with the reason, instead of it serving
//! without the key; and without a key the keychain is never asked at all.
use serde::Serialize;
use store::Store;
use ts_rs::TS;

use crate::error::{AppError, AppResult};

/// The store record that says the server requires the key in the keychain.
const KEY_REQUIRED: &str = "server_api_key_required";

/// What Settings shows of the key: never the key itself.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, TS)]
pub struct ServerKeyView {
    /// A key is saved: clients must send `Authorization: Bearer <key>`.
    pub set: bool,
    /// Its last four characters ("…abcd"), when one is saved and long enough.
    pub masked: Option<String>,
    /// The keychain could not be read: why.
    pub error: Option<AppError>,
}

/// Whether the server requires a key.
pub async fn required(store: &Store) -> AppResult<bool> {
    Ok(store.get_setting::<bool>(KEY_REQUIRED).await?.unwrap_or(false))
}

/// What the page shows. Reads the keychain only when a key is required.
pub async fn view(store: &Store, keychain: &hub::Keychain) -> AppResult<ServerKeyView> {
    if !required(store).await? {
        return Ok(ServerKeyView { set: false, masked: None, error: None });
    }
    let keychain = keychain.clone();
    Ok(match blocking(move || Ok(keychain.read()?)).await {
        Ok(Some(key)) => {
            ServerKeyView { set: true, masked: Some(hub::keychain::mask(&key)), error: None }
        }
        Ok(None) => ServerKeyView { set: true, masked: None, error: Some(missing()) },
        Err(e) => ServerKeyView { set: true, masked: None, error: Some(e) },
    })
}

/// The key the server must require: `None` when none is set; `Err` when one
/// is required but cannot be had (the server then does not start).
pub async fn for_server(store: &Store, keychain: &hub::Keychain) -> AppResult<Option<String>> {
    if !required(store).await? {
        return Ok(None);
    }
    let keychain = keychain.clone();
    match blocking(move || Ok(keychain.read()?)).await? {
        Some(key) => Ok(Some(key)),
        None => Err(missing()),
    }
}

/// Checks and saves `key` in the keychain, then requires it.
pub async fn save(store: &Store, keychain: &hub::Keychain, key: &str) -> AppResult<ServerKeyView> {
    let (entry, key) = (keychain.clone(), key.to_string());
    blocking(move || {
        entry.store(&key).map_err(|e| match e {
            hub::Error::InvalidToken(why) => {
                AppError::new("INVALID_API_KEY", format!("not a usable API key: {why}"))
            }
            other => other.into(),
        })
    })
    .await?;
    store.set_setting(KEY_REQUIRED, &true).await?;
    view(store, keychain).await
}

/// Stops requiring a key, and deletes it from the keychain. The requirement
/// goes first: should the keychain fail, the server still does not keep
/// asking for a key nobody can see any more.
pub async fn remove(store: &Store, keychain: &hub::Keychain) -> AppResult<ServerKeyView> {
    store.set_setting(KEY_REQUIRED, &false).await?;
    let entry = keychain.clone();
    blocking(move || Ok(entry.remove()?)).await?;
    view(store, keychain).await
}

fn missing() -> AppError {
    AppError::new(
        "KEYCHAIN_UNAVAILABLE",
        "the server's API key is no longer in the keychain: save a new one, or remove it to serve without a key",
    )
}

/// The keychain blocks (D-Bus, or a Keychain prompt on macOS).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> AppResult<T> + Send + 'static,
) -> AppResult<T> {
    tauri::async_runtime::spawn_blocking(f)
        .await
        .map_err(|e| AppError::new("KEYCHAIN_UNAVAILABLE", e.to_string()))?
}

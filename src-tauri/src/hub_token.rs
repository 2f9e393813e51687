//! The Hugging Face token of Settings: kept in the OS keychain (see
//! `hub::keychain`), never in the database, and shown to the page only
//! masked. The Hub client of every download (and search) takes it from
//! there (`hub_config`).
use serde::Serialize;
use ts_rs::TS;

use crate::error::{AppError, AppResult};

/// What Settings shows of the token: never the token itself.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, TS)]
pub struct HubTokenView {
    /// A token is saved in the keychain.
    pub set: bool,
    /// Its kind and last four characters ("hf_…abcd"), when one is saved.
    pub masked: Option<String>,
    /// With none saved: the token the Hub client falls back to, in words
    /// ("HF_TOKEN", "the token of `hf auth login`"), if there is one.
    pub fallback: Option<String>,
    /// The keychain could not be read: why (the page shows it; `set` is then
    /// unknown and false).
    pub error: Option<AppError>,
}

/// Reads the keychain into what the page shows. Blocking.
pub fn view(keychain: &hub::Keychain) -> HubTokenView {
    match keychain.read() {
        Ok(Some(token)) => HubTokenView {
            set: true,
            masked: Some(hub::keychain::mask(&token)),
            fallback: None,
            error: None,
        },
        Ok(None) => HubTokenView { set: false, masked: None, fallback: fallback(), error: None },
        Err(e) => {
            HubTokenView { set: false, masked: None, fallback: fallback(), error: Some(e.into()) }
        }
    }
}

/// Saves `token`, then reads back what the page shows. Blocking.
pub fn save(keychain: &hub::Keychain, token: &str) -> AppResult<HubTokenView> {
    keychain.store(token)?;
    Ok(view(keychain))
}

/// Deletes the saved token. Blocking.
pub fn remove(keychain: &hub::Keychain) -> AppResult<HubTokenView> {
    keychain.remove()?;
    Ok(view(keychain))
}

/// Where hf-hub would find a token without ours (the order it looks in).
fn fallback() -> Option<String> {
    let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    if set("HF_HUB_DISABLE_IMPLICIT_TOKEN") {
        return None;
    }
    if set("HF_TOKEN") {
        return Some("HF_TOKEN from the environment".into());
    }
    let file = std::env::var_os("HF_TOKEN_PATH").map(std::path::PathBuf::from).or_else(|| {
        let hf_home = std::env::var_os("HF_HOME").map(std::path::PathBuf::from);
        hf_home
            .or_else(|| {
                std::env::var_os("HOME")
                    .map(|h| std::path::Path::new(&h).join(".cache/huggingface"))
            })
            .map(|home| home.join("token"))
    })?;
    file.is_file().then(|| format!("the token of `hf auth login` ({})", file.display()))
}

/// The Hub client's setup for downloads and searches: endpoint and cache
/// from the environment, the token from the keychain first (see
/// `hub::HubConfig::with_keychain_token` for the order). A keychain that
/// cannot be read does not stop a download of a public model: it is logged
/// and Settings shows it, and a model that needed the token fails with its
/// own clear AUTH_REQUIRED / GATED message.
pub async fn hub_config() -> AppResult<hub::HubConfig> {
    let config = hub::HubConfig::from_env().ok_or_else(|| {
        AppError::new("NO_HF_CACHE", "cannot find a home folder for the Hugging Face cache")
    })?;
    let without = config.clone();
    let with_token = tauri::async_runtime::spawn_blocking(move || {
        config.with_keychain_token(&hub::Keychain::app())
    })
    .await;
    Ok(match with_token {
        Ok(Ok(config)) => config,
        Ok(Err(e)) => {
            tracing::warn!(%e, "the Hub token in the keychain cannot be read; going on without it");
            without
        }
        Err(e) => {
            tracing::warn!(%e, "reading the Hub token from the keychain failed; going on without it");
            without
        }
    })
}

//! Reading and saving the settings; engine settings apply on restart.
use std::sync::Arc;

use serde::Serialize;
use tauri::{AppHandle, Runtime, State};
use ts_rs::TS;

use crate::error::{AppError, AppResult};
use crate::settings::{ModelFacts, Settings, SETTINGS_KEY};
use crate::state::AppState;

#[derive(Debug, Clone, Serialize, TS)]
pub struct SettingsView {
    pub settings: Settings,
    /// The engine runs with other engine settings than these: restart it to apply.
    pub restart_needed: bool,
    /// What the loaded model cannot use, in words.
    pub notes: Vec<String>,
    /// The loaded model's name when it has load settings of its own (context,
    /// KV bits, running sequences: see the Models page), which it uses
    /// instead of these.
    pub model_has_own_load_settings: Option<String>,
}

/// The settings, and what of them the loaded model uses: its own load
/// settings (model_settings.rs) stand in for the Settings' three.
async fn view(state: &AppState) -> AppResult<SettingsView> {
    let settings = state.settings();
    let status = state.status();
    let (used, own) = match &status.model {
        Some(m) => match crate::model_settings::remembered(state, &m.id).await? {
            Some(own) => (own.over(&settings), Some(m.name.clone())),
            None => (settings.clone(), None),
        },
        None => (settings.clone(), None),
    };
    let restart_needed = status.knobs.as_ref().is_some_and(|k| *k != used.engine_knobs());
    // what the loaded model answers with where the user left the defaults
    let defaults_note = status.model.as_ref().and_then(|m| {
        crate::model_defaults::note(
            &settings,
            &m.id,
            &m.name,
            &crate::models::default_model_id(state),
        )
    });
    let facts =
        state.engine.engine().map(|e| ModelFacts::of(e.model_info(), status.model.map(|m| m.name)));
    let mut notes = used.notes_for(facts.as_ref());
    notes.extend(defaults_note);
    Ok(SettingsView { notes, restart_needed, settings, model_has_own_load_settings: own })
}

#[tauri::command]
pub async fn get_settings(state: State<'_, Arc<AppState>>) -> AppResult<SettingsView> {
    view(&state).await
}

#[tauri::command]
pub async fn save_settings<R: Runtime>(
    app: AppHandle<R>,
    state: State<'_, Arc<AppState>>,
    settings: serde_json::Value,
) -> AppResult<SettingsView> {
    // Read here rather than as a typed argument: a value that does not parse
    // is refused in the app's error shape, with its code, like one that does
    // not validate.
    let settings = Settings::from_json(settings)
        .and_then(|s| s.validate_for_every_model().map(|()| s))
        .map_err(|m| AppError::new("INVALID_SETTINGS", m))?;
    state.store.set_setting(SETTINGS_KEY, &settings).await?;
    let before = std::mem::replace(&mut *state.settings.lock().unwrap(), settings.clone());
    let changed = before.server_enabled != settings.server_enabled
        || before.server_port != settings.server_port
        || before.server_file_url_folders != settings.server_file_url_folders;
    // enabled but not running (its port was taken): every save tries again
    let failed = settings.server_enabled && state.server.lock().await.is_none();
    if changed || failed {
        crate::openai_server::apply(&app, &state).await;
    }
    view(&state).await
}

/// Restarts the engine with the current settings (replies under way end).
#[tauri::command]
pub async fn restart_engine<R: Runtime>(
    app: AppHandle<R>,
    state: State<'_, Arc<AppState>>,
) -> AppResult<SettingsView> {
    let id = state
        .status()
        .model
        .map(|m| m.id)
        .ok_or_else(|| AppError::new("NO_MODEL_LOADED", "No model is loaded."))?;
    crate::models::load(&app, &state, &id).await?;
    view(&state).await
}

/// Settings' "Split models across machines": one line per rank, as rank 0
/// (this Mac) knows them.
#[tauri::command]
pub async fn cluster_status(
    state: State<'_, Arc<AppState>>,
) -> AppResult<crate::cluster::ClusterStatus> {
    Ok(crate::cluster::status(&state).await)
}

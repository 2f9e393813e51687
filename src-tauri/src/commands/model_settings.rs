//! A model's load settings (context, KV quantization, running sequences),
//! remembered per model and used when it loads.
use std::sync::Arc;

use tauri::State;

use crate::error::AppResult;
use crate::model_settings::{self, ModelLoadSettings, ModelLoadSettingsView};
use crate::state::AppState;

#[tauri::command]
pub async fn get_model_load_settings(
    state: State<'_, Arc<AppState>>,
    id: String,
) -> AppResult<ModelLoadSettingsView> {
    model_settings::view(&state, &id).await
}

#[tauri::command]
pub async fn save_model_load_settings(
    state: State<'_, Arc<AppState>>,
    id: String,
    settings: ModelLoadSettings,
) -> AppResult<ModelLoadSettingsView> {
    model_settings::save(&state, &id, &settings).await
}

/// The model follows the Settings again.
#[tauri::command]
pub async fn forget_model_load_settings(
    state: State<'_, Arc<AppState>>,
    id: String,
) -> AppResult<ModelLoadSettingsView> {
    model_settings::forget(&state, &id).await
}

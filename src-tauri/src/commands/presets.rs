//! Presets: named chat settings (and an answer format) to start a chat from.
use std::sync::Arc;

use serde::Serialize;
use store::{Preset, PresetId};
use tauri::State;

use crate::answer_format::AnswerFormat;
use crate::chat_settings::ChatSettings;
use crate::error::AppResult;
use crate::state::AppState;

/// A preset as the UI reads it: its settings typed.
#[derive(Debug, Clone, Serialize)]
pub struct PresetView {
    pub id: PresetId,
    pub name: String,
    pub settings: ChatSettings,
    pub answer_format: Option<serde_json::Value>,
}

impl PresetView {
    fn of(p: Preset) -> AppResult<PresetView> {
        Ok(PresetView {
            id: p.id,
            name: p.name,
            settings: ChatSettings::from_stored(Some(&p.settings))?,
            answer_format: p.answer_format,
        })
    }
}

#[tauri::command]
pub async fn list_presets(state: State<'_, Arc<AppState>>) -> AppResult<Vec<PresetView>> {
    // a preset that no longer reads is left out rather than hiding all the others
    Ok(state
        .store
        .list_presets()
        .await?
        .into_iter()
        .filter_map(|p| PresetView::of(p).ok())
        .collect())
}

/// Saves (or replaces, by name) a preset.
#[tauri::command]
pub async fn save_preset(
    state: State<'_, Arc<AppState>>,
    name: String,
    settings: ChatSettings,
    answer_format: Option<AnswerFormat>,
) -> AppResult<PresetView> {
    settings.validate()?;
    if let Some(f) = &answer_format {
        f.validate()?;
    }
    let stored = serde_json::to_value(&settings).expect("chat settings serialize");
    let format =
        answer_format.map(|f| serde_json::to_value(f).expect("an answer format serializes"));
    PresetView::of(state.store.save_preset(&name, &stored, format.as_ref()).await?)
}

#[tauri::command]
pub async fn delete_preset(state: State<'_, Arc<AppState>>, id: PresetId) -> AppResult<bool> {
    Ok(state.store.delete_preset(id).await?)
}

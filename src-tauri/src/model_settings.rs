//! Load settings remembered per model (context length, KV-cache
//! quantization, running sequences, speeding up replies), as LM Studio keeps them: a model with
//! its own record loads with it, any other with the global Settings. Each
//! record is one JSON setting in the store, under `model_load:<gallery id>`.
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::draft_models::SpeedUpChoices;
use crate::error::{AppError, AppResult};
use crate::settings::{Settings, SpeedUp};
use crate::state::AppState;

/// The store key of a model's record.
fn key(id: &str) -> String {
    format!("model_load:{id}")
}

/// What one model loads with, in place of the Settings' values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
pub struct ModelLoadSettings {
    /// Context limit in tokens; 0 means the model's own.
    pub max_context: usize,
    /// KV-cache quantization: 0 (off), 8 or 4 bits.
    pub kv_bits: u8,
    /// Most sequences decoding at once (chats, server clients).
    pub max_running: usize,
    /// Speculative decoding for this model (records saved before it: off).
    #[serde(default)]
    pub speed_up: SpeedUp,
}

impl ModelLoadSettings {
    /// The Settings' values: what a model with no record loads with.
    pub fn defaults(settings: &Settings) -> Self {
        ModelLoadSettings {
            max_context: settings.max_context,
            kv_bits: settings.kv_bits,
            max_running: settings.max_running,
            speed_up: settings.speed_up.clone(),
        }
    }

    /// `settings` with these values in place of its own.
    pub fn over(&self, settings: &Settings) -> Settings {
        Settings {
            max_context: self.max_context,
            kv_bits: self.kv_bits,
            max_running: self.max_running,
            speed_up: self.speed_up.clone(),
            ..settings.clone()
        }
    }

    /// Refuses what the Settings refuse, with the same messages.
    pub fn validate(&self) -> AppResult<()> {
        self.over(&Settings::default()).validate().map_err(|m| AppError::new("INVALID_SETTINGS", m))
    }
}

/// A model's load settings as the form shows them.
#[derive(Debug, Clone, Serialize, TS)]
pub struct ModelLoadSettingsView {
    /// The gallery id ("dir:tiny", "hf:owner/name").
    pub id: String,
    /// What the model loads with: its record, else the defaults.
    pub settings: ModelLoadSettings,
    /// The model has a record of its own.
    pub remembered: bool,
    /// The Settings' values, which a model without a record follows.
    pub defaults: ModelLoadSettings,
    /// The model is loaded with other values than `settings`: they apply
    /// once it is loaded again.
    pub reload_needed: bool,
    /// What "Speed up replies" can offer this model besides off and prompt
    /// lookup: its MTP heads, the models on disk that can draft for it.
    pub speed_up_choices: SpeedUpChoices,
}

/// The model's record, if it has one.
pub async fn remembered(state: &AppState, id: &str) -> AppResult<Option<ModelLoadSettings>> {
    Ok(state.store.get_setting(&key(id)).await?)
}

/// The settings model `id` loads with: the Settings, with its record's values.
pub async fn effective(state: &AppState, id: &str) -> AppResult<Settings> {
    let settings = state.settings();
    Ok(match remembered(state, id).await? {
        Some(own) => own.over(&settings),
        None => settings,
    })
}

pub async fn view(state: &Arc<AppState>, id: &str) -> AppResult<ModelLoadSettingsView> {
    let speed_up_choices = crate::draft_models::choices(state, id).await;
    view_with(state, id, speed_up_choices).await
}

async fn view_with(
    state: &AppState,
    id: &str,
    speed_up_choices: SpeedUpChoices,
) -> AppResult<ModelLoadSettingsView> {
    let defaults = ModelLoadSettings::defaults(&state.settings());
    let own = remembered(state, id).await?;
    let settings = own.clone().unwrap_or_else(|| defaults.clone());
    let status = state.status();
    let loaded_with = status.model.filter(|m| m.id == id).and(status.knobs);
    let reload_needed = loaded_with.is_some_and(|k| {
        (k.max_context, k.kv_bits, k.max_running, &k.speed_up)
            != (settings.max_context, settings.kv_bits, settings.max_running, &settings.speed_up)
    });
    Ok(ModelLoadSettingsView {
        id: id.to_string(),
        settings,
        remembered: own.is_some(),
        defaults,
        reload_needed,
        speed_up_choices,
    })
}

pub async fn save(
    state: &Arc<AppState>,
    id: &str,
    settings: &ModelLoadSettings,
) -> AppResult<ModelLoadSettingsView> {
    if id.trim().is_empty() {
        return Err(AppError::new("MODEL_NOT_FOUND", "no model named"));
    }
    settings.validate()?;
    let choices = crate::draft_models::choices(state, id).await;
    crate::draft_models::check(&choices, &settings.speed_up, id)?;
    state.store.set_setting(&key(id), settings).await?;
    view_with(state, id, choices).await
}

/// Forgets the model's record: it follows the Settings again.
pub async fn forget(state: &Arc<AppState>, id: &str) -> AppResult<ModelLoadSettingsView> {
    state.store.delete_setting(&key(id)).await?;
    view(state, id).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_replaces_only_its_own_values() {
        let global = Settings {
            temperature: 0.3,
            max_context: 4096,
            kv_bits: 0,
            max_running: 8,
            ..Default::default()
        };
        let own = ModelLoadSettings {
            max_context: 1024,
            kv_bits: 4,
            max_running: 2,
            speed_up: SpeedUp::PromptLookup,
        };
        let merged = own.over(&global);
        assert_eq!((merged.max_context, merged.kv_bits, merged.max_running), (1024, 4, 2));
        assert!(merged.engine_config().scheduler.speculation.is_some(), "the model speculates");
        assert!(global.engine_config().scheduler.speculation.is_none(), "Settings' default: off");
        assert_eq!(merged.temperature, 0.3);
        assert_eq!(ModelLoadSettings::defaults(&merged), own);
    }

    #[test]
    fn values_no_engine_takes_are_refused() {
        let bad = ModelLoadSettings {
            max_context: 0,
            kv_bits: 3,
            max_running: 1,
            speed_up: SpeedUp::Off,
        };
        assert!(bad.validate().unwrap_err().message.contains("KV bits"));
        let bad = ModelLoadSettings {
            max_context: 0,
            kv_bits: 8,
            max_running: 0,
            speed_up: SpeedUp::Off,
        };
        assert!(bad.validate().unwrap_err().message.contains("running sequences"));
        ModelLoadSettings { max_context: 0, kv_bits: 8, max_running: 64, speed_up: SpeedUp::Off }
            .validate()
            .unwrap();
    }

    /// A record saved before "Speed up replies" existed still loads: off.
    #[test]
    fn an_older_record_reads_as_speculation_off() {
        let old: ModelLoadSettings =
            serde_json::from_str(r#"{"max_context":0,"kv_bits":8,"max_running":4}"#).unwrap();
        assert_eq!(old.speed_up, SpeedUp::Off);
    }
}

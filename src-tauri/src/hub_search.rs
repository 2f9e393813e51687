//! Search of the Hugging Face Hub and the fit check, for the gallery: the
//! hub crate does the Hub and the arithmetic; the app brings the engine's
//! family registry (which architectures run, and why one does not), the
//! keychain token (`hub_token::hub_config`), the load settings and this
//! machine's memory.
use std::sync::Arc;

use hub::{
    EngineSupport, FitReport, FitSettings, MachineMemory, ModelDetails, ModelShape, SearchPage,
    SearchQuery, Support, VariantFormat, WeightBytes, WeightHolding,
};
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::error::{AppError, AppResult};
use crate::settings::Settings;
use crate::state::AppState;

/// The engine's family registry, as the hub crate asks it.
pub struct EngineRegistry;

impl EngineSupport for EngineRegistry {
    fn model_type(&self, model_type: &str) -> Option<Support> {
        engine::model::registry::family(model_type).map(support)
    }

    fn gguf_architecture(&self, architecture: &str) -> Option<Support> {
        engine::model::registry::family_for_gguf(architecture).map(support)
    }
}

fn support(family: &engine::model::registry::Family) -> Support {
    Support { family: family.name.to_string(), vision: family.vision() }
}

/// What the fit check is for.
#[derive(Debug, Clone, Deserialize, TS)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum FitTarget {
    /// A repository on the Hub, before its download.
    Hub {
        repo: String,
        /// The download choice by its label ("Q4_K_M", "4-bit"); the first
        /// one when not given.
        variant: Option<String>,
    },
    /// A model on disk, by its gallery id ("hf:owner/name", "dir:tiny").
    Local { id: String },
}

/// The fit check's answer.
#[derive(Debug, Clone, Serialize, TS)]
pub struct FitCheck {
    /// The download choice the estimate is for (Hub targets).
    pub variant: Option<String>,
    #[serde(flatten)]
    pub report: FitReport,
}

/// What the estimate is asked for; `None` fields take the model's load
/// settings (its own, else the Settings', see model_settings.rs).
#[derive(Debug, Clone, Copy, Default)]
pub struct FitAsk {
    pub context: Option<u32>,
    pub kv_bits: Option<u8>,
    pub max_running: Option<usize>,
}

/// The load settings the estimate is for: the context asked (else the
/// model's load settings' limit; 0 is the model's own), KV bits and running
/// sequences asked (else the load settings'). The verdict is for one chat
/// under them (one answer, up to `hub::fit::CHAT_CONTEXT` tokens); every
/// running sequence filling the context is the report's worst case.
fn fit_settings(base: &Settings, ask: FitAsk, model_max: Option<u32>) -> AppResult<FitSettings> {
    let kv_bits = ask.kv_bits.unwrap_or(base.kv_bits);
    if ![0, 4, 8].contains(&kv_bits) {
        return Err(AppError::new(
            "INVALID_SETTINGS",
            format!("KV bits must be off (0), 8 or 4, not {kv_bits}"),
        ));
    }
    let max_running = ask.max_running.unwrap_or(base.max_running);
    if max_running == 0 || max_running > 64 {
        return Err(AppError::new(
            "INVALID_SETTINGS",
            "running sequences must be between 1 and 64",
        ));
    }
    // 0 is the model's own limit, as in the Settings; a limit above the
    // model's own is the model's own: the engine caps it
    let limit = ask.context.unwrap_or(u32::try_from(base.max_context).unwrap_or(u32::MAX));
    let context = match (limit, model_max) {
        (0, own) => own.unwrap_or(4096),
        (limit, Some(own)) => limit.min(own),
        (limit, None) => limit,
    };
    Ok(FitSettings {
        context,
        kv_bits: (kv_bits != 0).then_some(kv_bits),
        sequences: max_running as u32,
    })
}

/// How the engine will hold the weights (quantized as stored on Metal,
/// dequantized to float32 on the CPU backend: four bytes a weight).
fn holding(state: &AppState) -> WeightHolding {
    match state.settings().engine_config().load.format {
        engine::model::layers::WeightFormat::AsStored => WeightHolding::AsStored,
        engine::model::layers::WeightFormat::Float32 => WeightHolding::Float32,
    }
}

/// This machine's memory for a model that will replace the loaded one.
async fn machine(state: &AppState) -> MachineMemory {
    let detected = MachineMemory::detect();
    let held = match state.engine.engine() {
        Some(engine) => engine.stats_async().await.map_or(0, |s| s.active_memory_bytes as u64),
        None => 0,
    };
    after_unload(detected, held)
}

/// Loading a model unloads the running one, so what the engine holds now
/// (MLX's active memory) is free for the new one, though the free memory
/// measured now does not count it: without this, switching between two
/// models that each fit would look tight.
pub fn after_unload(machine: MachineMemory, engine_bytes: u64) -> MachineMemory {
    MachineMemory {
        available_bytes: machine
            .available_bytes
            .saturating_add(engine_bytes)
            .min(machine.total_bytes),
        ..machine
    }
}

async fn client() -> AppResult<hub::HubClient> {
    Ok(hub::HubClient::new(crate::hub_token::hub_config().await?)?)
}

pub async fn search(query: &SearchQuery) -> AppResult<SearchPage> {
    Ok(client().await?.search(query, &EngineRegistry).await?)
}

pub async fn details(repo: &str, revision: Option<&str>) -> AppResult<ModelDetails> {
    Ok(client().await?.model_details(repo, revision.unwrap_or("main"), &EngineRegistry).await?)
}

pub async fn fit_check(
    state: &Arc<AppState>,
    target: FitTarget,
    ask: FitAsk,
) -> AppResult<FitCheck> {
    let machine = machine(state).await;
    match target {
        FitTarget::Hub { repo, variant } => {
            let base = crate::model_settings::effective(state, &format!("hf:{repo}")).await?;
            let details = details(&repo, None).await?;
            let shape = details.shape.clone().ok_or_else(|| {
                let why = details.shape_error.clone().unwrap_or_else(|| "unknown".into());
                AppError::new("NO_MODEL_SHAPE", format!("cannot estimate {repo}: {why}"))
            })?;
            let variants = &details.model.variants;
            let chosen = match &variant {
                Some(label) => variants.iter().find(|v| &v.label == label).ok_or_else(|| {
                    let offered: Vec<&str> = variants.iter().map(|v| v.label.as_str()).collect();
                    AppError::new(
                        "MODEL_NOT_FOUND",
                        format!("{repo} has no {label} download (it has {offered:?})"),
                    )
                })?,
                None => variants.first().ok_or_else(|| {
                    AppError::new(
                        "NO_WEIGHTS",
                        format!("{repo} has no safetensors or GGUF weights"),
                    )
                })?,
            };
            // The KV cache and activations in the engine's type (float32 on
            // the CPU backend), not the checkpoint's, as for a model on disk.
            let shape = ModelShape { kv_element_bytes: holding(state).activation_bytes(), ..shape };
            let stored = chosen.weight_bytes.ok_or_else(|| {
                AppError::new(
                    "NO_MODEL_SHAPE",
                    format!("the Hub did not list the sizes of {repo}'s files"),
                )
            })?;
            // the Hub counts weights of safetensors only; a GGUF's count is in
            // its tensor table, which the header read does not reach
            let parameters = (chosen.format == VariantFormat::Safetensors)
                .then_some(details.model.parameters)
                .flatten();
            let weights = WeightBytes {
                weights: holding(state).bytes(stored, parameters),
                vision_projector: chosen.projector_bytes.unwrap_or(0),
            };
            let settings = fit_settings(&base, ask, shape.max_context)?;
            let report = hub::check_fit(&shape, &weights, &settings, &machine);
            Ok(FitCheck { variant: Some(chosen.label.clone()), report })
        }
        FitTarget::Local { id } => {
            let model =
                crate::models::scan(state).await.into_iter().find(|m| m.id == id).ok_or_else(
                    || AppError::new("MODEL_NOT_FOUND", format!("no model {id:?} on disk")),
                )?;
            let holding = holding(state);
            let path = model.path.clone();
            let (shape, weights) =
                tokio::task::spawn_blocking(move || hub::fit::local_model(&path, holding))
                    .await
                    .map_err(|e| AppError::new("FIT_CHECK_FAILED", e.to_string()))??;
            let base = crate::model_settings::effective(state, &id).await?;
            let settings = fit_settings(&base, ask, shape.max_context)?;
            Ok(FitCheck {
                variant: None,
                report: hub::check_fit(&shape, &weights, &settings, &machine),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_running_sequence_counts_and_the_ask_beats_the_settings() {
        let base = Settings { max_running: 4, kv_bits: 8, max_context: 2048, ..Default::default() };
        let s = fit_settings(&base, FitAsk::default(), Some(8192)).unwrap();
        assert_eq!((s.context, s.kv_bits, s.sequences), (2048, Some(8), 4));
        let ask = FitAsk { context: Some(512), kv_bits: Some(0), max_running: Some(1) };
        let s = fit_settings(&base, ask, Some(8192)).unwrap();
        assert_eq!((s.context, s.kv_bits, s.sequences), (512, None, 1));
        // a limit above the model's own is the model's own; 0 is the model's own
        let s = fit_settings(&base, FitAsk::default(), Some(1024)).unwrap();
        assert_eq!(s.context, 1024);
        let own = FitAsk { context: Some(0), ..Default::default() };
        assert_eq!(fit_settings(&base, own, Some(8192)).unwrap().context, 8192);
        let bad = FitAsk { max_running: Some(0), ..Default::default() };
        assert_eq!(fit_settings(&base, bad, None).unwrap_err().code, "INVALID_SETTINGS");
    }

    #[test]
    fn what_the_running_engine_holds_counts_as_free_for_the_next_model() {
        let machine = MachineMemory {
            total_bytes: 16 << 30,
            available_bytes: 4 << 30,
            gpu_limit_bytes: None,
        };
        assert_eq!(after_unload(machine, 3 << 30).available_bytes, 7 << 30);
        assert_eq!(after_unload(machine, 0), machine);
        // never more than the machine has
        assert_eq!(after_unload(machine, 20 << 30).available_bytes, 16 << 30);
    }
}

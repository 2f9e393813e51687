//! Whether the engine runs a model: the engine owns its family registry and
//! this crate does not depend on the engine, so the app passes the registry
//! in as an [`EngineSupport`].
use serde::{Deserialize, Serialize};
use ts_rs::TS;

/// What the engine says about an architecture it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
pub struct Support {
    /// The family's display name ("Qwen2-VL").
    pub family: String,
    /// The family has a vision tower.
    pub vision: bool,
}

/// The engine's family registry, as the app passes it in.
pub trait EngineSupport: Send + Sync {
    /// The family that loads a config.json `model_type`.
    fn model_type(&self, model_type: &str) -> Option<Support>;
    /// The family that imports a GGUF `general.architecture`.
    fn gguf_architecture(&self, architecture: &str) -> Option<Support>;
}

/// The verdict for one model, for the gallery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
pub struct SupportStatus {
    pub supported: bool,
    /// The engine's family, when supported.
    pub family: Option<String>,
    /// Why not, when not supported.
    pub reason: Option<String>,
}

impl SupportStatus {
    pub(crate) fn supported(support: Support) -> SupportStatus {
        SupportStatus { supported: true, family: Some(support.family), reason: None }
    }

    pub(crate) fn unsupported(reason: impl Into<String>) -> SupportStatus {
        SupportStatus { supported: false, family: None, reason: Some(reason.into()) }
    }
}

//! The user's settings: one JSON record in the store. Engine settings
//! (KV quantization, context, running sequences) only take effect when the
//! engine starts, so the app compares them with the ones the loaded engine
//! was started with and says when a restart is needed.
use engine::batch::speculation::SpeculationConfig;
use engine::batch::SchedulerConfig;
use engine::cache::prefix_disk::DiskPrefixConfig;
use engine::cache::KvQuantization;
use engine::handle::EngineConfig;
use engine::model::ModelInfo;
use engine::sample::SamplingParams;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use ts_rs::TS;

use crate::cluster::ClusterSettings;
use crate::context::ContextPolicy;

/// The largest disk budget for the prefix cache, in MiB.
const MAX_PREFIX_DISK_MB: usize = 1 << 20;

/// The longest idle time before an unload: a week, in minutes.
const MAX_IDLE_MINUTES: u32 = 7 * 24 * 60;

/// The store key the settings live under.
pub const SETTINGS_KEY: &str = "app_settings";

/// Quantize the KV cache only past this many columns: short contexts lose
/// quality and gain little (the CLI's `--kv-start` default).
const KV_START: usize = 256;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(default)]
pub struct Settings {
    /// Ask thinking models to reason before answering.
    pub thinking: bool,
    /// Most reasoning tokens before thinking is closed by force; 0 = no limit.
    pub thinking_budget: usize,
    /// What a chat does when it outgrows the context (a chat may choose its own).
    pub context_policy: ContextPolicy,
    /// KV-cache quantization: 0 (off), 8 or 4 bits.
    pub kv_bits: u8,
    pub kv_group_size: i32,
    /// Context limit in tokens; 0 means the model's own.
    pub max_context: usize,
    /// Vision-feature cache size in MiB.
    pub vision_cache_mb: usize,
    /// Disk space in MiB for finished conversations' KV cache, so a chat
    /// continued after a restart prefills only its new message; 0 = off.
    pub prefix_disk_cache_mb: usize,
    pub temperature: f32,
    pub top_p: f32,
    pub top_k: i32,
    pub min_p: f32,
    pub repetition_penalty: f32,
    pub max_tokens: usize,
    /// Sent as the first (system) message of every chat; empty for none.
    pub system_prompt: String,
    /// Most sequences decoding at once (chats, server clients).
    pub max_running: usize,
    /// Speculative decoding ("Speed up replies"): off, or drafts looked up
    /// in the chat's own text, verified by the model in one pass.
    pub speed_up: SpeedUp,
    /// Unload the model after this many minutes with nothing to do, to give
    /// its memory back; the next message (or server request) loads it again.
    /// 0 = never, the default: a model the user loaded stays ready, as it
    /// did before this setting, and reloading a large one takes a while.
    pub unload_after_idle_minutes: u32,
    /// Run the OpenAI-compatible server on 127.0.0.1.
    pub server_enabled: bool,
    pub server_port: u16,
    /// Folders whose image files the server's clients may name with `file:`
    /// URLs; empty (the default) refuses `file:` URLs.
    pub server_file_url_folders: Vec<PathBuf>,
    /// Split models across machines (cluster.rs): off by default.
    pub cluster: ClusterSettings,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            thinking: true,
            thinking_budget: 0,
            context_policy: ContextPolicy::Stop,
            kv_bits: 0,
            kv_group_size: 64,
            max_context: 0,
            vision_cache_mb: 512,
            prefix_disk_cache_mb: 4096,
            temperature: 0.7,
            top_p: 0.95,
            top_k: 0,
            min_p: 0.0,
            // LM Studio's default: small models stop going round in circles
            // (model_defaults.rs adds a shorter limit for the built-in one)
            repetition_penalty: 1.1,
            max_tokens: 1024,
            system_prompt: String::new(),
            max_running: 8,
            speed_up: SpeedUp::Off,
            unload_after_idle_minutes: 0,
            server_enabled: false,
            server_port: server::DEFAULT_PORT,
            server_file_url_folders: Vec::new(),
            cluster: ClusterSettings::default(),
        }
    }
}

/// "Speed up replies": where draft tokens come from. Replies stay what the
/// model would have written (greedy: the same tokens; sampling: the same
/// distribution); only the speed changes. Settings offer off and prompt
/// lookup (they apply to every model); a model's own load settings offer
/// its MTP heads, draft models and drafter folders too (model_settings.rs
/// says which).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum SpeedUp {
    #[default]
    Off,
    /// Drafts copied from the chat's own text where the reply repeats it
    /// (editing, extracting, code): no second model.
    PromptLookup,
    /// The checkpoint's own multi-token-prediction heads (`mtp.*` tensors).
    Mtp,
    /// Another model on disk with the same vocabulary drafts, by its
    /// gallery id (`hf:owner/name`, `dir:<entry>`); its path is found when
    /// the model loads (models.rs).
    DraftModel(String),
    /// A drafter folder on disk made for this model, by its gallery id: a
    /// Gemma 4 assistant, or a Qwen3.5 multi-token-prediction head split
    /// from its checkpoint (mlx-vlm's drafter folders); resolved at load.
    Drafter(String),
}

impl SpeedUp {
    /// Settings apply to every model, so they take only what suits any:
    /// off or prompt lookup. A model's own MTP heads, a draft model and a
    /// drafter folder each fit one model and are chosen in its Load
    /// settings (model_settings.rs checks them against it).
    pub fn for_every_model(&self) -> Result<(), String> {
        let (what, why) = match self {
            SpeedUp::Off | SpeedUp::PromptLookup => return Ok(()),
            SpeedUp::Mtp => {
                ("\"mtp\" (a model's own MTP heads)".to_string(), "only some checkpoints have them")
            }
            SpeedUp::DraftModel(id) => (
                format!("the draft model {id}"),
                "a draft must share the vocabulary of the model it drafts for",
            ),
            SpeedUp::Drafter(id) => {
                (format!("the drafter {id}"), "a drafter is made for one model")
            }
        };
        Err(format!(
            "Speed up replies in Settings applies to every model: off or prompt lookup. \
             {what} fits one model ({why}): choose it in that model's Load settings on the Models page."
        ))
    }

    /// The engine's speculation, for the proposers that need no path;
    /// `DraftModel` and `Drafter` are resolved at load
    /// (`draft_models::draft_speculation`).
    pub fn speculation(&self) -> Option<SpeculationConfig> {
        match self {
            SpeedUp::Off | SpeedUp::DraftModel(_) | SpeedUp::Drafter(_) => None,
            SpeedUp::PromptLookup => Some(SpeculationConfig::prompt_lookup()),
            SpeedUp::Mtp => Some(SpeculationConfig::mtp()),
        }
    }
}

/// The part of the settings an engine is started with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS)]
pub struct EngineKnobs {
    pub kv_bits: u8,
    pub kv_group_size: i32,
    pub max_context: usize,
    pub max_running: usize,
    pub speed_up: SpeedUp,
    pub vision_cache_mb: usize,
    pub prefix_disk_cache_mb: usize,
}

impl Settings {
    /// Settings as a caller of `save_settings` sent them (the UI, or anything
    /// that reaches the command): what does not read as settings is refused
    /// here with what is wrong, before anything is saved ("Speed up
    /// replies" named with the values it takes).
    pub fn from_json(value: serde_json::Value) -> Result<Self, String> {
        if let Some(speed_up) = value.get("speed_up") {
            if SpeedUp::deserialize(speed_up).is_err() {
                return Err(format!(
                    "Speed up replies in Settings must be \"off\" or \"prompt_lookup\", not {speed_up}"
                ));
            }
        }
        serde_json::from_value(value).map_err(|e| format!("the settings could not be read: {e}"))
    }

    /// [`Self::validate`] for the Settings themselves, which apply to every
    /// model (a model's own load settings are merged over them and validated
    /// without this: they may name its heads or its draft).
    pub fn validate_for_every_model(&self) -> Result<(), String> {
        self.validate()?;
        self.speed_up.for_every_model()
    }

    /// Rejects values no engine could use, with a message for the form.
    pub fn validate(&self) -> Result<(), String> {
        if ![0, 4, 8].contains(&self.kv_bits) {
            return Err(format!("KV bits must be off, 8 or 4, not {}", self.kv_bits));
        }
        if ![32, 64, 128].contains(&self.kv_group_size) {
            return Err(format!("KV group size must be 32, 64 or 128, not {}", self.kv_group_size));
        }
        if !(0.0..=5.0).contains(&self.temperature) {
            return Err("temperature must be between 0 and 5".into());
        }
        if !(0.0..=1.0).contains(&self.top_p) || self.top_p == 0.0 {
            return Err("top-p must be in (0, 1]".into());
        }
        if self.top_k < 0 {
            return Err("top-k must be 0 (off) or more".into());
        }
        if !(0.0..1.0).contains(&self.min_p) {
            return Err("min-p must be in [0, 1)".into());
        }
        if !(0.5..=2.0).contains(&self.repetition_penalty) {
            return Err("repetition penalty must be between 0.5 and 2".into());
        }
        if self.max_tokens == 0 {
            return Err("max tokens must be at least 1".into());
        }
        if self.prefix_disk_cache_mb > MAX_PREFIX_DISK_MB {
            return Err(format!(
                "the conversation cache on disk must be at most {MAX_PREFIX_DISK_MB} MiB (1 TiB)"
            ));
        }
        if self.max_running == 0 || self.max_running > 64 {
            return Err("running sequences must be between 1 and 64".into());
        }
        if self.unload_after_idle_minutes > MAX_IDLE_MINUTES {
            return Err(format!(
                "unload after idle must be at most {MAX_IDLE_MINUTES} minutes (a week); 0 = never"
            ));
        }
        if self.server_port == 0 {
            return Err("the server port must not be 0".into());
        }
        if let Some(folder) =
            self.server_file_url_folders.iter().find(|f| !f.is_absolute() || !f.is_dir())
        {
            return Err(format!(
                "{} is not a folder (file: image URLs need full paths of folders)",
                folder.display()
            ));
        }
        self.cluster.validate()?;
        Ok(())
    }

    pub fn engine_knobs(&self) -> EngineKnobs {
        EngineKnobs {
            kv_bits: self.kv_bits,
            kv_group_size: self.kv_group_size,
            max_context: self.max_context,
            max_running: self.max_running,
            speed_up: self.speed_up.clone(),
            vision_cache_mb: self.vision_cache_mb,
            prefix_disk_cache_mb: self.prefix_disk_cache_mb,
        }
    }

    pub fn engine_config(&self) -> EngineConfig {
        let kv_quantization = (self.kv_bits != 0).then_some(KvQuantization {
            bits: self.kv_bits as i32,
            group_size: self.kv_group_size,
            start: KV_START,
        });
        EngineConfig {
            load: Default::default(),
            scheduler: SchedulerConfig {
                max_running: self.max_running,
                max_context: self.max_context,
                kv_quantization,
                vision_cache_bytes: self.vision_cache_mb << 20,
                // chats keep streaming while another chat's images are encoded
                pace_to_decode: true,
                speculation: self.speed_up.speculation(),
                ..Default::default()
            },
        }
    }

    /// The prefix cache's disk tier in `folder` within the setting's budget;
    /// `None` when the setting is 0 (off).
    pub fn prefix_disk(&self, folder: PathBuf) -> Option<DiskPrefixConfig> {
        (self.prefix_disk_cache_mb > 0).then_some(DiskPrefixConfig {
            folder,
            capacity_bytes: (self.prefix_disk_cache_mb as u64) << 20,
        })
    }

    pub fn sampling(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            min_p: self.min_p,
            repetition_penalty: self.repetition_penalty,
            ..Default::default()
        }
    }

    /// What of these settings the loaded model cannot use, in words, for the
    /// settings panel: the model named as the user knows it, and what to do.
    pub fn notes_for(&self, model: Option<&ModelFacts>) -> Vec<String> {
        let mut notes = Vec::new();
        let Some(model) = model else { return notes };
        if let Some(q) = self.engine_config().scheduler.kv_quantization {
            if q.unsupported_reason(model.head_dim).is_some() {
                let fitting: Vec<String> = [32, 64, 128]
                    .iter()
                    .filter(|g| model.head_dim % **g == 0)
                    .map(|g| g.to_string())
                    .collect();
                let what_to_do = if fitting.is_empty() {
                    "turn KV-cache quantization off: it cannot apply to this model".to_string()
                } else {
                    format!(
                        "set KV group size to {} (or turn KV-cache quantization off)",
                        fitting.join(" or ")
                    )
                };
                notes.push(format!(
                    "KV-cache quantization does not apply to {}: its attention heads have {} values, which a group size                      of {} does not divide. To use it, {what_to_do}, then restart the engine.",
                    model.name, model.head_dim, q.group_size
                ));
            }
        }
        if self.max_context > model.max_context {
            notes.push(format!(
                "Max context {} is above {}'s own limit of {} tokens; the model's limit applies.",
                self.max_context, model.name, model.max_context
            ));
        }
        notes
    }
}

/// What the notes need to know of the loaded model.
#[derive(Debug, Clone)]
pub struct ModelFacts {
    /// The name the user knows (the gallery's: `owner/name`, not a cache folder).
    pub name: String,
    pub head_dim: i32,
    pub max_context: usize,
}

impl ModelFacts {
    pub fn of(info: &ModelInfo, display_name: Option<String>) -> Self {
        ModelFacts {
            name: display_name.unwrap_or_else(|| info.name.clone()),
            head_dim: info.shape.head_dim,
            max_context: info.shape.max_context,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_old_records_fill_in_new_fields() {
        Settings::default().validate().unwrap();
        let partial: Settings = serde_json::from_str(r#"{"temperature": 0.2}"#).unwrap();
        assert_eq!(partial.temperature, 0.2);
        assert_eq!(partial.max_running, Settings::default().max_running);
    }

    #[test]
    fn bad_values_are_refused() {
        let bad = Settings { kv_bits: 3, ..Default::default() };
        assert!(bad.validate().unwrap_err().contains("KV bits"));
        let bad = Settings { top_p: 0.0, ..Default::default() };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn file_url_folders_must_be_folders() {
        let dir = tempfile::tempdir().unwrap();
        let ok = Settings {
            server_file_url_folders: vec![dir.path().to_path_buf()],
            ..Default::default()
        };
        ok.validate().unwrap();
        for bad in [dir.path().join("missing"), PathBuf::from("relative")] {
            let s = Settings { server_file_url_folders: vec![bad.clone()], ..Default::default() };
            assert!(s.validate().unwrap_err().contains("not a folder"), "{}", bad.display());
        }
    }

    #[test]
    fn notes_name_the_model_as_the_user_knows_it_and_say_what_to_do() {
        let model = ModelFacts {
            name: "mlx-community/Qwen2-VL-2B".into(),
            head_dim: 80,
            max_context: 4096,
        };
        let s = Settings { kv_bits: 8, kv_group_size: 64, max_context: 8192, ..Default::default() };
        let notes = s.notes_for(Some(&model));
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(
            notes[0]
                .starts_with("KV-cache quantization does not apply to mlx-community/Qwen2-VL-2B"),
            "{notes:?}"
        );
        // 80 is divided by none of 32, 64, 128: the way out is to turn it off
        assert!(notes[0].contains("turn KV-cache quantization off"), "{notes:?}");
        assert!(notes[1].contains("own limit of 4096"), "{notes:?}");
        let model = ModelFacts { head_dim: 64, ..model };
        let s = Settings { kv_bits: 4, kv_group_size: 128, ..Default::default() };
        let notes = s.notes_for(Some(&model));
        assert!(notes[0].contains("set KV group size to 32 or 64"), "{notes:?}");
        assert!(Settings { kv_bits: 4, kv_group_size: 64, ..Default::default() }
            .notes_for(Some(&model))
            .is_empty());
    }

    #[test]
    fn kv_bits_become_the_engine_quantization() {
        let s = Settings { kv_bits: 4, kv_group_size: 32, ..Default::default() };
        let q = s.engine_config().scheduler.kv_quantization.unwrap();
        assert_eq!((q.bits, q.group_size), (4, 32));
        assert!(Settings::default().engine_config().scheduler.kv_quantization.is_none());
        assert_eq!(
            Settings { vision_cache_mb: 3, ..Default::default() }
                .engine_config()
                .scheduler
                .vision_cache_bytes,
            3 << 20
        );
    }

    #[test]
    fn the_disk_budget_is_off_at_zero_and_bounded() {
        let folder = PathBuf::from("/tmp/prefix");
        assert!(Settings { prefix_disk_cache_mb: 0, ..Default::default() }
            .prefix_disk(folder.clone())
            .is_none());
        let on = Settings { prefix_disk_cache_mb: 3, ..Default::default() }
            .prefix_disk(folder.clone())
            .unwrap();
        assert_eq!((on.folder, on.capacity_bytes), (folder, 3 << 20));
        let bad = Settings { prefix_disk_cache_mb: MAX_PREFIX_DISK_MB + 1, ..Default::default() };
        assert!(bad.validate().unwrap_err().contains("conversation cache on disk"));
    }
}

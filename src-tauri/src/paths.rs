//! Where the app keeps its files. `VLM_DATA_DIR` overrides the platform's
//! app-data folder (tests and the end-to-end suite start from an empty one);
//! models live in the folder the default model was installed into (the
//! repository's `models/` in development), else `<data>/models`.
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct Paths {
    /// Database, attachments, log.
    pub data_dir: PathBuf,
    /// The app's own models folder (scanned, downloads of GGUF files).
    pub models_dir: PathBuf,
}

impl Paths {
    pub fn resolve(platform_data_dir: Option<PathBuf>) -> Paths {
        let data_dir = std::env::var_os("VLM_DATA_DIR")
            .map(PathBuf::from)
            .or(platform_data_dir)
            .unwrap_or_else(|| PathBuf::from("vlm-chat-data"));
        let models_dir = match hub::default_model::locate() {
            Ok(file) => {
                file.parent().map(Path::to_path_buf).unwrap_or_else(|| data_dir.join("models"))
            }
            Err(_) => data_dir.join("models"),
        };
        Paths { data_dir, models_dir }
    }

    pub fn database(&self) -> PathBuf {
        self.data_dir.join("chats.db")
    }

    /// Finished conversations' KV cache (the engine's prefix cache on disk).
    pub fn prefix_cache(&self) -> PathBuf {
        self.data_dir.join("prefix-cache")
    }
}

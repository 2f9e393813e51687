//! `GET /v1/models`: the loaded model, then the models found in the
//! configured models folder (listed so clients can see what exists; the app
//! loads them).
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use axum::extract::State;
use axum::Json;

use super::AppContext;
use crate::openai::{ModelEntry, ModelList};

pub(crate) async fn list(State(context): State<AppContext>) -> Json<ModelList> {
    let mut data = Vec::new();
    let loaded = context.state.engine().map(|engine| engine.model_info().clone());
    if let Some(info) = &loaded {
        let speculation = match context.state.engine() {
            Some(engine) => tokio::time::timeout(super::health::STATS_WAIT, engine.stats_async())
                .await
                .ok()
                .and_then(Result::ok)
                .map(|stats| stats.speculation.status),
            None => None,
        };
        data.push(ModelEntry {
            id: info.name.clone(),
            object: "model",
            created: modified_secs(&info.path),
            owned_by: "local",
            loaded: true,
            context_length: Some(info.shape.max_context),
            speculation,
        });
    }
    if let Some(dir) = context.settings.models_dir.clone() {
        let loaded_path = loaded.map(|info| info.path);
        // Directory listing is blocking I/O (and the folder may be on a slow disk).
        let on_disk =
            tokio::task::spawn_blocking(move || models_on_disk(&dir, loaded_path.as_deref()))
                .await
                .unwrap_or_default();
        data.extend(on_disk);
    }
    Json(ModelList { object: "list", data })
}

/// Model folders (with a config.json) and `.gguf` files directly in `dir`,
/// by name, without the loaded one.
fn models_on_disk(dir: &Path, loaded: Option<&Path>) -> Vec<ModelEntry> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        tracing::debug!(dir = %dir.display(), "models folder not readable");
        return Vec::new();
    };
    let loaded = loaded.and_then(|p| p.canonicalize().ok());
    let mut found: Vec<(String, PathBuf)> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| is_model(p))
        .filter(|p| loaded.is_none() || p.canonicalize().ok() != loaded)
        .filter_map(|p| Some((p.file_name()?.to_string_lossy().into_owned(), p)))
        .collect();
    found.sort();
    found
        .into_iter()
        .map(|(id, path)| ModelEntry {
            id,
            object: "model",
            created: modified_secs(&path),
            owned_by: "local",
            loaded: false,
            context_length: None,
            speculation: None,
        })
        .collect()
}

fn is_model(path: &Path) -> bool {
    if path.is_dir() {
        path.join("config.json").is_file()
    } else {
        path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
    }
}

fn modified_secs(path: &Path) -> u64 {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

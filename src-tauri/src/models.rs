//! The model gallery (catalog + what is on disk), loading and unloading the
//! engine, and downloads. Status changes go out as `engine-status` events,
//! download progress as `download-progress`, the end as `download-done`.
use std::path::{Path, PathBuf};
use std::sync::Arc;

use engine::handle::EngineHandle;
use engine::model::Capabilities;
use hub::{CatalogModel, LocalModel, ModelSource, ScanConfig};
use serde::Serialize;
use tauri::{AppHandle, Emitter, Runtime};
use ts_rs::TS;

use crate::error::{AppError, AppResult};
use crate::model_settings::ModelLoadSettings;
use crate::state::{AppState, EngineStatus, LoadedModel};

/// Where the gallery looks: the Hugging Face cache, the models folder and
/// the models the user added from elsewhere (added_models.rs).
pub async fn scan_config(state: &AppState) -> ScanConfig {
    ScanConfig {
        hf_cache: hub::HfCache::from_env(),
        models_dir: Some(state.paths.models_dir.clone()),
        user_paths: crate::added_models::paths(state).await,
        supported: engine::model::registry::supported_model_types()
            .iter()
            .map(|s| s.to_string())
            .collect(),
    }
}

pub async fn scan(state: &AppState) -> Vec<LocalModel> {
    let config = scan_config(state).await;
    tokio::task::spawn_blocking(move || config.scan()).await.unwrap_or_default()
}

/// What the model at `path` (a folder or a `.gguf` file) can do, as the
/// engine's family registry and the model's chat template say. An unreadable
/// model can do nothing: the scan already reports why it cannot be used.
pub fn capabilities(path: &Path) -> Capabilities {
    engine::model::describe(path).map(|info| info.capabilities).unwrap_or_default()
}

/// A model on disk as the gallery shows it.
#[derive(Debug, Clone, Serialize, TS)]
pub struct LocalEntry {
    #[serde(flatten)]
    pub model: LocalModel,
    /// Vision, thinking and tools, from the engine's registry.
    #[serde(flatten)]
    pub capabilities: Capabilities,
    /// The load settings remembered for this model (model_settings.rs);
    /// `None`: it loads with the Settings'.
    pub load_settings: Option<ModelLoadSettings>,
    /// Its checkpoint ships multi-token-prediction heads (`mtp.*` tensors),
    /// which "Speed up replies" can draft with.
    pub mtp_heads: bool,
    /// A drafter folder, not a chat model: it cannot be loaded alone, and
    /// "Speed up replies" of the model it was made for can draft with it.
    pub drafter: Option<crate::draft_models::Drafter>,
}

fn local_entry(model: LocalModel) -> LocalEntry {
    let capabilities = capabilities(&model.path);
    let mtp_heads = hub::mtp::folder_ships_mtp_heads(&model.path);
    let drafter = crate::draft_models::drafter_of(&model);
    LocalEntry { model, capabilities, load_settings: None, mtp_heads, drafter }
}

/// A catalog entry as the gallery shows it.
#[derive(Debug, Clone, Serialize, TS)]
pub struct GalleryEntry {
    #[serde(flatten)]
    pub model: CatalogModel,
    /// The disk-scan id when the model is on disk and complete.
    pub local_id: Option<String>,
    /// A partial download is on disk (a download resumes it).
    pub partial: bool,
    pub downloading: bool,
}

#[derive(Debug, Clone, Serialize, TS)]
pub struct Gallery {
    pub catalog: Vec<GalleryEntry>,
    /// Everything found on disk, catalog models included.
    pub local: Vec<LocalEntry>,
    pub models_dir: PathBuf,
    pub hf_cache_dir: Option<PathBuf>,
    /// Bytes all models on disk take.
    pub disk_bytes: u64,
}

/// The disk-scan id a catalog entry has once on disk.
fn local_id_of(source: &ModelSource) -> String {
    match source {
        ModelSource::Hub { repo, .. } => format!("hf:{repo}"),
        ModelSource::Local { file, .. } => format!("dir:{file}"),
    }
}

pub async fn gallery(state: &AppState) -> Gallery {
    let local = scan(state).await;
    let downloading = state.downloads.lock().unwrap().keys().cloned().collect::<Vec<_>>();
    let catalog = state
        .catalog
        .with_support(&engine::model::registry::supported_model_types())
        .into_iter()
        .map(|model| {
            let id = local_id_of(&model.entry.source);
            let found = local.iter().find(|l| l.id == id);
            GalleryEntry {
                local_id: found.filter(|l| !l.partial && l.error.is_none()).map(|l| l.id.clone()),
                partial: found.is_some_and(|l| l.partial),
                downloading: downloading.contains(&model.entry.id),
                model,
            }
        })
        .collect();
    let mut local =
        tokio::task::spawn_blocking(move || local.into_iter().map(local_entry).collect::<Vec<_>>())
            .await
            .unwrap_or_default();
    for entry in &mut local {
        entry.load_settings =
            crate::model_settings::remembered(state, &entry.model.id).await.unwrap_or_else(|e| {
                tracing::warn!(%e, id = entry.model.id, "a model's load settings cannot be read");
                None
            });
    }
    Gallery {
        disk_bytes: local.iter().map(|m| m.model.size_bytes).sum(),
        catalog,
        local,
        models_dir: state.paths.models_dir.clone(),
        hf_cache_dir: hub::HfCache::from_env().map(|c| c.root().to_path_buf()),
    }
}

/// The id of the model to load when nothing was chosen yet: the catalog's
/// default, installed in the models folder by the setup script.
pub fn default_model_id(state: &AppState) -> String {
    local_id_of(&state.catalog.default_entry().source)
}

pub(crate) fn set_status<R: Runtime>(
    app: &AppHandle<R>,
    state: &AppState,
    change: impl FnOnce(&mut EngineStatus),
) {
    let status = {
        let mut s = state.status.lock().unwrap();
        change(&mut s);
        s.clone()
    };
    let _ = app.emit("engine-status", status);
}

/// Loads a model by its disk-scan id, replacing the running engine (whose
/// replies under way end with ENGINE_STOPPED), and remembers the choice. The
/// model's own load settings (model_settings.rs) apply, else the Settings'.
pub async fn load<R: Runtime>(
    app: &AppHandle<R>,
    state: &Arc<AppState>,
    id: &str,
) -> AppResult<EngineStatus> {
    let _one_at_a_time = state.load_lock.lock().await;
    load_locked(app, state, id).await
}

/// `load`, with the load lock held by the caller.
pub(crate) async fn load_locked<R: Runtime>(
    app: &AppHandle<R>,
    state: &Arc<AppState>,
    id: &str,
) -> AppResult<EngineStatus> {
    let found = scan(state).await.into_iter().find(|m| m.id == id);
    let model = found
        .ok_or_else(|| AppError::new("MODEL_NOT_FOUND", format!("no model {id:?} on disk")))?;
    if !model.supported && crate::draft_models::drafter_of(&model).is_some() {
        return Err(AppError::new(
            "UNSUPPORTED_MODEL",
            format!(
                "{} is a drafter, not a chat model: choose it under Speed up replies in the Load settings of the model it was made for",
                model.name
            ),
        ));
    }
    if !model.supported {
        let why = model.error.clone().unwrap_or_else(|| {
            format!(
                "architecture {} is not supported (supported: {})",
                model.architecture.as_deref().unwrap_or("unknown"),
                engine::model::registry::supported_model_types().join(", ")
            )
        });
        return Err(AppError::new("UNSUPPORTED_MODEL", why));
    }
    let settings = crate::model_settings::effective(state, id).await?;
    // A draft model or a drafter folder is named by its gallery id: its path is the scan's.
    let draft = match &settings.speed_up {
        crate::settings::SpeedUp::DraftModel(draft) => {
            Some(crate::draft_models::draft_speculation(state, draft).await?)
        }
        crate::settings::SpeedUp::Drafter(drafter) => {
            Some(crate::draft_models::drafter_speculation(state, drafter).await?)
        }
        _ => None,
    };
    // Split across machines (Settings' Cluster): this Mac is rank 0. A
    // second ring in one run is refused here, before anything is stopped.
    let tensor_split = settings.cluster.split == crate::cluster::ClusterSplit::Tensor;
    if settings.cluster.enabled && model.path.is_file() && tensor_split {
        // the engine would refuse it only after the ring joined, which a run
        // of the app can do once (cluster.rs)
        return Err(AppError::new(
            "INVALID_REQUEST",
            format!(
                "{} is a .gguf file: tensor parallel splits a safetensors folder (Llama, Qwen2, Qwen3 families). Choose Pipeline or Auto in Settings → Split models across machines, or turn it off to load it on this Mac alone.",
                model.name
            ),
        ));
    }
    let group = match settings.cluster.enabled {
        true => Some(crate::cluster::begin(state, &settings.cluster, id)?),
        false => None,
    };
    set_status(app, state, |s| {
        s.state = "loading";
        s.loading = Some(model.name.clone());
    });
    let path = model.path.clone();
    let mut config = settings.engine_config();
    if draft.is_some() {
        config.scheduler.speculation = draft;
    }
    config.scheduler.prefix_disk = settings.prefix_disk(state.paths.prefix_cache());
    let split = group.is_some();
    let started = tokio::task::spawn_blocking(move || match group {
        None => EngineHandle::start(&path, config),
        Some(group) => EngineHandle::start_distributed(&path, config, group),
    })
    .await;
    let started = match started {
        Ok(r) => r.map_err(AppError::from),
        Err(e) => Err(AppError::new("LOAD_ABORTED", e.to_string())),
    };
    if split {
        crate::cluster::finish(state, started.as_ref().map(|_| ()));
    } else if started.is_ok() {
        // a split model loaded before is replaced: its ranks stop
        crate::cluster::left(state);
    }
    let handle = match started {
        Ok(h) => h,
        Err(e) => {
            set_status(app, state, |s| {
                s.state = if s.model.is_some() { "ready" } else { "unloaded" };
                s.loading = None;
                s.error = Some(e.clone());
            });
            return Err(e);
        }
    };
    let info = handle.model_info().clone();
    // the scan's name (`owner/name` in the Hugging Face cache, the entry in
    // the models folder), not the engine's: that is the folder's name, which
    // in the cache is a snapshot's commit hash
    let name = model.name.clone();
    if let Some(previous) = state.engine.set_engine(Some(handle)) {
        let _ = tokio::task::spawn_blocking(move || previous.shutdown()).await;
    }
    state.store.set_selected_model(id).await?;
    *state.last_stats.lock().unwrap() = None;
    state.idle.lock().unwrap().touch(std::time::Instant::now());
    set_status(app, state, |s| {
        s.state = "ready";
        s.loading = None;
        s.error = None;
        s.idle_unloaded = None;
        s.knobs = Some(settings.engine_knobs());
        s.model = Some(LoadedModel {
            id: id.to_string(),
            name,
            path: info.path.display().to_string(),
            architecture: info.architecture.clone(),
            quantization: info.stored_quantization.clone(),
            quantization_words: info.quantization_words.clone(),
            max_context: info.shape.max_context,
            capabilities: info.capabilities,
        });
    });
    Ok(state.status())
}

/// Unloads the model at the user's word: nothing loads it again by itself.
pub async fn unload<R: Runtime>(
    app: &AppHandle<R>,
    state: &Arc<AppState>,
) -> AppResult<EngineStatus> {
    let _one_at_a_time = state.load_lock.lock().await;
    unload_locked(app, state, false).await;
    Ok(state.status())
}

/// Stops the engine, with the load lock held by the caller. `idle`: the
/// model was unloaded for having been idle, and the next message or server
/// request loads it again (see idle.rs).
pub(crate) async fn unload_locked<R: Runtime>(
    app: &AppHandle<R>,
    state: &Arc<AppState>,
    idle: bool,
) {
    if let Some(previous) = state.engine.set_engine(None) {
        let _ = tokio::task::spawn_blocking(move || previous.shutdown()).await;
    }
    crate::cluster::left(state);
    set_status(app, state, |s| {
        s.state = "unloaded";
        s.idle_unloaded = if idle { s.model.take() } else { None };
        s.model = None;
        s.knobs = None;
    });
}

/// Loads the remembered model (or the default one) at startup.
pub async fn load_initial<R: Runtime>(app: &AppHandle<R>, state: &Arc<AppState>) {
    let selected = state.store.selected_model().await.ok().flatten();
    let id = selected.unwrap_or_else(|| default_model_id(state));
    if let Err(e) = load(app, state, &id).await {
        tracing::warn!(%e, id, "loading the selected model at startup failed");
    }
}

#[derive(Debug, Clone, Serialize, TS)]
pub struct DownloadDone {
    pub id: String,
    pub ok: bool,
    pub cancelled: bool,
    pub error: Option<AppError>,
    /// The disk-scan id of the finished model.
    pub local_id: Option<String>,
}

#[derive(Debug, Clone, Serialize, TS)]
pub struct DownloadEvent {
    pub id: String,
    #[serde(flatten)]
    pub progress: hub::DownloadProgress,
}

/// Where a download id points: a catalog id, or `hf:<owner/name>` for any
/// repository found by a search (its main branch).
fn download_source(state: &AppState, id: &str) -> AppResult<(String, String)> {
    if let Some(repo) = id.strip_prefix("hf:") {
        hub::repo::validate_repo_id(repo)?;
        return Ok((repo.to_string(), "main".to_string()));
    }
    let entry = state
        .catalog
        .get(id)
        .ok_or_else(|| AppError::new("MODEL_NOT_FOUND", format!("{id} is not in the catalog")))?;
    match entry.source.clone() {
        ModelSource::Hub { repo, revision } => Ok((repo, revision)),
        ModelSource::Local { .. } => Err(AppError::new(
            "NOT_DOWNLOADABLE",
            format!("{id} is installed with the app, not downloaded"),
        )),
    }
}

/// Starts downloading a catalog model, or any Hub repository as `hf:<repo>`,
/// into the Hugging Face cache (resuming any partial files); `files` keeps
/// only those (a GGUF repository's one quantization: a search result's
/// variant). Progress and the end arrive as events. The Hub token
/// comes from the keychain first (Settings), see `hub_token::hub_config`.
pub async fn start_download<R: Runtime>(
    app: &AppHandle<R>,
    state: &Arc<AppState>,
    id: &str,
    files: Option<Vec<String>>,
) -> AppResult<()> {
    let (repo, revision) = download_source(state, id)?;
    let client = hub::HubClient::new(crate::hub_token::hub_config().await?)?;
    let cancel = hub::CancellationToken::new();
    {
        let mut downloads = state.downloads.lock().unwrap();
        if downloads.contains_key(id) {
            return Err(AppError::new(
                "ALREADY_DOWNLOADING",
                format!("{id} is already downloading"),
            ));
        }
        downloads.insert(id.to_string(), cancel.clone());
    }
    let progress_app = app.clone();
    let progress_id = id.to_string();
    let options = hub::DownloadOptions {
        cancel: cancel.clone(),
        on_progress: Some(Arc::new(move |p: &hub::DownloadProgress| {
            let _ = progress_app.emit(
                "download-progress",
                DownloadEvent { id: progress_id.clone(), progress: p.clone() },
            );
        })),
        progress_interval: std::time::Duration::from_millis(250),
        ..Default::default()
    };
    let app = app.clone();
    let state = state.clone();
    let id = id.to_string();
    tauri::async_runtime::spawn(async move {
        let result = match &files {
            None => client.download(&repo, &revision, &options).await,
            Some(names) => {
                match client.list_files(&repo, &revision).await.and_then(|l| l.select(names)) {
                    Ok(listing) => client.download_listing(&listing, &options).await,
                    Err(e) => Err(e),
                }
            }
        };
        state.downloads.lock().unwrap().remove(&id);
        let done = match result {
            Ok(_) => DownloadDone {
                id,
                ok: true,
                cancelled: false,
                error: None,
                local_id: Some(format!("hf:{repo}")),
            },
            Err(e) => DownloadDone {
                id,
                ok: false,
                cancelled: cancel.is_cancelled(),
                error: Some(AppError::from(e)),
                local_id: None,
            },
        };
        let _ = app.emit("download-done", done);
    });
    Ok(())
}

pub fn cancel_download(state: &AppState, id: &str) -> bool {
    match state.downloads.lock().unwrap().get(id) {
        Some(token) => {
            token.cancel();
            true
        }
        None => false,
    }
}

/// Deletes a model from disk (not the loaded one, nor the built-in default,
/// which the app cannot download again); returns the bytes freed.
pub async fn delete(state: &Arc<AppState>, id: &str) -> AppResult<u64> {
    if state.status().model.is_some_and(|m| m.id == id) {
        return Err(AppError::new("MODEL_IN_USE", "Unload the model before deleting it."));
    }
    if id == default_model_id(state) {
        return Err(AppError::new(
            "BUILT_IN_MODEL",
            "The built-in model comes with the app and cannot be deleted.",
        ));
    }
    let model = scan(state)
        .await
        .into_iter()
        .find(|m| m.id == id)
        .ok_or_else(|| AppError::new("MODEL_NOT_FOUND", format!("no model {id:?} on disk")))?;
    let config = scan_config(state).await;
    let freed = tokio::task::spawn_blocking(move || config.delete(&model))
        .await
        .map_err(|e| AppError::new("DELETE_FAILED", e.to_string()))??;
    Ok(freed)
}

//! Models already on disk: the Hugging Face cache, the app's models folder
//! and the folders and GGUF files the user added by path ("Add model…"). Scanning never fails because of one
//! bad model: an unreadable config or GGUF is listed with an error string, an
//! architecture the engine lacks is listed as unsupported.
use std::path::{Path, PathBuf};

use hf_hub::cache::{CachedRepoInfo, CachedRevisionInfo};
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::cache::{disk_usage, HfCache};
use crate::error::{Error, Result};
use crate::gguf;

/// Where to look, and what the engine can run.
#[derive(Debug, Clone, Default)]
pub struct ScanConfig {
    /// The Hugging Face cache (`HfCache::from_env()` for the usual one).
    pub hf_cache: Option<HfCache>,
    /// The app's own models folder: subfolders with a config.json, and `.gguf` files.
    pub models_dir: Option<PathBuf>,
    /// Model folders and GGUF files the user added from elsewhere.
    pub user_paths: Vec<PathBuf>,
    /// Architectures (config.json `model_type` / GGUF `general.architecture`)
    /// the engine implements.
    pub supported: Vec<String>,
}

/// Where a model on disk lives; also says how to delete it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Location {
    /// A repository in the Hugging Face cache.
    HfCache {
        /// `owner/name`.
        repo: String,
        /// The snapshot's commit, when there is one.
        commit: Option<String>,
    },
    /// An entry (folder or `.gguf` file) directly in the app's models folder.
    ModelsDir {
        /// The entry's name in the folder.
        entry: String,
    },
    /// A folder or file the user pointed us to; never deleted by us.
    UserFile,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "lowercase")]
pub enum ModelFormat {
    /// A folder with config.json and safetensors (MLX / Hugging Face layout).
    Folder,
    /// A single GGUF file.
    Gguf,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
pub struct LocalModel {
    /// Stable id: `hf:owner/name`, `hf:owner/name/file.gguf`, `dir:<entry>` or `file:<path>`.
    pub id: String,
    /// Name to show.
    pub name: String,
    pub location: Location,
    /// What to load: the snapshot or model folder, or the GGUF file.
    pub path: PathBuf,
    pub format: ModelFormat,
    /// Bytes on disk (for a cached repo: all of it, every revision and partial file).
    pub size_bytes: u64,
    /// config.json `model_type` or GGUF `general.architecture`, when readable.
    pub architecture: Option<String>,
    /// The engine implements the architecture and the model has no error.
    pub supported: bool,
    /// A download was started and not finished (resumable).
    pub partial: bool,
    /// Why the model cannot be used as it is (bad config.json, missing files…).
    pub error: Option<String>,
}

impl ScanConfig {
    /// Every model found, sorted by name. Blocking file I/O: call it from a
    /// blocking thread in async code.
    pub fn scan(&self) -> Vec<LocalModel> {
        let mut models = Vec::new();
        if let Some(cache) = &self.hf_cache {
            models.extend(scan_hf_cache(cache));
        }
        if let Some(dir) = &self.models_dir {
            models.extend(scan_models_dir(dir));
        }
        for path in &self.user_paths {
            models.push(user_model(path));
        }
        for m in &mut models {
            m.supported = m.error.is_none()
                && !m.partial
                && m.architecture.as_ref().is_some_and(|a| self.supported.iter().any(|s| s == a));
        }
        models.sort_by(|a, b| {
            a.name.to_lowercase().cmp(&b.name.to_lowercase()).then(a.id.cmp(&b.id))
        });
        models
    }

    /// Deletes a model found by [`ScanConfig::scan`] and returns the bytes
    /// freed. The path is rebuilt from the configured folders, never taken
    /// from `model.path`, so a forged entry cannot point outside them. Files
    /// the user added by path are not deleted.
    pub fn delete(&self, model: &LocalModel) -> Result<u64> {
        match &model.location {
            Location::HfCache { repo, .. } => {
                let cache = self
                    .hf_cache
                    .as_ref()
                    .ok_or_else(|| Error::DeleteNotAllowed(model.id.clone()))?;
                cache.delete_repo(repo)
            }
            Location::ModelsDir { entry } => {
                let dir = self
                    .models_dir
                    .as_ref()
                    .ok_or_else(|| Error::DeleteNotAllowed(model.id.clone()))?;
                let single = Path::new(entry).components().count() == 1
                    && !entry.contains(['/', '\\'])
                    && entry != "."
                    && entry != "..";
                if !single {
                    return Err(Error::DeleteNotAllowed(model.id.clone()));
                }
                let path = dir.join(entry);
                let freed = disk_usage(&path)?;
                let meta = std::fs::symlink_metadata(&path).map_err(|e| Error::io(&path, e))?;
                if meta.is_dir() {
                    std::fs::remove_dir_all(&path).map_err(|e| Error::io(&path, e))?;
                } else {
                    std::fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
                }
                Ok(freed)
            }
            Location::UserFile => Err(Error::DeleteNotAllowed(format!(
                "{} (a file you added; remove it from the list instead)",
                model.path.display()
            ))),
        }
    }
}

fn scan_hf_cache(cache: &HfCache) -> Vec<LocalModel> {
    let info = match cache.scan() {
        Ok(info) => info,
        Err(e) => {
            tracing::warn!(cache = %cache.root().display(), error = %e, "cannot scan the Hugging Face cache");
            return Vec::new();
        }
    };
    info.repos.iter().filter(|r| r.repo_type == "model").flat_map(scan_cached_repo).collect()
}

/// The snapshot a cached repo is used at: the one `main` points to, else the
/// newest.
fn current_revision(repo: &CachedRepoInfo) -> Option<&CachedRevisionInfo> {
    repo.revisions
        .iter()
        .find(|r| r.refs.iter().any(|name| name == "main"))
        .or_else(|| repo.revisions.iter().max_by_key(|r| r.last_modified))
}

fn scan_cached_repo(cached: &CachedRepoInfo) -> Vec<LocalModel> {
    let repo = cached.repo_id.as_str();
    let dir = cached.repo_path.as_path();
    let partial = has_partial_blobs(&dir.join("blobs"));
    // everything on disk, partial files and older revisions included: what deleting frees
    let size = disk_usage(dir).unwrap_or(0);
    let revision = current_revision(cached);
    let commit = revision.map(|r| r.commit_hash.clone());
    let location = Location::HfCache { repo: repo.to_string(), commit: commit.clone() };
    let base = LocalModel {
        id: format!("hf:{repo}"),
        name: repo.to_string(),
        location: location.clone(),
        path: dir.to_path_buf(),
        format: ModelFormat::Folder,
        size_bytes: size,
        architecture: None,
        supported: false,
        partial,
        error: None,
    };
    let Some(revision) = revision else {
        // a download that has not finished its first file yet
        return if partial { vec![base] } else { Vec::new() };
    };
    let snapshot = revision.snapshot_path.clone();

    if snapshot.join("config.json").exists() {
        let mut model = LocalModel { path: snapshot.clone(), ..base };
        match config_architecture(&snapshot) {
            Ok(arch) => model.architecture = Some(arch),
            Err(e) => model.error = Some(e.to_string()),
        }
        if model.error.is_none() {
            model.error = check_snapshot(&snapshot);
        }
        return vec![model];
    }
    let ggufs = gguf_files_in(&snapshot);
    if ggufs.is_empty() {
        // not a model repo (a dataset-like or tokenizer-only download), unless still arriving
        return if partial { vec![LocalModel { path: snapshot, ..base }] } else { Vec::new() };
    }
    ggufs
        .into_iter()
        .map(|file| {
            let file_name = file.file_name().unwrap_or_default().to_string_lossy().into_owned();
            let mut model = gguf_model(format!("hf:{repo}/{file_name}"), &file, location.clone());
            model.name = format!("{repo} ({file_name})");
            model.partial = partial;
            model
        })
        .collect()
}

fn scan_models_dir(dir: &Path) -> Vec<LocalModel> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut models = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let location = Location::ModelsDir { entry: name.clone() };
        if path.is_dir() && path.join("config.json").exists() {
            models.push(folder_model(format!("dir:{name}"), name, &path, location));
        } else if is_gguf(&path) {
            models.push(gguf_model(format!("dir:{name}"), &path, location));
        }
    }
    models
}

/// A folder or `.gguf` file the user added, as `file:<path>`. One that is
/// gone (moved, an unplugged disk) stays listed with why, so it can be
/// removed from the list; the scan never drops it silently.
fn user_model(path: &Path) -> LocalModel {
    let id = format!("file:{}", path.display());
    if path.is_dir() {
        let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let mut model = folder_model(id, name, path, Location::UserFile);
        if model.error.is_none() && !path.join("config.json").exists() {
            model.error = Some("no config.json in the folder".into());
        }
        return model;
    }
    gguf_model(id, path, Location::UserFile)
}

/// A model folder (config.json and safetensors) with its architecture, or why it cannot be used.
fn folder_model(id: String, name: String, path: &Path, location: Location) -> LocalModel {
    let mut model = LocalModel {
        id,
        name,
        location,
        size_bytes: disk_usage(path).unwrap_or(0),
        path: path.to_path_buf(),
        format: ModelFormat::Folder,
        architecture: None,
        supported: false,
        partial: false,
        error: None,
    };
    match config_architecture(path) {
        Ok(arch) => model.architecture = Some(arch),
        Err(e) => model.error = Some(e.to_string()),
    }
    if model.error.is_none() {
        model.error = check_snapshot(path);
    }
    model
}

fn gguf_model(id: String, file: &Path, location: Location) -> LocalModel {
    let name = file.file_stem().unwrap_or_default().to_string_lossy().into_owned();
    let mut model = LocalModel {
        id,
        name,
        location,
        path: file.to_path_buf(),
        format: ModelFormat::Gguf,
        size_bytes: 0,
        architecture: None,
        supported: false,
        partial: false,
        error: None,
    };
    match std::fs::metadata(file) {
        Ok(meta) => model.size_bytes = meta.len(),
        Err(e) => {
            model.error = Some(Error::io(file, e).to_string());
            return model;
        }
    }
    match gguf::read_architecture(file) {
        Ok(arch) => model.architecture = Some(arch),
        Err(e) => model.error = Some(e.to_string()),
    }
    model
}

/// config.json's `model_type`.
fn config_architecture(folder: &Path) -> Result<String> {
    let path = folder.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    let config: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::InvalidConfig { path: path.clone(), reason: e.to_string() })?;
    config
        .get("model_type")
        .and_then(|t| t.as_str())
        .map(str::to_string)
        .ok_or(Error::InvalidConfig { path, reason: "no model_type".into() })
}

/// A folder model needs its weights, and (in the HF cache) every snapshot
/// link must reach its blob.
fn check_snapshot(folder: &Path) -> Option<String> {
    let mut has_weights = false;
    let mut missing = Vec::new();
    let mut stack = vec![folder.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            // metadata() follows the link: it fails when the blob is gone
            match std::fs::metadata(&path) {
                Ok(meta) if meta.is_dir() => stack.push(path),
                Ok(_) => has_weights |= path.extension().is_some_and(|e| e == "safetensors"),
                Err(_) => {
                    missing.push(path.strip_prefix(folder).unwrap_or(&path).display().to_string())
                }
            }
        }
    }
    if !missing.is_empty() {
        missing.sort();
        return Some(format!("incomplete: missing {}", missing.join(", ")));
    }
    (!has_weights).then(|| "no .safetensors weights in the folder".to_string())
}

fn has_partial_blobs(blobs: &Path) -> bool {
    std::fs::read_dir(blobs).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            // huggingface_hub's and ours; `.part` from downloads of older app versions
            name.ends_with(".incomplete") || name.ends_with(".part")
        })
    })
}

fn gguf_files_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.flatten().map(|e| e.path()).filter(|p| is_gguf(p)).collect())
        .unwrap_or_default();
    files.sort();
    files
}

fn is_gguf(path: &Path) -> bool {
    path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) && path.is_file()
}

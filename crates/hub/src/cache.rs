//! The Hugging Face cache, shared with huggingface_hub, hf-hub, mlx-lm and
//! LM Studio users, so a model downloaded by any of them is found by all:
//!
//! ```text
//! <root>/models--<owner>--<name>/
//!     blobs/<sha256 or git blob id>      file contents, stored once
//!     blobs/<hash>.incomplete            a download in progress (resumable)
//!     snapshots/<commit>/<file path>     symlinks to ../../blobs/<hash>
//!     refs/<revision>                    the commit a branch or tag points to
//! <root>/.locks/models--<owner>--<name>/<hash>.lock
//! ```
//!
//! hf-hub finds the root (`HF_HUB_CACHE`, `$HF_HOME/hub`, …) and scans it.
//! Writing into it is ours, because hf-hub keeps its writers (and its locks)
//! private to its own unverified download: we follow the same layout and take
//! the same per-blob lock files, so a Python or hf-hub download of the same
//! file waits for ours and the other way round.
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::repo::{validate_repo_id, validate_revision};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HfCache {
    /// The `hub` folder that holds the `models--…` folders.
    root: PathBuf,
}

impl HfCache {
    pub fn new(root: impl Into<PathBuf>) -> HfCache {
        HfCache { root: root.into() }
    }

    /// Where huggingface_hub and hf-hub put it: `$HF_HUB_CACHE`, else
    /// `$HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`, else
    /// `~/.cache/huggingface/hub` (on macOS too), as hf-hub resolves it.
    /// `None` only without any of these and no home folder.
    pub fn from_env() -> Option<HfCache> {
        let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
        let any = ["HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HOME"]
            .iter()
            .any(|v| set(v));
        // without any of them hf-hub would pick a folder under /tmp
        any.then(|| HfCache::new(hf_hub::resolve_cache_dir()))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `models--owner--name`; the repo id must be valid.
    pub fn repo_dir(&self, repo: &str) -> Result<PathBuf> {
        validate_repo_id(repo)?;
        Ok(self.root.join(repo_folder(repo)))
    }

    /// Every repository in the cache with its snapshots, as hf-hub scans it
    /// (a missing root is an empty cache). Blocking file I/O.
    pub fn scan(&self) -> Result<hf_hub::cache::HFCacheInfo> {
        let client = hf_hub::HFClient::builder()
            .cache_dir(&self.root)
            .build()
            .map_err(|e| Error::Network(format!("cannot set up the Hub client: {e}")))?;
        // hf-hub's scan is async in name only (it reads with std::fs), so a
        // plain executor runs it, from a blocking thread or inside a runtime
        futures::executor::block_on(client.scan_cache().send()).map_err(|e| Error::Io {
            path: self.root.clone(),
            source: std::io::Error::other(e.to_string()),
        })
    }

    /// Deletes a repository from the cache (all revisions, partial downloads
    /// included) and returns the bytes freed. A repo that is not there frees 0.
    pub fn delete_repo(&self, repo: &str) -> Result<u64> {
        let dir = self.repo_dir(repo)?;
        if !dir.exists() {
            return Ok(0);
        }
        let freed = disk_usage(&dir)?;
        std::fs::remove_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        Ok(freed)
    }

    /// Takes the lock huggingface_hub and hf-hub take before writing a blob,
    /// waiting while another process holds it. Released when dropped.
    pub(crate) async fn lock_blob(&self, repo: &str, blob: &str) -> Result<BlobLock> {
        let path = self.root.join(".locks").join(repo_folder(repo)).join(format!("{blob}.lock"));
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent).await.map_err(|e| Error::io(parent, e))?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        let mut waiting = false;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(BlobLock { _file: file }),
                Err(std::fs::TryLockError::WouldBlock) => {
                    if !waiting {
                        tracing::info!(lock = %path.display(), "another download of this file is running; waiting");
                        waiting = true;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(&path, e)),
            }
        }
    }
}

/// An exclusive lock on one blob of the cache (flock, as Python's filelock).
pub(crate) struct BlobLock {
    _file: std::fs::File,
}

fn repo_folder(repo: &str) -> String {
    format!("models--{}", repo.replace('/', "--"))
}

/// 40 hex digits: a git commit id.
pub(crate) fn is_commit_hash(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Points `snapshots/<commit>/<name>` at `blobs/<blob>` with a relative
/// symlink, as huggingface_hub does (copies where symlinks are unavailable).
pub(crate) async fn link_snapshot(snapshot: &Path, name: &str, blob: &str) -> Result<()> {
    let link = snapshot.join(name);
    if let Some(parent) = link.parent() {
        tokio::fs::create_dir_all(parent).await.map_err(|e| Error::io(parent, e))?;
    }
    let depth = name.split('/').count();
    let target: PathBuf =
        std::iter::repeat_n("..", depth + 1).collect::<PathBuf>().join("blobs").join(blob);
    if tokio::fs::symlink_metadata(&link).await.is_ok() {
        tokio::fs::remove_file(&link).await.map_err(|e| Error::io(&link, e))?;
    }
    #[cfg(unix)]
    {
        tokio::fs::symlink(&target, &link).await.map_err(|e| Error::io(&link, e))
    }
    #[cfg(not(unix))]
    {
        let source = link.parent().unwrap_or(snapshot).join(&target);
        tokio::fs::copy(&source, &link).await.map(|_| ()).map_err(|e| Error::io(&link, e))
    }
}

/// `refs/<revision>` ← commit, written atomically.
pub(crate) async fn write_ref(repo_dir: &Path, revision: &str, commit: &str) -> Result<()> {
    validate_revision(revision)?;
    let path = repo_dir.join("refs").join(revision);
    if let Some(parent) = path.parent() {
        tokio::fs::create_dir_all(parent).await.map_err(|e| Error::io(parent, e))?;
    }
    let tmp = path.with_extension("tmp");
    tokio::fs::write(&tmp, commit).await.map_err(|e| Error::io(&tmp, e))?;
    tokio::fs::rename(&tmp, &path).await.map_err(|e| Error::io(&path, e))
}

/// Bytes used by the regular files under `path` (or `path` itself). Symlinks
/// are not followed, so each blob of the HF cache counts once however many
/// snapshots point at it.
pub fn disk_usage(path: &Path) -> Result<u64> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| Error::io(path, e))?;
    if meta.is_file() {
        return Ok(meta.len());
    }
    if !meta.is_dir() {
        return Ok(0);
    }
    let mut total = 0;
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))? {
            let entry = entry.map_err(|e| Error::io(&dir, e))?;
            let meta = entry.metadata().map_err(|e| Error::io(entry.path(), e))?; // does not follow links
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() {
                total += meta.len();
            }
        }
    }
    Ok(total)
}

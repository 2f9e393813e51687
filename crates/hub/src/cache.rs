//! The Hugging Face cache layout, shared with huggingface_hub, mlx-lm and
//! LM Studio users, so a model downloaded by any of them is found by all:
//!
//! ```text
//! <root>/models--<owner>--<name>/
//!     blobs/<sha256 or git blob id>      file contents, stored once
//!     snapshots/<commit>/<file path>     symlinks to ../../blobs/<hash>
//!     refs/<revision>                    the commit a branch or tag points to
//! ```
use std::path::{Path, PathBuf};

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

    /// Where huggingface_hub puts it: `$HF_HUB_CACHE`, else `$HF_HOME/hub`,
    /// else `$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`
    /// (on macOS too). `None` only without any of these and no home folder.
    pub fn from_env() -> Option<HfCache> {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        let root = var("HF_HUB_CACHE")
            .or_else(|| var("HF_HOME").map(|h| h.join("hub")))
            .or_else(|| var("XDG_CACHE_HOME").map(|c| c.join("huggingface").join("hub")))
            .or_else(|| var("HOME").map(|h| h.join(".cache").join("huggingface").join("hub")))?;
        Some(HfCache::new(root))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `models--owner--name`; the repo id must be valid.
    pub fn repo_dir(&self, repo: &str) -> Result<PathBuf> {
        validate_repo_id(repo)?;
        Ok(self.root.join(format!("models--{}", repo.replace('/', "--"))))
    }

    /// The commit that `revision` points to: itself if it is a commit hash
    /// with a snapshot, else what `refs/<revision>` says.
    pub fn resolve_revision(&self, repo: &str, revision: &str) -> Result<Option<String>> {
        validate_revision(revision)?;
        let dir = self.repo_dir(repo)?;
        if is_commit_hash(revision) && dir.join("snapshots").join(revision).is_dir() {
            return Ok(Some(revision.to_string()));
        }
        match std::fs::read_to_string(dir.join("refs").join(revision)) {
            Ok(text) => Ok(Some(text.trim().to_string()).filter(|c| is_commit_hash(c))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(dir.join("refs").join(revision), e)),
        }
    }

    /// The snapshot folder for `revision`, if downloaded.
    pub fn snapshot_dir(&self, repo: &str, revision: &str) -> Result<Option<PathBuf>> {
        let Some(commit) = self.resolve_revision(repo, revision)? else { return Ok(None) };
        let dir = self.repo_dir(repo)?.join("snapshots").join(commit);
        Ok(dir.is_dir().then_some(dir))
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
}

/// 40 hex digits: a git commit id.
pub(crate) fn is_commit_hash(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
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

//! What a repository holds at one commit, with each file's size and the hash
//! its download is verified against, all asked through hf-hub:
//!
//! 1. `info(revision)`: the commit the revision points to (files are then
//!    listed and fetched by commit, so a push during a download cannot mix
//!    two revisions);
//! 2. `list_tree(commit, recursive)`: every file with its size and git blob
//!    id (SHA-1), and whether it is stored in LFS;
//! 3. for LFS files, the SHA-256: the tree endpoint sends it as `lfs.oid`, but
//!    hf-hub 1.0's `BlobLfsInfo` reads only `lfs.sha256` (the key of the info
//!    endpoint with `?blobs=true`, which hf-hub cannot ask for), so it is lost
//!    on the way. A HEAD on the file (`get_file_metadata`) gives it back as the
//!    `X-Linked-Etag`, the name huggingface_hub gives the blob in the cache.
//!    Should hf-hub fill `lfs.sha256` one day, the HEAD is skipped.
use futures::TryStreamExt;
use hf_hub::repository::RepoTreeEntry;
use serde::{Deserialize, Serialize};

use crate::cache::is_commit_hash;
use crate::client::HubClient;
use crate::error::{Error, Result};
use crate::repo::{validate_file_name, validate_repo_id, validate_revision};

/// What a repository holds at one commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoListing {
    pub repo: String,
    /// The revision asked for (branch, tag or commit).
    pub revision: String,
    /// The commit it resolved to.
    pub commit: String,
    pub files: Vec<RepoFile>,
}

impl RepoListing {
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// The same listing with only the named files (a GGUF repository's one
    /// quantization, say). Names not in the listing are an error, so a typo
    /// cannot download nothing and call it done.
    pub fn select(&self, names: &[String]) -> Result<RepoListing> {
        if let Some(missing) = names.iter().find(|n| !self.files.iter().any(|f| &f.name == *n)) {
            return Err(Error::NotFound(format!("{}@{}: {missing}", self.repo, self.revision)));
        }
        Ok(RepoListing {
            files: self.files.iter().filter(|f| names.contains(&f.name)).cloned().collect(),
            ..self.clone()
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoFile {
    /// Path inside the repository (checked safe).
    pub name: String,
    pub size: u64,
    /// How its content is verified; also its blob name in the cache.
    pub hash: FileHash,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "hex", rename_all = "snake_case")]
pub enum FileHash {
    /// LFS files: SHA-256 of the content.
    Sha256(String),
    /// Plain git files: the git blob id, SHA-1 of `"blob {size}\0" + content`.
    GitBlob(String),
}

impl FileHash {
    /// The file's name under `blobs/`, as huggingface_hub names it.
    pub fn blob_name(&self) -> &str {
        match self {
            FileHash::Sha256(h) | FileHash::GitBlob(h) => h,
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let (hex, len) = match self {
            FileHash::Sha256(h) => (h, 64),
            FileHash::GitBlob(h) => (h, 40),
        };
        if hex.len() == len && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            Ok(())
        } else {
            Err(Error::InvalidListing(format!("bad hash {hex:?}")))
        }
    }
}

/// A file of the tree before its LFS hash is known.
struct TreeFile {
    name: String,
    size: u64,
    git_blob: String,
    lfs: Option<Option<String>>,
}

impl HubClient {
    /// The files of `repo` at `revision`, with sizes and hashes. Every file
    /// name is checked before anything else is asked: one unsafe name rejects
    /// the whole listing.
    pub async fn list_files(&self, repo: &str, revision: &str) -> Result<RepoListing> {
        validate_repo_id(repo)?;
        validate_revision(revision)?;
        let what = format!("{repo}@{revision}");
        let handle = self.model(repo);
        let info = handle
            .info()
            .revision(revision)
            .send()
            .await
            .map_err(|e| self.error(e, repo, &what))?;
        let commit = info
            .sha
            .filter(|c| is_commit_hash(c))
            .map(|c| c.to_ascii_lowercase())
            .ok_or_else(|| Error::InvalidListing(format!("{what}: no commit sha")))?;

        let tree = handle
            .list_tree()
            .revision(commit.clone())
            .recursive(true)
            .send()
            .map_err(|e| self.error(e, repo, &what))?;
        let entries: Vec<RepoTreeEntry> =
            tree.try_collect().await.map_err(|e| self.error(e, repo, &what))?;
        let mut tree_files = Vec::new();
        for entry in entries {
            if let RepoTreeEntry::File { path, size, oid, lfs, .. } = entry {
                validate_file_name(&path)?;
                tree_files.push(TreeFile {
                    name: path,
                    size,
                    git_blob: oid,
                    lfs: lfs.map(|l| l.sha256),
                });
            }
        }

        let mut files = Vec::with_capacity(tree_files.len());
        for f in tree_files {
            let hash = match f.lfs {
                None => FileHash::GitBlob(f.git_blob.to_ascii_lowercase()),
                Some(Some(sha256)) => FileHash::Sha256(sha256.to_ascii_lowercase()),
                Some(None) => {
                    let file_what = format!("{what}: {}", f.name);
                    let meta = handle
                        .get_file_metadata()
                        .filepath(f.name.clone())
                        .revision(&commit)
                        .send()
                        .await
                        .map_err(|e| self.error(e, repo, &file_what))?;
                    FileHash::Sha256(meta.etag.to_ascii_lowercase())
                }
            };
            hash.validate()
                .map_err(|e| Error::InvalidListing(format!("{what}: {}: {e}", f.name)))?;
            files.push(RepoFile { name: f.name, size: f.size, hash });
        }
        Ok(RepoListing { repo: repo.to_string(), revision: revision.to_string(), commit, files })
    }
}

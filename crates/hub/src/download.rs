//! Downloads of Hub repositories into the Hugging Face cache (see
//! [`crate::cache`]), with progress, cancellation, resume and verification.
//!
//! What is whose, and why:
//! - **hf-hub** lists the files ([`crate::listing`]) and moves the bytes:
//!   `download_file_stream` with a byte range speaks both plain HTTP (the
//!   CDN) and Xet, and carries the endpoint, the token and its retries of
//!   failed requests.
//! - **Ours**: everything around the bytes, because hf-hub 1.0's own
//!   `download_file`/`snapshot_download` (read in its source) do not verify
//!   what they write (no SHA-256 or size check against the listing), start
//!   every partial file over (`File::create` on `.incomplete`), have no cancel
//!   token, and report progress per file without a total. So here: the
//!   partial file is resumed from where it ends ([`crate::partial`]), hashed
//!   as it grows and renamed to its blob only when size and hash match;
//!   cut transfers are retried from where they broke, with backoff, as long
//!   as they make progress; a cancel token stops it all and keeps the partial
//!   files; progress covers the whole repository; and the snapshot links and
//!   refs are written in huggingface_hub's layout, under its lock files.
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use futures::StreamExt;
use serde::{Deserialize, Serialize};
pub use tokio_util::sync::CancellationToken;

use crate::cache::{is_commit_hash, link_snapshot, write_ref};
use crate::client::HubClient;
use crate::error::{Error, Result};
use crate::listing::{RepoFile, RepoListing};
use crate::partial::{partial_path, Part};
use crate::progress::{ProgressFn, Tracker};
use crate::repo::{validate_file_name, validate_repo_id, validate_revision};

/// Retries of transient failures (connection errors, cut transfers, 5xx,
/// 429) for one file. Any progress resets the count, so a slow but moving
/// connection is never given up on. hf-hub retries each request on its own
/// too; these retries also cover a transfer that breaks midway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Tries per file without progress before giving up (at least 1).
    pub attempts: u32,
    /// Wait before the first retry; doubles each time up to `max_delay`.
    pub initial_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 5,
            initial_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(15),
        }
    }
}

#[derive(Clone)]
pub struct DownloadOptions {
    /// Cancels the download; partial files stay for a later resume.
    pub cancel: CancellationToken,
    /// Called with progress at most every `progress_interval`, and at the end.
    pub on_progress: Option<ProgressFn>,
    pub progress_interval: Duration,
    pub retry: RetryPolicy,
}

impl Default for DownloadOptions {
    fn default() -> Self {
        DownloadOptions {
            cancel: CancellationToken::new(),
            on_progress: None,
            progress_interval: Duration::from_millis(100),
            retry: RetryPolicy::default(),
        }
    }
}

/// A finished download.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DownloadedModel {
    pub repo: String,
    pub commit: String,
    /// The snapshot folder to load the model from.
    pub snapshot_dir: PathBuf,
    /// Size of all the files.
    pub bytes_total: u64,
    /// Bytes that came over the network this time (0 when all was cached).
    pub bytes_fetched: u64,
}

/// Repository folders this process is downloading into now: a second
/// download of the same repo would only wait on the first one's locks.
static ACTIVE: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);

struct ActiveGuard(PathBuf);

impl ActiveGuard {
    fn take(repo: &str, repo_dir: &Path) -> Result<ActiveGuard> {
        let mut active = ACTIVE.lock().unwrap_or_else(|e| e.into_inner());
        if !active.get_or_insert_with(HashSet::new).insert(repo_dir.to_path_buf()) {
            return Err(Error::AlreadyDownloading(repo.to_string()));
        }
        Ok(ActiveGuard(repo_dir.to_path_buf()))
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        let mut active = ACTIVE.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(set) = active.as_mut() {
            set.remove(&self.0);
        }
    }
}

impl HubClient {
    /// Downloads every file of `repo` at `revision` into the cache and
    /// returns the snapshot folder. Files already in the cache are not
    /// fetched again; partial files are resumed.
    pub async fn download(
        &self,
        repo: &str,
        revision: &str,
        options: &DownloadOptions,
    ) -> Result<DownloadedModel> {
        let listing = with_cancel(&options.cancel, self.list_files(repo, revision)).await?;
        self.download_listing(&listing, options).await
    }

    /// Downloads the files of a listing (all of them, or the subset
    /// [`RepoListing::select`] kept) into the cache.
    pub async fn download_listing(
        &self,
        listing: &RepoListing,
        options: &DownloadOptions,
    ) -> Result<DownloadedModel> {
        validate_repo_id(&listing.repo)?;
        validate_revision(&listing.revision)?;
        if !is_commit_hash(&listing.commit) {
            return Err(Error::InvalidListing(format!(
                "commit {:?} is not a commit id",
                listing.commit
            )));
        }
        for file in &listing.files {
            validate_file_name(&file.name)?;
            file.hash.validate()?;
        }
        let repo_dir = self.cache.repo_dir(&listing.repo)?;
        let _active = ActiveGuard::take(&listing.repo, &repo_dir)?;
        let blobs = repo_dir.join("blobs");
        let snapshot = repo_dir.join("snapshots").join(&listing.commit);
        for dir in [&blobs, &snapshot] {
            tokio::fs::create_dir_all(dir).await.map_err(|e| Error::io(dir, e))?;
        }

        // small files first: config.json and the tokenizer land before the
        // weights, so a scan during the download already names the model
        let mut files: Vec<&RepoFile> = listing.files.iter().collect();
        files.sort_by_key(|f| (f.size, f.name.clone()));

        let mut progress =
            Tracker::new(listing, options.on_progress.clone(), options.progress_interval);
        for file in &files {
            progress.bytes_done +=
                existing_bytes(&blobs.join(file.hash.blob_name()), file.size).await;
        }
        progress.emit(true);

        for file in &files {
            let blob = blobs.join(file.hash.blob_name());
            progress.start_file(file);
            if !blob_is_complete(&blob, file.size).await {
                let _lock = with_cancel(
                    &options.cancel,
                    self.cache.lock_blob(&listing.repo, file.hash.blob_name()),
                )
                .await?;
                // another process may have finished it while we waited
                if !blob_is_complete(&blob, file.size).await {
                    self.fetch_file(listing, file, &blob, options, &mut progress).await?;
                }
            }
            link_snapshot(&snapshot, &file.name, file.hash.blob_name()).await?;
            progress.finish_file();
        }
        if listing.revision != listing.commit {
            write_ref(&repo_dir, &listing.revision, &listing.commit).await?;
        }
        progress.emit(true);
        Ok(DownloadedModel {
            repo: listing.repo.clone(),
            commit: listing.commit.clone(),
            snapshot_dir: snapshot,
            bytes_total: listing.total_bytes(),
            bytes_fetched: progress.fetched,
        })
    }

    /// One file into `blob`, through its partial file, with retries.
    async fn fetch_file(
        &self,
        listing: &RepoListing,
        file: &RepoFile,
        blob: &Path,
        options: &DownloadOptions,
        progress: &mut Tracker,
    ) -> Result<()> {
        let part_path = partial_path(blob);
        adopt_old_part_file(blob, &part_path).await;
        let counted = existing_bytes(blob, file.size).await;
        let mut part = Part::open(&part_path, file).await?;
        // the part's bytes were counted when the download started; an
        // oversized part was just emptied
        progress.bytes_done -= counted.saturating_sub(part.len);
        progress.file_bytes_done = part.len;

        let mut failures = 0;
        let mut delay = options.retry.initial_delay;
        while part.len < file.size {
            let before = part.len;
            let attempt = with_cancel(
                &options.cancel,
                self.fetch_attempt(listing, file, &mut part, progress),
            );
            match attempt.await {
                Ok(()) => {}
                Err(e) if !is_transient(&e) => {
                    // flush what arrived so the part's length is true for a resume
                    part.flush().await;
                    return Err(e);
                }
                Err(e) => {
                    if part.len > before {
                        failures = 0;
                        delay = options.retry.initial_delay;
                    }
                    failures += 1;
                    if failures >= options.retry.attempts.max(1) {
                        part.flush().await;
                        return Err(e);
                    }
                    tracing::info!(file = %file.name, error = %e, retry_in = ?delay, "download interrupted, resuming");
                    with_cancel(&options.cancel, async {
                        tokio::time::sleep(delay).await;
                        Ok(())
                    })
                    .await?;
                    delay = (delay * 2).min(options.retry.max_delay);
                }
            }
        }
        part.finish(blob, file).await
    }

    /// One request for the rest of the file, appended to the part as it comes.
    async fn fetch_attempt(
        &self,
        listing: &RepoListing,
        file: &RepoFile,
        part: &mut Part,
        progress: &mut Tracker,
    ) -> Result<()> {
        let what = format!("{}@{}: {}", listing.repo, listing.revision, file.name);
        let start = part.len;
        let (length, mut stream) = self
            .model(&listing.repo)
            .download_file_stream()
            .filename(file.name.clone())
            .revision(listing.commit.clone())
            .range(start..file.size)
            .send()
            .await
            .map_err(|e| self.error(e, &listing.repo, &what))?;
        if start > 0 && length == Some(file.size) {
            // the server ignored the range and sends the whole file
            progress.restart_file(part.len);
            part.reset().await?;
        }
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| self.error(e, &listing.repo, &what))?;
            if part.len + chunk.len() as u64 > file.size {
                part.discard().await;
                return Err(Error::ChecksumMismatch {
                    file: file.name.clone(),
                    reason: format!("more than the listed {} bytes", file.size),
                });
            }
            part.append(&chunk).await?;
            progress.add(chunk.len() as u64);
        }
        if part.len < file.size {
            return Err(Error::Network(format!(
                "{what}: the transfer ended after {} of {} bytes",
                part.len, file.size
            )));
        }
        Ok(())
    }
}

/// Worth another try: the connection, the server or the rate limit, not the
/// request.
fn is_transient(e: &Error) -> bool {
    match e {
        Error::Network(_) => true,
        Error::Http { status, .. } => *status >= 500 || *status == 408 || *status == 429,
        _ => false,
    }
}

/// A partial file from an app version that named them `.part` becomes the
/// `.incomplete` file it now is, so its bytes are not fetched again.
async fn adopt_old_part_file(blob: &Path, part_path: &Path) {
    let old = blob.with_extension("part");
    if tokio::fs::try_exists(&old).await.unwrap_or(false)
        && !tokio::fs::try_exists(part_path).await.unwrap_or(true)
    {
        let _ = tokio::fs::rename(&old, part_path).await;
    }
}

/// Bytes already on disk for a file: its verified blob, or its partial file.
async fn existing_bytes(blob: &Path, size: u64) -> u64 {
    if blob_is_complete(blob, size).await {
        return size;
    }
    match tokio::fs::metadata(partial_path(blob)).await {
        Ok(meta) if meta.is_file() => meta.len().min(size),
        _ => 0,
    }
}

/// A blob is named by its hash and only ever created by a verified rename,
/// so the right size is enough to trust it.
async fn blob_is_complete(blob: &Path, size: u64) -> bool {
    tokio::fs::metadata(blob).await.is_ok_and(|m| m.is_file() && m.len() == size)
}

/// Runs `work` unless `cancel` fires first.
async fn with_cancel<T>(
    cancel: &CancellationToken,
    work: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    tokio::select! {
        biased;
        _ = cancel.cancelled() => Err(Error::Cancelled),
        result = work => result,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_connection_and_server_troubles_are_retried() {
        assert!(is_transient(&Error::Network("reset".into())));
        assert!(is_transient(&Error::Http { status: 503, url: "u".into() }));
        assert!(is_transient(&Error::Http { status: 429, url: "u".into() }));
        assert!(!is_transient(&Error::Http { status: 400, url: "u".into() }));
        assert!(!is_transient(&Error::NotFound("x".into())));
        assert!(!is_transient(&Error::AuthRequired { what: "x".into(), status: 401 }));
        assert!(!is_transient(&Error::Cancelled));
    }
}

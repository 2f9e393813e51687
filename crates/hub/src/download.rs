//! Downloads of Hub repositories into the Hugging Face cache layout (see
//! [`crate::cache`]), with progress, cancellation, resume and verification.
//!
//! Why reqwest and not the `hf-hub` crate (0.4): its tokio API takes a custom
//! endpoint, a token and a progress trait, but it does not verify what it
//! downloads (no SHA-256 or size check against the listing), it resumes only
//! through its own chunk bookkeeping appended to a preallocated file, it
//! buffers whole chunks in memory, it has no cancel token (dropping the future
//! leaves its spawned chunk tasks running), and its errors do not tell 404
//! from 401 from a full disk. Those are the requirements here, so we speak the
//! two Hub endpoints we need directly:
//! - `GET {endpoint}/api/models/{repo}/revision/{rev}?blobs=true`: the commit
//!   (`sha`) and `siblings[]` with `rfilename`, `size`, `blobId` (git SHA-1)
//!   and, for LFS files, `lfs.sha256`/`lfs.size`;
//! - `GET {endpoint}/{repo}/resolve/{commit}/{file}` (with `Range` to resume).
//!
//! Each file goes to `blobs/<hash>.part`, is hashed as it arrives (a resumed
//! part is hashed from disk first), and is renamed to `blobs/<hash>` only
//! once its size and hash match the listing; a mismatch deletes the part. So
//! a blob name always means verified content, and a `.part` file is never
//! taken for a finished one. Files are fetched by commit, not branch, so a
//! push during the download cannot mix two revisions.
use std::collections::{HashSet, VecDeque};
use std::io::SeekFrom;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::header::{HeaderMap, AUTHORIZATION, CONTENT_RANGE, RANGE};
use reqwest::{StatusCode, Url};
use serde::{Deserialize, Serialize};
use sha1::Sha1;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
pub use tokio_util::sync::CancellationToken;

use crate::cache::{is_commit_hash, HfCache};
use crate::error::{Error, Result};
use crate::repo::{validate_file_name, validate_repo_id, validate_revision};

pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// How to reach the Hub and where to put what comes from it.
#[derive(Clone)]
pub struct HubConfig {
    /// Base URL of the Hub or a mirror, without a trailing slash.
    pub endpoint: String,
    /// A Hugging Face access token for gated and private repositories.
    pub token: Option<String>,
    /// The cache that downloads go into.
    pub cache: HfCache,
}

impl std::fmt::Debug for HubConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // the token is a secret: never in logs
        f.debug_struct("HubConfig")
            .field("endpoint", &self.endpoint)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("cache", &self.cache)
            .finish()
    }
}

impl HubConfig {
    /// `HF_ENDPOINT` (default [`DEFAULT_ENDPOINT`]), `HF_TOKEN` (or the older
    /// `HUGGING_FACE_HUB_TOKEN`) and the cache from [`HfCache::from_env`].
    pub fn from_env() -> Option<HubConfig> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        Some(HubConfig {
            endpoint: var("HF_ENDPOINT").unwrap_or_else(|| DEFAULT_ENDPOINT.to_string()),
            token: var("HF_TOKEN").or_else(|| var("HUGGING_FACE_HUB_TOKEN")),
            cache: HfCache::from_env()?,
        })
    }
}

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
}

/// Progress of a repository download. `bytes_done` only grows, except when a
/// partial file the server would not resume has to start over.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DownloadProgress {
    pub repo: String,
    /// The file being downloaded (the last one, in the final event).
    pub file: String,
    pub file_bytes_done: u64,
    pub file_bytes_total: u64,
    /// All files: bytes on disk (verified or partial) out of the listing's total.
    pub bytes_done: u64,
    pub bytes_total: u64,
    pub files_done: usize,
    pub files_total: usize,
    /// Download speed over the last few seconds.
    pub bytes_per_second: f64,
}

pub type ProgressFn = Arc<dyn Fn(&DownloadProgress) + Send + Sync>;

/// Retries of transient failures (connection errors, cut transfers, 5xx,
/// 429) for one file. Any progress resets the count, so a slow but moving
/// connection is never given up on.
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
        RetryPolicy { attempts: 5, initial_delay: Duration::from_millis(500), max_delay: Duration::from_secs(15) }
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

/// Talks to the Hub. Cheap to clone.
#[derive(Clone)]
pub struct HubClient {
    http: reqwest::Client,
    config: HubConfig,
}

/// Repository folders this process is downloading into now: two downloads
/// of one repo into one cache would write the same `.part` files.
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
    pub fn new(config: HubConfig) -> Result<HubClient> {
        Url::parse(&config.endpoint).map_err(|e| Error::Network(format!("bad endpoint {:?}: {e}", config.endpoint)))?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            // a stalled transfer fails (and is retried) instead of hanging forever
            .read_timeout(Duration::from_secs(60))
            .user_agent(concat!("vlm-app-hub/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::Network(e.to_string()))?;
        Ok(HubClient { http, config })
    }

    pub fn config(&self) -> &HubConfig {
        &self.config
    }

    /// The files of `repo` at `revision`, with sizes and hashes. Every file
    /// name is checked before anything is returned: one unsafe name rejects
    /// the whole listing.
    pub async fn list_files(&self, repo: &str, revision: &str) -> Result<RepoListing> {
        validate_repo_id(repo)?;
        validate_revision(revision)?;
        let mut url = self.url(&["api", "models"])?;
        push_segments(&mut url, repo.split('/'));
        push_segments(&mut url, ["revision", revision]);
        url.set_query(Some("blobs=true"));
        let what = format!("{repo}@{revision}");
        let response = self.get(url.clone(), None).await.map_err(|e| Error::Network(e.to_string()))?;
        if !response.status().is_success() {
            return Err(status_error(response.status(), response.headers(), &what, url.as_str()));
        }
        let body = response.bytes().await.map_err(|e| Error::Network(e.to_string()))?;
        parse_listing(repo, revision, &body)
    }

    /// Downloads every file of `repo` at `revision` into the cache and
    /// returns the snapshot folder. Files already in the cache are not
    /// fetched again; partial files are resumed.
    pub async fn download(&self, repo: &str, revision: &str, options: &DownloadOptions) -> Result<DownloadedModel> {
        let listing = with_cancel(&options.cancel, self.list_files(repo, revision)).await?;
        self.download_listing(&listing, options).await
    }

    /// Downloads the files of a listing (all of them, or a subset the caller
    /// filtered) into the cache.
    pub async fn download_listing(&self, listing: &RepoListing, options: &DownloadOptions) -> Result<DownloadedModel> {
        validate_repo_id(&listing.repo)?;
        validate_revision(&listing.revision)?;
        if !is_commit_hash(&listing.commit) {
            return Err(Error::InvalidListing(format!("commit {:?} is not a commit id", listing.commit)));
        }
        for file in &listing.files {
            validate_file_name(&file.name)?;
            validate_hash(&file.hash)?;
        }
        let repo_dir = self.config.cache.repo_dir(&listing.repo)?;
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

        let mut progress = Tracker::new(listing, options);
        for file in &files {
            let blob = blobs.join(file.hash.blob_name());
            progress.bytes_done += existing_bytes(&blob, file.size).await;
        }
        progress.emit(true);

        for file in &files {
            let blob = blobs.join(file.hash.blob_name());
            progress.start_file(file);
            if !blob_is_complete(&blob, file.size).await {
                self.fetch_file(listing, file, &blob, options, &mut progress).await?;
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

    /// One file into `blob`, through `blob.part`, with retries.
    async fn fetch_file(
        &self,
        listing: &RepoListing,
        file: &RepoFile,
        blob: &Path,
        options: &DownloadOptions,
        progress: &mut Tracker,
    ) -> Result<()> {
        let part_path = blob.with_extension("part");
        let counted = existing_bytes(blob, file.size).await;
        let mut part = Part::open(&part_path, file).await?;
        // the part's bytes were counted when the download started; an
        // oversized part was just emptied
        progress.bytes_done -= counted.saturating_sub(part.len);
        progress.file_bytes_done = part.len;

        let mut url = self.url(&[])?;
        push_segments(&mut url, listing.repo.split('/'));
        push_segments(&mut url, ["resolve", listing.commit.as_str()]);
        push_segments(&mut url, file.name.split('/'));

        let mut failures = 0;
        let mut delay = options.retry.initial_delay;
        loop {
            let before = part.len;
            let attempt = with_cancel(&options.cancel, self.fetch_attempt(&url, file, &mut part, progress));
            match attempt.await {
                Ok(()) => break,
                Err(Attempt::Fatal(e)) => {
                    // flush what arrived so the part's length is true for a resume
                    let _ = part.file.flush().await;
                    return Err(e);
                }
                Err(Attempt::Transient(e)) => {
                    if part.len > before {
                        failures = 0;
                        delay = options.retry.initial_delay;
                    }
                    failures += 1;
                    if failures >= options.retry.attempts.max(1) {
                        let _ = part.file.flush().await;
                        return Err(e);
                    }
                    tracing::info!(file = %file.name, error = %e, retry_in = ?delay, "download interrupted, resuming");
                    with_cancel(&options.cancel, async {
                        tokio::time::sleep(delay).await;
                        Ok::<_, Attempt>(())
                    })
                    .await
                    .map_err(Attempt::into_error)?;
                    delay = (delay * 2).min(options.retry.max_delay);
                }
            }
        }
        part.finish(blob, file).await
    }

    async fn fetch_attempt(
        &self,
        url: &Url,
        file: &RepoFile,
        part: &mut Part,
        progress: &mut Tracker,
    ) -> Result<(), Attempt> {
        if part.len < file.size {
            let range = (part.len > 0).then(|| format!("bytes={}-", part.len));
            let mut response = self.get(url.clone(), range.as_deref()).await.map_err(network)?;
            let status = response.status();
            match status {
                StatusCode::PARTIAL_CONTENT => {
                    let start = content_range_start(response.headers());
                    if start != Some(part.len) {
                        // not the range we asked for: start over cleanly
                        progress.restart_file(part.len);
                        part.reset().await.map_err(Attempt::Fatal)?;
                        return Err(Attempt::Transient(Error::Network(format!(
                            "{}: server sent an unexpected range",
                            file.name
                        ))));
                    }
                }
                StatusCode::OK => {
                    if part.len > 0 {
                        // the server ignored Range and sends the whole file
                        progress.restart_file(part.len);
                        part.reset().await.map_err(Attempt::Fatal)?;
                    }
                }
                StatusCode::RANGE_NOT_SATISFIABLE => {
                    progress.restart_file(part.len);
                    part.reset().await.map_err(Attempt::Fatal)?;
                    return Err(Attempt::Transient(Error::Network(format!("{}: range not satisfiable", file.name))));
                }
                _ => {
                    let e = status_error(status, response.headers(), &file.name, url.as_str());
                    return Err(if is_transient_status(status) { Attempt::Transient(e) } else { Attempt::Fatal(e) });
                }
            }
            loop {
                let chunk = match response.chunk().await {
                    Ok(Some(chunk)) => chunk,
                    Ok(None) => break,
                    Err(e) => return Err(network(e)),
                };
                if part.len + chunk.len() as u64 > file.size {
                    part.discard().await;
                    return Err(Attempt::Fatal(Error::ChecksumMismatch {
                        file: file.name.clone(),
                        reason: format!("more than the listed {} bytes", file.size),
                    }));
                }
                part.append(&chunk).await.map_err(Attempt::Fatal)?;
                progress.add(chunk.len() as u64);
            }
            if part.len < file.size {
                return Err(Attempt::Transient(Error::Network(format!(
                    "{}: connection closed after {} of {} bytes",
                    file.name, part.len, file.size
                ))));
            }
        }
        Ok(())
    }

    fn url(&self, segments: &[&str]) -> Result<Url> {
        let mut url = Url::parse(&self.config.endpoint).map_err(|e| Error::Network(format!("bad endpoint: {e}")))?;
        if url.cannot_be_a_base() {
            return Err(Error::Network(format!("bad endpoint {:?}", self.config.endpoint)));
        }
        url.path_segments_mut().expect("base URL").pop_if_empty();
        push_segments(&mut url, segments.iter().copied());
        Ok(url)
    }

    async fn get(&self, url: Url, range: Option<&str>) -> reqwest::Result<reqwest::Response> {
        let mut request = self.http.get(url);
        if let Some(token) = &self.config.token {
            // reqwest drops Authorization when a redirect leaves this host (the CDN)
            request = request.header(AUTHORIZATION, format!("Bearer {token}"));
        }
        if let Some(range) = range {
            request = request.header(RANGE, range);
        }
        request.send().await
    }
}

/// Bytes already on disk for a file: its verified blob, or its partial file.
async fn existing_bytes(blob: &Path, size: u64) -> u64 {
    if blob_is_complete(blob, size).await {
        return size;
    }
    match tokio::fs::metadata(blob.with_extension("part")).await {
        Ok(meta) if meta.is_file() => meta.len().min(size),
        _ => 0,
    }
}

/// A blob is named by its hash and only ever created by a verified rename,
/// so the right size is enough to trust it.
async fn blob_is_complete(blob: &Path, size: u64) -> bool {
    tokio::fs::metadata(blob).await.is_ok_and(|m| m.is_file() && m.len() == size)
}

/// Outcome of one try at a file.
enum Attempt {
    /// Worth retrying (from where the part file ends).
    Transient(Error),
    /// Retrying cannot help.
    Fatal(Error),
}

impl Attempt {
    fn into_error(self) -> Error {
        match self {
            Attempt::Transient(e) | Attempt::Fatal(e) => e,
        }
    }
}

impl From<Error> for Attempt {
    fn from(e: Error) -> Self {
        Attempt::Fatal(e)
    }
}

fn network(e: reqwest::Error) -> Attempt {
    Attempt::Transient(Error::Network(e.to_string()))
}

/// Runs `work` unless `cancel` fires first.
async fn with_cancel<T, E: From<Error>>(
    cancel: &CancellationToken,
    work: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, E> {
    tokio::select! {
        biased;
        _ = cancel.cancelled() => Err(E::from(Error::Cancelled)),
        result = work => result,
    }
}

/// A `.part` file being written, with the running hash of its content.
struct Part {
    path: PathBuf,
    file: tokio::fs::File,
    len: u64,
    hasher: Hasher,
}

impl Part {
    /// Opens (or creates) the part file and hashes what it already holds.
    async fn open(path: &Path, file: &RepoFile) -> Result<Part> {
        let mut handle = tokio::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .await
            .map_err(|e| Error::io(path, e))?;
        let mut len = handle.metadata().await.map_err(|e| Error::io(path, e))?.len();
        if len > file.size {
            handle.set_len(0).await.map_err(|e| Error::io(path, e))?;
            len = 0;
        }
        let mut hasher = Hasher::new(&file.hash, file.size);
        let mut buf = vec![0u8; 1 << 20];
        let mut hashed = 0;
        while hashed < len {
            let n = handle.read(&mut buf).await.map_err(|e| Error::io(path, e))?;
            if n == 0 {
                break;
            }
            let n = n.min((len - hashed) as usize);
            hasher.update(&buf[..n]);
            hashed += n as u64;
        }
        let mut part = Part { path: path.to_path_buf(), file: handle, len: hashed, hasher };
        part.file.seek(SeekFrom::Start(hashed)).await.map_err(|e| Error::io(path, e))?;
        Ok(part)
    }

    async fn append(&mut self, bytes: &[u8]) -> Result<()> {
        self.file.write_all(bytes).await.map_err(|e| Error::io(&self.path, e))?;
        self.hasher.update(bytes);
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// Empties the part to download the file from its start.
    async fn reset(&mut self) -> Result<()> {
        self.file.flush().await.map_err(|e| Error::io(&self.path, e))?;
        self.file.set_len(0).await.map_err(|e| Error::io(&self.path, e))?;
        self.file.seek(SeekFrom::Start(0)).await.map_err(|e| Error::io(&self.path, e))?;
        self.len = 0;
        self.hasher = self.hasher.fresh();
        Ok(())
    }

    /// Removes bad data, so it is neither resumed nor mistaken for a file.
    async fn discard(&mut self) {
        let _ = self.file.flush().await;
        let _ = tokio::fs::remove_file(&self.path).await;
    }

    /// Syncs, verifies size and hash, and renames the part to the blob.
    async fn finish(mut self, blob: &Path, file: &RepoFile) -> Result<()> {
        self.file.flush().await.map_err(|e| Error::io(&self.path, e))?;
        self.file.sync_all().await.map_err(|e| Error::io(&self.path, e))?;
        let mismatch = if self.len != file.size {
            Some(format!("{} bytes, the listing says {}", self.len, file.size))
        } else {
            let actual = self.hasher.clone().finish_hex();
            (actual != file.hash.blob_name()).then(|| match &file.hash {
                FileHash::Sha256(want) => format!("sha256 {actual}, expected {want}"),
                FileHash::GitBlob(want) => format!("git blob id {actual}, expected {want}"),
            })
        };
        if let Some(reason) = mismatch {
            self.discard().await;
            return Err(Error::ChecksumMismatch { file: file.name.clone(), reason });
        }
        drop(self.file);
        tokio::fs::rename(&self.path, blob).await.map_err(|e| Error::io(blob, e))
    }
}

/// The running hash a file is verified with.
#[derive(Clone)]
enum Hasher {
    Sha256(Sha256),
    GitBlob { hasher: Sha1, size: u64 },
}

impl Hasher {
    fn new(hash: &FileHash, size: u64) -> Hasher {
        match hash {
            FileHash::Sha256(_) => Hasher::Sha256(Sha256::new()),
            FileHash::GitBlob(_) => {
                let mut hasher = Sha1::new();
                hasher.update(format!("blob {size}\0").as_bytes());
                Hasher::GitBlob { hasher, size }
            }
        }
    }

    fn fresh(&self) -> Hasher {
        match self {
            Hasher::Sha256(_) => Hasher::Sha256(Sha256::new()),
            Hasher::GitBlob { size, .. } => Hasher::new(&FileHash::GitBlob(String::new()), *size),
        }
    }

    fn update(&mut self, bytes: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(bytes),
            Hasher::GitBlob { hasher, .. } => hasher.update(bytes),
        }
    }

    fn finish_hex(self) -> String {
        match self {
            Hasher::Sha256(h) => hex(&h.finalize()),
            Hasher::GitBlob { hasher, .. } => hex(&hasher.finalize()),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Progress bookkeeping and throttled reporting.
struct Tracker {
    event: DownloadProgress,
    /// Bytes fetched over the network in this call.
    fetched: u64,
    bytes_done: u64,
    file_bytes_done: u64,
    /// Recent (time, fetched) samples for the speed.
    samples: VecDeque<(Instant, u64)>,
    last_emit: Option<Instant>,
    interval: Duration,
    callback: Option<ProgressFn>,
}

/// Speed is averaged over this window.
const SPEED_WINDOW: Duration = Duration::from_secs(5);

impl Tracker {
    fn new(listing: &RepoListing, options: &DownloadOptions) -> Tracker {
        Tracker {
            event: DownloadProgress {
                repo: listing.repo.clone(),
                file: String::new(),
                file_bytes_done: 0,
                file_bytes_total: 0,
                bytes_done: 0,
                bytes_total: listing.total_bytes(),
                files_done: 0,
                files_total: listing.files.len(),
                bytes_per_second: 0.0,
            },
            fetched: 0,
            bytes_done: 0,
            file_bytes_done: 0,
            samples: VecDeque::from([(Instant::now(), 0)]),
            last_emit: None,
            interval: options.progress_interval,
            callback: options.on_progress.clone(),
        }
    }

    fn start_file(&mut self, file: &RepoFile) {
        self.event.file = file.name.clone();
        self.event.file_bytes_total = file.size;
        self.file_bytes_done = 0;
    }

    fn add(&mut self, n: u64) {
        self.fetched += n;
        self.bytes_done += n;
        self.file_bytes_done += n;
        self.emit(false);
    }

    /// A partial file of `had` bytes was thrown away.
    fn restart_file(&mut self, had: u64) {
        self.bytes_done = self.bytes_done.saturating_sub(had);
        self.file_bytes_done = 0;
    }

    fn finish_file(&mut self) {
        self.file_bytes_done = self.event.file_bytes_total;
        self.event.files_done += 1;
        self.emit(true);
    }

    fn emit(&mut self, force: bool) {
        let now = Instant::now();
        if !force && self.last_emit.is_some_and(|t| now.duration_since(t) < self.interval) {
            return;
        }
        self.last_emit = Some(now);
        self.samples.push_back((now, self.fetched));
        while self.samples.len() > 2 && now.duration_since(self.samples[0].0) > SPEED_WINDOW {
            self.samples.pop_front();
        }
        let (t0, f0) = self.samples[0];
        let elapsed = now.duration_since(t0).as_secs_f64();
        self.event.bytes_per_second = if elapsed > 0.0 { (self.fetched - f0) as f64 / elapsed } else { 0.0 };
        self.event.bytes_done = self.bytes_done;
        self.event.file_bytes_done = self.file_bytes_done;
        if let Some(callback) = &self.callback {
            callback(&self.event);
        }
    }
}

/// Points `snapshots/<commit>/<name>` at `blobs/<blob>` with a relative
/// symlink, as huggingface_hub does (copies where symlinks are unavailable).
async fn link_snapshot(snapshot: &Path, name: &str, blob: &str) -> Result<()> {
    let link = snapshot.join(name);
    if let Some(parent) = link.parent() {
        tokio::fs::create_dir_all(parent).await.map_err(|e| Error::io(parent, e))?;
    }
    let depth = name.split('/').count();
    let target: PathBuf = std::iter::repeat_n("..", depth + 1).collect::<PathBuf>().join("blobs").join(blob);
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
async fn write_ref(repo_dir: &Path, revision: &str, commit: &str) -> Result<()> {
    let path = repo_dir.join("refs").join(revision);
    if let Some(parent) = path.parent() {
        tokio::fs::create_dir_all(parent).await.map_err(|e| Error::io(parent, e))?;
    }
    let tmp = path.with_extension("tmp");
    tokio::fs::write(&tmp, commit).await.map_err(|e| Error::io(&tmp, e))?;
    tokio::fs::rename(&tmp, &path).await.map_err(|e| Error::io(&path, e))
}

fn push_segments<'a>(url: &mut Url, segments: impl IntoIterator<Item = &'a str>) {
    // each segment is percent-encoded, '/' included: "refs/pr/1" stays one segment
    url.path_segments_mut().expect("base URL").extend(segments);
}

fn content_range_start(headers: &HeaderMap) -> Option<u64> {
    // "bytes 100-199/200"
    let value = headers.get(CONTENT_RANGE)?.to_str().ok()?;
    let range = value.strip_prefix("bytes ")?;
    range.split('-').next()?.trim().parse().ok()
}

fn is_transient_status(status: StatusCode) -> bool {
    status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::REQUEST_TIMEOUT
}

/// An HTTP error status as our error. The Hub answers 401 for a repository
/// that does not exist *or* that is private (so as not to reveal it), and says
/// which in `X-Error-Code`.
fn status_error(status: StatusCode, headers: &HeaderMap, what: &str, url: &str) -> Error {
    let hub_code = headers.get("x-error-code").and_then(|v| v.to_str().ok()).unwrap_or("");
    let not_found = matches!(hub_code, "RepoNotFound" | "RevisionNotFound" | "EntryNotFound");
    match status {
        StatusCode::NOT_FOUND => Error::NotFound(what.to_string()),
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN if not_found => {
            Error::NotFound(format!("{what} (if it is private or gated, a Hugging Face token is needed)"))
        }
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
            Error::AuthRequired { what: what.to_string(), status: status.as_u16() }
        }
        _ => Error::Http { status: status.as_u16(), url: url.to_string() },
    }
}

#[derive(Deserialize)]
struct ApiModelInfo {
    sha: Option<String>,
    #[serde(default)]
    siblings: Vec<ApiSibling>,
}

#[derive(Deserialize)]
struct ApiSibling {
    rfilename: String,
    size: Option<u64>,
    #[serde(rename = "blobId")]
    blob_id: Option<String>,
    lfs: Option<ApiLfs>,
}

#[derive(Deserialize)]
struct ApiLfs {
    sha256: Option<String>,
    /// Older responses: "sha256:<hex>".
    oid: Option<String>,
    size: Option<u64>,
}

fn parse_listing(repo: &str, revision: &str, body: &[u8]) -> Result<RepoListing> {
    let info: ApiModelInfo =
        serde_json::from_slice(body).map_err(|e| Error::InvalidListing(format!("not the expected JSON: {e}")))?;
    let commit = info.sha.filter(|c| is_commit_hash(c)).ok_or_else(|| Error::InvalidListing("no commit sha".into()))?;
    // names first: an unsafe name rejects the listing before anything else is looked at
    for sibling in &info.siblings {
        validate_file_name(&sibling.rfilename)?;
    }
    let mut files = Vec::with_capacity(info.siblings.len());
    for s in info.siblings {
        let lfs_hash = s.lfs.as_ref().and_then(|l| {
            l.sha256.clone().or_else(|| l.oid.as_ref().map(|o| o.trim_start_matches("sha256:").to_string()))
        });
        let hash = match (lfs_hash, s.blob_id) {
            (Some(sha256), _) => FileHash::Sha256(sha256.to_ascii_lowercase()),
            (None, Some(blob)) => FileHash::GitBlob(blob.to_ascii_lowercase()),
            (None, None) => {
                return Err(Error::InvalidListing(format!(
                    "{}: no hash (the endpoint ignored blobs=true)",
                    s.rfilename
                )))
            }
        };
        validate_hash(&hash)?;
        let size = s
            .lfs
            .as_ref()
            .and_then(|l| l.size)
            .or(s.size)
            .ok_or_else(|| Error::InvalidListing(format!("{}: no size", s.rfilename)))?;
        files.push(RepoFile { name: s.rfilename, size, hash });
    }
    Ok(RepoListing { repo: repo.to_string(), revision: revision.to_string(), commit, files })
}

fn validate_hash(hash: &FileHash) -> Result<()> {
    let (hex, len) = match hash {
        FileHash::Sha256(h) => (h, 64),
        FileHash::GitBlob(h) => (h, 40),
    };
    if hex.len() == len && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        Ok(())
    } else {
        Err(Error::InvalidListing(format!("bad hash {hex:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_hub_listing_shape() {
        let body = br#"{
            "_id": "x", "id": "org/m", "sha": "0123456789abcdef0123456789abcdef01234567",
            "siblings": [
                {"rfilename": "config.json", "size": 12, "blobId": "ABCDEF0123456789abcdef0123456789abcdef01"},
                {"rfilename": "model.safetensors", "size": 99, "blobId": "1111111111111111111111111111111111111111",
                 "lfs": {"sha256": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "size": 99, "pointerSize": 134}}
            ]}"#;
        let listing = parse_listing("org/m", "main", body).unwrap();
        assert_eq!(listing.commit, "0123456789abcdef0123456789abcdef01234567");
        assert_eq!(listing.files[0].hash, FileHash::GitBlob("abcdef0123456789abcdef0123456789abcdef01".into()));
        assert_eq!(listing.files[1].hash, FileHash::Sha256("a".repeat(64)));
        assert_eq!(listing.total_bytes(), 111);
    }

    #[test]
    fn listings_without_hashes_or_with_bad_names_are_refused() {
        let sha = "0123456789abcdef0123456789abcdef01234567";
        let no_hash = format!(r#"{{"sha": "{sha}", "siblings": [{{"rfilename": "config.json"}}]}}"#);
        assert_eq!(parse_listing("o/m", "main", no_hash.as_bytes()).unwrap_err().code(), "INVALID_LISTING");
        let evil =
            format!(r#"{{"sha": "{sha}", "siblings": [{{"rfilename": "../evil", "size": 1, "blobId": "{sha}"}}]}}"#);
        assert_eq!(parse_listing("o/m", "main", evil.as_bytes()).unwrap_err().code(), "UNSAFE_FILE_NAME");
        assert_eq!(parse_listing("o/m", "main", b"[]").unwrap_err().code(), "INVALID_LISTING");
    }

    #[test]
    fn git_blob_ids_match_git() {
        // `printf 'hello\n' | git hash-object --stdin`
        let mut h = Hasher::new(&FileHash::GitBlob(String::new()), 6);
        h.update(b"hello\n");
        assert_eq!(h.finish_hex(), "ce013625030ba8dba906f756967f9e9ca394464a");
    }

    #[test]
    fn auth_and_not_found_statuses() {
        let mut headers = HeaderMap::new();
        assert_eq!(status_error(StatusCode::NOT_FOUND, &headers, "x", "u").code(), "NOT_FOUND");
        assert_eq!(status_error(StatusCode::UNAUTHORIZED, &headers, "x", "u").code(), "AUTH_REQUIRED");
        assert_eq!(status_error(StatusCode::FORBIDDEN, &headers, "x", "u").code(), "AUTH_REQUIRED");
        headers.insert("x-error-code", "RepoNotFound".parse().unwrap());
        assert_eq!(status_error(StatusCode::UNAUTHORIZED, &headers, "x", "u").code(), "NOT_FOUND");
        headers.insert("x-error-code", "GatedRepo".parse().unwrap());
        assert_eq!(status_error(StatusCode::FORBIDDEN, &headers, "x", "u").code(), "AUTH_REQUIRED");
        assert_eq!(status_error(StatusCode::BAD_GATEWAY, &headers, "x", "u").code(), "HTTP_ERROR");
    }
}

//! Errors the hub reports. Each variant has a stable machine-readable code
//! (SCREAMING_SNAKE_CASE, see [`Error::code`]) so the UI can say the right
//! thing: "sign in", "free some space", "try again".
use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// assets/catalog.json (or a catalog file) is malformed or inconsistent.
    #[error("invalid model catalog: {0}")]
    InvalidCatalog(String),

    /// A repo id that is not `owner/name` with the Hub's allowed characters.
    #[error("invalid repository id {0:?}")]
    InvalidRepoId(String),

    /// A revision with characters that cannot be a branch, tag or commit.
    #[error("invalid revision {0:?}")]
    InvalidRevision(String),

    /// The repository, revision or file does not exist (HTTP 404).
    #[error("not found on the Hub: {0}")]
    NotFound(String),

    /// HTTP 401/403 on a private repository, or a token the Hub rejects: a
    /// Hugging Face token with access is needed.
    #[error("{what} needs a Hugging Face token with access (HTTP {status})")]
    AuthRequired { what: String, status: u16 },

    /// HTTP 401/403 on a gated repository (the Hub says `GatedRepo`): its
    /// terms must be accepted on its page, signed in with the account of the
    /// token the app uses. 401: no token was sent; 403: the token's account
    /// has no access yet.
    #[error("{repo} is gated: {}", gated_advice(*status, url))]
    Gated {
        repo: String,
        status: u16,
        /// The repository's page, where the terms are accepted.
        url: String,
    },

    /// The OS keychain that keeps the app's Hub token cannot be reached
    /// (no Secret Service on this Linux session, a locked Keychain…).
    #[error("the system keychain is not available: {0}")]
    Keychain(String),

    /// A Hub token that cannot be right (empty, spaces, not ASCII…).
    #[error("not a Hugging Face token: {0}")]
    InvalidToken(String),

    /// Any other unexpected HTTP status.
    #[error("HTTP {status} from {url}")]
    Http { status: u16, url: String },

    /// The connection failed or broke and retries did not help.
    #[error("network error: {0}")]
    Network(String),

    /// The listing holds a file name that could escape the model folder
    /// (`..`, an absolute path, a backslash…). Nothing was written.
    #[error("refusing unsafe file name {0:?} in the repository listing")]
    UnsafeFileName(String),

    /// The listing lacks what verification needs (sizes and hashes).
    #[error("the repository listing is unusable: {0}")]
    InvalidListing(String),

    /// A downloaded file does not match the listing; it was deleted.
    #[error("{file}: downloaded data does not match the listing ({reason}); the file was deleted")]
    ChecksumMismatch { file: String, reason: String },

    /// Out of disk space (ENOSPC/EDQUOT). The partial file is kept, so the
    /// download resumes once space is freed.
    #[error("disk full while writing {0}")]
    DiskFull(PathBuf),

    /// This process is already downloading the repository.
    #[error("{0} is already being downloaded")]
    AlreadyDownloading(String),

    /// The cancel token fired. Partial files are kept for a later resume.
    #[error("download cancelled")]
    Cancelled,

    /// A GGUF file's header is malformed, truncated or of an unknown version.
    #[error("invalid GGUF file {path}: {reason}")]
    InvalidGguf { path: PathBuf, reason: String },

    /// A model's config.json cannot be read as JSON or lacks what we need.
    #[error("invalid model config {path}: {reason}")]
    InvalidConfig { path: PathBuf, reason: String },

    /// Deleting this model is not ours to do (a file the user added by path),
    /// or the path is outside the folders we manage.
    #[error("cannot delete {0}")]
    DeleteNotAllowed(String),

    /// A search asked past the results it pages through ("More results"
    /// re-reads every page shown before: see `SearchQuery::offset`).
    #[error("a search shows at most {0} results; narrow it with more words or a filter")]
    SearchTooDeep(usize),

    #[error("I/O error on {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

impl Error {
    /// Stable code for UIs.
    pub fn code(&self) -> &'static str {
        match self {
            Error::InvalidCatalog(_) => "INVALID_CATALOG",
            Error::InvalidRepoId(_) => "INVALID_REPO_ID",
            Error::InvalidRevision(_) => "INVALID_REVISION",
            Error::NotFound(_) => "NOT_FOUND",
            Error::AuthRequired { .. } => "AUTH_REQUIRED",
            Error::Gated { .. } => "GATED",
            Error::Keychain(_) => "KEYCHAIN_UNAVAILABLE",
            Error::InvalidToken(_) => "INVALID_TOKEN",
            Error::Http { .. } => "HTTP_ERROR",
            Error::Network(_) => "NETWORK_ERROR",
            Error::UnsafeFileName(_) => "UNSAFE_FILE_NAME",
            Error::InvalidListing(_) => "INVALID_LISTING",
            Error::ChecksumMismatch { .. } => "CHECKSUM_MISMATCH",
            Error::DiskFull(_) => "DISK_FULL",
            Error::AlreadyDownloading(_) => "ALREADY_DOWNLOADING",
            Error::Cancelled => "CANCELLED",
            Error::InvalidGguf { .. } => "INVALID_GGUF",
            Error::InvalidConfig { .. } => "INVALID_MODEL_CONFIG",
            Error::DeleteNotAllowed(_) => "DELETE_NOT_ALLOWED",
            Error::SearchTooDeep(_) => "SEARCH_TOO_DEEP",
            Error::Io { .. } => "IO_ERROR",
        }
    }

    /// An I/O error on `path`, as `DiskFull` when that is what it is.
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        let path = path.into();
        if is_disk_full(&source) {
            return Error::DiskFull(path);
        }
        Error::Io { path, source }
    }
}

fn gated_advice(status: u16, url: &str) -> String {
    if status == 401 {
        format!("add a Hugging Face token in Settings, and accept the model's terms at {url}")
    } else {
        format!("accept the model's terms at {url} with the account of your Hugging Face token")
    }
}

/// ENOSPC / EDQUOT, whichever way the platform reports them.
pub(crate) fn is_disk_full(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded)
}

//! Errors the store reports. Each variant has a stable machine-readable code
//! (SCREAMING_SNAKE_CASE, see [`Error::code`]) so the app can show the right
//! thing without parsing messages.
use std::path::PathBuf;

use crate::bulk::BulkJobId;
use crate::types::{ChatId, MessageId};

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("chat {0} not found")]
    ChatNotFound(ChatId),

    #[error("bulk job {0} not found")]
    BulkJobNotFound(BulkJobId),

    #[error("message {0} not found")]
    MessageNotFound(MessageId),

    /// `update_reply`/`finish_reply` on a message that is no longer streaming
    /// (already finished, or marked interrupted after a restart).
    #[error("message {0} is not a streaming reply")]
    ReplyNotStreaming(MessageId),

    /// A message references an attachment hash the store does not hold.
    #[error("attachment {0} not found")]
    AttachmentNotFound(String),

    /// The bytes are not a PNG, JPEG, WebP or GIF image.
    #[error("not a supported image: {0} (PNG, JPEG, WebP and GIF are accepted)")]
    NotAnImage(String),

    /// A HEIC (HEIF) photo where the app cannot convert it (not macOS).
    #[error("HEIC photos are not supported on this system; convert it to JPEG or PNG first")]
    HeicUnsupported,

    #[error("attachment is {size} bytes, the limit is {max} bytes")]
    AttachmentTooLarge { size: u64, max: u64 },

    /// A caller-supplied value is unusable (an empty title, an empty setting key).
    #[error("invalid input: {0}")]
    InvalidInput(String),

    /// The database was written by a newer version of the app: it has
    /// migrations this build does not know. Migrations only go forward, so we
    /// refuse rather than guess.
    #[error(
        "the database was created by a newer version of the app (migration {version} is unknown)"
    )]
    DatabaseTooNew { version: i64 },

    /// A migration failed; it ran in a transaction, so the database is as it was before.
    #[error("database migration failed: {0}")]
    Migration(String),

    /// A stored setting exists but does not decode as the requested type.
    #[error("setting {key:?} has an unexpected shape: {source}")]
    SettingDecode { key: String, source: serde_json::Error },

    /// Out of disk space, reported by SQLite (SQLITE_FULL) or the file system (ENOSPC).
    #[error("disk full: {0}")]
    DiskFull(String),

    #[error("database error: {0}")]
    Database(sqlx::Error),

    #[error("I/O error on {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

impl Error {
    /// Stable code for the UI.
    pub fn code(&self) -> &'static str {
        match self {
            Error::ChatNotFound(_) => "CHAT_NOT_FOUND",
            Error::BulkJobNotFound(_) => "BULK_JOB_NOT_FOUND",
            Error::MessageNotFound(_) => "MESSAGE_NOT_FOUND",
            Error::ReplyNotStreaming(_) => "REPLY_NOT_STREAMING",
            Error::AttachmentNotFound(_) => "ATTACHMENT_NOT_FOUND",
            Error::NotAnImage(_) => "NOT_AN_IMAGE",
            Error::HeicUnsupported => "HEIC_UNSUPPORTED",
            Error::AttachmentTooLarge { .. } => "ATTACHMENT_TOO_LARGE",
            Error::InvalidInput(_) => "INVALID_INPUT",
            Error::DatabaseTooNew { .. } => "DATABASE_TOO_NEW",
            Error::Migration(_) => "MIGRATION_FAILED",
            Error::SettingDecode { .. } => "SETTING_DECODE_ERROR",
            Error::DiskFull(_) => "DISK_FULL",
            Error::Database(_) => "DATABASE_ERROR",
            Error::Io { .. } => "IO_ERROR",
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        if is_disk_full(&source) {
            return Error::DiskFull(format!("{}: {source}", path.into().display()));
        }
        Error::Io { path: path.into(), source }
    }
}

/// ENOSPC / EDQUOT, whichever way the platform reports them.
pub(crate) fn is_disk_full(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded)
}

impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        // SQLITE_FULL is primary result code 13; extended codes keep it in the low byte.
        if let sqlx::Error::Database(db) = &e {
            if let Some(code) = db.code() {
                if code.parse::<i64>().is_ok_and(|c| c & 0xff == 13) {
                    return Error::DiskFull(db.message().to_string());
                }
            }
        }
        if let sqlx::Error::Io(io) = &e {
            if is_disk_full(io) {
                return Error::DiskFull(io.to_string());
            }
        }
        Error::Database(e)
    }
}

impl From<sqlx::migrate::MigrateError> for Error {
    fn from(e: sqlx::migrate::MigrateError) -> Self {
        match e {
            sqlx::migrate::MigrateError::VersionMissing(version) => {
                Error::DatabaseTooNew { version }
            }
            other => Error::Migration(other.to_string()),
        }
    }
}

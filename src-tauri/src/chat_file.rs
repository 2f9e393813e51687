//! A chat as files, to keep or move to another computer: a folder with
//! `chat.json` (every branch, every field: what import reads back),
//! `chat.md` (the shown branch, for reading) and `images/<sha256>.<ext>`
//! (each image once, named by its content, linked from both).
//!
//! Import trusts nothing in the folder: the JSON must be this format, image
//! names must stay inside the folder, each image must hash to its name, and
//! the chat is added in one transaction, so a bad file adds no chat.
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use ts_rs::TS;
use store::{
    Chat, ChatId, ImportedChat, ImportedMessage, Message, MessageStats, MessageStatus, Role, Store, Timestamp,
};

use crate::error::{AppError, AppResult};

/// What `format` says in every chat file.
pub const FORMAT: &str = "vlm-chat";
/// The version this app writes and reads.
pub const VERSION: u32 = 1;
/// A chat file larger than this is not read (images are beside it, not in it).
const MAX_FILE_BYTES: u64 = 256 << 20;
/// The error code of a file that cannot be imported.
pub const INVALID_CHAT_FILE: &str = "INVALID_CHAT_FILE";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatFile {
    pub format: String,
    pub version: u32,
    pub title: String,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    #[serde(default)]
    pub answer_format: Option<serde_json::Value>,
    #[serde(default)]
    pub settings: Option<serde_json::Value>,
    /// The id of the last message of the shown branch.
    #[serde(default)]
    pub shown: Option<i64>,
    /// Every message of every branch, parents first.
    pub messages: Vec<FileMessage>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileMessage {
    pub id: i64,
    #[serde(default)]
    pub parent_id: Option<i64>,
    pub role: Role,
    pub content: String,
    #[serde(default)]
    pub reasoning: Option<String>,
    #[serde(default)]
    pub stats: Option<MessageStats>,
    #[serde(default)]
    pub model: Option<String>,
    pub status: MessageStatus,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub error_code: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    #[serde(default)]
    pub images: Vec<FileImage>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileImage {
    pub sha256: String,
    /// Relative to the chat file's folder (`images/<sha256>.<ext>`).
    pub file: String,
}

/// Where an export went.
#[derive(Debug, Clone, Serialize, TS)]
pub struct ExportedChat {
    pub folder: PathBuf,
    pub json: PathBuf,
    pub markdown: PathBuf,
}

fn invalid(message: impl Into<String>) -> AppError {
    AppError::new(INVALID_CHAT_FILE, message)
}

fn io_error(path: &Path, e: std::io::Error) -> AppError {
    AppError::new("IO_ERROR", format!("{}: {e}", path.display()))
}

/// Writes `chat` into a new folder under `exports` (named after the chat,
/// never over an earlier export) and returns where.
pub async fn export_chat(store: &Store, chat: ChatId, exports: &Path) -> AppResult<ExportedChat> {
    let record = store.get_chat(chat).await?;
    export_chat_as(store, chat, exports, &format!("{}-{}", slug(&record.title), chat.0)).await
}

/// Writes `chat` into a new folder `name` in `parent` (where the user's
/// save dialog said), never over anything there: `name-2`… when taken.
pub async fn export_chat_as(store: &Store, chat: ChatId, parent: &Path, name: &str) -> AppResult<ExportedChat> {
    let record = store.get_chat(chat).await?;
    let all = store.list_all_messages(chat).await?;
    let shown = store.list_messages(chat).await?;
    let folder = free_folder(parent, name);
    let images = folder.join("images");
    tokio::fs::create_dir_all(&images).await.map_err(|e| io_error(&images, e))?;
    for a in all.iter().flat_map(|m| &m.attachments) {
        let name = a.path.file_name().map(PathBuf::from).unwrap_or_else(|| PathBuf::from(&a.sha256));
        let to = images.join(name);
        if !to.exists() {
            tokio::fs::copy(&a.path, &to).await.map_err(|e| io_error(&a.path, e))?;
        }
    }
    let file = to_file(&record, &all, shown.last().map(|m| m.id.0));
    let json = folder.join("chat.json");
    let text = serde_json::to_string_pretty(&file).expect("a chat file serializes");
    tokio::fs::write(&json, text).await.map_err(|e| io_error(&json, e))?;
    let markdown = folder.join("chat.md");
    tokio::fs::write(&markdown, to_markdown(&record, &shown)).await.map_err(|e| io_error(&markdown, e))?;
    Ok(ExportedChat { folder, json, markdown })
}

fn image_file(m: &store::Attachment) -> String {
    let name = m.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| m.sha256.clone());
    format!("images/{name}")
}

pub fn to_file(chat: &Chat, messages: &[Message], shown: Option<i64>) -> ChatFile {
    ChatFile {
        format: FORMAT.into(),
        version: VERSION,
        title: chat.title.clone(),
        created_at: chat.created_at,
        updated_at: chat.updated_at,
        answer_format: chat.answer_format.clone(),
        settings: chat.settings.clone(),
        shown,
        messages: messages
            .iter()
            .map(|m| FileMessage {
                id: m.id.0,
                parent_id: m.parent_id.map(|p| p.0),
                role: m.role,
                content: m.content.clone(),
                reasoning: m.reasoning.clone(),
                stats: m.stats.clone(),
                model: m.model.clone(),
                status: m.status,
                error: m.error.clone(),
                error_code: m.error_code.clone(),
                created_at: m.created_at,
                updated_at: m.updated_at,
                images: m.attachments.iter().map(|a| FileImage { sha256: a.sha256.clone(), file: image_file(a) }).collect(),
            })
            .collect(),
    }
}

/// The shown branch for reading: who said what, images linked beside it.
pub fn to_markdown(chat: &Chat, shown: &[Message]) -> String {
    let title = if chat.title.is_empty() { "New chat" } else { chat.title.as_str() };
    let mut out = format!("# {title}\n\n");
    out.push_str("*The branch that was shown; chat.json holds every branch and imports back into the app.*\n");
    for m in shown {
        let who = match m.role {
            Role::User => "You".to_string(),
            Role::Assistant => m.model.clone().unwrap_or_else(|| "Assistant".into()),
            Role::System => "System".into(),
            Role::Tool => "Tool".into(),
        };
        out.push_str(&format!("\n## {who}\n\n"));
        for a in &m.attachments {
            out.push_str(&format!("![image]({})\n\n", image_file(a)));
        }
        if let Some(r) = m.reasoning.as_deref().filter(|r| !r.is_empty()) {
            out.push_str("<details><summary>Thinking</summary>\n\n");
            out.push_str(r.trim_end());
            out.push_str("\n\n</details>\n\n");
        }
        if !m.content.is_empty() {
            out.push_str(m.content.trim_end());
            out.push('\n');
        }
        match m.status {
            MessageStatus::Error => out.push_str(&format!("\n*The reply failed: {}*\n", m.error.as_deref().unwrap_or(""))),
            MessageStatus::Interrupted => out.push_str("\n*Stopped before the end.*\n"),
            _ => {}
        }
    }
    out
}

/// Reads the chat file at `path` (and the images beside it) into a new chat.
pub async fn import_chat(store: &Store, path: &Path) -> AppResult<Chat> {
    let size = tokio::fs::metadata(path).await.map_err(|e| io_error(path, e))?.len();
    if size > MAX_FILE_BYTES {
        return Err(invalid(format!("{} is {size} bytes: too large for a chat file", path.display())));
    }
    let bytes = tokio::fs::read(path).await.map_err(|e| io_error(path, e))?;
    let file: ChatFile = serde_json::from_slice(&bytes)
        .map_err(|e| invalid(format!("{} is not a chat file this app can read: {e}", path.display())))?;
    if file.format != FORMAT || file.version != VERSION {
        return Err(invalid(format!(
            "{} is a {:?} file of version {}; this app reads {FORMAT:?} version {VERSION}",
            path.display(),
            file.format,
            file.version
        )));
    }
    let folder = path.parent().unwrap_or(Path::new("."));
    let mut messages = Vec::with_capacity(file.messages.len());
    for m in &file.messages {
        let mut attachments = Vec::with_capacity(m.images.len());
        for image in &m.images {
            attachments.push(store_image(store, folder, image).await?);
        }
        messages.push(ImportedMessage {
            key: m.id,
            parent: m.parent_id,
            role: m.role,
            content: m.content.clone(),
            reasoning: m.reasoning.clone(),
            stats: m.stats.clone(),
            model: m.model.clone(),
            status: m.status,
            error: m.error.clone(),
            error_code: m.error_code.clone(),
            created_at: m.created_at,
            updated_at: m.updated_at,
            attachments,
        });
    }
    let chat = ImportedChat {
        title: file.title,
        created_at: file.created_at,
        updated_at: file.updated_at,
        answer_format: file.answer_format,
        settings: file.settings,
        messages,
        shown: file.shown,
    };
    store.import_chat(&chat).await.map_err(|e| match e {
        store::Error::InvalidInput(m) => invalid(m),
        other => other.into(),
    })
}

/// Stores one image of the file; it must be inside the folder and hash to its name.
async fn store_image(store: &Store, folder: &Path, image: &FileImage) -> AppResult<String> {
    let relative = Path::new(&image.file);
    if relative.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(invalid(format!("image {:?} is not a file inside the chat's folder", image.file)));
    }
    let path = folder.join(relative);
    let bytes = tokio::fs::read(&path).await.map_err(|e| invalid(format!("image {}: {e}", path.display())))?;
    let stored = store.add_attachment(&bytes).await?;
    if stored.sha256 != image.sha256 {
        return Err(invalid(format!("image {} is not the image the chat names (its content changed)", image.file)));
    }
    Ok(stored.sha256)
}

/// A file-name-safe short form of a title.
fn slug(title: &str) -> String {
    let s: String = title
        .chars()
        .flat_map(|c| if c.is_alphanumeric() { c.to_lowercase().collect::<Vec<_>>() } else { vec!['-'] })
        .collect::<String>()
        .split('-')
        .filter(|p| !p.is_empty())
        .take(8)
        .collect::<Vec<_>>()
        .join("-");
    if s.is_empty() { "chat".into() } else { s.chars().take(60).collect() }
}

/// `base` under `dir`, or `base-2`, `base-3`… if taken.
fn free_folder(dir: &Path, base: &str) -> PathBuf {
    let mut candidate = dir.join(base);
    let mut n = 2;
    while candidate.exists() {
        candidate = dir.join(format!("{base}-{n}"));
        n += 1;
    }
    candidate
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_safe_file_names() {
        assert_eq!(slug("What is in ../this picture?"), "what-is-in-this-picture");
        assert_eq!(slug("   "), "chat");
        assert_eq!(slug("Été à Paris"), "été-à-paris");
    }
}

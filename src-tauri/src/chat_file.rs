//! A chat as files, to keep or move to another computer: a folder with
//! `chat.json` (every branch, every field: what import reads back),
//! `chat.md` (the shown branch, for reading) and `images/<sha256>.<ext>`
//! (each image once, named by its content, linked from both).
//!
//! Import trusts nothing in the folder: the JSON must be this format with
//! settings and an answer format the app accepts, images must be regular
//! files inside the folder (no links, FIFOs or devices, each within the
//! attachment limit) that hash to their names, and all of it is checked
//! before anything is stored, so a bad file adds nothing (see [`import_chat`]).
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use store::{
    Chat, ChatId, ImportedChat, ImportedMessage, Message, MessageStats, MessageStatus, Role, Store,
    Timestamp,
};
use ts_rs::TS;

use crate::answer_format::AnswerFormat;
use crate::chat_settings::ChatSettings;
use crate::error::{AppError, AppResult};
use crate::regular_file::Links;

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
    /// An answer's tool calls (left out when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<store::ToolCallRecord>,
    /// A tool message's call (left out on other messages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_result: Option<store::ToolResultInfo>,
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
pub async fn export_chat_as(
    store: &Store,
    chat: ChatId,
    parent: &Path,
    name: &str,
) -> AppResult<ExportedChat> {
    let record = store.get_chat(chat).await?;
    let all = store.list_all_messages(chat).await?;
    let shown = store.list_messages(chat).await?;
    let folder = free_folder(parent, name);
    let images = folder.join("images");
    tokio::fs::create_dir_all(&images).await.map_err(|e| io_error(&images, e))?;
    for a in all.iter().flat_map(|m| &m.attachments) {
        let name =
            a.path.file_name().map(PathBuf::from).unwrap_or_else(|| PathBuf::from(&a.sha256));
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
    tokio::fs::write(&markdown, to_markdown(&record, &shown))
        .await
        .map_err(|e| io_error(&markdown, e))?;
    Ok(ExportedChat { folder, json, markdown })
}

fn image_file(m: &store::Attachment) -> String {
    let name = m
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| m.sha256.clone());
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
                tool_calls: m.tool_calls.clone(),
                tool_result: m.tool_result.clone(),
                images: m
                    .attachments
                    .iter()
                    .map(|a| FileImage { sha256: a.sha256.clone(), file: image_file(a) })
                    .collect(),
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
        for call in &m.tool_calls {
            out.push_str(&format!("\n*Calls `{}`* `{}`\n", call.name, call.arguments));
        }
        match m.status {
            MessageStatus::Error => out
                .push_str(&format!("\n*The reply failed: {}*\n", m.error.as_deref().unwrap_or(""))),
            MessageStatus::Interrupted => out.push_str("\n*Stopped before the end.*\n"),
            _ => {}
        }
    }
    out
}

/// Reads the chat file at `path` (and the images beside it) into a new chat.
///
/// Nothing is stored until everything is checked: the file (a regular file,
/// of bounded size), its format, settings and answer format, its message
/// tree, and every image (inside the folder, a regular file and no link, of
/// an image's size, hashing to the name the file gives it). Then the images
/// are stored and the chat added in one transaction; should that fail, the
/// images it stored are taken back.
pub async fn import_chat(store: &Store, path: &Path) -> AppResult<Chat> {
    let file = read_chat_file(path).await?;
    check_contents(&file).map_err(|m| invalid(format!("{}: {m}", path.display())))?;
    let folder = path.parent().unwrap_or(Path::new(".")).to_path_buf();
    let images = check_images(&folder, &file).await?;

    let mut new_images = Vec::new();
    let stored = async {
        for image in &images {
            if !store.has_attachment(&image.sha256).await? {
                new_images.push(image.sha256.clone());
            }
            store_image(store, image).await?;
        }
        let chat = to_imported(file);
        store.import_chat(&chat).await.map_err(|e| match e {
            store::Error::InvalidInput(m) => invalid(m),
            other => other.into(),
        })
    }
    .await;
    if stored.is_err() && !new_images.is_empty() {
        if let Err(e) = store.remove_unused_attachments(&new_images).await {
            tracing::warn!(%e, "a failed import's images stay until the next start");
        }
    }
    stored
}

/// The most bytes of images one imported chat may bring: each image is at
/// most the app's attachment limit, and a chat of more than this is not one
/// a person assembled by hand (it would fill the data folder).
const MAX_IMPORT_IMAGE_BYTES: u64 = 1 << 30;

/// The chat file itself: a regular file (a link the user picked is
/// followed), at most [`MAX_FILE_BYTES`], of this format and version.
async fn read_chat_file(path: &Path) -> AppResult<ChatFile> {
    let owned = path.to_path_buf();
    let bytes = tokio::task::spawn_blocking(move || {
        crate::regular_file::read(&owned, MAX_FILE_BYTES, Links::Follow)
    })
    .await
    .map_err(|e| AppError::new("IO_ERROR", e.to_string()))?
    .map_err(|why| invalid(format!("{} cannot be imported: {why}", path.display())))?;
    let file: ChatFile = serde_json::from_slice(&bytes).map_err(|e| {
        invalid(format!("{} is not a chat file this app can read: {e}", path.display()))
    })?;
    if file.format != FORMAT || file.version != VERSION {
        return Err(invalid(format!(
            "{} is a {:?} file of version {}; this app reads {FORMAT:?} version {VERSION}",
            path.display(),
            file.format,
            file.version
        )));
    }
    Ok(file)
}

/// The chat's settings and answer format as the app checks them when they
/// are set (a misspelled key or a temperature of 99 would fail every reply
/// later), and its message tree as the store will need it (each id once,
/// parents first, the shown message among them).
fn check_contents(file: &ChatFile) -> Result<(), String> {
    let settings = ChatSettings::from_stored(file.settings.as_ref())
        .map_err(|e| format!("its settings: {}", e.message))?;
    settings.validate().map_err(|e| format!("its settings: {}", e.message))?;
    if let Some(format) = file.answer_format.as_ref().filter(|f| !f.is_null()) {
        let format =
            AnswerFormat::from_stored(format).map_err(|e| format!("its answer format: {e}"))?;
        format.validate().map_err(|e| format!("its answer format: {e}"))?;
    }
    let mut seen = std::collections::HashSet::new();
    for m in &file.messages {
        if let Some(parent) = m.parent_id.filter(|p| !seen.contains(p)) {
            return Err(format!(
                "message {} comes before its parent {parent}, or its parent is missing",
                m.id
            ));
        }
        if !seen.insert(m.id) {
            return Err(format!("message {} appears twice", m.id));
        }
    }
    match file.shown {
        Some(shown) if !seen.contains(&shown) => {
            Err(format!("the shown message {shown} is not in the chat"))
        }
        _ => Ok(()),
    }
}

/// An image of the file, checked: where it is and what it hashes to.
struct CheckedImage {
    path: PathBuf,
    sha256: String,
}

/// Every image the file names, once each, checked without storing any.
async fn check_images(folder: &Path, file: &ChatFile) -> AppResult<Vec<CheckedImage>> {
    let mut checked: Vec<CheckedImage> = Vec::new();
    let mut total: u64 = 0;
    for image in file.messages.iter().flat_map(|m| &m.images) {
        let path = image_path(folder, image)?;
        if checked.iter().any(|c| c.path == path && c.sha256 == image.sha256) {
            continue;
        }
        let (sha256, size) = hash_image(&path, image).await?;
        total += size;
        if total > MAX_IMPORT_IMAGE_BYTES {
            return Err(invalid(format!(
                "the chat's images are more than {} MB together; this app imports at most that",
                MAX_IMPORT_IMAGE_BYTES / 1_000_000
            )));
        }
        if sha256 != image.sha256 {
            return Err(invalid(format!(
                "image {} is not the image the chat names (its content changed)",
                image.file
            )));
        }
        checked.push(CheckedImage { path, sha256 });
    }
    Ok(checked)
}

/// Where an image named in the file is: a relative path of plain names,
/// inside the folder once every link on the way is resolved.
fn image_path(folder: &Path, image: &FileImage) -> AppResult<PathBuf> {
    let outside =
        || invalid(format!("image {:?} is not a file inside the chat's folder", image.file));
    let relative = Path::new(&image.file);
    if relative.as_os_str().is_empty()
        || relative.components().any(|c| !matches!(c, Component::Normal(_)))
    {
        return Err(outside());
    }
    let path = folder.join(relative);
    // the folders on the way may be links: where they lead must still be inside
    let (Ok(root), Some(Ok(parent))) =
        (folder.canonicalize(), path.parent().map(Path::canonicalize))
    else {
        return Err(invalid(format!("image {}: its folder cannot be found", image.file)));
    };
    if !parent.starts_with(&root) {
        return Err(outside());
    }
    Ok(path)
}

/// Reads one image (a regular file, not a link, within the attachment
/// limit) and hashes it as the store would; returns the hash and size.
async fn hash_image(path: &Path, image: &FileImage) -> AppResult<(String, u64)> {
    let owned = path.to_path_buf();
    let read = tokio::task::spawn_blocking(move || {
        let bytes = crate::regular_file::read(&owned, store::MAX_ATTACHMENT_BYTES, Links::Refuse)?;
        let size = bytes.len() as u64;
        // a PDF is stored like an image, by its sha256 (documents.rs)
        let sha256 = if crate::documents::is_pdf(&bytes) {
            store::document_sha256(&bytes)
        } else {
            store::attachment_sha256(&bytes)
        };
        sha256.map(|sha| (sha, size)).map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| AppError::new("IO_ERROR", e.to_string()))?;
    read.map_err(|why| invalid(format!("image {}: {why}", image.file)))
}

/// Stores a checked image; it must still hash to what it did when checked.
async fn store_image(store: &Store, image: &CheckedImage) -> AppResult<()> {
    let owned = image.path.clone();
    let bytes = tokio::task::spawn_blocking(move || {
        crate::regular_file::read(&owned, store::MAX_ATTACHMENT_BYTES, Links::Refuse)
    })
    .await
    .map_err(|e| AppError::new("IO_ERROR", e.to_string()))?
    .map_err(|why| invalid(format!("image {}: {why}", image.path.display())))?;
    let stored = if crate::documents::is_pdf(&bytes) {
        // read again as it is stored: its text and passages come from the file, not the export
        let name = image.path.file_name().map_or("document.pdf".into(), |n| n.to_string_lossy());
        crate::documents::add_document(store, bytes, &name).await?
    } else {
        store.add_attachment(&bytes).await?
    };
    if stored.sha256 != image.sha256 {
        return Err(invalid(format!(
            "image {} changed while the chat was imported",
            image.path.display()
        )));
    }
    Ok(())
}

/// The checked file as the store's import takes it.
fn to_imported(file: ChatFile) -> ImportedChat {
    let messages = file
        .messages
        .into_iter()
        .map(|m| ImportedMessage {
            key: m.id,
            parent: m.parent_id,
            role: m.role,
            content: m.content,
            reasoning: m.reasoning,
            stats: m.stats,
            model: m.model,
            status: m.status,
            error: m.error,
            error_code: m.error_code,
            created_at: m.created_at,
            updated_at: m.updated_at,
            attachments: m.images.into_iter().map(|i| i.sha256).collect(),
            tool_calls: m.tool_calls,
            tool_result: m.tool_result,
        })
        .collect();
    ImportedChat {
        title: file.title,
        created_at: file.created_at,
        updated_at: file.updated_at,
        answer_format: file.answer_format,
        settings: file.settings,
        messages,
        shown: file.shown,
    }
}

/// A file-name-safe short form of a title.
fn slug(title: &str) -> String {
    let s: String = title
        .chars()
        .flat_map(|c| {
            if c.is_alphanumeric() {
                c.to_lowercase().collect::<Vec<_>>()
            } else {
                vec!['-']
            }
        })
        .collect::<String>()
        .split('-')
        .filter(|p| !p.is_empty())
        .take(8)
        .collect::<Vec<_>>()
        .join("-");
    if s.is_empty() {
        "chat".into()
    } else {
        s.chars().take(60).collect()
    }
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

//! The records the store hands out and takes in.
use std::fmt;

use serde::{Deserialize, Serialize};
use ts_rs::TS;

/// A chat's row id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, TS)]
#[serde(transparent)]
pub struct ChatId(pub i64);

/// A message's row id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, TS)]
#[serde(transparent)]
pub struct MessageId(pub i64);

/// An assistant message that is being streamed. Only `begin_reply` makes one,
/// so `update_reply`/`finish_reply` cannot be pointed at a user message by mistake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, TS)]
#[serde(transparent)]
pub struct ReplyId(pub MessageId);

impl fmt::Display for ChatId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Milliseconds since the Unix epoch (UTC): what the UI formats, and sortable as an integer.
pub type Timestamp = i64;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
pub struct Chat {
    /// Row id.
    pub id: ChatId,
    /// Empty until the first user message names the chat (or the user renames it).
    pub title: String,
    /// The model of the latest reply, if any.
    pub model: Option<String>,
    /// When the chat was created.
    pub created_at: Timestamp,
    /// Last activity (a message added or removed, a reply); chats are listed by this, newest first.
    pub updated_at: Timestamp,
    /// How replies are shaped (the app's description, e.g. JSON with given
    /// fields); `None` is free text. The UI's type is the app's (bulk::AnswerFormat).
    #[ts(type = "import(\"./AnswerFormat\").AnswerFormat | null")]
    pub answer_format: Option<serde_json::Value>,
    /// What the chat sets for itself (the app's JSON: system prompt, model,
    /// sampling…); `None` follows the app's settings.
    #[serde(default)]
    #[ts(type = "import(\"./ChatSettings\").ChatSettings | null")]
    pub settings: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, TS)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Role> {
        Some(match s {
            "system" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            _ => return None,
        })
    }
}

/// Where a message is in its life. Only assistant replies are ever `Streaming`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, TS)]
#[serde(rename_all = "lowercase")]
pub enum MessageStatus {
    Complete,
    /// Being generated now.
    Streaming,
    /// Stopped before the end (the user stopped it, or the app quit or crashed
    /// mid-reply); the partial text is kept.
    Interrupted,
    /// Generation failed; `Message::error` says why.
    Error,
}

impl MessageStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            MessageStatus::Complete => "complete",
            MessageStatus::Streaming => "streaming",
            MessageStatus::Interrupted => "interrupted",
            MessageStatus::Error => "error",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<MessageStatus> {
        Some(match s {
            "complete" => MessageStatus::Complete,
            "streaming" => MessageStatus::Streaming,
            "interrupted" => MessageStatus::Interrupted,
            "error" => MessageStatus::Error,
            _ => return None,
        })
    }
}

/// How a streamed reply ended. A separate type from [`MessageStatus`] so that
/// "finish as still streaming" cannot be expressed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", content = "message", rename_all = "lowercase")]
pub enum ReplyOutcome {
    Complete,
    Interrupted,
    /// Failed, with only a message (no code is stored).
    Error(String),
    /// Failed, with a stable code (e.g. the engine's `INVALID_IMAGE`) kept
    /// beside the message, so a UI can explain it without reading the text.
    Failed {
        code: String,
        message: String,
    },
}

/// Generation statistics shown under a reply. Stored as JSON, so fields can be
/// added later without a migration; all are optional because an interrupted
/// or failed reply may not have them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, TS)]
pub struct MessageStats {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    /// Prompt tokens reused from the prompt cache instead of prefilled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_prompt_tokens: Option<u64>,
    /// Of those, the ones read from the prompt cache's files on disk (a
    /// chat continued after a restart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_from_disk_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens: Option<u64>,
    /// Decode speed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_second: Option<f64>,
    /// Time to first token, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    /// Why generation stopped ("stop", "length", "cancelled", …), as the engine says it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// KV-cache bytes the reply's tokens held when it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cache_bytes: Option<u64>,
    /// Earlier messages of the conversation left out of the prompt to fit
    /// the model's context (the chat's context policy); absent when none were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left_out_messages: Option<u64>,
    /// The pages of each PDF of the conversation that the prompt carried
    /// (the document chip lists them); absent when it had no document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documents: Option<Vec<DocumentPages>>,
}

/// Which pages of one PDF a reply's prompt carried.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, TS)]
pub struct DocumentPages {
    /// The document (its attachment's sha256).
    pub sha256: String,
    pub name: String,
    /// The whole text went, every page.
    pub whole: bool,
    /// The pages whose text went (all of them when `whole`; else those of
    /// the passages that best matched the question), ascending.
    pub pages: Vec<u32>,
    /// Pages that went as pictures beside the passages (a model that sees,
    /// a document longer than the context), ascending.
    #[serde(default)]
    pub pictures: Vec<u32>,
}

/// An image stored in the attachments folder, named by the SHA-256 of its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
pub struct Attachment {
    /// Lowercase hex SHA-256 of the file's bytes: its identity.
    pub sha256: String,
    /// MIME type detected from the magic bytes.
    pub mime: String,
    /// Size in bytes.
    pub size: u64,
    /// Where the file is on disk.
    pub path: std::path::PathBuf,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct Message {
    /// Row id; increases in the order messages were added.
    pub id: MessageId,
    /// The chat it belongs to.
    pub chat_id: ChatId,
    /// The message it answers or follows; `None` for the first message of a
    /// branch at the top of the chat. A chat is a tree: regenerated answers
    /// and edited messages are siblings under the same parent.
    #[serde(default)]
    pub parent_id: Option<MessageId>,
    /// Every message under the same parent, this one included, oldest
    /// first (the UI's ‹ 2/3 ›). Filled for the messages of a path
    /// (`list_messages`, `get_message`, a finished reply); empty elsewhere.
    #[serde(default)]
    pub siblings: Vec<MessageId>,
    pub role: Role,
    /// The visible text (for a reply: the answer without its reasoning).
    pub content: String,
    /// A thinking model's reasoning, kept apart from the answer.
    pub reasoning: Option<String>,
    /// Images attached to the message, in the order they were given.
    pub attachments: Vec<Attachment>,
    pub stats: Option<MessageStats>,
    /// The model that wrote a reply.
    pub model: Option<String>,
    pub status: MessageStatus,
    /// Why generation failed, for status `Error`.
    pub error: Option<String>,
    /// The failure's stable code (`INVALID_IMAGE`, `CONTEXT_LENGTH_EXCEEDED`, …)
    /// when one was given ([`ReplyOutcome::Failed`]).
    #[serde(default)]
    pub error_code: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// The tools an answer called (its reply ended in these calls); empty
    /// on every other message.
    #[serde(default)]
    pub tool_calls: Vec<ToolCallRecord>,
    /// For a tool message: the call it answers and how that went.
    #[serde(default)]
    pub tool_result: Option<ToolResultInfo>,
}

/// One tool call of an answer, as the model made it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
pub struct ToolCallRecord {
    /// The call's id (`call_…`), which its tool message names.
    pub id: String,
    /// The tool's name, as offered to the model.
    pub name: String,
    /// The arguments as the model wrote them: a JSON object's text.
    pub arguments: String,
    /// The MCP server that has the tool, when one did.
    #[serde(default)]
    pub server: Option<String>,
}

/// How a tool call went, kept on its tool message (whose content is the
/// result's text, or why there is none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum ToolOutcome {
    /// The tool ran and answered.
    Ok,
    /// The tool ran and said it failed, or could not be run (server down,
    /// timeout, garbage back).
    Error,
    /// The user denied the call: the tool never ran.
    Denied,
    /// The user stopped the reply while the call waited or ran.
    Cancelled,
}

/// What a tool message answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
pub struct ToolResultInfo {
    /// The [`ToolCallRecord::id`] of the call.
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    #[serde(default)]
    pub server: Option<String>,
    pub outcome: ToolOutcome,
}

/// A message to add as a whole (user input, a system prompt, an imported
/// reply). Replies that stream use `begin_reply` instead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewMessage {
    pub role: Role,
    pub content: String,
    #[serde(default)]
    pub reasoning: Option<String>,
    /// SHA-256 hashes returned by `Store::add_attachment`.
    #[serde(default)]
    pub attachments: Vec<String>,
    #[serde(default)]
    pub stats: Option<MessageStats>,
    #[serde(default)]
    pub model: Option<String>,
    /// For a tool message: the call it answers.
    #[serde(default)]
    pub tool_result: Option<ToolResultInfo>,
}

impl NewMessage {
    /// A user message with text only.
    pub fn user(content: impl Into<String>) -> Self {
        Self::with_role(Role::User, content)
    }

    /// A system prompt.
    pub fn system(content: impl Into<String>) -> Self {
        Self::with_role(Role::System, content)
    }

    pub fn with_role(role: Role, content: impl Into<String>) -> Self {
        NewMessage {
            role,
            content: content.into(),
            reasoning: None,
            attachments: Vec::new(),
            stats: None,
            model: None,
            tool_result: None,
        }
    }

    /// A tool's answer to `info`'s call (or why there is none).
    pub fn tool(content: impl Into<String>, info: ToolResultInfo) -> Self {
        NewMessage { tool_result: Some(info), ..Self::with_role(Role::Tool, content) }
    }

    /// Adds attachments by hash (from `Store::add_attachment`).
    pub fn with_attachments(mut self, hashes: impl IntoIterator<Item = String>) -> Self {
        self.attachments.extend(hashes);
        self
    }
}

/// What an orphan cleanup removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanupReport {
    /// Attachment files deleted from disk.
    pub files_removed: u64,
    /// Their total size.
    pub bytes_freed: u64,
}

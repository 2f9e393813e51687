//! A whole chat added at once (an import): its record, every message of
//! every branch with its parent, and which branch is shown, in one
//! transaction, so a bad file adds nothing. Attachments must be stored first
//! (`add_attachment`); an import that then fails takes back those it stored
//! (`remove_unused_attachments`), or they go at the next start
//! (`cleanup_orphans`).
use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::store::Store;
use crate::types::{
    Chat, MessageStats, MessageStatus, Role, Timestamp, ToolCallRecord, ToolResultInfo,
};

/// The chat's own record.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportedChat {
    pub title: String,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub answer_format: Option<serde_json::Value>,
    pub settings: Option<serde_json::Value>,
    /// Parents before children.
    pub messages: Vec<ImportedMessage>,
    /// The `key` of the last message of the branch to show; `None`: the
    /// branch added last.
    pub shown: Option<i64>,
}

/// One message, named by a `key` of the file's own (its id in the chat it
/// was exported from).
#[derive(Debug, Clone, PartialEq)]
pub struct ImportedMessage {
    pub key: i64,
    pub parent: Option<i64>,
    pub role: Role,
    pub content: String,
    pub reasoning: Option<String>,
    pub stats: Option<MessageStats>,
    pub model: Option<String>,
    /// A reply exported while it streamed comes in interrupted.
    pub status: MessageStatus,
    pub error: Option<String>,
    pub error_code: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// SHA-256 names of stored attachments, in order.
    pub attachments: Vec<String>,
    /// An answer's tool calls.
    pub tool_calls: Vec<ToolCallRecord>,
    /// A tool message's call.
    pub tool_result: Option<ToolResultInfo>,
}

impl Store {
    /// Adds `chat` as a new chat; returns it. Refuses (adding nothing) a
    /// message whose parent is unknown or comes after it, a repeated key, a
    /// shown key that is not a message, or an attachment not stored.
    pub async fn import_chat(&self, chat: &ImportedChat) -> Result<Chat> {
        let mut tx = self.write_tx().await?;
        let chat_id: i64 = sqlx::query_scalar(
            "INSERT INTO chats (title, created_at, updated_at, answer_format, settings) VALUES (?1, ?2, ?3, ?4, ?5) RETURNING id",
        )
        .bind(&chat.title)
        .bind(chat.created_at)
        .bind(chat.updated_at)
        .bind(chat.answer_format.as_ref().map(serde_json::Value::to_string))
        .bind(chat.settings.as_ref().map(serde_json::Value::to_string))
        .fetch_one(&mut *tx)
        .await?;
        let mut ids: HashMap<i64, i64> = HashMap::new();
        for (order, m) in chat.messages.iter().enumerate() {
            let parent = match m.parent {
                None => None,
                Some(p) => Some(*ids.get(&p).ok_or_else(|| {
                    Error::InvalidInput(format!(
                        "message {} comes before its parent {p}, or its parent is missing",
                        m.key
                    ))
                })?),
            };
            let status = match m.status {
                MessageStatus::Streaming => MessageStatus::Interrupted,
                s => s,
            };
            let stats =
                m.stats.as_ref().map(serde_json::to_string).transpose().expect("stats serialize");
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO messages (chat_id, parent_id, chosen, role, content, reasoning, stats, model, status, error,
                                       error_code, created_at, updated_at, tool_calls, tool_result)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15) RETURNING id",
            )
            .bind(chat_id)
            .bind(parent)
            .bind(order as i64 + 1)
            .bind(m.role.as_str())
            .bind(&m.content)
            .bind(m.reasoning.as_deref().filter(|r| !r.is_empty()))
            .bind(stats)
            .bind(&m.model)
            .bind(status.as_str())
            .bind(&m.error)
            .bind(&m.error_code)
            .bind(m.created_at)
            .bind(m.updated_at)
            .bind((!m.tool_calls.is_empty()).then(|| serde_json::to_string(&m.tool_calls).expect("serializes")))
            .bind(m.tool_result.as_ref().map(|t| serde_json::to_string(t).expect("serializes")))
            .fetch_one(&mut *tx)
            .await?;
            if ids.insert(m.key, id).is_some() {
                return Err(Error::InvalidInput(format!("message {} appears twice", m.key)));
            }
            for (position, hash) in m.attachments.iter().enumerate() {
                let known =
                    sqlx::query_scalar::<_, i64>("SELECT 1 FROM attachments WHERE sha256 = ?1")
                        .bind(hash)
                        .fetch_optional(&mut *tx)
                        .await?;
                if known.is_none() {
                    return Err(Error::AttachmentNotFound(hash.clone()));
                }
                sqlx::query("INSERT INTO message_attachments (message_id, position, sha256) VALUES (?1, ?2, ?3)")
                    .bind(id)
                    .bind(position as i64)
                    .bind(hash)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        if let Some(shown) = chat.shown {
            let leaf = *ids.get(&shown).ok_or_else(|| {
                Error::InvalidInput(format!("the shown message {shown} is not in the chat"))
            })?;
            // the shown line up from its leaf wins at every level
            sqlx::query(
                "WITH RECURSIVE up(id) AS (SELECT ?1 UNION ALL
                     SELECT m.parent_id FROM messages m JOIN up ON m.id = up.id WHERE m.parent_id IS NOT NULL)
                 UPDATE messages SET chosen = ?2 WHERE id IN (SELECT id FROM up)",
            )
            .bind(leaf)
            .bind(chat.messages.len() as i64 + 1)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        self.get_chat(crate::types::ChatId(chat_id)).await
    }
}

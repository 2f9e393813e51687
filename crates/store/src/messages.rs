//! Messages (each added under a parent: see `tree.rs`), and the crash-safe
//! life of a streamed reply:
//! `begin_reply` (status streaming) → `update_reply`… → `finish_reply`;
//! a reply still streaming when the app starts was cut by a crash or a kill
//! and is marked interrupted, keeping its partial text.
use sqlx::sqlite::SqliteRow;
use sqlx::{Row, Sqlite, Transaction};

use crate::attachments::{attachment_from_row, stored_attachment};
use crate::error::{Error, Result};
use crate::store::Store;
use crate::title::derive_title;
use crate::tree::{active_leaf, ensure_parent, next_chosen};
use crate::types::{
    ChatId, Message, MessageId, MessageStats, MessageStatus, NewMessage, ReplyId, ReplyOutcome,
    Role, ToolCallRecord,
};

pub(crate) const MESSAGE_COLUMNS: &str =
    "id, chat_id, parent_id, role, content, reasoning, stats, model, status, error, error_code, created_at, updated_at, tool_calls, tool_result";

pub(crate) fn message_from_row(row: &SqliteRow) -> Result<Message> {
    let role: String = row.try_get("role")?;
    let status: String = row.try_get("status")?;
    let stats: Option<String> = row.try_get("stats")?;
    let id = MessageId(row.try_get("id")?);
    Ok(Message {
        id,
        chat_id: ChatId(row.try_get("chat_id")?),
        parent_id: row.try_get::<Option<i64>, _>("parent_id")?.map(MessageId),
        siblings: Vec::new(),
        // the CHECK constraints make these unreachable, short of a hand-edited database
        role: Role::parse(&role).ok_or_else(|| corrupt(id, "role", &role))?,
        content: row.try_get("content")?,
        reasoning: row.try_get("reasoning")?,
        attachments: Vec::new(),
        // stats are advisory: a row with unreadable stats still shows its text
        stats: stats.and_then(|s| serde_json::from_str::<MessageStats>(&s).ok()),
        model: row.try_get("model")?,
        status: MessageStatus::parse(&status).ok_or_else(|| corrupt(id, "status", &status))?,
        error: row.try_get("error")?,
        error_code: row.try_get("error_code")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        tool_calls: tool_json(id, row.try_get("tool_calls")?, "tool_calls")?.unwrap_or_default(),
        tool_result: tool_json(id, row.try_get("tool_result")?, "tool_result")?,
    })
}

/// A tool column's JSON. Unlike stats these are part of the conversation
/// (the prompt is built from them), so a row that does not read fails.
fn tool_json<T: serde::de::DeserializeOwned>(
    id: MessageId,
    text: Option<String>,
    column: &str,
) -> Result<Option<T>> {
    text.map(|t| serde_json::from_str(&t).map_err(|e| corrupt(id, column, &e.to_string())))
        .transpose()
}

fn corrupt(id: MessageId, column: &str, value: &str) -> Error {
    Error::Database(sqlx::Error::Decode(format!("message {id}: unknown {column} {value:?}").into()))
}

/// NULL for "no reasoning", so the UI need not tell "" from absent.
fn non_empty(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

impl Store {
    /// Adds a complete message at the end of the chat's active path (after
    /// the message shown last). A user message names an untitled chat.
    /// Fails with `ATTACHMENT_NOT_FOUND` if a hash was never stored (or was
    /// cleaned up since): store attachments right before sending.
    pub async fn add_message(&self, chat: ChatId, message: &NewMessage) -> Result<Message> {
        let mut tx = self.write_tx().await?;
        ensure_chat(&mut tx, chat).await?;
        let parent = active_leaf(&mut tx, chat).await?;
        let stored = self.insert_message(&mut tx, chat, parent, message).await?;
        tx.commit().await?;
        self.with_siblings(stored).await
    }

    /// Adds a complete message under `parent` (`None`: a new first message
    /// of the chat) and makes it the shown branch. Editing a message is this
    /// with the edited message's parent: the new text becomes a sibling and
    /// the old branch stays reachable.
    pub async fn add_message_under(
        &self,
        chat: ChatId,
        parent: Option<MessageId>,
        message: &NewMessage,
    ) -> Result<Message> {
        let mut tx = self.write_tx().await?;
        ensure_chat(&mut tx, chat).await?;
        if let Some(parent) = parent {
            ensure_parent(&mut tx, chat, parent).await?;
        }
        let stored = self.insert_message(&mut tx, chat, parent, message).await?;
        tx.commit().await?;
        self.with_siblings(stored).await
    }

    async fn insert_message(
        &self,
        tx: &mut Transaction<'_, Sqlite>,
        chat: ChatId,
        parent: Option<MessageId>,
        message: &NewMessage,
    ) -> Result<Message> {
        let now = self.now_ms();
        let stats =
            message.stats.as_ref().map(serde_json::to_string).transpose().expect("stats serialize");
        let chosen = next_chosen(tx, chat).await?;
        let row = sqlx::query(&format!(
            "INSERT INTO messages (chat_id, parent_id, chosen, role, content, reasoning, stats, model, status, created_at, updated_at, tool_result)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'complete', ?9, ?9, ?10) RETURNING {MESSAGE_COLUMNS}"
        ))
        .bind(chat.0)
        .bind(parent.map(|p| p.0))
        .bind(chosen)
        .bind(message.role.as_str())
        .bind(&message.content)
        .bind(message.reasoning.as_deref().and_then(non_empty))
        .bind(stats)
        .bind(&message.model)
        .bind(now)
        .bind(message.tool_result.as_ref().map(|t| serde_json::to_string(t).expect("serializes")))
        .fetch_one(&mut **tx)
        .await?;
        let mut stored = message_from_row(&row)?;

        for (position, hash) in message.attachments.iter().enumerate() {
            stored
                .attachments
                .push(stored_attachment(&mut **tx, hash, &self.attachments_dir).await?);
            sqlx::query("INSERT INTO message_attachments (message_id, position, sha256) VALUES (?1, ?2, ?3)")
                .bind(stored.id.0)
                .bind(position as i64)
                .bind(hash)
                .execute(&mut **tx)
                .await?;
        }

        sqlx::query("UPDATE chats SET updated_at = ?1 WHERE id = ?2")
            .bind(now)
            .bind(chat.0)
            .execute(&mut **tx)
            .await?;
        if message.role == Role::User {
            let title = derive_title(&message.content);
            if !title.is_empty() {
                sqlx::query("UPDATE chats SET title = ?1 WHERE id = ?2 AND title = ''")
                    .bind(title)
                    .bind(chat.0)
                    .execute(&mut **tx)
                    .await?;
            }
        }
        Ok(stored)
    }

    /// One message by id, with its attachments and siblings.
    pub async fn get_message(&self, id: MessageId) -> Result<Message> {
        let row = sqlx::query(&format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = ?1"))
            .bind(id.0)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(Error::MessageNotFound(id))?;
        let mut message = message_from_row(&row)?;
        let rows = sqlx::query(
            "SELECT a.sha256, a.ext, a.mime, a.size FROM message_attachments ma
             JOIN attachments a ON a.sha256 = ma.sha256 WHERE ma.message_id = ?1 ORDER BY ma.position",
        )
        .bind(id.0)
        .fetch_all(&self.pool)
        .await?;
        message.attachments = rows
            .iter()
            .map(|r| attachment_from_row(r, &self.attachments_dir))
            .collect::<Result<_>>()?;
        self.with_siblings(message).await
    }

    /// `message` as [`Store::add_message_under`] would store it under
    /// `parent`, without storing anything: a prompt can be built, and the
    /// engine can start on it, before the message is written. It has no id
    /// yet (0) and no siblings; its attachments are the stored records, and
    /// an unknown hash fails with `ATTACHMENT_NOT_FOUND` as the write would.
    pub async fn draft_message(
        &self,
        chat: ChatId,
        parent: Option<MessageId>,
        message: &NewMessage,
    ) -> Result<Message> {
        let mut attachments = Vec::with_capacity(message.attachments.len());
        for hash in &message.attachments {
            attachments.push(stored_attachment(&self.pool, hash, &self.attachments_dir).await?);
        }
        let now = self.now_ms();
        Ok(Message {
            id: MessageId(0),
            chat_id: chat,
            parent_id: parent,
            siblings: Vec::new(),
            role: message.role,
            content: message.content.clone(),
            reasoning: message.reasoning.as_deref().and_then(non_empty).map(str::to_string),
            attachments,
            stats: message.stats.clone(),
            model: message.model.clone(),
            status: MessageStatus::Complete,
            error: None,
            error_code: None,
            created_at: now,
            updated_at: now,
            tool_calls: Vec::new(),
            tool_result: message.tool_result.clone(),
        })
    }

    /// `message` with its siblings filled in.
    pub(crate) async fn with_siblings(&self, mut message: Message) -> Result<Message> {
        message.siblings = sqlx::query_scalar::<_, i64>(
            "SELECT id FROM messages WHERE chat_id = ?1 AND parent_id IS ?2 ORDER BY id",
        )
        .bind(message.chat_id.0)
        .bind(message.parent_id.map(|p| p.0))
        .fetch_all(&self.pool)
        .await?
        .into_iter()
        .map(MessageId)
        .collect();
        Ok(message)
    }

    /// Starts an assistant reply at the end of the chat's active path: an
    /// empty message with status `streaming`. Remembers `model` as the
    /// chat's model.
    pub async fn begin_reply(&self, chat: ChatId, model: &str) -> Result<ReplyId> {
        let mut tx = self.write_tx().await?;
        ensure_chat(&mut tx, chat).await?;
        let parent = active_leaf(&mut tx, chat).await?;
        insert_reply(tx, chat, parent, model, self.now_ms()).await
    }

    /// Starts an assistant reply under `parent` (a user message) and makes
    /// it the shown branch. Regenerating is this: the earlier answers stay
    /// as its siblings.
    pub async fn begin_reply_under(
        &self,
        chat: ChatId,
        parent: MessageId,
        model: &str,
    ) -> Result<ReplyId> {
        let mut tx = self.write_tx().await?;
        ensure_chat(&mut tx, chat).await?;
        ensure_parent(&mut tx, chat, parent).await?;
        insert_reply(tx, chat, Some(parent), model, self.now_ms()).await
    }

    /// Opens a finished answer again to extend it in place (Continue on an
    /// answer cut at its token limit): the message is `streaming` again and
    /// takes [`Store::update_reply`] and [`Store::finish_reply`] with its
    /// whole text, old and new. Only a complete or interrupted answer of
    /// `chat` can be continued.
    pub async fn reopen_reply(&self, chat: ChatId, message: MessageId) -> Result<ReplyId> {
        let reopened: Option<i64> = sqlx::query_scalar(
            "UPDATE messages SET status = 'streaming', updated_at = ?1
             WHERE id = ?2 AND chat_id = ?3 AND role = 'assistant' AND status IN ('complete', 'interrupted')
             RETURNING id",
        )
        .bind(self.now_ms())
        .bind(message.0)
        .bind(chat.0)
        .fetch_optional(&self.pool)
        .await?;
        match reopened {
            Some(id) => Ok(ReplyId(MessageId(id))),
            None => match self.get_message(message).await {
                Ok(m) if m.chat_id == chat => {
                    Err(Error::InvalidInput("only a finished answer can be continued".into()))
                }
                _ => Err(Error::MessageNotFound(message)),
            },
        }
    }

    /// Saves the text so far (the whole text, not a delta). The app calls
    /// this about once a second, so a crash loses at most that much.
    pub async fn update_reply(&self, reply: ReplyId, content: &str, reasoning: &str) -> Result<()> {
        let updated = sqlx::query(
            "UPDATE messages SET content = ?1, reasoning = ?2, updated_at = ?3
             WHERE id = ?4 AND status = 'streaming'",
        )
        .bind(content)
        .bind(non_empty(reasoning))
        .bind(self.now_ms())
        .bind(reply.0 .0)
        .execute(&self.pool)
        .await?;
        if updated.rows_affected() == 0 {
            return Err(self.not_streaming(reply).await);
        }
        Ok(())
    }

    /// Keeps the tool calls a streaming reply ended in (before
    /// [`Store::finish_reply`]): they are part of the conversation, so the
    /// next prompt and an export carry them.
    pub async fn set_reply_tool_calls(
        &self,
        reply: ReplyId,
        calls: &[ToolCallRecord],
    ) -> Result<()> {
        let json = (!calls.is_empty()).then(|| serde_json::to_string(calls).expect("serializes"));
        let updated = sqlx::query(
            "UPDATE messages SET tool_calls = ?1, updated_at = ?2 WHERE id = ?3 AND status = 'streaming'",
        )
        .bind(json)
        .bind(self.now_ms())
        .bind(reply.0 .0)
        .execute(&self.pool)
        .await?;
        if updated.rows_affected() == 0 {
            return Err(self.not_streaming(reply).await);
        }
        Ok(())
    }

    /// Ends a reply with its final text, stats and outcome.
    pub async fn finish_reply(
        &self,
        reply: ReplyId,
        content: &str,
        reasoning: &str,
        stats: Option<&MessageStats>,
        outcome: ReplyOutcome,
    ) -> Result<Message> {
        let (status, error, code) = match outcome {
            ReplyOutcome::Complete => (MessageStatus::Complete, None, None),
            ReplyOutcome::Interrupted => (MessageStatus::Interrupted, None, None),
            ReplyOutcome::Error(message) => (MessageStatus::Error, Some(message), None),
            ReplyOutcome::Failed { code, message } => {
                (MessageStatus::Error, Some(message), Some(code))
            }
        };
        let stats = stats.map(serde_json::to_string).transpose().expect("stats serialize");
        let row = sqlx::query(&format!(
            "UPDATE messages SET content = ?1, reasoning = ?2, stats = ?3, status = ?4, error = ?5, error_code = ?6,
             updated_at = ?7 WHERE id = ?8 AND status = 'streaming' RETURNING {MESSAGE_COLUMNS}"
        ))
        .bind(content)
        .bind(non_empty(reasoning))
        .bind(stats)
        .bind(status.as_str())
        .bind(error)
        .bind(code)
        .bind(self.now_ms())
        .bind(reply.0 .0)
        .fetch_optional(&self.pool)
        .await?;
        match row {
            Some(row) => self.with_siblings(message_from_row(&row)?).await,
            None => Err(self.not_streaming(reply).await),
        }
    }

    /// Why an update matched no row: the message is gone, or not streaming.
    async fn not_streaming(&self, reply: ReplyId) -> Error {
        let exists = sqlx::query_scalar::<_, i64>("SELECT 1 FROM messages WHERE id = ?1")
            .bind(reply.0 .0)
            .fetch_optional(&self.pool)
            .await;
        match exists {
            Ok(Some(_)) => Error::ReplyNotStreaming(reply.0),
            Ok(None) => Error::MessageNotFound(reply.0),
            Err(e) => e.into(),
        }
    }

    /// Marks replies left `streaming` (by a crash or a kill) as `interrupted`.
    /// Runs on open, before anything else can start a reply.
    pub(crate) async fn recover_interrupted_replies(&self) -> Result<u64> {
        let done =
            sqlx::query("UPDATE messages SET status = 'interrupted', updated_at = ?1 WHERE status = 'streaming'")
                .bind(self.now_ms())
                .execute(&self.pool)
                .await?;
        Ok(done.rows_affected())
    }
}

pub(crate) async fn ensure_chat(tx: &mut Transaction<'_, Sqlite>, chat: ChatId) -> Result<()> {
    sqlx::query_scalar::<_, i64>("SELECT 1 FROM chats WHERE id = ?1")
        .bind(chat.0)
        .fetch_optional(&mut **tx)
        .await?
        .map(|_| ())
        .ok_or(Error::ChatNotFound(chat))
}

async fn insert_reply(
    mut tx: Transaction<'_, Sqlite>,
    chat: ChatId,
    parent: Option<MessageId>,
    model: &str,
    now: i64,
) -> Result<ReplyId> {
    let chosen = next_chosen(&mut tx, chat).await?;
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO messages (chat_id, parent_id, chosen, role, content, model, status, created_at, updated_at)
         VALUES (?1, ?2, ?3, 'assistant', '', ?4, 'streaming', ?5, ?5) RETURNING id",
    )
    .bind(chat.0)
    .bind(parent.map(|p| p.0))
    .bind(chosen)
    .bind(model)
    .bind(now)
    .fetch_one(&mut *tx)
    .await?;
    sqlx::query("UPDATE chats SET model = ?1, updated_at = ?2 WHERE id = ?3")
        .bind(model)
        .bind(now)
        .bind(chat.0)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(ReplyId(MessageId(id)))
}

//! Messages, and the crash-safe life of a streamed reply:
//! `begin_reply` (status streaming) → `update_reply`… → `finish_reply`;
//! a reply still streaming when the app starts was cut by a crash or a kill
//! and is marked interrupted, keeping its partial text.
use std::collections::HashMap;

use sqlx::sqlite::SqliteRow;
use sqlx::{Row, Sqlite, Transaction};

use crate::attachments::attachment_from_row;
use crate::error::{Error, Result};
use crate::store::{now_ms, Store};
use crate::title::derive_title;
use crate::types::{
    Attachment, ChatId, Message, MessageId, MessageStats, MessageStatus, NewMessage, ReplyId, ReplyOutcome, Role,
};

const MESSAGE_COLUMNS: &str =
    "id, chat_id, role, content, reasoning, stats, model, status, error, error_code, created_at, updated_at";

fn message_from_row(row: &SqliteRow) -> Result<Message> {
    let role: String = row.try_get("role")?;
    let status: String = row.try_get("status")?;
    let stats: Option<String> = row.try_get("stats")?;
    let id = MessageId(row.try_get("id")?);
    Ok(Message {
        id,
        chat_id: ChatId(row.try_get("chat_id")?),
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
    })
}

fn corrupt(id: MessageId, column: &str, value: &str) -> Error {
    Error::Database(sqlx::Error::Decode(format!("message {id}: unknown {column} {value:?}").into()))
}

/// NULL for "no reasoning", so the UI need not tell "" from absent.
fn non_empty(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

impl Store {
    /// Adds a complete message. A user message names an untitled chat.
    /// Fails with `ATTACHMENT_NOT_FOUND` if a hash was never stored (or was
    /// cleaned up since): store attachments right before sending.
    pub async fn add_message(&self, chat: ChatId, message: &NewMessage) -> Result<Message> {
        let now = now_ms();
        let stats = message.stats.as_ref().map(serde_json::to_string).transpose().expect("stats serialize");
        let mut tx = self.write_tx().await?;
        ensure_chat(&mut tx, chat).await?;
        let row = sqlx::query(&format!(
            "INSERT INTO messages (chat_id, role, content, reasoning, stats, model, status, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'complete', ?7, ?7) RETURNING {MESSAGE_COLUMNS}"
        ))
        .bind(chat.0)
        .bind(message.role.as_str())
        .bind(&message.content)
        .bind(message.reasoning.as_deref().and_then(non_empty))
        .bind(stats)
        .bind(&message.model)
        .bind(now)
        .fetch_one(&mut *tx)
        .await?;
        let mut stored = message_from_row(&row)?;

        for (position, hash) in message.attachments.iter().enumerate() {
            let row = sqlx::query("SELECT sha256, ext, mime, size FROM attachments WHERE sha256 = ?1")
                .bind(hash)
                .fetch_optional(&mut *tx)
                .await?
                .ok_or_else(|| Error::AttachmentNotFound(hash.clone()))?;
            stored.attachments.push(attachment_from_row(&row, &self.attachments_dir)?);
            sqlx::query("INSERT INTO message_attachments (message_id, position, sha256) VALUES (?1, ?2, ?3)")
                .bind(stored.id.0)
                .bind(position as i64)
                .bind(hash)
                .execute(&mut *tx)
                .await?;
        }

        sqlx::query("UPDATE chats SET updated_at = ?1 WHERE id = ?2").bind(now).bind(chat.0).execute(&mut *tx).await?;
        if message.role == Role::User {
            let title = derive_title(&message.content);
            if !title.is_empty() {
                sqlx::query("UPDATE chats SET title = ?1 WHERE id = ?2 AND title = ''")
                    .bind(title)
                    .bind(chat.0)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        tx.commit().await?;
        Ok(stored)
    }

    /// A chat's messages, oldest first, with their attachments.
    pub async fn list_messages(&self, chat: ChatId) -> Result<Vec<Message>> {
        // one read transaction: the messages and their attachments from the same snapshot
        let mut tx = self.pool.begin().await?;
        ensure_chat(&mut tx, chat).await?;
        let rows = sqlx::query(&format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE chat_id = ?1 ORDER BY id"))
            .bind(chat.0)
            .fetch_all(&mut *tx)
            .await?;
        let mut messages = rows.iter().map(message_from_row).collect::<Result<Vec<_>>>()?;

        let rows = sqlx::query(
            "SELECT ma.message_id, a.sha256, a.ext, a.mime, a.size
             FROM message_attachments ma
             JOIN messages m ON m.id = ma.message_id
             JOIN attachments a ON a.sha256 = ma.sha256
             WHERE m.chat_id = ?1 ORDER BY ma.message_id, ma.position",
        )
        .bind(chat.0)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        let mut by_message: HashMap<i64, Vec<Attachment>> = HashMap::new();
        for row in &rows {
            let id: i64 = row.try_get("message_id")?;
            by_message.entry(id).or_default().push(attachment_from_row(row, &self.attachments_dir)?);
        }
        for message in &mut messages {
            if let Some(attachments) = by_message.remove(&message.id.0) {
                message.attachments = attachments;
            }
        }
        Ok(messages)
    }

    /// One message by id.
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
        message.attachments =
            rows.iter().map(|r| attachment_from_row(r, &self.attachments_dir)).collect::<Result<_>>()?;
        Ok(message)
    }

    /// Deletes `from` and every later message of `chat` (regenerate, edit
    /// and resend), then the attachment files no other message uses. Returns
    /// how many messages went. A streaming reply among them is deleted too:
    /// stop it first.
    pub async fn delete_messages_from(&self, chat: ChatId, from: MessageId) -> Result<u64> {
        let mut tx = self.write_tx().await?;
        let exists = sqlx::query_scalar::<_, i64>("SELECT 1 FROM messages WHERE id = ?1 AND chat_id = ?2")
            .bind(from.0)
            .bind(chat.0)
            .fetch_optional(&mut *tx)
            .await?;
        if exists.is_none() {
            return Err(Error::MessageNotFound(from));
        }
        let candidates: Vec<String> = sqlx::query_scalar(
            "SELECT DISTINCT ma.sha256 FROM message_attachments ma
             JOIN messages m ON m.id = ma.message_id WHERE m.chat_id = ?1 AND m.id >= ?2",
        )
        .bind(chat.0)
        .bind(from.0)
        .fetch_all(&mut *tx)
        .await?;
        let deleted = sqlx::query("DELETE FROM messages WHERE chat_id = ?1 AND id >= ?2")
            .bind(chat.0)
            .bind(from.0)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        sqlx::query("UPDATE chats SET updated_at = ?1 WHERE id = ?2")
            .bind(now_ms())
            .bind(chat.0)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        self.remove_unreferenced_attachments(Some(&candidates)).await?;
        Ok(deleted)
    }

    /// Starts an assistant reply in `chat`: an empty message with status
    /// `streaming`. Remembers `model` as the chat's model.
    pub async fn begin_reply(&self, chat: ChatId, model: &str) -> Result<ReplyId> {
        let now = now_ms();
        let mut tx = self.write_tx().await?;
        ensure_chat(&mut tx, chat).await?;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO messages (chat_id, role, content, model, status, created_at, updated_at)
             VALUES (?1, 'assistant', '', ?2, 'streaming', ?3, ?3) RETURNING id",
        )
        .bind(chat.0)
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

    /// Saves the text so far (the whole text, not a delta). The app calls
    /// this about once a second, so a crash loses at most that much.
    pub async fn update_reply(&self, reply: ReplyId, content: &str, reasoning: &str) -> Result<()> {
        let updated = sqlx::query(
            "UPDATE messages SET content = ?1, reasoning = ?2, updated_at = ?3
             WHERE id = ?4 AND status = 'streaming'",
        )
        .bind(content)
        .bind(non_empty(reasoning))
        .bind(now_ms())
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
            ReplyOutcome::Failed { code, message } => (MessageStatus::Error, Some(message), Some(code)),
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
        .bind(now_ms())
        .bind(reply.0 .0)
        .fetch_optional(&self.pool)
        .await?;
        match row {
            Some(row) => message_from_row(&row),
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
                .bind(now_ms())
                .execute(&self.pool)
                .await?;
        Ok(done.rows_affected())
    }
}

async fn ensure_chat(tx: &mut Transaction<'_, Sqlite>, chat: ChatId) -> Result<()> {
    sqlx::query_scalar::<_, i64>("SELECT 1 FROM chats WHERE id = ?1")
        .bind(chat.0)
        .fetch_optional(&mut **tx)
        .await?
        .map(|_| ())
        .ok_or(Error::ChatNotFound(chat))
}

//! A chat as a tree of messages (migration 0005): every message has a parent,
//! regenerated answers and edited messages are siblings, and the branch shown
//! is the *active path* — from the top, at each level the sibling chosen
//! last (largest `chosen`, a per-chat counter raised when a message is added
//! or picked). Each subtree keeps its own last choice, so switching back to
//! an earlier answer shows the conversation that went on from it.
use std::collections::HashMap;

use sqlx::{Row, Sqlite, Transaction};

use crate::attachments::attachment_from_row;
use crate::error::{Error, Result};
use crate::messages::{ensure_chat, message_from_row, MESSAGE_COLUMNS};
use crate::store::Store;
use crate::types::{Attachment, ChatId, Message, MessageId};

/// The active path of chat ?1 as (id, depth), from the top. Each step picks
/// the most recently chosen child; the walk ends at a message with none.
const ACTIVE_PATH: &str = "WITH RECURSIVE path(id, depth) AS (
        SELECT (SELECT id FROM messages WHERE chat_id = ?1 AND parent_id IS NULL
                ORDER BY chosen DESC, id DESC LIMIT 1), 0
        UNION ALL
        SELECT (SELECT c.id FROM messages c WHERE c.parent_id = path.id
                ORDER BY c.chosen DESC, c.id DESC LIMIT 1), path.depth + 1
        FROM path WHERE path.id IS NOT NULL
    )";

/// Message ?1 and everything under it.
const SUBTREE: &str = "WITH RECURSIVE sub(id) AS (
        SELECT ?1
        UNION ALL
        SELECT m.id FROM messages m JOIN sub ON m.parent_id = sub.id
    )";

/// Message ?1 and its ancestors up to the top.
const ANCESTORS: &str = "WITH RECURSIVE up(id) AS (
        SELECT ?1
        UNION ALL
        SELECT m.parent_id FROM messages m JOIN up ON m.id = up.id WHERE m.parent_id IS NOT NULL
    )";

/// The last message of the active path, where a new message goes.
pub(crate) async fn active_leaf(
    tx: &mut Transaction<'_, Sqlite>,
    chat: ChatId,
) -> Result<Option<MessageId>> {
    let leaf: Option<i64> = sqlx::query_scalar(&format!(
        "{ACTIVE_PATH} SELECT id FROM path WHERE id IS NOT NULL ORDER BY depth DESC LIMIT 1"
    ))
    .bind(chat.0)
    .fetch_optional(&mut **tx)
    .await?;
    Ok(leaf.map(MessageId))
}

/// The value that makes a message the chosen one among its siblings.
pub(crate) async fn next_chosen(tx: &mut Transaction<'_, Sqlite>, chat: ChatId) -> Result<i64> {
    let max: Option<i64> =
        sqlx::query_scalar("SELECT MAX(chosen) FROM messages WHERE chat_id = ?1")
            .bind(chat.0)
            .fetch_one(&mut **tx)
            .await?;
    Ok(max.unwrap_or(0) + 1)
}

/// `MESSAGE_NOT_FOUND` unless `message` is in `chat`: a message of another
/// chat is never a parent here.
pub(crate) async fn ensure_parent(
    tx: &mut Transaction<'_, Sqlite>,
    chat: ChatId,
    message: MessageId,
) -> Result<()> {
    sqlx::query_scalar::<_, i64>("SELECT 1 FROM messages WHERE id = ?1 AND chat_id = ?2")
        .bind(message.0)
        .bind(chat.0)
        .fetch_optional(&mut **tx)
        .await?
        .map(|_| ())
        .ok_or(Error::MessageNotFound(message))
}

impl Store {
    /// The chat's active path, oldest first, each message with its
    /// attachments and its siblings. This is the conversation the UI shows
    /// and the model is sent.
    pub async fn list_messages(&self, chat: ChatId) -> Result<Vec<Message>> {
        // one read transaction: the path, siblings and attachments from the same snapshot
        let mut tx = self.pool.begin().await?;
        ensure_chat(&mut tx, chat).await?;
        let columns =
            MESSAGE_COLUMNS.split(", ").map(|c| format!("m.{c}")).collect::<Vec<_>>().join(", ");
        let rows = sqlx::query(&format!(
            "{ACTIVE_PATH} SELECT {columns} FROM path JOIN messages m ON m.id = path.id ORDER BY path.depth"
        ))
        .bind(chat.0)
        .fetch_all(&mut *tx)
        .await?;
        let mut messages = rows.iter().map(message_from_row).collect::<Result<Vec<_>>>()?;

        // siblings of path messages are the tops and the children of path messages
        let rows = sqlx::query(&format!(
            "{ACTIVE_PATH} SELECT id, parent_id FROM messages
             WHERE chat_id = ?1 AND (parent_id IS NULL OR parent_id IN (SELECT id FROM path WHERE id IS NOT NULL))
             ORDER BY id"
        ))
        .bind(chat.0)
        .fetch_all(&mut *tx)
        .await?;
        let mut by_parent: HashMap<Option<i64>, Vec<MessageId>> = HashMap::new();
        for row in &rows {
            by_parent
                .entry(row.try_get("parent_id")?)
                .or_default()
                .push(MessageId(row.try_get("id")?));
        }
        let attachments = self.attachments_of(&mut tx, chat).await?;
        tx.commit().await?;
        for m in &mut messages {
            m.siblings = by_parent.get(&m.parent_id.map(|p| p.0)).cloned().unwrap_or_default();
            m.attachments = attachments.get(&m.id.0).cloned().unwrap_or_default();
        }
        Ok(messages)
    }

    /// Every message of the chat, every branch, in the order they were
    /// added (parents before children), with attachments (for export). The
    /// `siblings` field is left empty: the parents say it all.
    pub async fn list_all_messages(&self, chat: ChatId) -> Result<Vec<Message>> {
        let mut tx = self.pool.begin().await?;
        ensure_chat(&mut tx, chat).await?;
        let rows = sqlx::query(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages WHERE chat_id = ?1 ORDER BY id"
        ))
        .bind(chat.0)
        .fetch_all(&mut *tx)
        .await?;
        let mut messages = rows.iter().map(message_from_row).collect::<Result<Vec<_>>>()?;
        let attachments = self.attachments_of(&mut tx, chat).await?;
        tx.commit().await?;
        for m in &mut messages {
            m.attachments = attachments.get(&m.id.0).cloned().unwrap_or_default();
        }
        Ok(messages)
    }

    /// The line from the top of the chat down to `message`, inclusive: the
    /// conversation a reply under `message` answers, whichever branch is shown.
    pub async fn path_to(&self, chat: ChatId, message: MessageId) -> Result<Vec<Message>> {
        let all = self.list_all_messages(chat).await?;
        let by_id: HashMap<MessageId, &Message> = all.iter().map(|m| (m.id, m)).collect();
        let mut line = Vec::new();
        let mut next = Some(message);
        while let Some(id) = next {
            let m = by_id.get(&id).ok_or(Error::MessageNotFound(id))?;
            line.push((*m).clone());
            next = m.parent_id;
        }
        line.reverse();
        Ok(line)
    }

    /// The attachments of every message of `chat`, by message id, in order.
    async fn attachments_of(
        &self,
        tx: &mut Transaction<'_, Sqlite>,
        chat: ChatId,
    ) -> Result<HashMap<i64, Vec<Attachment>>> {
        let rows = sqlx::query(
            "SELECT ma.message_id, a.sha256, a.ext, a.mime, a.size
             FROM message_attachments ma
             JOIN messages m ON m.id = ma.message_id
             JOIN attachments a ON a.sha256 = ma.sha256
             WHERE m.chat_id = ?1 ORDER BY ma.message_id, ma.position",
        )
        .bind(chat.0)
        .fetch_all(&mut **tx)
        .await?;
        let mut by_message: HashMap<i64, Vec<Attachment>> = HashMap::new();
        for row in &rows {
            let id: i64 = row.try_get("message_id")?;
            by_message
                .entry(id)
                .or_default()
                .push(attachment_from_row(row, &self.attachments_dir)?);
        }
        Ok(by_message)
    }

    /// Shows the branch through `message` (switching between siblings): it
    /// and its ancestors become the chosen ones at their levels; below it,
    /// the branch it last showed. Not activity: the chat keeps its place.
    /// Returns the new active path.
    pub async fn choose_message(&self, chat: ChatId, message: MessageId) -> Result<Vec<Message>> {
        let mut tx = self.write_tx().await?;
        ensure_parent(&mut tx, chat, message).await?;
        let chosen = next_chosen(&mut tx, chat).await?;
        // one value for the whole line up: each ancestor is in its own sibling group
        sqlx::query(&format!(
            "{ANCESTORS} UPDATE messages SET chosen = ?2 WHERE id IN (SELECT id FROM up)"
        ))
        .bind(message.0)
        .bind(chosen)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        self.list_messages(chat).await
    }

    /// The last message of the chat's active path, if any.
    pub async fn active_leaf(&self, chat: ChatId) -> Result<Option<MessageId>> {
        let mut tx = self.pool.begin().await?;
        ensure_chat(&mut tx, chat).await?;
        let leaf = active_leaf(&mut tx, chat).await?;
        tx.commit().await?;
        Ok(leaf)
    }

    /// Deletes `message` and every message under it (a branch), then the
    /// attachment files no other message (or bulk job) uses. The sibling
    /// chosen before it is shown instead. Returns how many messages went. A
    /// streaming reply among them is deleted too: stop it first.
    pub async fn delete_branch(&self, chat: ChatId, message: MessageId) -> Result<u64> {
        let mut tx = self.write_tx().await?;
        ensure_parent(&mut tx, chat, message).await?;
        let candidates: Vec<String> = sqlx::query_scalar(&format!(
            "{SUBTREE} SELECT DISTINCT ma.sha256 FROM message_attachments ma WHERE ma.message_id IN (SELECT id FROM sub)"
        ))
        .bind(message.0)
        .fetch_all(&mut *tx)
        .await?;
        // one statement: the parent links inside the subtree are checked at its end
        let deleted = sqlx::query(&format!(
            "{SUBTREE} DELETE FROM messages WHERE id IN (SELECT id FROM sub)"
        ))
        .bind(message.0)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        sqlx::query("UPDATE chats SET updated_at = ?1 WHERE id = ?2")
            .bind(self.now_ms())
            .bind(chat.0)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        self.remove_unreferenced_attachments(Some(&candidates)).await?;
        Ok(deleted)
    }
}

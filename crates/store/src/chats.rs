//! Chats: create, list, rename, delete, search.
use sqlx::sqlite::SqliteRow;
use sqlx::Row;

use crate::error::{Error, Result};
use crate::store::Store;
use crate::types::{Chat, ChatId, CleanupReport};

const CHAT_COLUMNS: &str = "id, title, model, created_at, updated_at, answer_format, settings";

pub(crate) fn chat_from_row(row: &SqliteRow) -> Result<Chat> {
    Ok(Chat {
        id: ChatId(row.try_get("id")?),
        title: row.try_get("title")?,
        model: row.try_get("model")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        answer_format: json_column(row, "answer_format")?,
        settings: json_column(row, "settings")?,
    })
}

/// A nullable column that holds JSON the app gave.
pub(crate) fn json_column(row: &SqliteRow, column: &str) -> Result<Option<serde_json::Value>> {
    match row.try_get::<Option<String>, _>(column)? {
        Some(text) => Ok(Some(
            serde_json::from_str(&text)
                .map_err(|e| Error::InvalidInput(format!("stored {column}: {e}")))?,
        )),
        None => Ok(None),
    }
}

impl Store {
    /// A new, untitled chat. It takes its title from its first user message.
    pub async fn create_chat(&self) -> Result<Chat> {
        let now = self.now_ms();
        let row = sqlx::query(&format!(
            "INSERT INTO chats (title, created_at, updated_at) VALUES ('', ?1, ?1) RETURNING {CHAT_COLUMNS}"
        ))
        .bind(now)
        .fetch_one(&self.pool)
        .await?;
        chat_from_row(&row)
    }

    pub async fn get_chat(&self, id: ChatId) -> Result<Chat> {
        let row = sqlx::query(&format!("SELECT {CHAT_COLUMNS} FROM chats WHERE id = ?1"))
            .bind(id.0)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(Error::ChatNotFound(id))?;
        chat_from_row(&row)
    }

    /// All chats, most recently active first.
    pub async fn list_chats(&self) -> Result<Vec<Chat>> {
        let rows = sqlx::query(&format!(
            "SELECT {CHAT_COLUMNS} FROM chats ORDER BY updated_at DESC, id DESC"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(chat_from_row).collect()
    }

    /// Sets a chat's title (trimmed; must not be empty). A renamed chat keeps
    /// its title: only untitled chats take one from their first message. A
    /// rename is not activity: the chat keeps its place in the list.
    pub async fn rename_chat(&self, id: ChatId, title: &str) -> Result<Chat> {
        let title = title.trim();
        if title.is_empty() {
            return Err(Error::InvalidInput("a chat title cannot be empty".into()));
        }
        let row = sqlx::query(&format!(
            "UPDATE chats SET title = ?1 WHERE id = ?2 RETURNING {CHAT_COLUMNS}"
        ))
        .bind(title)
        .bind(id.0)
        .fetch_optional(&self.pool)
        .await?
        .ok_or(Error::ChatNotFound(id))?;
        chat_from_row(&row)
    }

    /// Sets how the chat's replies are shaped (`None`: free text). Like a
    /// rename, not activity: the chat keeps its place in the list.
    pub async fn set_answer_format(
        &self,
        id: ChatId,
        format: Option<&serde_json::Value>,
    ) -> Result<Chat> {
        let text = format.map(serde_json::Value::to_string);
        let row = sqlx::query(&format!(
            "UPDATE chats SET answer_format = ?1 WHERE id = ?2 RETURNING {CHAT_COLUMNS}"
        ))
        .bind(text)
        .bind(id.0)
        .fetch_optional(&self.pool)
        .await?
        .ok_or(Error::ChatNotFound(id))?;
        chat_from_row(&row)
    }

    /// Sets what the chat sets for itself (the app's JSON; `None`: follow
    /// the app's settings in everything). Not activity.
    pub async fn set_chat_settings(
        &self,
        id: ChatId,
        settings: Option<&serde_json::Value>,
    ) -> Result<Chat> {
        let text = settings.map(serde_json::Value::to_string);
        let row = sqlx::query(&format!(
            "UPDATE chats SET settings = ?1 WHERE id = ?2 RETURNING {CHAT_COLUMNS}"
        ))
        .bind(text)
        .bind(id.0)
        .fetch_optional(&self.pool)
        .await?
        .ok_or(Error::ChatNotFound(id))?;
        chat_from_row(&row)
    }

    /// Deletes a chat with its messages, then the attachment files that no
    /// other message uses.
    pub async fn delete_chat(&self, id: ChatId) -> Result<CleanupReport> {
        let mut tx = self.write_tx().await?;
        let candidates: Vec<String> = sqlx::query_scalar(
            "SELECT DISTINCT ma.sha256 FROM message_attachments ma
             JOIN messages m ON m.id = ma.message_id WHERE m.chat_id = ?1",
        )
        .bind(id.0)
        .fetch_all(&mut *tx)
        .await?;
        // messages and message_attachments go with it (ON DELETE CASCADE)
        let deleted =
            sqlx::query("DELETE FROM chats WHERE id = ?1").bind(id.0).execute(&mut *tx).await?;
        if deleted.rows_affected() == 0 {
            return Err(Error::ChatNotFound(id));
        }
        tx.commit().await?;
        self.remove_unreferenced_attachments(Some(&candidates)).await
    }

    /// Chats whose title or any message (any branch) has every word of
    /// `query`, each as a word or the start of one ("photo" finds
    /// "photos"), case and accents ignored, most recently active first. An
    /// empty query lists all. Served by the FTS5 indexes of migration 0007.
    pub async fn search_chats(&self, query: &str) -> Result<Vec<Chat>> {
        if query.trim().is_empty() {
            return self.list_chats().await;
        }
        // only punctuation: nothing a word index can find
        let Some(fts) = fts_query(query) else { return Ok(Vec::new()) };
        let rows = sqlx::query(&format!(
            "SELECT {CHAT_COLUMNS} FROM chats
             WHERE id IN (SELECT m.chat_id FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid
                          WHERE messages_fts MATCH ?1
                          UNION SELECT rowid FROM chats_fts WHERE chats_fts MATCH ?1)
             ORDER BY updated_at DESC, id DESC"
        ))
        .bind(fts)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(chat_from_row).collect()
    }
}

/// The user's words as an FTS5 query: each one quoted (so no character of
/// theirs is FTS syntax) and a prefix; all must match. `None` when no word
/// has a letter or digit to search for.
fn fts_query(text: &str) -> Option<String> {
    let words: Vec<String> = text
        .split_whitespace()
        .filter(|w| w.chars().any(char::is_alphanumeric))
        .map(|w| format!("\"{}\"*", w.replace('"', "\"\"")))
        .collect();
    (!words.is_empty()).then(|| words.join(" "))
}

#[cfg(test)]
mod tests {
    use super::fts_query;

    #[test]
    fn user_text_never_becomes_fts_syntax() {
        assert_eq!(fts_query("cats  purr").as_deref(), Some("\"cats\"* \"purr\"*"));
        assert_eq!(
            fts_query("say \"hi\" OR NOT").as_deref(),
            Some("\"say\"* \"\"\"hi\"\"\"* \"OR\"* \"NOT\"*")
        );
        assert_eq!(fts_query(" % _ "), None);
        assert_eq!(fts_query("100%").as_deref(), Some("\"100%\"*"));
    }
}

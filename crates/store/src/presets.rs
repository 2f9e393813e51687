//! Presets: named sets of chat settings (and an answer format) to start a
//! chat from. The store keeps the app's JSON as given; a name is unique, so
//! saving under a taken name replaces that preset.
use serde::{Deserialize, Serialize};
use sqlx::sqlite::SqliteRow;
use sqlx::Row;
use ts_rs::TS;

use crate::chats::json_column;
use crate::error::{Error, Result};
use crate::store::Store;
use crate::types::Timestamp;

/// A preset's row id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, TS)]
#[serde(transparent)]
pub struct PresetId(pub i64);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct Preset {
    pub id: PresetId,
    /// What the user called it (trimmed, not empty, unique).
    pub name: String,
    /// Chat settings, as `Chat::settings`.
    #[ts(type = "import(\"./ChatSettings\").ChatSettings")]
    pub settings: serde_json::Value,
    /// As `Chat::answer_format`; `None` is free text.
    #[ts(type = "import(\"./AnswerFormat\").AnswerFormat | null")]
    pub answer_format: Option<serde_json::Value>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

const PRESET_COLUMNS: &str = "id, name, settings, answer_format, created_at, updated_at";

fn preset_from_row(row: &SqliteRow) -> Result<Preset> {
    Ok(Preset {
        id: PresetId(row.try_get("id")?),
        name: row.try_get("name")?,
        settings: json_column(row, "settings")?.unwrap_or(serde_json::Value::Null),
        answer_format: json_column(row, "answer_format")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

impl Store {
    /// Every preset, by name.
    pub async fn list_presets(&self) -> Result<Vec<Preset>> {
        let rows = sqlx::query(&format!(
            "SELECT {PRESET_COLUMNS} FROM presets ORDER BY name COLLATE NOCASE, id"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(preset_from_row).collect()
    }

    pub async fn get_preset(&self, id: PresetId) -> Result<Preset> {
        let row = sqlx::query(&format!("SELECT {PRESET_COLUMNS} FROM presets WHERE id = ?1"))
            .bind(id.0)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| Error::InvalidInput(format!("preset {} not found", id.0)))?;
        preset_from_row(&row)
    }

    /// Saves a preset under `name`, replacing one of the same name.
    pub async fn save_preset(
        &self,
        name: &str,
        settings: &serde_json::Value,
        answer_format: Option<&serde_json::Value>,
    ) -> Result<Preset> {
        let name = name.trim();
        if name.is_empty() {
            return Err(Error::InvalidInput("a preset needs a name".into()));
        }
        let row = sqlx::query(&format!(
            "INSERT INTO presets (name, settings, answer_format, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?4)
             ON CONFLICT (name) DO UPDATE SET settings = excluded.settings, answer_format = excluded.answer_format,
                 updated_at = excluded.updated_at
             RETURNING {PRESET_COLUMNS}"
        ))
        .bind(name)
        .bind(settings.to_string())
        .bind(answer_format.map(serde_json::Value::to_string))
        .bind(self.now_ms())
        .fetch_one(&self.pool)
        .await?;
        preset_from_row(&row)
    }

    /// Deletes a preset; chats started from it keep their settings. Returns
    /// whether it existed.
    pub async fn delete_preset(&self, id: PresetId) -> Result<bool> {
        let done =
            sqlx::query("DELETE FROM presets WHERE id = ?1").bind(id.0).execute(&self.pool).await?;
        Ok(done.rows_affected() > 0)
    }
}

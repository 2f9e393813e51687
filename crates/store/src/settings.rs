//! Settings: key → JSON value, typed at the edges through serde.
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::store::Store;

/// The setting that remembers the model picked last (its catalog id or path).
pub const SELECTED_MODEL_KEY: &str = "selected_model";

impl Store {
    /// The value stored under `key`, decoded as `T`; `None` if unset.
    pub async fn get_setting<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>> {
        let raw: Option<String> = sqlx::query_scalar("SELECT value FROM settings WHERE key = ?1")
            .bind(key)
            .fetch_optional(&self.pool)
            .await?;
        raw.map(|raw| {
            serde_json::from_str(&raw)
                .map_err(|source| Error::SettingDecode { key: key.to_string(), source })
        })
        .transpose()
    }

    /// Stores `value` (as JSON) under `key`, replacing what was there.
    pub async fn set_setting<T: Serialize + ?Sized>(&self, key: &str, value: &T) -> Result<()> {
        if key.trim().is_empty() {
            return Err(Error::InvalidInput("a setting key cannot be empty".into()));
        }
        let json = serde_json::to_string(value)
            .map_err(|source| Error::SettingDecode { key: key.to_string(), source })?;
        sqlx::query(
            "INSERT INTO settings (key, value, updated_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
        )
        .bind(key)
        .bind(json)
        .bind(self.now_ms())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Removes `key`; returns whether it was set.
    pub async fn delete_setting(&self, key: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM settings WHERE key = ?1")
            .bind(key)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// The model picked last, if any.
    pub async fn selected_model(&self) -> Result<Option<String>> {
        self.get_setting(SELECTED_MODEL_KEY).await
    }

    /// Remembers the model picked, for the next start.
    pub async fn set_selected_model(&self, model: &str) -> Result<()> {
        self.set_setting(SELECTED_MODEL_KEY, model).await
    }
}

//! The MCP servers the app starts (Settings → Tools): name → the app's JSON
//! of how to reach it. The store keeps the JSON as given; the app checks it.
use sqlx::Row;

use crate::error::{Error, Result};
use crate::store::Store;
use crate::types::Timestamp;

/// One configured server.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServerRecord {
    /// Unique; what the chat settings and tool calls name it by.
    pub name: String,
    /// How to start or reach it, and which of its tools run without asking.
    pub config: serde_json::Value,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl Store {
    /// Every configured server, in the order they were added.
    pub async fn list_mcp_servers(&self) -> Result<Vec<McpServerRecord>> {
        let rows = sqlx::query(
            "SELECT name, config, created_at, updated_at FROM mcp_servers ORDER BY rowid",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let name: String = row.try_get("name")?;
                let config: String = row.try_get("config")?;
                let config = serde_json::from_str(&config).map_err(|e| {
                    Error::InvalidInput(format!(
                        "MCP server {name}: its stored settings do not read: {e}"
                    ))
                })?;
                Ok(McpServerRecord {
                    name,
                    config,
                    created_at: row.try_get("created_at")?,
                    updated_at: row.try_get("updated_at")?,
                })
            })
            .collect()
    }

    /// Adds the server `name`, or replaces its settings (keeping its place).
    pub async fn save_mcp_server(&self, name: &str, config: &serde_json::Value) -> Result<()> {
        if name.trim().is_empty() {
            return Err(Error::InvalidInput("an MCP server needs a name".into()));
        }
        sqlx::query(
            "INSERT INTO mcp_servers (name, config, created_at, updated_at) VALUES (?1, ?2, ?3, ?3)
             ON CONFLICT (name) DO UPDATE SET config = excluded.config, updated_at = excluded.updated_at",
        )
        .bind(name)
        .bind(config.to_string())
        .bind(self.now_ms())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Removes the server `name`; returns whether there was one.
    pub async fn delete_mcp_server(&self, name: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM mcp_servers WHERE name = ?1")
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }
}

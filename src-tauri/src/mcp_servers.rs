//! The app's MCP servers kept in the store and run by the manager: loaded
//! at start, added, changed, removed and imported from Settings → Tools.
use std::sync::Arc;

use crate::error::{AppError, AppResult};
use crate::mcp::config::{from_mcp_json, McpServerConfig};
use crate::mcp::McpServerView;
use crate::state::AppState;

/// Starts every stored server that is enabled (at the app's start).
pub async fn start_stored(state: &Arc<AppState>) -> AppResult<()> {
    for record in state.store.list_mcp_servers().await? {
        match McpServerConfig::from_stored(&record.name, &record.config) {
            Ok(config) => state.mcp.set(config),
            Err(e) => tracing::warn!(%e, "an MCP server's stored settings do not read"),
        }
    }
    Ok(())
}

/// Adds or replaces a server (restarting it) and returns how it stands.
pub async fn save(state: &Arc<AppState>, config: McpServerConfig) -> AppResult<McpServerView> {
    config.validate()?;
    state.store.save_mcp_server(&config.name, &config.to_stored()).await?;
    let name = config.name.clone();
    state.mcp.set(config);
    Ok(state.mcp.get(&name).expect("just set"))
}

/// Stops and forgets a server.
pub async fn remove(state: &Arc<AppState>, name: &str) -> AppResult<bool> {
    let stored = state.store.delete_mcp_server(name).await?;
    Ok(state.mcp.remove(name) || stored)
}

/// Adds the servers of an `mcpServers` JSON file; a name already used is
/// refused before anything is added.
pub async fn import(state: &Arc<AppState>, text: &str) -> AppResult<Vec<McpServerView>> {
    let servers = from_mcp_json(text)?;
    let existing = state.store.list_mcp_servers().await?;
    if let Some(taken) = servers.iter().find(|s| existing.iter().any(|e| e.name == s.name)) {
        return Err(AppError::new(
            "MCP_SERVER_EXISTS",
            format!("A server named {} exists already; rename it first.", taken.name),
        ));
    }
    for config in servers {
        save(state, config).await?;
    }
    Ok(state.mcp.list())
}

/// "Always allow this tool": kept in the server's stored settings.
pub async fn always_allow(state: &Arc<AppState>, server: &str, tool: &str) -> AppResult<()> {
    if let Some(config) = state.mcp.allow_always(server, tool) {
        state.store.save_mcp_server(server, &config.to_stored()).await?;
    }
    Ok(())
}

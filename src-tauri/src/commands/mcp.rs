//! Settings → Tools (MCP): the servers, their state and tools, add / edit /
//! remove / restart, and an `mcpServers` file's import. State changes also
//! come as the `mcp-changed` event (one server's view).
use std::sync::Arc;

use tauri::State;

use crate::error::{AppError, AppResult};
use crate::mcp::{McpServerConfig, McpServerView};
use crate::state::AppState;

#[tauri::command]
pub async fn list_mcp_servers(state: State<'_, Arc<AppState>>) -> AppResult<Vec<McpServerView>> {
    Ok(state.mcp.list())
}

/// Adds a server, or replaces the one of that name (it restarts).
#[tauri::command]
pub async fn save_mcp_server(
    state: State<'_, Arc<AppState>>,
    config: McpServerConfig,
) -> AppResult<McpServerView> {
    crate::mcp_servers::save(state.inner(), config).await
}

#[tauri::command]
pub async fn remove_mcp_server(state: State<'_, Arc<AppState>>, name: String) -> AppResult<bool> {
    crate::mcp_servers::remove(state.inner(), &name).await
}

#[tauri::command]
pub async fn restart_mcp_server(
    state: State<'_, Arc<AppState>>,
    name: String,
) -> AppResult<McpServerView> {
    if !state.mcp.restart(&name) {
        return Err(AppError::new("MCP_SERVER_NOT_FOUND", format!("No server is named {name}.")));
    }
    Ok(state.mcp.get(&name).expect("just restarted"))
}

/// Adds the servers of an `mcp.json` (`{"mcpServers": {…}}`) pasted or read by the page.
#[tauri::command]
pub async fn import_mcp_servers(
    state: State<'_, Arc<AppState>>,
    json: String,
) -> AppResult<Vec<McpServerView>> {
    crate::mcp_servers::import(state.inner(), &json).await
}

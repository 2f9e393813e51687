//! Settings → Tools (MCP): the servers, their state and tools, add / edit /
//! remove / restart, and an `mcpServers` file's import. State changes also
//! come as the `mcp-changed` event (one server's view).
use std::sync::Arc;

use tauri::State;

use crate::error::AppResult;
use crate::mcp::{McpServerConfig, McpServerView};
use crate::state::AppState;

#[tauri::command]
pub async fn list_mcp_servers(state: State<'_, Arc<AppState>>) -> AppResult<Vec<McpServerView>> {
    Ok(state.mcp.list())
}

/// Adds a server, or changes the one of that name in place (it restarts); an
/// environment or header value left empty keeps the one saved (in the keychain).
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
    crate::mcp_servers::restart(state.inner(), &name).await
}

/// Adds the servers of an `mcp.json` (`{"mcpServers": {…}}`) pasted or read by the page.
#[tauri::command]
pub async fn import_mcp_servers(
    state: State<'_, Arc<AppState>>,
    json: String,
) -> AppResult<Vec<McpServerView>> {
    crate::mcp_servers::import(state.inner(), &json).await
}

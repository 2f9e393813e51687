//! The app's MCP servers kept in the store and run by the manager: loaded
//! at start, added, edited in place, removed and imported from Settings →
//! Tools. A server's environment or header values are kept in the OS
//! keychain, the store keeping their names (mcp/secrets.rs).
use std::sync::Arc;

use crate::error::{AppError, AppResult};
use crate::mcp::config::{from_mcp_json, McpServerConfig};
use crate::mcp::{secrets, McpServerView};
use crate::state::AppState;

/// Starts every stored server that is enabled (at the app's start).
pub async fn start_stored(state: &Arc<AppState>) -> AppResult<()> {
    for record in state.store.list_mcp_servers().await? {
        match McpServerConfig::from_stored(&record.name, &record.config) {
            Ok(config) => load(state, config).await,
            Err(e) => tracing::warn!(%e, "an MCP server's stored settings do not read"),
        }
    }
    Ok(())
}

/// Puts a stored server in the manager with its values from the keychain; one whose values
/// cannot be read shows failed, saying why. Values an older version kept in the store are
/// moved into the keychain (they stay where they are if it cannot take them).
async fn load(state: &Arc<AppState>, config: McpServerConfig) {
    if !secrets::has_secrets(&config) {
        return state.mcp.set(config);
    }
    if secrets::values(&config).values().any(|v| !v.is_empty()) {
        match secrets::save(&config).await {
            Ok(()) => {
                if let Err(e) = state.store.save_mcp_server(&config.name, &config.to_stored()).await
                {
                    tracing::warn!(%e, server = config.name, "an MCP server's values moved to the keychain stay in the store too");
                }
            }
            Err(e) => {
                tracing::warn!(%e, server = config.name, "an MCP server's values stay in the store")
            }
        }
        return state.mcp.set(config);
    }
    match secrets::load(&config.name).await {
        Ok(Some(values)) => state.mcp.set(secrets::with_values(config, &values)),
        Ok(None) => state.mcp.set_failed(
            config,
            "its environment values or headers are not in the system keychain (deleted there?): \
             Edit the server to enter them again"
                .into(),
        ),
        Err(e) => state.mcp.set_failed(
            config,
            format!(
                "its environment values or headers are kept in the system keychain, which \
                 cannot be read: {}",
                e.message
            ),
        ),
    }
}

/// Adds a server, or changes the one of that name in place (it restarts), and returns how
/// it stands. A value left empty keeps the one saved under its name (the page never sees
/// them); the values go to the keychain first, and a keychain that cannot take them refuses
/// the change before anything is stored.
pub async fn save(state: &Arc<AppState>, mut config: McpServerConfig) -> AppResult<McpServerView> {
    config.validate()?;
    if let Some(current) = state.mcp.config(&config.name) {
        secrets::keep_unchanged(&mut config, &current);
    }
    let had_secrets = state
        .store
        .list_mcp_servers()
        .await?
        .iter()
        .find(|r| r.name == config.name)
        .and_then(|r| McpServerConfig::from_stored(&r.name, &r.config).ok())
        .is_some_and(|c| secrets::has_secrets(&c));
    if secrets::has_secrets(&config) {
        secrets::save(&config).await?;
    } else if had_secrets {
        forget_secrets(&config.name).await;
    }
    state.store.save_mcp_server(&config.name, &config.to_stored()).await?;
    let name = config.name.clone();
    state.mcp.set(config);
    Ok(state.mcp.get(&name).expect("just set"))
}

/// Stops and forgets a server, its keychain entry too.
pub async fn remove(state: &Arc<AppState>, name: &str) -> AppResult<bool> {
    let had_secrets = state.mcp.config(name).is_some_and(|c| secrets::has_secrets(&c));
    let stored = state.store.delete_mcp_server(name).await?;
    if had_secrets {
        forget_secrets(name).await;
    }
    Ok(state.mcp.remove(name) || stored)
}

/// Starts a server again; one with values reads them from the keychain anew (a keychain
/// unlocked since, an entry put back).
pub async fn restart(state: &Arc<AppState>, name: &str) -> AppResult<McpServerView> {
    let not_found = || AppError::new("MCP_SERVER_NOT_FOUND", format!("No server is named {name}."));
    let config = state.mcp.config(name).ok_or_else(not_found)?;
    if secrets::has_secrets(&config) {
        let record = state.store.list_mcp_servers().await?.into_iter().find(|r| r.name == name);
        let record = record.ok_or_else(not_found)?;
        load(state, McpServerConfig::from_stored(name, &record.config)?).await;
    } else if !state.mcp.restart(name) {
        return Err(not_found());
    }
    state.mcp.get(name).ok_or_else(not_found)
}

async fn forget_secrets(name: &str) {
    if let Err(e) = secrets::remove(name).await {
        tracing::warn!(%e, server = name, "an MCP server's keychain entry could not be deleted");
    }
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
